"""
Verified streaming for the OpenAI-compatible chat endpoint.

With an LLM generator, a streamed chat answer is sent sentence by sentence while the model writes it: each sentence
is sent once the model has finished it and only if it passes the decision the citation verifier and the output
guardrails make for the whole answer (`CitationVerifier.sentence_verdicts` / `keeps`, invalid markers removed by
`clean_markers`, then `OutputGuardrails.screen`); a sentence that fails is never sent. Sentences the whole answer keeps
only when some claim is supported (connective text, headings), and claims while the share of supported claims so
far is below the verifier's `min_supported_ratio` (the output guardrails would replace the answer), wait until that
holds. The final chunk carries the citations and the `gatehouse` extras of the pipeline's response. When the final
answer is not what was sent (the model failed and the extractive answerer answered, every claim fell later, the time
budget ran out), the final chunk says so in `gatehouse.validation.confidence_warnings` and `gatehouse.stream` and
carries the final answer after a blank line.

An answer made at once (the extractive answerer, direct answers, refusals) is streamed when the pipeline has finished,
in word-sized pieces: its time to the first token is the pipeline's latency.

With `openwebui_sources` (hayhooks.yml), every cited passage is announced by an Open WebUI `source` event before the
text that first cites it, and `[S#]` markers are written `[n]`, n numbering the passages in that order, which is how
Open WebUI links inline `[n]` markers to its source list.

Usage (what `AskWrapper.run_chat_completion` does):
```python
from gatehouse.serving.streaming import answer_checks, stream_answer

verifier, guard = answer_checks(pipeline)
chunks = stream_answer(lambda: run_ask(pipeline, "How do I rotate an API key?"), verifier=verifier, guard=guard,
                       completion_id="chatcmpl-1", model="ask", openwebui=False)
```
"""

import contextvars
import logging
import queue
import re
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any

from fastapi_openai_compat import ChatCompletion
from fastapi_openai_compat.chat_completions.models import Choice, Message
from hayhooks.open_webui import OpenWebUIEvent, create_source_event
from haystack import Document, Pipeline

from gatehouse.components.generators.llm_answerer import REPLY_LISTENER
from gatehouse.components.guardrails.output_guardrails import OutputGuardrails
from gatehouse.components.state import State
from gatehouse.components.citation_markers import rewrite_markers
from gatehouse.components.text_units import Unit
from gatehouse.components.validators.citation_verifier import CitationVerifier

logger = logging.getLogger(__name__)

#: Word-sized pieces of an answer streamed at once.
STREAM_PIECE = re.compile(r"\S+\s*|\s+")
#: A unit that may still be the start of a citation marker (`[S`, `(S2`): the unit before it may not be complete.
_MARKER_START = re.compile(r"^[\[(]")
_HTTP_URL = re.compile(r"^https?://[^\s/]+", re.IGNORECASE)


@dataclass(frozen=True)
class Released:
    """A verified sentence to send: the whitespace from the text sent before it, then the sentence."""

    text: str
    citations: list[dict[str, Any]]


@dataclass(frozen=True)
class Answered:
    """The pipeline's response contract."""

    response: dict[str, Any]


@dataclass(frozen=True)
class Failed:
    """The ask raised (an HTTP error with its status)."""

    error: BaseException


def answer_checks(pipeline: Pipeline) -> tuple[CitationVerifier | None, OutputGuardrails | None]:
    """
    The ask pipeline's citation verifier and output guardrails, the checks a streamed sentence must pass.

    :param pipeline: The loaded ask pipeline.
    :returns: The first `CitationVerifier` and the first `OutputGuardrails` (None where there is none; without a
        verifier nothing is streamed before the answer is complete).
    """
    verifier = guard = None
    for _, instance in pipeline.walk():
        if verifier is None and isinstance(instance, CitationVerifier):
            verifier = instance
        if guard is None and isinstance(instance, OutputGuardrails):
            guard = instance
    return verifier, guard


