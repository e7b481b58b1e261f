"""
Verified streaming for the OpenAI-compatible chat endpoint, and the sources every chat answer carries.

With an LLM generator, a streamed chat answer is sent sentence by sentence while the model writes it: the ask
pipeline's own citation verifier releases each sentence once the model has finished it and only if it passes the
decision the verifier makes for the whole answer, and its output guardrails screen it and hand it to the request's
`streaming_callback` (see `components/validators/verified_reply.py`); a sentence that fails is never sent. The final
chunk carries the citations and the `gatehouse` extras of the pipeline's response. A `partial` answer's notice (the
last paragraph the response builder gives it) follows the sentences sent, so the stream says so too. When the
final answer is not what was sent (the model failed and the extractive answerer answered, every claim fell later, the time budget ran out), the
final chunk says so in `gatehouse.validation.confidence_warnings` and `gatehouse.stream` and carries the final answer
after a blank line. Every stream ends with `data: [DONE]` (`StreamEnd`).

An answer made at once (the extractive answerer, direct answers, refusals) is streamed when the pipeline has finished,
in word-sized pieces: its time to the first token is the pipeline's latency.

Sources (`ChatSources`): in a chat answer, streamed or not, the cited passages are numbered 1, 2, ... in order of
first use and `[S#]` markers are written `[n]`, which is how Open WebUI links inline markers to its list of sources.
A streamed answer announces each passage, once the answer is complete (its citation, quote included, is then final),
with an Open WebUI `source` event in the `event` field of an ordinary chat.completion.chunk (empty content) sent
before the final chunk, so OpenAI clients read every line as a chunk; a non-streamed answer lists them in a
top-level `sources` field, which Open WebUI reads from a reply that does not stream. `gatehouse.source_numbers` maps
the ids to the numbers (`{"S2": 1}`).

Usage (what `AskWrapper.run_chat_completion` does):
```python
from gatehouse.serving.streaming import chat_completion, stream_answer

chunks = stream_answer(lambda callback: run_ask(pipeline, "How do I rotate an API key?", streaming_callback=callback),
                       completion_id="chatcmpl-1", model="ask")
reply = chat_completion(response, completion_id="chatcmpl-2", model="ask")   # not streamed
```
"""

import contextvars
import queue
import re
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any

from fastapi_openai_compat import ChatCompletion
from fastapi_openai_compat.chat_completions.models import Choice, Message
from haystack.dataclasses import StreamingCallbackT, StreamingChunk

from gatehouse.components.citation_markers import rewrite_markers
from gatehouse.components.printable import printable, printable_data
from gatehouse.components.text_units import shortened

#: Word-sized pieces of an answer streamed at once.
STREAM_PIECE = re.compile(r"\S+\s*|\s+")
_HTTP_URL = re.compile(r"^https?://[^\s/]+", re.IGNORECASE)
#: The longest source name Open WebUI shows whole on an inline chip: a longer one is shown as its first 15 and last
#: 10 characters (`getDisplayTitle` in its Source.svelte), which makes the sections of one document look alike.
CHIP_CHARS = 30
#: The line that ends a server-sent event stream of chat completions, as OpenAI's API ends it.
DONE_EVENT = b"data: [DONE]\n\n"


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


class StreamedSentences:
    """
    The request's streaming callback: each verified, screened sentence the pipeline sends goes on `events` as
    `Released`, made printable (`printable_data`, as the ask's response is); it counts what was sent and, from the
    last chunk, what the verifier dropped.
    """

    def __init__(self, events: queue.SimpleQueue, started: float) -> None:
        """
        :param events: Where released sentences go.
        :param started: `time.perf_counter()` at the request's start, for `first_sentence_ms`.
        """
        self.events = events
        self.started = started
        self.sent = 0
        self.dropped = 0
        self.first_sentence_ms: float | None = None
        self.first_sentence_at: float | None = None

    def __call__(self, chunk: StreamingChunk) -> None:
        """Take one chunk of the pipeline's stream."""
        if chunk.finish_reason:
            self.dropped = int(chunk.meta.get("sentences_dropped") or 0)
            return
        if self.first_sentence_ms is None:
            self.first_sentence_ms = (time.perf_counter() - self.started) * 1000
            self.first_sentence_at = time.time()
        self.events.put(Released(text=printable(chunk.content),
                                 citations=printable_data(list(chunk.meta.get("citations") or []))))
        self.sent += 1


def chip_name(text: str, limit: int = CHIP_CHARS) -> str:
    """
    A source name Open WebUI shows whole on its chips: at most `limit` characters, cut at a word and ended with "…"
    when longer.

    :param text: The name (a section heading, a document title).
    :param limit: The longest name kept whole.
    :returns: The name, whitespace normalised.
    """
    return shortened(" ".join(str(text).split()), limit)


