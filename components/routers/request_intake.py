"""Turns the caller's request into the pipeline state, rejecting malformed requests with a typed status."""

import time
from typing import Any

from haystack import component

from gatehouse.components.state import PUBLIC_TENANT, State, new_state

MODES = ("full-corpus", "constrained-context", "hybrid")


@component
class RequestIntake:
    """
    Validates a request and builds the state that the gates pass along (see `gatehouse.components.state`).

    A malformed request (unknown mode, history that is not a list of `{role, content}` turns, a non-string
    query) leaves on `invalid` with status `error` and a message naming the problem.

    Usage:
    ```python
    from gatehouse.components.routers.request_intake import RequestIntake

    out = RequestIntake().run(query="How do I rotate an API key?", tenant="acme", mode="full-corpus")
    out["state"]["path"]   # ["start"]
    ```
    """

    def __init__(self, *, default_mode: str = "full-corpus", max_history_turns: int = 20) -> None:
        """
        :param default_mode: Mode of requests that name none.
        :param max_history_turns: Older turns are dropped.
        """
        if default_mode not in MODES:
            raise ValueError(f"Unknown default_mode '{default_mode}'. Use one of: {', '.join(MODES)}.")
        self.default_mode = default_mode
        self.max_history_turns = max_history_turns

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
        return {"state": state}
