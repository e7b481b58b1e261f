"""A generator stage backed by any Haystack chat generator, answering only from the numbered passages."""

import inspect
import logging
import re
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from gatehouse.components.chat import ChatGeneratorSerialization, with_deadline
from gatehouse.components.generators.extractive_answerer import ExtractiveAnswerer
from gatehouse.components.generators.reply_stream import ReplyStream
from gatehouse.components.setting_groups import MovedSettings, setting_group
from gatehouse.components.state import FALLBACK_MESSAGE, State, advance, with_validation
from haystack import Document, component
from haystack.dataclasses import ChatMessage, StreamingCallbackT, StreamingChunk

logger = logging.getLogger(__name__)

#: What a degraded answer says: never the exception text (that goes to the log).
LLM_FAILED_MESSAGE = "The language model did not answer."

#: Rules, the answer format and two worked examples (one answered, one NOT_FOUND): small models copy the example's
#: `[S#]` after each sentence. It is the same for every question and comes first, so a llama.cpp server reads it once
#: and then from its prompt cache.
DEFAULT_SYSTEM_PROMPT = (
    "You answer questions about documentation using ONLY the numbered sources you are given. Each source starts with "
    "its marker and its heading path (document › section).\n"
    "\n"
    "Rules:\n"
    "1. Answer the question directly in one or two short sentences. Do not copy whole passages; add nothing the "
    "sources do not say.\n"
    "2. End every sentence with the marker of the source that says it, like [S2].\n"
    "3. Copy names, numbers, options, commands and menu paths exactly as the source writes them.\n"
    "4. If no source states the answer, reply with exactly: NOT_FOUND\n"
    "\n"
    "Example 1:\n"
    "[S1] Billing › Invoices\n"
    "Invoices are emailed to the account owner on the first day of each month. Past invoices can be downloaded "
    "from Settings > Billing.\n"
    "\n"
    "[S2] Security › Sessions\n"
    "Sessions expire after 12 hours without activity.\n"
    "\n"
    "Question: When do I get my invoice, and where are the old ones?\n"
    "Answer: Invoices are emailed to the account owner on the first day of each month [S1]. Past invoices can be "
    "downloaded from Settings > Billing [S1].\n"
    "\n"
    "Example 2:\n"
    "[S1] Security › Sessions\n"
    "Sessions expire after 12 hours without activity.\n"
    "\n"
    "Question: How long are invoices kept?\n"
    "Answer: NOT_FOUND"
)

#: The passages, then the question last (what changes most, after what may be cached).
DEFAULT_USER_PROMPT = "{passages}\n\nQuestion: {question}\nAnswer:"
DEFAULT_PASSAGE_TEMPLATE = "[{source_id}] {heading}\n{content}"
#: What the model is sent and the reply that means "no passage answers": the `system` message, the `user` message
#: (`{passages}` and `{question}` filled in), a `passage` as sent (`{source_id}`, `{heading}`: its heading path,
#: `{title}`, `{section}`, `{content}`) and the `not_found_reply` the system prompt asks for.
DEFAULT_PROMPT: dict[str, str] = {"system": DEFAULT_SYSTEM_PROMPT, "user": DEFAULT_USER_PROMPT,
                                  "passage": DEFAULT_PASSAGE_TEMPLATE, "not_found_reply": "NOT_FOUND"}
#: Settings earlier answerers took that this one does not (a YAML setting them still loads, with a warning).
RETIRED_SETTINGS: dict[str, str] = {
    "max_units": "the model reads the first passages whole, within max_passage_tokens, not the gate's units",
    "max_unit_words": "the model reads the first passages whole, within max_passage_tokens, not the gate's units",
}
USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens", "cached_prompt_tokens")

# Marker spellings small models use instead of `[S2]`: `[2]`, `[S 2]`, `[Source 2]`, `(S2)`, `(S1, S2)`.
_NUMBERED_MARKER = re.compile(r"(?<!\w)\[\s*(?:sources?|src|s{1,2})?\s*(\d+)\s*\]", re.IGNORECASE)  # not `items[2]`
#: A reply that opens with its marker ("[S1] Keys expire after 90 days.") has it moved to the end of that sentence.
_LEADING_MARKERS = re.compile(r"^\s*((?:\[S\d+(?:\s*,\s*S\d+)*\]\s*)+)(?=\S)(?!```)([^\n]*?[.!?])(?=\s|$)")
_PARENTHESISED_MARKER = re.compile(r"\(\s*(S\d+(?:\s*[,;]\s*S\d+)*)\s*\)", re.IGNORECASE)
_ANSWER_PREFIX = re.compile(r"^\s*answer\s*:\s*", re.IGNORECASE)


