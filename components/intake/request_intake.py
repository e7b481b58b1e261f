"""Turns the caller's request into the pipeline state, rejecting malformed requests with a typed status."""

import time
from typing import Any

from haystack import Document, component

from gatehouse.components.state import PUBLIC_TENANT, State, advance, new_state, with_validation

MODES = ("full-corpus", "constrained-context", "hybrid")
INVALID_CONTEXT = ("reject", "fallback_to_full_corpus")


@component
class RequestIntake:
    """
    Validates a request and builds the state that the gates pass along (see `gatehouse.components.state`).

    A malformed request (unknown mode, history that is not a list of `{role, content}` turns, a non-string
    query) leaves on `invalid` with status `error` and a message naming the problem, and so does one over a bound
    (below; the message names the setting): what the gates after it read is bounded whoever calls the pipeline
    (`gatehouse serve` refuses the same requests with a 422 before the pipeline runs, see `over_bound`).

    The history is bounded by the turns a request may send (`max_request_history_turns`) and the characters of the
    turns kept (the last `max_history_turns`: `max_history_chars`), the context by `max_context_chars`.

    The mode sets where the answer may come from (the seeds' context selection):

    - `full-corpus`: the knowledge bases;
    - `constrained-context`: only the caller's `context`, as one document (`context_documents`); nothing is searched;
    - `hybrid`: the caller's context in front of what the knowledge bases give.

    A context shorter than `min_context_chars` is rejected (`invalid`, a message that says why) or, with
    `invalid_context: fallback_to_full_corpus`, the request searches the knowledge bases instead and a warning says so.

    Usage:
    ```python
    from gatehouse.components.intake.request_intake import RequestIntake

    out = RequestIntake().run(query="How do I rotate an API key?", tenant="acme", mode="full-corpus")
    out["state"]["path"]   # ["start"]
    ```
    """

    def __init__(
        self,
        *,
        default_mode: str = "full-corpus",
        max_history_turns: int = 20,
        max_request_history_turns: int = 1000,
        max_history_chars: int = 200_000,
        max_context_chars: int = 200_000,
        min_context_chars: int = 50,
        invalid_context: str = "reject",
        context_title: str = "Your selected text",
    ) -> None:
        """
        :param default_mode: Mode of requests that name none.
        :param max_history_turns: The most recent turns kept; older ones are dropped (a chat client sends the whole
            conversation).
        :param max_request_history_turns: Most turns a request may send; more is an error.
        :param max_history_chars: Most characters the kept turns may hold together; more is an error.
        :param max_context_chars: Longest context, in characters; longer is an error.
        :param min_context_chars: Shortest usable context of the constrained and hybrid modes.
        :param invalid_context: `reject` or `fallback_to_full_corpus`: what a too short context does.
        :param context_title: Display title of citations into the caller's context.
        """
        if default_mode not in MODES:
            raise ValueError(f"Unknown default_mode '{default_mode}'. Use one of: {', '.join(MODES)}.")
        if invalid_context not in INVALID_CONTEXT:
            raise ValueError(f"invalid_context must be one of: {', '.join(INVALID_CONTEXT)}; got {invalid_context!r}.")
        if max_history_turns < 0 or min(max_request_history_turns, max_history_chars, max_context_chars) < 1:
            raise ValueError("max_history_turns must be 0 or more; max_request_history_turns, max_history_chars and "
                             "max_context_chars at least 1.")
        self.default_mode = default_mode
        self.max_history_turns = max_history_turns
        self.max_request_history_turns = max_request_history_turns
        self.max_history_chars = max_history_chars
        self.max_context_chars = max_context_chars
        self.min_context_chars = min_context_chars
        self.invalid_context = invalid_context
        self.context_title = context_title

    def kept_turns(self, history: list[Any]) -> list[Any]:
        """The turns of a history that are kept: the last `max_history_turns`."""
        return history[len(history) - self.max_history_turns :] if self.max_history_turns else []

    def over_bound(self, history: list[dict[str, Any]], context: Any) -> str | None:
        """
        Why a request's history or context is over a bound, naming the setting; None when neither is.

        :param history: The turns the request sent, each with a string `content`.
        :param context: The request's context (not a string: no context).
        """
        where = "of the ask pipeline's intake"
        if len(history) > self.max_request_history_turns:
            return (f"The history holds {len(history)} turns; the limit is {self.max_request_history_turns} "
                    f"(max_request_history_turns {where}).")
        kept = self.kept_turns(history)
        chars = sum(len(turn["content"]) for turn in kept)
        if chars > self.max_history_chars:
            return (f"The last {len(kept)} turns of the history hold {chars} characters; the limit is "
                    f"{self.max_history_chars} (max_history_chars {where}).")
        if isinstance(context, str) and len(context) > self.max_context_chars:
            return (f"The context is {len(context)} characters long; the limit is {self.max_context_chars} "
                    f"(max_context_chars {where}).")
        return None

    def _problem(self, query: Any, mode: str, history: Any, tenant: Any, context: Any) -> str | None:
        if not isinstance(query, str):
            return "The query must be a string."
        if mode not in MODES:
            return f"Unknown mode '{mode}'. Use one of: {', '.join(MODES)}."
        if tenant is not None and not isinstance(tenant, str):
            return "The tenant must be a string."
        if not isinstance(history, list) or any(
            not isinstance(turn, dict)
            or turn.get("role") not in {"user", "assistant", "system"}
            or not isinstance(turn.get("content"), str)
            for turn in history
        ):
            return "The history must be a list of {role: user|assistant|system, content: text} turns."
        return self.over_bound(history, context)

    def _with_context(self, state: State) -> dict[str, State]:
        """The state of a constrained or hybrid request: its context as a document, or why it cannot be used."""
        mode = state["mode"]
        context = state.get("context")
        context = context.strip() if isinstance(context, str) else ""
        if len(context) < self.min_context_chars:
            reason = (f"The {mode} mode needs a context of at least {self.min_context_chars} characters "
                      f"(got {len(context)}).")
            if self.invalid_context == "fallback_to_full_corpus":
                warned = with_validation(state, "confidence_warnings", reason + " Searched the knowledge bases instead.")
                return {"state": advance(warned, steps=["context_invalid_full_corpus"], mode="full-corpus")}
            return {"invalid": advance(state, steps=["context_invalid"], status="error", error_message=reason,
                                       answer="")}
        document = Document(content=context, meta={
            "source": "user-context", "title": self.context_title, "kb": None, "tenant": state["tenant"],
            "doc_id": "user-context", "section": None, "section_id": None, "url": None})
        step = "constrained_context" if mode == "constrained-context" else "hybrid_context"
        return {"state": advance(state, steps=[step], context_documents=[document])}

    @component.output_types(state=State, invalid=State)
    def run(
        self,
        query: str,
        tenant: str | None = None,
        kb: str | None = None,
        mode: str | None = None,
        context: str | None = None,
        history: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """
        Build the state.

        :param query: The user's question.
        :param tenant: The caller's tenant; None is the public tenant.
        :param kb: A knowledge base to search, bypassing the router.
        :param mode: `full-corpus`, `constrained-context` or `hybrid`.
        :param context: Caller-provided text for the constrained and hybrid modes.
        :param history: Earlier turns of the conversation.
        :returns: `state` for a valid request, else `invalid` (status `error`).
        """
        mode = mode or self.default_mode
        history = [] if history is None else history
        problem = self._problem(query, mode, history, tenant, context)
        state = new_state(
            query if isinstance(query, str) else "",
            tenant=(tenant.strip() if isinstance(tenant, str) else "") or PUBLIC_TENANT,
            kb=kb or None,
            mode=mode if mode in MODES else self.default_mode,
            context=context,
            history=self.kept_turns(history) if isinstance(history, list) else [],
            started=time.perf_counter(),
        )
        if problem:
            state.update(status="error", error_message=problem, answer="", history=[], context=None)
            return {"invalid": state}
        if state["mode"] == "full-corpus":
            return {"state": state}
        return self._with_context(state)
