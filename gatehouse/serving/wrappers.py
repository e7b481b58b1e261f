"""
Hayhooks pipeline wrappers for Gatehouse's YAML pipelines: ask, retrieve and index.

Hayhooks can neither chat with nor stream a YAML pipeline, and answers a YAML pipeline with its raw
per-component outputs. These wrappers give each kind of pipeline a typed request and response:

- ask: `POST /{name}/run` returns the Gatehouse response contract; `/v1/chat/completions` (model `{name}`)
  answers OpenAI clients, streaming or not, with a final chunk that carries the structured citations; an LLM answer
  streams sentence by sentence, each sent once verified (see `streaming.py`).
- retrieve: `POST /{name}/run` returns the hybrid search's documents with scores and metadata, screened as an ask
  screens its passages (`PassageScreen`'s rules): hostile blocks removed, documents left empty withheld, unsafe URLs
  dropped. Its query passes the deployed ask pipeline's input guardrails first (refused: 422; redacted).
- index: `POST /{name}/run` takes a multipart upload of files into a knowledge base and queues it as an ingest
  job (202; `wait=true` answers with the report when it is done).

What leaves the server as text passes through `printable_data` on its way out: the ask's response contract (REST,
chat, the streamed chat's final chunk, the MCP tool), each streamed sentence (`streaming.py`) and the retrieved
documents. Escape sequences, control characters and invisible format characters from documents never reach a
client.

One generic `pipeline_wrapper.py` (in this package) picks the class from the `gatehouse.yml` deployed beside
it, which `gatehouse serve` writes from `hayhooks.yml`.

Requests run concurrently: the document stores serialise their own writes and let reads run beside them, so no lock
is held here. An ask has a time budget (`limits.request_timeout_s`): when it runs out, the request is answered with
`status: partial` and a warning instead of waiting for a hanging LLM endpoint.

Usage:
```python
from gatehouse.serving.wrappers import wrapper_class

PipelineWrapper = wrapper_class("data/serve/pipelines/ask/gatehouse.yml")   # what pipeline_wrapper.py does
```
"""

import contextvars
import re
import threading
import time
import uuid
from collections.abc import Callable, Generator
from concurrent.futures import Future
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from fastapi import HTTPException, UploadFile
from fastapi.responses import JSONResponse
from fastapi_openai_compat import ChatCompletion
from hayhooks import BasePipelineWrapper
from haystack import Document, Pipeline
from haystack.core.serialization import allow_deserialization_module
from haystack.dataclasses import ByteStream, StreamingCallbackT
from pydantic import WithJsonSchema
from starlette.datastructures import Headers
from typing_extensions import TypedDict

from gatehouse.components.writers.ingest_planner import NAME_PATTERN as KB_NAME_PATTERN
from gatehouse.components.writers.ingest_planner import upload_name
from gatehouse.components.builders.response_builder import ResponseBuilder
from gatehouse.components.guardrails.document_screen import DocumentScreen
from gatehouse.components.guardrails.input_guardrails import InputGuardrails
from gatehouse.components.guardrails.passage_screen import screen_passage
from gatehouse.components.guardrails.sanitising import citation_url
from gatehouse.components.printable import printable_data
from gatehouse.components.retrievers.retrieval_pipeline import RetrievalPipeline
from gatehouse.components.intake.request_intake import RequestIntake
from gatehouse.components.state import advance, new_state, with_validation
from gatehouse import runtime
from gatehouse.ask import run_ask
from gatehouse.pipelines import load_pipeline
from gatehouse.serving.auth import AccessDenied, KeyRing, denied, resolve_principal
from gatehouse.serving.jobs import IndexResponse, IngestJobs, QueueFull
from gatehouse.serving.manifest import Manifest, input_guardrails_specs, load_manifest
from gatehouse.serving.client_tasks import ClientTask, client_task
from gatehouse.serving.data_dir_answers import data_dir_unavailable, require_writable_data_dir
from gatehouse.serving.observability import record_ask, record_client_task, record_search_refusal
from gatehouse.serving.streaming import chat_completion, stream_answer

