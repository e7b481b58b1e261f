"""Turns the state into a retrieval request: its query, tenant and knowledge bases."""

import time
from typing import Any

from haystack import Document, component

from gatehouse.components.state import State


@component
class RetrievalRequest:
    """
    The step before `RetrievalPipeline` in `search.yml`: emits the state's `query`, `tenant` and `kbs` for the search.
    A request whose passages are only the caller's context (mode `constrained-context`) searches nothing: it emits no
    documents of its own. The state goes on to `RetrievalResult` either way.

    Usage:
    ```python
    from gatehouse.components.retrievers.retrieval_request import RetrievalRequest
    from gatehouse.components.state import new_state

    request = RetrievalRequest().run(state=new_state("How do I rotate an API key?", kbs=["faq"]))
    request["query"], request["kbs"]   # ("How do I rotate an API key?", ["faq"])
    ```
    """

    @component.output_types(
        state=State, query=str, tenant=str | None, kbs=list[str] | None, documents=list[Document]
    )
    def run(self, state: State) -> dict[str, Any]:
        """
        Start one retrieval attempt.

        :param state: The request state (`query`, `tenant`, `kbs`, `mode`).
        :returns: `state` (with `retrieval_started`) and either `query`, `tenant` and `kbs` (search) or `documents`
            (none: the constrained-context mode).
        """
        state = State(state, retrieval_started=time.perf_counter())
        if state.get("mode") == "constrained-context":
            return {"state": state, "documents": []}
        return {"state": state, "query": state["query"], "tenant": state.get("tenant"), "kbs": state.get("kbs") or None}
