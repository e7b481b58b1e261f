"""Puts an attempt's retrieved documents into the state, after any context the caller gave (hybrid mode)."""

import time
from dataclasses import replace
from typing import Any

from haystack import Document, component

from gatehouse.components.state import State, advance


@component
class RetrievalResult:
    """
    The step after `RetrievalPipeline` in `search.yml`: the state takes the attempt's documents. The caller's context
    (`context_documents`) goes in front: alone in the constrained-context mode, scored above the retrieved chunks in
    the hybrid mode so passage assembly keeps it. The retrieval's time (since `RetrievalRequest`) is recorded under `latency_ms["retrieval"]`.

    Usage:
    ```python
    from haystack import Document
    from gatehouse.components.retrievers.retrieval_result import RetrievalResult
    from gatehouse.components.state import new_state

    result = RetrievalResult().run(state=new_state("q"), documents=[Document(content="a", score=0.5)])
    result["state"]["chunks_retrieved"]   # 1
    ```
    """

    @component.output_types(state=State)
    def run(self, state: State, documents: list[Document]) -> dict[str, Any]:
        """
        Record the attempt's documents.

        :param state: The request state (from `RetrievalRequest`).
        :param documents: The retrieved documents, best first.
        :returns: `state` with `documents` (the context first) and `chunks_retrieved` (those the search found).
        """
        context = list(state.get("context_documents") or [])
        if state.get("mode") == "hybrid":
            top = max((doc.score or 0.0 for doc in documents), default=0.0)
            context = [replace(doc, score=top + 1.0) for doc in context]
        return {
            "state": advance(
                state, stage="retrieval", started=state.get("retrieval_started", time.perf_counter()),
                documents=context + list(documents), chunks_retrieved=len(documents),
            )
        }