class ChatSources:
    """
    Numbers the cited passages 1, 2, ... in order of first use, writes `[S#]` markers as `[n]`, and describes each
    numbered passage as an Open WebUI source.

    Open WebUI keeps a message's sources in the order they arrive and links an inline `[n]` to the n-th; it merges
    sources that share `metadata[0].source` (its list of sources) or `metadata[0].name` (the inline chips), so both
    are unique. The name is the passage's section (its document's title when it has none), short enough to show whole
    on a chip (`chip_name`) and made distinct with ` (2)`, ` (3)`; the citation popup, which Open WebUI titles with
    the same name, shows the document's title and section and then the quote: the units of the passage the answer
    stands on. A passage's citation is the last one `number` saw for it: a streamed answer's final citations quote
    what every sentence citing it stands on.

    Usage:
    ```python
    sources = ChatSources()
    sources.number(response["citations"])
    text = sources.renumber("Keys expire after 90 days. [S2]")   # "... [1]"
    sources.describe()                                         # one Open WebUI source per number, in order
    ```
    """

    def __init__(self) -> None:
        self.numbers: dict[str, int] = {}
        self.citations: dict[str, dict[str, Any]] = {}

    def number(self, citations: list[dict[str, Any]]) -> None:
        """
        Number the citations not numbered yet, and keep each one as the latest of its id.

        :param citations: Citations of the response contract (`id`, `text`, `section`, `url`, `chunk_id`, `quote`,
            `snippet`).
        """
        for citation in citations:
            self.numbers.setdefault(citation["id"], len(self.numbers) + 1)
            self.citations[citation["id"]] = citation

    def describe(self) -> list[dict[str, Any]]:
        """The Open WebUI sources (`source`, `document`, `metadata`) of the numbered citations, in number order."""
        sources: list[dict[str, Any]] = []
        names: set[str] = set()
        keys: set[str] = set()
        for source_id in sorted(self.numbers, key=self.numbers.__getitem__):
            citation = self.citations[source_id]
            title = str(citation.get("text") or source_id)
            name = _distinct(str(citation.get("section") or title), names)
            key = str(citation.get("chunk_id") or source_id)
            key = f"{key}#{source_id}" if key in keys else key
            keys.add(key)
            url = str(citation.get("url") or "")
            metadata: dict[str, Any] = {"source": key, "name": name}
            source: dict[str, Any] = {"id": key, "name": name}
            if _HTTP_URL.match(url):
                metadata["source_url"] = source["url"] = url
            quote = str(citation.get("quote") or citation.get("snippet") or "")
            sources.append({"source": source, "document": [f"{title}\n\n{quote}".strip()], "metadata": [metadata]})
        return sources

    def renumber(self, text: str) -> str:
        """The text with its `[S#]` markers written as the numbers of `number` (`[S2, S5]` -> `[1, 2]`)."""
        return rewrite_markers(text, lambda ids: [str(self.numbers[i]) for i in ids if i in self.numbers])


def _distinct(text: str, names: set[str]) -> str:
    """The chip name of `text`, with ` (2)`, ` (3)` when `names` holds it already; added to `names`."""
    name, copy = chip_name(text), 1
    while name in names:
        copy += 1
        suffix = f" ({copy})"
        name = chip_name(text, CHIP_CHARS - len(suffix)) + suffix
    names.add(name)
    return name


def chat_completion(response: dict[str, Any], *, completion_id: str, model: str) -> ChatCompletion:
    """
    A non-streamed chat answer: the response contract's answer with markers written `[n]`, its `citations`, the
    Open WebUI `sources` and the `gatehouse` extras (status, error_message, metadata, validation, path,
    source_numbers).

    :param response: The ask's response contract.
    :param completion_id: The chat completion's id.
    :param model: The model name the client asked for.
    """
    sources = ChatSources()
    sources.number(response["citations"])
    extras = {key: response[key] for key in ("status", "error_message", "metadata", "validation", "path")}
    return ChatCompletion(
        id=completion_id, object="chat.completion", created=int(time.time()), model=model,
        choices=[Choice(index=0, message=Message(role="assistant", content=sources.renumber(response["answer"])),
                        finish_reason="stop")],
        citations=response["citations"], sources=sources.describe(),
        gatehouse={**extras, "source_numbers": dict(sources.numbers)},
    )


def stream_answer(ask: Callable[[StreamingCallbackT], dict[str, Any]], *, completion_id: str,
                  model: str) -> Generator[Any, None, None]:
    """
    Run an ask in the background with a streaming callback, and stream the sentences it releases.

    Waits for the first verified sentence, or the whole response when nothing is released before it, so that an ask
    that fails before the stream starts raises its HTTP error here, with its status.

    :param ask: Runs the ask (time budget included) with the given streaming callback and returns the response
        contract.
    :param completion_id: The chat completion's id.
    :param model: The model name the client asked for.
    :returns: The chat completion chunks (those announcing a source carry it in `event`).
    :raises BaseException: What `ask` raised before anything could be sent.
    """
    started = time.perf_counter()
    events: queue.SimpleQueue = queue.SimpleQueue()
    sentences = StreamedSentences(events, started)

    def work() -> None:
        try:
            events.put(Answered(ask(sentences)))
        except BaseException as error:  # noqa: BLE001 - handed to the stream, which raises it or reports it
            events.put(Failed(error))

    threading.Thread(target=contextvars.copy_context().run, args=(work,), name="gatehouse-chat-stream",
                     daemon=True).start()
    first = events.get()
    if isinstance(first, Failed):
        raise first.error
    return _chunks(first, events, sentences, started=started, completion_id=completion_id, model=model)


