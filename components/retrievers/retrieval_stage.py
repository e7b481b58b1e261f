"""The retrieval step of the ask pipeline: runs `retrieve.yml` for the state's query, tenant and knowledge bases."""

import time
from dataclasses import replace
from typing import Any

from haystack import Pipeline, component, default_from_dict, default_to_dict

from gatehouse.components.state import advance


@component
class RetrievalStage:
    """
    Runs the hybrid retrieval pipeline (`pipelines/retrieve.yml` by default) inside the ask pipeline, so
    retrieval is declared once and tuned in one file.

    The tenant comes from the state and is pinned by the retrieval pipeline's `TenantFilter`; the knowledge
    bases come from the router. Caller-provided context (hybrid mode) is put in front of the retrieved chunks,
    scored above them so passage assembly keeps it.

    Usage:
    ```python
    from gatehouse.components.retrievers.retrieval_stage import RetrievalStage
    from gatehouse.components.state import new_state

    stage = RetrievalStage(pipeline="retrieve")
    state = stage.run(state=new_state("How do I rotate an API key?", kbs=["faq"]))["state"]
    state["documents"]
    ```
    """

    def __init__(self, *, pipeline: str = "retrieve", top_k: int | None = None) -> None:
        """
        :param pipeline: Name (in the pipelines folder) or path of the retrieval pipeline YAML.
        :param top_k: Overrides the ranker's `top_k`; None keeps the retrieval YAML's value.
        """
        self.pipeline = pipeline
        self.top_k = top_k
        self._pipeline: Pipeline | None = None

    def warm_up(self) -> None:
        """Load the retrieval pipeline and its models."""
        if self._pipeline is None:
            from gatehouse.pipelines import load_pipeline

            self._pipeline = load_pipeline(self.pipeline)
            self._pipeline.warm_up()

    def retrieve(self, query: str, tenant: str | None, kbs: list[str] | None, top_k: int | None = None) -> list:
        """Run the retrieval pipeline and return its documents (`top_k` overrides this stage's for one call)."""
        self.warm_up()
        assert self._pipeline is not None
        return run_retrieval(self._pipeline, query, tenant, kbs, self.top_k if top_k is None else top_k)

    @component.output_types(state=dict)
    def run(self, state: dict) -> dict[str, Any]:
        """
        Retrieve for the state's current query.

        :param state: The request state (`query`, `tenant`, `kbs`, optional `context_documents`, and
            `prefetched_documents`: the router's evidence search, used instead of searching when its query and KBs
            are the state's).
        :returns: `state` with `documents` and `chunks_retrieved`.
        """
        started = time.perf_counter()
        prefetched = state.get("prefetched_documents") or {}
        if prefetched.get("query") == state["query"] and prefetched.get("kbs") == state.get("kbs"):
            documents = list(prefetched["documents"])  # the router's evidence search already ran this retrieval
        else:
            documents = self.retrieve(state["query"], state.get("tenant"), state.get("kbs"))
        top = max((doc.score or 0.0 for doc in documents), default=0.0)
        context = [replace(doc, score=top + 1.0) for doc in state.get("context_documents") or []]
        documents = context + documents
        return {
            "state": advance(
                state, stage="retrieval", started=started, documents=documents, chunks_retrieved=len(documents),
                prefetched_documents=None,
            )
        }

    def to_dict(self) -> dict[str, Any]:
        """Serialise the component."""
        return default_to_dict(self, pipeline=self.pipeline, top_k=self.top_k)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RetrievalStage":
        """Deserialise the component."""
        return default_from_dict(cls, data)


def retrieval_inputs(pipeline: Pipeline, query: str, tenant: str | None = None, kbs: list[str] | None = None) -> dict:
    """
    The inputs of a retrieval pipeline for one query: every component input named `query` or `text` (retrievers,
    query embedder, ranker) gets the query, `tenant` and `kbs` inputs (the tenant filter) get theirs. A retriever
    added in YAML is fed without a code change.
    """
    values = {"query": query, "text": query, "tenant": tenant, "kbs": kbs or None}
    inputs: dict[str, dict[str, Any]] = {}
    for name, sockets in pipeline.inputs().items():
        given = {key: values[key] for key in sockets if key in values}
        if given:
            inputs[name] = given
    return inputs


def run_retrieval(
    pipeline: Pipeline, query: str, tenant: str | None, kbs: list[str] | None, top_k: int | None = None
) -> list:
    """
    Run a loaded retrieval pipeline (`retrieve.yml`'s inputs) and return its ranked documents.

    :param top_k: Overrides the `top_k` of the pipeline's last stage (the ranker); None keeps the YAML's value.
    """
    inputs = retrieval_inputs(pipeline, query, tenant, kbs)
    last = next(iter(pipeline.outputs()))  # the ranker in retrieve.yml
    if top_k is not None:
        inputs.setdefault(last, {})["top_k"] = top_k
    return pipeline.run(inputs)[last]["documents"]