NAME_PATTERN = re.compile(KB_NAME_PATTERN)
# Ask pipelines run at most this many at a time, each in a thread of its own (see `_in_background`).
ASK_SLOTS = threading.BoundedSemaphore(32)
OUT_OF_TIME_ANSWER = "I could not finish an answer in time. Please try again in a moment."

# The rules of the request fields as the OpenAPI document (and the MCP tool schemas) state them. Only documented: the
# wrappers check them themselves, so a bad value is a 422 whose detail names the field and the rule.
QueryText = Annotated[str, WithJsonSchema({"type": "string", "minLength": 1, "pattern": r"\S"})]
Name = Annotated[str, WithJsonSchema({"type": "string", "pattern": f"^(?:{KB_NAME_PATTERN})$"})]
TopK = Annotated[int, WithJsonSchema({"type": "integer", "minimum": 1, "maximum": 100})]


class Turn(TypedDict):
    """One earlier conversation turn."""

    role: Literal["user", "assistant", "system"]
    content: str


class Citation(TypedDict):
    """A passage the answer cites as `[id]`: its title and section (`text`), the section alone, the start of its body
    (`snippet`) and the units of it the answer stands on (`quote`)."""

    id: str
    text: str
    section: str | None
    url: str | None
    chunk_id: str
    source: str | None
    kb: str | None
    confidence: float | None
    snippet: str
    quote: str | None  # None in an answer cached before quotes were kept


class Validation(TypedDict):
    """What the verifier and the guardrails noticed."""

    boundary_violations: list[str]
    confidence_warnings: list[str]
    guardrail_actions: list[str]
    unsupported_sentences: list[str]


class AskResponse(TypedDict):
    """The Gatehouse response contract."""

    answer: str
    citations: list[Citation]
    metadata: dict[str, Any]
    validation: Validation
    status: str
    error_message: str | None
    path: list[str]


class RetrievedDocument(TypedDict):
    """A retrieved chunk, screened: `screened` names what the screen removed from it (empty: nothing)."""

    id: str
    content: str
    score: float | None
    meta: dict[str, Any]
    screened: list[str]


class WithheldDocument(TypedDict):
    """A retrieved chunk the screen left empty, so not returned, and what it removed."""

    id: str
    screened: list[str]


class RetrieveResponse(TypedDict):
    """Hybrid search results, and what the input guardrails did to the query (`redacted_pii:<kind>`, ...)."""

    documents: list[RetrievedDocument]
    tenant: str
    kbs: list[str] | None
    withheld: list[WithheldDocument]
    guardrail_actions: list[str]


def check_name(value: Any, *, field: str, kind: str) -> None:
    """
    Refuse a knowledge base or tenant name that could not have been ingested.

    :param value: The name, as the request sent it (chat's extra body fields are untyped); None passes (the
        caller's default applies).
    :param field: The request field, named in the error.
    :param kind: What the name names (`knowledge base`, `tenant`).
    :raises HTTPException: 422 naming the field and the rule.
    """
    if value is None:
        return
    if not isinstance(value, str):
        raise HTTPException(status_code=422, detail=f"{field} must be a string: the {kind} name")
    if not NAME_PATTERN.fullmatch(value):
        raise HTTPException(status_code=422, detail=f"{field} {value!r} is not a valid {kind} name "
                                                    "(lower-case letters, digits, '-', '_')")


class GatehouseWrapper(BasePipelineWrapper):
    """Shared set-up: the manifest (auth, limits) and the pipeline YAML this deployment serves."""

    pipeline_file: Path
    manifest_file: Path

    def setup(self) -> None:
        """Read the manifest and load the pipeline YAML (allowlisted modules only)."""
        runtime.configure()
        self.manifest: Manifest = load_manifest(self.manifest_file)
        self.keyring = KeyRing.from_manifest(self.manifest)
        for pattern in self.manifest.allowed_modules:  # process-wide, so pipelines nested in YAML see them too
            allow_deserialization_module(pattern)
        self.pipeline = self.load()
        self.pipeline.warm_up()

    def load(self) -> Pipeline:
        """The pipeline this deployment serves, loaded from its YAML."""
        return load_pipeline(self.pipeline_file)

    def _tenant(self, requested: str | None, headers: Headers | None) -> str:
        check_name(requested, field="tenant", kind="tenant")
        try:
            return self.keyring.tenant_for(resolve_principal(self.keyring, headers), requested)
        except AccessDenied as error:
            raise denied(error) from error

    def _query(self, query: str | None, field: str = "query") -> str:
        text = (query or "").strip()
        if not text:
            raise HTTPException(status_code=422, detail=f"{field} must not be empty")
        if len(text) > self.manifest.max_query_chars:
            raise HTTPException(status_code=422, detail=f"{field} is {len(text)} characters long; the limit is "
                                                         f"{self.manifest.max_query_chars} (max_query_chars of the ask "
                                                         "pipeline's input guardrail)")
        return text


