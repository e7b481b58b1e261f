"""Turns the state into a retrieval request, or hands on the documents the router's evidence search already found."""

import time
from typing import Any

from haystack import Document, component

from gatehouse.components.state import State


@component
class RetrievalRequest:
    """
    The step before `RetrievalPipeline` in `ask.yml`: emits the state's `query`, `tenant` and `kbs` for the search,
    or, when the router's evidence tier already searched the same query in the same knowledge bases, those
    documents instead (no second search). The state goes on to `RetrievalResult` either way.

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

        :param state: The request state (`query`, `tenant`, `kbs`, and `prefetched_documents` from the router).
        :returns: `state` (with `retrieval_started`, `prefetched_documents` cleared) and either `query`, `tenant`
            and `kbs` (search) or `documents` (the evidence search's, when its query and KBs are the state's).
        """
        prefetched = state.get("prefetched_documents") or {}
        state = {**state, "retrieval_started": time.perf_counter(), "prefetched_documents": None}
        if prefetched.get("query") == state["query"] and prefetched.get("kbs") == state.get("kbs"):
            return {"state": state, "documents": list(prefetched["documents"])}
        return {"state": state, "query": state["query"], "tenant": state.get("tenant"), "kbs": state.get("kbs") or None}