class SentenceGate:
    """
    Follows the model's reply (an `llm_answerer.ReplyListener`) and puts each sentence that passes the checks on
    `events` as `Released`, as soon as the model has written the next one.

    Usage:
    ```python
    gate = SentenceGate(verifier=verifier, guard=guard, events=queue.SimpleQueue(), started=time.perf_counter())
    token = REPLY_LISTENER.set(gate)     # the LLM answerer streams into the gate while the pipeline runs
    ```
    """

    def __init__(self, *, verifier: CitationVerifier, guard: OutputGuardrails | None, events: queue.SimpleQueue,
                 started: float) -> None:
        """
        :param verifier: The pipeline's citation verifier.
        :param guard: The pipeline's output guardrails, if any.
        :param events: Where released sentences go.
        :param started: `time.perf_counter()` at the request's start, for `first_sentence_ms`.
        """
        self.verifier = verifier
        self.guard = guard
        self.events = events
        self.started = started
        self.sent = 0
        self.dropped = 0
        self.first_sentence_ms: float | None = None
        self.first_sentence_at: float | None = None
        self._lock = threading.Lock()
        self._asked = False
        self._open = False
        self._closed = False
        self._passages: list[Document] = []
        self._question = ""
        self._verify = False
        self._decided = 0  # units of the reply decided so far
        self._cursor = 0  # where the last decided unit ends in the reply
        self._gaps: list[str] = []  # the whitespace around units dropped since the last kept one
        self._pending: list[tuple[str, str, list[dict[str, Any]]]] = []  # kept, waiting for the support condition
        self._claims = 0
        self._supported = 0
        self._cited: list[str] = []

    def reply_started(self, state: State) -> None:
        """The model was asked: remember the passages it may cite (the first reply of a request only)."""
        if self._asked or self._closed:
            return
        self._asked = True
        self._passages = list(state.get("passages") or [])
        self._question = str(state.get("condensed_query") or state.get("original_query") or state.get("query") or "")
        skip = ["fallback"] if self.verifier.skip_statuses is None else self.verifier.skip_statuses
        self._verify = bool(self._passages) and state.get("status") not in skip
        self._open = True

    def reply_grew(self, text: str) -> None:
        """Decide the units the model has finished: all but the last (and the one before a possible marker)."""
        units = self._units(text)
        complete = len(units) - 1
        if units and _MARKER_START.match(units[-1].text):
            complete -= 1
        self._decide(text, units, complete)

    def reply_ended(self, answer: str | None) -> None:
        """Decide the rest of the answer; a reply that is no answer releases nothing more."""
        if answer is None:
            self._open = False
            return
        units = self._units(answer)
        self._decide(answer, units, len(units))
        self._open = False

    def close(self) -> None:
        """Release nothing more (the response has been answered, or the client has gone)."""
        with self._lock:
            self._closed = True

    def _units(self, text: str) -> list[Unit]:
        return self.verifier.units(text) if self._open and not self._closed else []

    def _decide(self, text: str, units: list[Unit], complete: int) -> None:
        try:
            for unit in units[self._decided : complete]:
                self._decide_unit(text, unit)
                self._decided += 1
        except Exception:  # a failing check streams nothing more; the final chunk carries the answer
            logger.exception("Verifying a streamed sentence failed; the answer is sent when it is complete")
            self.close()

    def _decide_unit(self, text: str, unit: Unit) -> None:
        words = unit.text.split()
        found = re.compile(r"\s*".join(re.escape(word) for word in words)).search(text, self._cursor)
        if found is None:  # the reply was split differently once it grew: the final chunk sends the answer
            raise ValueError(f"unit not found in the reply: {unit.text!r}")
        gap, body = text[self._cursor : found.start()], found.group(0)
        self._cursor = found.end()
        verdicts = self.verifier.sentence_verdicts([unit], self._passages, self._question) if self._verify else []
        claim = bool(verdicts) and not verdicts[0]["connective"]
        if claim:
            self._claims += 1
            self._supported += bool(verdicts[0]["supported"])
        if verdicts and not self.verifier.keeps(verdicts[0]):
            self.dropped += 1
            self._gaps.append(gap)
            return
        if verdicts and "reattributed_from" in verdicts[0]:  # the marker of the passage that says it
            body = verdicts[0]["unit"]
        cleaned = self.verifier.clean_markers(body, self._passages)
        citations = self.verifier.citations_of(cleaned, self._passages, verdicts) if self._verify else []
        self._cited += [c["id"] for c in citations if c["id"] not in self._cited]
        separator = _closed_up([*self._gaps, gap]) if self._gaps else gap
        self._gaps = []
        self._pending.append((separator, cleaned, citations))
        if not self._verify or (self._supported and self._supported / self._claims >= self.verifier.min_supported_ratio):
            self._flush()

    def _flush(self) -> None:
        state = {"passages": self._passages, "citations": [{"id": i} for i in self._cited]}
        with self._lock:
            if self._closed:
                return
            for separator, body, citations in self._pending:
                screened = self.guard.screen(body, state)[0] if self.guard is not None else body
                if self.first_sentence_ms is None:
                    self.first_sentence_ms = (time.perf_counter() - self.started) * 1000
                    self.first_sentence_at = time.time()
                    separator = ""  # the answer starts with its first kept sentence
                self.events.put(Released(text=separator + screened, citations=citations))
                self.sent += 1
            self._pending = []