class AskWrapper(GatehouseWrapper):
    """Serves `ask.yml`: REST, OpenAI-compatible chat (streaming or not) and an MCP tool."""

    def setup(self) -> None:
        """Load the pipeline; its request intake's bounds (history, context) are the server's too, and its input
        guardrails screen what an Open WebUI task's reply echoes."""
        super().setup()
        self.intake = next((c for _, c in self.pipeline.walk() if isinstance(c, RequestIntake)), None)
        self.input_guard = next((c for _, c in self.pipeline.walk() if isinstance(c, InputGuardrails)), None
                                ) or InputGuardrails()

    def _screened_task(self, task: ClientTask) -> ClientTask | None:
        """
        The task, if its instructions pass the input guardrails; None for an injection written as a task (or
        instructions over the question limit), which is then asked like any question: refused, and counted so.
        """
        return task if "passed" in self.input_guard.run(state=new_state(task.instructions)) else None

    def _redacted(self, text: str) -> str:
        """Text cleaned and its personal data redacted as the input guardrails do a question (what a task echoes)."""
        verdict = self.input_guard.run(state=new_state(text))
        return next(iter(verdict.values()))["query"]

    def _bounded(self, history: list[dict[str, Any]], context: str | None) -> None:
        """
        Refuse a history or context over the bounds of the pipeline's intake before the pipeline runs.

        :raises HTTPException: 422 naming the setting (`max_request_history_turns`, `max_history_chars`,
            `max_context_chars` of the ask pipeline's intake).
        """
        problem = None if self.intake is None else self.intake.over_bound(history, context)
        if problem:
            raise HTTPException(status_code=422, detail=problem)

    def _ask(self, query: str, *, kb: str | None, tenant: str, mode: str | None, context: str | None,
             history: list[dict[str, Any]] | None,
             streaming_callback: StreamingCallbackT | None = None) -> dict[str, Any]:
        check_name(kb, field="kb", kind="knowledge base")
        started = time.perf_counter()
        budget = self.manifest.request_timeout_s
        deadline = time.monotonic() + budget  # the LLM calls of the run fit their timeouts and retries in what is left
        run = _in_background(lambda: run_ask(self.pipeline, query, kb=kb, tenant=tenant, mode=mode, context=context,
                                             history=history or [], deadline=deadline,
                                             streaming_callback=streaming_callback))
        try:
            with data_dir_unavailable():
                response = run.result(timeout=budget)
        except TimeoutError:
            run.cancel()
            response = _out_of_time(budget, started, kb=kb, tenant=tenant, mode=mode)
        response = printable_data(response)
        record_ask(response, query=query, log_queries=self.manifest.logging.log_queries, pipeline=self.pipeline,
                   requested_kb=kb is not None)
        if response["status"] == "error":
            llm_failed = "generate_llm_failed" in response["path"]
            raise HTTPException(status_code=502 if llm_failed else 422, detail=response["error_message"])
        return response

    def run_api(
        self,
        query: QueryText,
        kb: Name | None = None,
        tenant: Name | None = None,
        mode: Literal["full-corpus", "constrained-context", "hybrid"] | None = None,
        context: str | None = None,
        history: list[Turn] | None = None,
        headers: Headers | None = None,
    ) -> AskResponse:
        """
        Ask the Gatehouse knowledge bases a question and get a grounded answer whose citations [S#] point at real passages.

        :param query: The question.
        :param kb: Search this knowledge base instead of letting the router choose.
        :param tenant: Act for this tenant (only one the API key holds); default the key's first tenant.
        :param mode: full-corpus (default), constrained-context (answer only from `context`) or hybrid.
        :param context: Caller-provided text for the constrained-context and hybrid modes.
        :param history: Earlier turns, each {role, content}; follow-up questions are condensed with them.
        :returns: The Gatehouse response: answer, citations, metadata, validation, status, error_message, path.
        """
        text, tenant_name, turns = self._query(query), self._tenant(tenant, headers), [dict(t) for t in history or []]
        self._bounded(turns, context)
        return self._ask(text, kb=kb, tenant=tenant_name, mode=mode, context=context, history=turns)

    def run_chat_completion(self, model: str, messages: list[dict], body: dict,
                            headers: Headers | None = None) -> ChatCompletion | Generator:
        """
        OpenAI-compatible chat: the last user message is the question, earlier turns are its history.

        Message contents are strings or lists of text parts. Optional extra body fields: `tenant`, `kb`. Markers
        read `[n]`, the n-th cited passage, which Open WebUI `sources` describe (see `streaming.py`). With
        `stream: true` an LLM answer is streamed sentence by sentence, each sentence once the citation verifier and
        the output guardrails passed it (an answer made at once, in pieces when it is complete), a final chunk
        carries `citations` and `gatehouse` (status, metadata, validation, path, stream, source_numbers), and
        `data: [DONE]` ends the stream. Open WebUI's background task prompts (title, tags, follow-ups) are answered
        without the pipeline (`client_tasks.py`), the title echoed cleaned and redacted by the input guardrails; a
        task prompt whose instructions the guardrails refuse is asked, and refused, like any question.
        """
        limit = None if self.intake is None else self.intake.max_request_history_turns
        if limit is not None and len(messages) - 1 > limit:
            raise HTTPException(status_code=422, detail=f"messages holds {len(messages) - 1} turns before the "
                                                        f"question; the limit is {limit} (max_request_history_turns "
                                                        "of the ask pipeline's intake)")
        for index, m in enumerate(messages):
            if not isinstance(m.get("role"), str):
                raise HTTPException(status_code=422, detail=f"messages[{index}].role must be a string")
        turns = [{"role": m["role"], "content": _text_of(m.get("content"), f"messages[{index}]")}
                 for index, m in enumerate(messages)]
        turns = [t for t in turns if t["role"] in {"user", "assistant"} and t["content"]]
        if not turns or turns[-1]["role"] != "user":
            raise HTTPException(status_code=422, detail="messages must end with a non-empty user message")
        tenant = self._tenant(body.get("tenant"), headers)
        check_name(body.get("kb"), field="kb", kind="knowledge base")
        completion_id = f"chatcmpl-{uuid.uuid4().hex}"
        task = client_task(turns)
        if task is not None:
            task = self._screened_task(task)
        if task is not None:  # Open WebUI's title, tags, follow-ups: answered here, not asked
            record_client_task(task.kind)
            reply = task.response(screen=self._redacted)
            if body.get("stream"):
                return stream_answer(lambda streaming_callback: reply, completion_id=completion_id, model=model)
            return chat_completion(reply, completion_id=completion_id, model=model)
        query = self._query(turns[-1]["content"], "the last user message")
        self._bounded(turns[:-1], None)

        def ask(streaming_callback: StreamingCallbackT | None = None) -> dict[str, Any]:
            return self._ask(query, kb=body.get("kb"), tenant=tenant, mode=None, context=None, history=turns[:-1],
                             streaming_callback=streaming_callback)

        if body.get("stream"):
            return stream_answer(ask, completion_id=completion_id, model=model)
        return chat_completion(ask(), completion_id=completion_id, model=model)


