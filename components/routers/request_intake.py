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
    query) leaves on `invalid` with status `error` and a message naming the problem.

    The mode sets where the answer may come from (the seeds' context selection):

    - `full-corpus`: the knowledge bases;
    - `constrained-context`: only the caller's `context`, as one document (`context_documents`); nothing is searched;
    - `hybrid`: the caller's context in front of what the knowledge bases give.

    A context shorter than `min_context_chars` is rejected (`invalid`, a message that says why) or, with
    `invalid_context: fallback_to_full_corpus`, the request searches the knowledge bases instead and a warning says so.

    Usage:
    ```python
    from gatehouse.components.routers.request_intake import RequestIntake

    out = RequestIntake().run(query="How do I rotate an API key?", tenant="acme", mode="full-corpus")
    out["state"]["path"]   # ["start"]
    ```
    """

    def __init__(
        self,
        *,
        default_mode: str = "full-corpus",
        max_history_turns: int = 20,
        min_context_chars: int = 50,
        invalid_context: str = "reject",
        context_title: str = "Your selected text",
    ) -> None:
        """
        :param default_mode: Mode of requests that name none.
        :param max_history_turns: Older turns are dropped.
        :param min_context_chars: Shortest usable context of the constrained and hybrid modes.
        :param invalid_context: `reject` or `fallback_to_full_corpus`: what a too short context does.
        :param context_title: Display title of citations into the caller's context.
        """
        if default_mode not in MODES:
            raise ValueError(f"Unknown default_mode '{default_mode}'. Use one of: {', '.join(MODES)}.")
        if invalid_context not in INVALID_CONTEXT:
            raise ValueError(f"invalid_context must be one of: {', '.join(INVALID_CONTEXT)}; got {invalid_context!r}.")
        self.default_mode = default_mode
        self.max_history_turns = max_history_turns
        self.min_context_chars = min_context_chars
        self.invalid_context = invalid_context
        self.context_title = context_title

    def _problem(self, query: Any, mode: str, history: Any, tenant: Any) -> str | None:
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
        return None

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
        problem = self._problem(query, mode, history, tenant)
        state = new_state(
            query if isinstance(query, str) else "",
            tenant=(tenant.strip() if isinstance(tenant, str) else "") or PUBLIC_TENANT,
            kb=kb or None,
            mode=mode if mode in MODES else self.default_mode,
            context=context,
            history=history[-self.max_history_turns :] if isinstance(history, list) else [],
            started=time.perf_counter(),
        )
        if problem:
            state.update(status="error", error_message=problem, answer="", history=[], context=None)
            return {"invalid": state}
        if state["mode"] == "full-corpus":
            return {"state": state}
        return self._with_context(state)