def _closed_up(gaps: list[str]) -> str:
    """
    The whitespace the citation verifier leaves between two kept units when the units between them are removed
    (`gaps` is the whitespace before, between and after them): each removed unit with the spaces and tabs beside it
    becomes one space, one after the other; then lines are trimmed and blank lines close up to one.
    """
    joined = "\x00".join(gaps)
    while "\x00" in joined:
        joined = re.sub(r"[ \t]*\x00[ \t]*", " ", joined, count=1)
    lines = joined.split("\n")
    if len(lines) > 1:
        joined = "\n".join([lines[0].rstrip(" \t"), *("" for _ in lines[1:-1]), lines[-1].lstrip(" \t")])
    return re.sub(r"\n{3,}", "\n\n", joined)


class OpenWebUISources:
    """
    Numbers the cited passages 1, 2, ... in order of first use, announces each with the `source` event Open WebUI
    reads, and writes `[S#]` markers as `[n]`.

    Open WebUI keeps a message's sources in the order their events arrive and links an inline `[n]` to the n-th;
    it merges sources that share `metadata[0].source` (the citation list) or `metadata[0].name` (the inline
    markers), so both are made unique.

    Usage:
    ```python
    sources = OpenWebUISources()
    events = sources.add(response["citations"])     # one `source` event per passage not announced yet
    text = sources.renumber("Keys expire after 90 days. [S2]")   # "... [1]"
    ```
    """

    def __init__(self) -> None:
        self.numbers: dict[str, int] = {}
        self._names: set[str] = set()
        self._keys: set[str] = set()

    def add(self, citations: list[dict[str, Any]]) -> list[OpenWebUIEvent]:
        """
        Number the citations not numbered yet.

        :param citations: Citations of the response contract (`id`, `text`, `url`, `chunk_id`, `snippet`).
        :returns: One `source` event per newly numbered citation.
        """
        events = []
        for citation in citations:
            if citation["id"] in self.numbers:
                continue
            self.numbers[citation["id"]] = len(self.numbers) + 1
            name = str(citation.get("text") or citation["id"])
            name = f"{name} ({citation['id']})" if name in self._names else name
            key = str(citation.get("chunk_id") or citation["id"])
            key = f"{key}#{citation['id']}" if key in self._keys else key
            self._names.add(name)
            self._keys.add(key)
            url = str(citation.get("url") or "")
            metadata: dict[str, Any] = {"source": key, "name": name}
            source: dict[str, Any] = {"id": key, "name": name}
            if _HTTP_URL.match(url):
                metadata["source_url"] = source["url"] = url
            events.append(create_source_event({"source": source, "document": [citation.get("snippet") or ""],
                                               "metadata": [metadata]}))
        return events

    def renumber(self, text: str) -> str:
        """The text with its `[S#]` markers written as the numbers of `add` (`[S2, S5]` -> `[1, 2]`)."""
        return rewrite_markers(text, lambda ids: [str(self.numbers[i]) for i in ids if i in self.numbers])