def _text_of(content: Any, message: str) -> str:
    """
    The text of an OpenAI message content: a string or a list of text parts.

    :param content: The message's `content`.
    :param message: Where the message is in the request (`messages[2]`), named in the error.
    :returns: The text, stripped; empty for a content that is neither.
    :raises HTTPException: 422 naming a part that is not `{"type": "text", "text": <string>}` (only text is answered).
    """
    if isinstance(content, str):
        return content.strip()
    if not isinstance(content, list):
        return ""
    for index, part in enumerate(content):
        if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
            raise HTTPException(status_code=422, detail=f"{message}.content[{index}] is not a text part "
                                                        '{"type": "text", "text": <string>}; only text is supported')
    return " ".join(part["text"] for part in content).strip()


def _in_background(function: Callable[[], Any]) -> Future:
    """
    Run `function` in a daemon thread with the caller's context variables, so the caller can stop waiting for it.

    A thread cannot be stopped: a run whose caller gave up finishes in the background, bounded by its LLM client's own
    timeout, and being a daemon it never holds up the server's shutdown. At most `ASK_SLOTS` runs at a time; a run
    still waiting for a slot when its caller gives up (cancels the future) never starts.

    :param function: What to run.
    :returns: Its future.
    """
    future: Future = Future()
    context = contextvars.copy_context()

    def work() -> None:
        with ASK_SLOTS:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(context.run(function))
            except BaseException as error:  # noqa: BLE001 - handed to the waiting caller, as an executor does
                future.set_exception(error)

    threading.Thread(target=work, name="gatehouse-ask", daemon=True).start()
    return future