#: What is counted as a token of a passage: a word or a punctuation mark (on documentation, within 0.9-1.6 of the
#: BPE tokens of the models `gatehouse llm install` serves, median 1.05).
_TOKEN = re.compile(r"\w+|[^\w\s]")
#: The end of a reply's last whole sentence: `.`, `!` or `?` with any markers after it, or a marker.
_SENTENCE_END = re.compile(r"(?:[.!?](?:\s*\[S\d+(?:\s*,\s*S\d+)*\])*|\[S\d+(?:\s*,\s*S\d+)*\])(?=\s|$)")


def estimate_tokens(text: str) -> int:
    """A text's tokens as the passage budget counts them: its words and punctuation marks."""
    return len(_TOKEN.findall(text))


@component
class LLMAnswerer(MovedSettings, ChatGeneratorSerialization):
    """
    Generates a cited answer with a chat model (llama.cpp's server from `gatehouse llm serve`, vLLM, Ollama, OpenAI,
    ...), given as any Haystack chat generator in `chat_generator`.

    The model reads passages, not fragments of them: the system prompt (rules, the `[S#]` answer format and worked
    examples; the same for every question, so a server with a prompt cache reads it once), then the first passages in
    retrieval's order, each whole under its marker and heading path (`[S1] Document › Section › Subsection`), as many
    as fit `max_passage_tokens` (words and punctuation marks; at most `max_passages`; the first is always sent, cut to
    the budget when it alone is longer), then the question: the condensed standalone question for a follow-up, else
    the user's question. One call per question.

    Marker spellings small models use (`[2]`, `(S2)`, `[Source 2]`) are rewritten to `[S2]`; a reply cut by the
    token limit keeps its whole sentences; the citation verifier then removes every sentence its passage does not
    support. A reply of exactly `prompt.not_found_reply` is the fallback message with status `fallback`: the model,
    not a threshold, decides that the passages do not answer.

    The server's token counts (the reply's `meta["usage"]`) are added to the state's `usage`
    (`prompt_tokens`, `completion_tokens`, `total_tokens`, `cached_prompt_tokens`), which the response reports in
    `metadata.usage`.

    When the model fails (server down, timeout), the extractive answerer answers instead with status `partial` and a
    warning that says so (the exception goes to the log, never into the response), unless `fallback_to_extractive`
    is off, in which case the status is `error`.

    Given a `streaming_callback` (the chat endpoint streams), the answer is not made here: the state carries the
    model's reply as a `ReplyStream`, which the citation verifier and the output guardrails follow while the model
    writes it (see `run`); the answer is the same either way.

    Usage:
    ```python
    from gatehouse.components.generators.llm_answerer import LLMAnswerer
    from gatehouse.components.generators.openai_compatible_generator import OpenAICompatibleChatGenerator

    answerer = LLMAnswerer(chat_generator=OpenAICompatibleChatGenerator(), max_passages=3, max_passage_tokens=300)
    state = answerer.run(state=state_with_passages)["state"]
    state["answer"], state["usage"]
    ```
    """

    moved_settings = {"system_prompt": "prompt.system", "user_prompt": "prompt.user",
                      "passage_template": "prompt.passage", "not_found_reply": "prompt.not_found_reply"}
    retired_settings = RETIRED_SETTINGS

    def __init__(
        self,
        *,
        chat_generator: Any,
        prompt: dict[str, str] | None = None,
        max_passages: int | None = None,
        max_passage_tokens: int | None = None,
        fallback_message: str = FALLBACK_MESSAGE,
        fallback_to_extractive: bool = True,
    ) -> None:
        """
        :param chat_generator: A Haystack chat generator component.
        :param prompt: The messages and passages as sent, and the not-found reply (`DEFAULT_PROMPT`: keys, defaults).
        :param max_passages: Only the first (best) passages are sent; None: as many as the budget takes.
        :param max_passage_tokens: The passages sent, whole, fit this many tokens (words and punctuation marks) together;
            the first is always sent (cut to it when longer). None: no budget.
        :param fallback_message: The answer when the model replies `prompt.not_found_reply`.
        :param fallback_to_extractive: Answer extractively when the model fails (else the status is `error`).
        """
        if max_passages is not None and max_passages < 1:
            raise ValueError(f"max_passages must be at least 1 or None, got {max_passages}")
        if max_passage_tokens is not None and max_passage_tokens < 1:
            raise ValueError(f"max_passage_tokens must be at least 1 or None, got {max_passage_tokens}")
        self.chat_generator = chat_generator
        self.prompt = setting_group("prompt", prompt, DEFAULT_PROMPT)
        self.max_passages = max_passages
        self.max_passage_tokens = max_passage_tokens
        self.fallback_message = fallback_message
        self.fallback_to_extractive = fallback_to_extractive
        self._extractive = ExtractiveAnswerer() if fallback_to_extractive else None

    def warm_up(self) -> None:
        """Warm up the chat generator when it has a warm-up step."""
        if hasattr(self.chat_generator, "warm_up"):
            self.chat_generator.warm_up()

    def messages(self, state: State) -> list[ChatMessage]:
        """
        The chat messages sent for a state: the system prompt, then the passages and the question.

        :param state: The state with `passages` and the question.
        :returns: The system and user messages.
        """
        numbered = "\n\n".join(self._passage(doc) for doc in self.sent_passages(list(state.get("passages") or [])))
        question = state.get("condensed_query") or state.get("original_query") or state["query"]
        user = self.prompt["user"].replace("{passages}", numbered).replace("{question}", question)
        return [ChatMessage.from_system(self.prompt["system"]), ChatMessage.from_user(user)]

    def sent_passages(self, passages: list[Document]) -> list[Document]:
        """
        The passages the model reads: the first ones in order, whole, while they fit `max_passage_tokens` together (a
        passage that does not fit is skipped, a shorter one after it may fit), at most `max_passages`; the first
        always, cut to the budget when it alone is longer.
        """
        sent: list[Document] = []
        used = 0
        for doc in passages[: self.max_passages]:
            cost = estimate_tokens(self._passage(doc))
            if self.max_passage_tokens is None or used + cost <= self.max_passage_tokens:
                sent.append(doc)
                used += cost
            elif not sent:
                sent.append(replace(doc, content=_cut(doc.content or "", self.max_passage_tokens
                                                      - estimate_tokens(self._passage(replace(doc, content=""))))))
                used = self.max_passage_tokens
        return sent

    def _passage(self, doc: Document) -> str:
        title = str(doc.meta.get("title") or doc.meta.get("source") or "")
        section = str(doc.meta.get("section") or "")
        path = [str(h) for h in (doc.meta.get("heading_path") or ([section] if section else []))]
        heading = " › ".join(dict.fromkeys(part for part in (title, *path) if part))
        return (
            self.prompt["passage"].replace("{source_id}", str(doc.meta.get("source_id", "")))
            .replace("{heading}", heading)
            .replace("{title}", title)
            .replace("{section}", section)
            .replace("{content}", (doc.content or "").strip())
        )

    @staticmethod
    def normalize_markers(reply: str) -> str:
        """The reply with `[2]`, `[S 2]`, `[Source 2]`, `(S2)` and `(S1, S2)` written as `[S2]`, `[S1, S2]`."""
        reply = _ANSWER_PREFIX.sub("", reply)
        reply = _NUMBERED_MARKER.sub(lambda m: f"[S{m.group(1)}]", reply)
        reply = _PARENTHESISED_MARKER.sub(lambda m: f"[{m.group(1).upper()}]", reply).strip()
        return _LEADING_MARKERS.sub(lambda m: f"{m.group(2)} {m.group(1).strip()}", reply)

    def _is_not_found(self, reply: str) -> bool:
        bare = re.sub(r"\[[^\]]*\]", "", reply)
        return re.sub(r"[\W_]+", "", bare).lower() == re.sub(r"[\W_]+", "", self.prompt["not_found_reply"]).lower()

    @component.output_types(state=State)
    def run(self, state: State, deadline: float | None = None,
            streaming_callback: StreamingCallbackT | None = None) -> dict[str, Any]:
        """
        Generate the answer.

        :param state: The state with `passages`.
        :param deadline: `time.monotonic()` by which the request must be answered (the model's call fits in it).
        :param streaming_callback: The request streams its answer: the model is not asked here; the state carries its
            reply as a `ReplyStream` in `reply`, which the citation verifier and the output guardrails follow, so the
            callback gets each sentence once it is verified and screened, never the raw reply. (The chat generator
            must take a `streaming_callback`; one that does not answers here in one piece.)
        :returns: `state` with `answer`, `generator` and `usage` (fallback: also `status` and `fallback`), or with
            `reply` when streaming.
        """
        if streaming_callback is not None and "streaming_callback" in inspect.signature(self.chat_generator.run).parameters:
            return {"state": State(state, reply=ReplyStream(lambda on_text: self._answer(state, deadline, on_text)))}
        return {"state": self._answer(state, deadline, None)}

    def _answer(self, state: State, deadline: float | None, on_text: Callable[[str], None] | None) -> State:
        """Ask the model (streaming to `on_text` when given) and make its reply the state's answer."""
        started = time.perf_counter()
        streaming = {"streaming_callback": self._follower(on_text)} if on_text is not None else {}
        try:
            result = self.chat_generator.run(messages=self.messages(state), **streaming,
                                             **with_deadline(self.chat_generator, deadline))
            replies = (result or {}).get("replies") or []
            reply = replies[0] if replies and isinstance(replies[0], ChatMessage) else None
            text = (reply.text or "").strip() if reply is not None else ""
            if not text:
                raise RuntimeError("the chat generator returned no text reply")
        except Exception as error:  # noqa: BLE001 - any model failure degrades to the extractive answer
            logger.warning("The language model failed: %s: %s", type(error).__name__, error)
            if self._extractive is None:
                return advance(state, stage="generation", started=started, steps=["generate_llm_failed"],
                               status="error", error_message=LLM_FAILED_MESSAGE, answer="")
            warned = with_validation(state, "confidence_warnings", f"{LLM_FAILED_MESSAGE} Answered extractively instead.")
            extracted = self._extractive.run(state=warned)["state"]
            degraded = extracted.get("status") if extracted.get("status") in ("fallback", "error") else "partial"
            return advance(extracted, stage="generation", started=started, steps=["generate_llm_failed"],
                           status=degraded)
        usage = _add_usage(state.get("usage"), reply.meta.get("usage"))
        if self._is_not_found(text):
            return advance(state, stage="generation", started=started, steps=["generate_llm", "llm_not_found"],
                           answer=self.fallback_message, status="fallback", fallback=True, generator="llm", usage=usage)
        answer = self.normalize_markers(text)
        if reply.meta.get("finish_reason") == "length":  # cut by the token limit: its whole sentences only
            answer = whole_sentences(answer)
        return advance(state, stage="generation", started=started, steps=["generate_llm"], answer=answer,
                       generator="llm", usage=usage)

    def _follower(self, on_text: Callable[[str], None]) -> StreamingCallbackT:
        """A streaming callback that tells `on_text` the reply so far, normalised, after each text chunk."""
        received: list[str] = []

        def follow(chunk: StreamingChunk) -> None:
            if chunk.content:
                received.append(chunk.content)
                on_text(self.normalize_markers("".join(received)))

        return follow