def stream_answer(ask: Callable[[], dict[str, Any]], *, verifier: CitationVerifier | None,
                  guard: OutputGuardrails | None, completion_id: str, model: str,
                  openwebui: bool) -> Generator[Any, None, None]:
    """
    Run an ask in the background with a `SentenceGate` following the model, and stream what passes.

    Waits for the first verified sentence, or the whole response when nothing is released before it, so that an ask
    that fails before the stream starts raises its HTTP error here, with its status.

    :param ask: Runs the ask (time budget included) and returns the response contract.
    :param verifier: The pipeline's citation verifier; None streams the answer once it is complete.
    :param guard: The pipeline's output guardrails.
    :param completion_id: The chat completion's id.
    :param model: The model name the client asked for.
    :param openwebui: Send Open WebUI `source` events and write markers as `[n]`.
    :returns: The chunk generator (chat completion chunks and, with `openwebui`, source events).
    :raises BaseException: What `ask` raised before anything could be sent.
    """
    started = time.perf_counter()
    events: queue.SimpleQueue = queue.SimpleQueue()
    gate = SentenceGate(verifier=verifier, guard=guard, events=events, started=started) if verifier else None
    context = contextvars.copy_context()
    context.run(REPLY_LISTENER.set, gate)

    def work() -> None:
        try:
            events.put(Answered(ask()))
        except BaseException as error:  # noqa: BLE001 - handed to the stream, which raises it or reports it
            events.put(Failed(error))

    threading.Thread(target=context.run, args=(work,), name="gatehouse-chat-stream", daemon=True).start()
    first = events.get()
    if isinstance(first, Failed):
        if gate is not None:
            gate.close()
        raise first.error
    return _chunks(first, events, gate, started=started, completion_id=completion_id, model=model,
                   sources=OpenWebUISources() if openwebui else None)


def _chunks(event: Any, events: queue.SimpleQueue, gate: SentenceGate | None, *, started: float,
            completion_id: str, model: str, sources: OpenWebUISources | None) -> Generator[Any, None, None]:
    """Released sentences as they come, then the rest of the answer if it differs, then the final chunk."""
    created = int(time.time())

    def chunk(content: str, finish_reason: str | None = None, **extra: Any) -> ChatCompletion:
        return ChatCompletion(
            id=completion_id, object="chat.completion.chunk", created=created, model=model,
            choices=[Choice(index=0, delta=Message(role="assistant", content=content), finish_reason=finish_reason)],
            **extra,
        )

    def send(text: str, citations: list[dict[str, Any]], *, in_pieces: bool = False) -> Iterator[Any]:
        if sources is not None:
            yield from sources.add(citations)
            text = sources.renumber(text)  # before splitting: a marker may hold a space ("[S1, S2]")
        for piece in STREAM_PIECE.findall(text) if in_pieces else [text]:
            yield chunk(piece)

    sent: list[str] = []
    try:
        while isinstance(event, Released):
            yield from send(event.text, event.citations)
            sent.append(event.text)
            event = events.get()
    finally:
        if gate is not None:
            gate.close()
    answered_ms = (time.perf_counter() - started) * 1000
    response = event.response if isinstance(event, Answered) else _failed(event.error)
    answer, streamed = response["answer"], "".join(sent)
    differs = bool(streamed) and streamed.split() != answer.split()
    validation = dict(response["validation"])
    if not streamed:
        yield from send(answer, response["citations"], in_pieces=True)
    elif differs and answer:
        validation["confidence_warnings"] = [
            *validation.get("confidence_warnings", []),
            (f"streamed_answer_replaced: the sentences streamed while the model wrote are not the final answer "
             f"(status {response['status']}); the final answer follows them."),
        ]
        yield from send("\n\n" + answer, response["citations"])
    stream = {
        "mode": "sentences" if gate is not None and (gate.sent or gate.dropped) else "answer",
        "sentences_sent": gate.sent if gate is not None else 0,
        "sentences_dropped": gate.dropped if gate is not None else 0,
        "first_sentence_ms": round(gate.first_sentence_ms, 1) if gate and gate.first_sentence_ms else None,
        "first_sentence_at": gate.first_sentence_at if gate else None,
        "answer_ms": round(answered_ms, 1),
        "answer_differs": differs,
    }
    if sources is not None:
        stream["source_numbers"] = dict(sources.numbers)
    extras = {key: response[key] for key in ("status", "error_message", "metadata", "path")}
    yield chunk("", finish_reason="stop", citations=response["citations"],
                gatehouse={**extras, "validation": validation, "stream": stream})


def _failed(error: BaseException) -> dict[str, Any]:
    """The response contract of an ask that raised after sentences were sent (its HTTP status can no longer be)."""
    detail = getattr(error, "detail", None) or "The answer could not be completed."
    return {"answer": "", "citations": [], "metadata": {}, "status": "error", "error_message": str(detail),
            "path": [], "validation": {"boundary_violations": [], "confidence_warnings": [], "guardrail_actions": [],
                                       "unsupported_sentences": []}}