def _out_of_time(budget: float, started: float, *, kb: str | None, tenant: str, mode: str | None) -> dict[str, Any]:
    """The response contract of an ask whose time budget ran out before the pipeline answered."""
    state = new_state("", kb=kb, tenant=tenant, mode=mode, started=started, answer=OUT_OF_TIME_ANSWER,
                      status="partial")
    state = advance(state, steps=["time_budget_exhausted"])
    state = with_validation(state, "confidence_warnings",
                            f"No answer was ready within the time budget of {budget:g} s (limits.request_timeout_s).")
    return ResponseBuilder().run(state=state)["response"]


class RetrieveWrapper(GatehouseWrapper):
    """Serves `retrieve.yml`: hybrid search only, as REST and as an MCP tool."""

    def load(self) -> Pipeline:
        """The retrieval pipeline, also wrapped as one component (query, tenant, kbs, top_k in; documents out), the
        input guardrails of the deployed ask pipeline for its queries (`input_guardrails`) and the passage screen's
        rules (its defaults) for what it returns."""
        self.retrieval = RetrievalPipeline(pipeline_file=str(self.pipeline_file))
        self.input_guard = input_guardrails(self.manifest)
        self.input_guard.warm_up()
        self.screen = DocumentScreen()
        return self.retrieval.pipeline

    def _screened_query(self, query: str) -> tuple[str, list[str]]:
        """
        The query as the input guardrails pass it to a search (cleaned, personal data and secrets redacted) and what
        they did.

        :raises HTTPException: 422 when they refuse it (a prompt injection, a refused capability or topic), naming the
            violation and with the answer an ask would give.
        """
        verdict = self.input_guard.run(state=new_state(query))
        if "passed" in verdict:
            return verdict["passed"]["query"], list(verdict["passed"]["validation"]["guardrail_actions"])
        blocked = verdict["blocked"]
        violation = blocked["path"][-1].partition(":")[2]
        record_search_refusal(violation)
        raise HTTPException(status_code=422, detail=f"query refused by the input guardrails ({violation}): "
                                                    f"{blocked['answer']}")

    def run_api(
        self,
        query: QueryText,
        kbs: list[Name] | None = None,
        tenant: Name | None = None,
        top_k: TopK = 10,
        headers: Headers | None = None,
    ) -> RetrieveResponse:
        """
        Search the Gatehouse knowledge bases (hybrid dense + BM25) and return the best passages with scores and metadata.

        :param query: What to search for.
        :param kbs: Restrict the search to these knowledge bases; default all of the tenant's.
        :param tenant: Act for this tenant (only one the API key holds); default the key's first tenant.
        :param top_k: How many passages to return (1-100).
        :returns: The documents, best first, screened as an ask screens its passages (`screened` names what was
            removed from each; a document left empty is `withheld`), the tenant and KBs searched, and what the ask
            pipeline's input guardrails did to the query before the search (`redacted_pii:email`, ...).
        """
        text = self._query(query)
        if not 1 <= top_k <= 100:
            raise HTTPException(status_code=422, detail=f"top_k is {top_k}; use 1 to 100")
        for kb in kbs or []:
            check_name(kb, field="kb", kind="knowledge base")
        tenant_name = self._tenant(tenant, headers)
        text, actions = self._screened_query(text)
        with data_dir_unavailable():
            documents = self.retrieval.run(query=text, tenant=tenant_name, kbs=kbs or None, top_k=top_k)["documents"]
        screened, withheld = _screened(documents, self.screen)
        return printable_data({"documents": screened, "tenant": tenant_name, "kbs": kbs or None, "withheld": withheld,
                               "guardrail_actions": actions})