def _cut(text: str, tokens: int) -> str:
    """The text cut after `tokens` tokens (as the budget counts them), at a word's end, with " …" where it was cut."""
    ends = [match.end() for match in _TOKEN.finditer(text)]
    if len(ends) <= tokens:
        return text
    return text[: ends[max(tokens - 1, 0)]].rstrip() + " …"


def whole_sentences(reply: str) -> str:
    """A reply cut by the token limit without its unfinished last sentence (as written when it has no whole one)."""
    ends = [match.end() for match in _SENTENCE_END.finditer(reply)]
    return reply[: ends[-1]].rstrip() if ends else reply


def _add_usage(total: dict[str, int] | None, reply_usage: Any) -> dict[str, int] | None:
    """
    The state's token counts plus one reply's: `prompt_tokens`, `completion_tokens`, `total_tokens` and
    `cached_prompt_tokens` (the prompt tokens the server read from its cache, its `prompt_tokens_details`).
    """
    if not isinstance(reply_usage, dict):
        return total
    details = reply_usage.get("prompt_tokens_details")
    reply_counts = {**reply_usage, "cached_prompt_tokens": details.get("cached_tokens") if isinstance(details, dict)
                    else None}
    summed = {key: int((total or {}).get(key) or 0) for key in USAGE_KEYS}
    for key in USAGE_KEYS:
        summed[key] += int(reply_counts.get(key) or 0)
    return summed