def _chunks(event: Any, events: queue.SimpleQueue, sentences: StreamedSentences, *, started: float,
            completion_id: str, model: str) -> Generator[Any, None, None]:
    """Released sentences as they come, then the rest of the answer if it differs, then the final chunk."""
    created = int(time.time())
    sources = ChatSources()

    def chunk(content: str, finish_reason: str | None = None, **extra: Any) -> ChatCompletion:
        return ChatCompletion(
            id=completion_id, object="chat.completion.chunk", created=created, model=model,
            choices=[Choice(index=0, delta=Message(role="assistant", content=content), finish_reason=finish_reason)],
            **extra,
        )

    def send(text: str, citations: list[dict[str, Any]], *, in_pieces: bool = False) -> Iterator[Any]:
        sources.number(citations)
        text = sources.renumber(text)  # before splitting: a marker may hold a space ("[S1, S2]")
        for piece in STREAM_PIECE.findall(text) if in_pieces else [text]:
            yield chunk(piece)

    sent: list[str] = []
    while isinstance(event, Released):
        yield from send(event.text, event.citations)
        sent.append(event.text)
        event = events.get()
    answered_ms = (time.perf_counter() - started) * 1000
    response = event.response if isinstance(event, Answered) else _failed(event.error)
    answer, streamed = response["answer"], "".join(sent)
    said, _, notice = answer.rpartition("\n\n")
    noted = bool(streamed) and said.split() == streamed.split()  # what was sent, then a partial answer's notice
    differs = bool(streamed) and not noted and streamed.split() != answer.split()
    validation = dict(response["validation"])
    if not streamed:
        yield from send(answer, response["citations"], in_pieces=True)
    elif noted:
        yield from send("\n\n" + notice, response["citations"])
    elif differs and answer:
        validation["confidence_warnings"] = [
            *validation.get("confidence_warnings", []),
            (f"streamed_answer_replaced: the sentences streamed while the model wrote are not the final answer "
             f"(status {response['status']}); the final answer follows them."),
        ]
        yield from send("\n\n" + answer, response["citations"])
    stream = {
        "mode": "sentences" if sentences.sent or sentences.dropped else "answer",
        "sentences_sent": sentences.sent,
        "sentences_dropped": sentences.dropped,
        "first_sentence_ms": round(sentences.first_sentence_ms, 1) if sentences.first_sentence_ms else None,
        "first_sentence_at": sentences.first_sentence_at,
        "answer_ms": round(answered_ms, 1),
        "answer_differs": differs,
    }
    sources.number(response["citations"])  # the final citations: their quotes cover every sentence citing them
    for source in sources.describe():
        yield chunk("", event={"type": "source", "data": source})
    extras = {key: response[key] for key in ("status", "error_message", "metadata", "path")}
    yield chunk("", finish_reason="stop", citations=response["citations"],
                gatehouse={**extras, "validation": validation, "stream": stream,
                           "source_numbers": dict(sources.numbers)})


def _failed(error: BaseException) -> dict[str, Any]:
    """The response contract of an ask that raised after sentences were sent (its HTTP status can no longer be)."""
    detail = getattr(error, "detail", None) or "The answer could not be completed."
    return {"answer": "", "citations": [], "metadata": {}, "status": "error", "error_message": str(detail),
            "path": [], "validation": {"boundary_violations": [], "confidence_warnings": [], "guardrail_actions": [],
                                       "unsupported_sentences": []}}


class StreamEnd:
    """
    ASGI middleware: a server-sent event stream of the chat routes ends with `data: [DONE]`, as OpenAI's does and
    as OpenAI clients and Open WebUI expect (the chat router Hayhooks uses ends it without). Other answers pass
    unchanged.

    Usage: `app.add_middleware(StreamEnd, paths=("/v1/chat/completions", "/chat/completions"))`.
    """

    def __init__(self, app: Any, *, paths: tuple[str, ...]) -> None:
        """
        :param app: The ASGI app.
        :param paths: The chat routes.
        """
        self.app = app
        self.paths = paths

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("path") not in self.paths:
            await self.app(scope, receive, send)
            return
        streaming = False
        tail = b""

        async def end_with_done(message: dict[str, Any]) -> None:
            nonlocal streaming, tail
            if message["type"] == "http.response.start":
                headers = dict(message.get("headers") or [])
                streaming = headers.get(b"content-type", b"").startswith(b"text/event-stream")
            elif streaming and message["type"] == "http.response.body":
                body = message.get("body", b"")
                tail = (tail + body)[-len(DONE_EVENT):]
                if not message.get("more_body", False) and tail != DONE_EVENT:
                    message = {**message, "body": body + DONE_EVENT}
            await send(message)

        await self.app(scope, receive, end_with_done)