def input_guardrails(manifest: Manifest) -> InputGuardrails:
    """
    The input guardrails the manifest's ask pipeline applies (the first one's, as its YAML declares them), which
    screen what reaches a search without an ask (`/retrieve/run`, the retrieve tool); their defaults when no ask
    pipeline is deployed.
    """
    specs = input_guardrails_specs(manifest.pipelines, manifest.path)
    return InputGuardrails.from_dict(specs[0]) if specs else InputGuardrails()


def _screened(documents: list[Document], screen: DocumentScreen
              ) -> tuple[list[RetrievedDocument], list[WithheldDocument]]:
    """
    Retrieved documents screened with the passage screen's rules (`screen_passage`), as an ask's passages are: blocks
    addressed to the assistant, phishing and spoofed links removed (`document_<kind>`), foreign images removed
    (`removed_external_image:<host>`), unsafe link targets cut (`document_unsafe_link`); a `meta.url` that is not a
    safe link (`javascript:`, `data:`, ...) is dropped (`removed_unsafe_url`).

    :returns: The documents returned, each with what was removed from it, and those left empty, withheld.
    """
    returned: list[RetrievedDocument] = []
    withheld: list[WithheldDocument] = []
    for document in documents:
        kept, found = screen_passage(screen, document)
        removed = [f"removed_external_image:{detail}" if kind == "beacon" else f"document_{kind}"
                   for kind, detail in found]
        meta = dict(document.meta or {})
        if meta.get("url") is not None and citation_url(str(meta["url"])) is None:
            del meta["url"]
            removed.append("removed_unsafe_url")
        removed = list(dict.fromkeys(removed))
        if kept is None:
            withheld.append({"id": document.id, "screened": removed})
        else:
            returned.append({"id": document.id, "content": kept.content or "", "score": document.score, "meta": meta,
                             "screened": removed})
    return returned, withheld


class IndexWrapper(GatehouseWrapper):
    """
    Serves `index.yml`: multipart uploads (txt, md, html, pdf) into one knowledge base of one tenant, checked at once
    and indexed as background jobs (`gatehouse.serving.jobs`), reported at `GET /{name}/jobs/{job_id}`.
    """

    skip_mcp = True

    def setup(self) -> None:
        """Load the pipeline and start the ingest workers (`limits.ingest_workers`, `limits.max_queued_jobs`)."""
        super().setup()
        name = next((name for name, deployed in self.manifest.pipelines.items()
                     if deployed.kind == "index" and deployed.pipeline == self.pipeline_file), self.pipeline_file.stem)
        manifest = self.manifest
        bounds = {"workers": manifest.ingest_workers, "max_queued": manifest.max_queued_jobs,
                  "max_queued_per_tenant": manifest.max_queued_jobs_per_tenant,
                  "history": manifest.ingest_job_history, "status_path": f"/{name}/jobs"}
        store = shared_database(self.pipeline)
        if store is None:  # the embedded store: one process, jobs in memory
            self.jobs: Any = IngestJobs(pipeline=self.pipeline, **bounds)
        else:  # PostgreSQL: the jobs in its database, seen and run by every server over it
            from gatehouse.serving.db_jobs import DatabaseIngestJobs

            self.jobs = DatabaseIngestJobs(url=store.connection_url, table=store.table, pipeline=self.pipeline,
                                           lease_s=manifest.ingest_job_lease_s, pool_timeout_s=store.pool_timeout_s,
                                           **bounds)

    def run_api(
        self,
        files: list[UploadFile],
        kb: Name,
        tenant: Name | None = None,
        force: bool = False,
        wait: bool = False,
        headers: Headers | None = None,
    ) -> IndexResponse:  # the 200 answer (`wait=true`); Hayhooks derives the OpenAPI model from this annotation
        """
        Upload files into a knowledge base; they are indexed by a background job (202 with its `status_url`).

        A bad file fails alone with a reason; the good ones are stored.

        :param files: The files (txt, md, html, pdf), as multipart form fields named `files`.
        :param kb: The knowledge base to index into (lower-case letters, digits, '-', '_').
        :param tenant: The owning tenant (only one the API key holds); default the key's first tenant.
        :param force: Re-index files whose content did not change.
        :param wait: Answer when the job has finished, with its report (200), instead of at once (202).
        :returns: With `wait=true`, counts of written, skipped and failed files, with a reason per failed file.
        :raises HTTPException: 422 for a bad `kb`, no files, a file name with nothing usable in it or two files of the
            same name (nothing is stored), 415 when no file has a supported type, 429 (with Retry-After) when the ingest
            queue is full, 503 when the data directory cannot be written, 500 when a waited-for job fails.
        """
        check_name(kb or "", field="kb", kind="knowledge base")
        tenant_name = self._tenant(tenant, headers)
        if not files:
            raise HTTPException(status_code=422, detail="no files were uploaded (multipart field `files`)")
        names = [upload_name(upload.filename or "") for upload in files]
        unusable = [repr(upload.filename or "") for upload, name in zip(files, names) if not name]
        if unusable:
            raise HTTPException(status_code=422, detail=f"files: no usable file name in {', '.join(unusable)} (control "
                                                        "characters, bidirectional controls, zero-width characters "
                                                        "and folders are removed from file names); rename the file")
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise HTTPException(status_code=422, detail=f"files: duplicate file names in one upload: "
                                                        f"{', '.join(repeated)} (a document is stored under its file "
                                                        "name; rename them or upload them separately)")
        streams = [ByteStream(data=upload.file.read(), meta={"file_name": name}) for upload, name in zip(files, names)]
        planner = self.pipeline.get_component("planner")
        supported = set(planner.mime_types)
        if not any(Path(s.meta["file_name"]).suffix.lower() in supported for s in streams):
            names = ", ".join(s.meta["file_name"] for s in streams)
            raise HTTPException(status_code=415, detail=f"unsupported file type: {names}; accepted: "
                                                        f"{', '.join(sorted(supported))}")
        require_writable_data_dir()
        try:
            with data_dir_unavailable():  # a database that went away: 503
                accepted = self.jobs.submit(kb=kb, tenant=tenant_name, force=force, files=streams)
        except QueueFull as error:
            raise HTTPException(status_code=429, detail=str(error),
                                headers={"Retry-After": str(error.retry_after)}) from error
        if not wait:
            return JSONResponse(status_code=202, content=accepted, headers={"Location": accepted["status_url"]})
        with data_dir_unavailable():
            job = self.jobs.wait(accepted["job_id"])
        if job["status"] == "failed":
            require_writable_data_dir()  # the data directory turned read-only while the job ran: 503, as at once
            raise HTTPException(status_code=500, detail=f"ingest job {job['job_id']} failed: {job['error']}")
        return job["result"]


def shared_database(pipeline: Pipeline) -> Any | None:
    """The index pipeline's PostgreSQL store (its writer's), whose database then holds the ingest jobs; else None."""
    try:
        writer = pipeline.get_component("writer")
    except ValueError:
        return None
    dense = getattr(writer, "dense_store", None)
    return dense.store if getattr(dense, "active_backend", None) == "postgres" else None


WRAPPERS: dict[str, type[GatehouseWrapper]] = {"ask": AskWrapper, "retrieve": RetrieveWrapper, "index": IndexWrapper}


def wrapper_class(deployment_file: str | Path) -> type[GatehouseWrapper]:
    """
    The wrapper class for one deployment, from its `gatehouse.yml` (`kind`, `pipeline`, `manifest`).

    :param deployment_file: The deployment description `gatehouse serve` wrote.
    :returns: A subclass of the kind's wrapper bound to the pipeline YAML and the manifest.
    """
    spec = yaml.safe_load(Path(deployment_file).read_text(encoding="utf-8"))
    base = WRAPPERS[spec["kind"]]
    return type("PipelineWrapper", (base,), {"pipeline_file": Path(spec["pipeline"]),
                                             "manifest_file": Path(spec["manifest"])})
