"""Dense retrieval from the vector store, keeping the raw cosine score for the quality gate."""

from dataclasses import replace
from typing import Any

from haystack import Document, component

from gatehouse.components.embedders.vector import Vector
from gatehouse.document_stores.dense_document_store import DenseDocumentStore


@component
class DenseRetriever:
    """
    Retrieves the chunks nearest to a query embedding; each carries `meta["dense_score"]` (cosine similarity).

    Usage:
    ```python
    from gatehouse.components.retrievers.dense_retriever import DenseRetriever
    from gatehouse.document_stores.dense_document_store import DenseDocumentStore

    retriever = DenseRetriever(document_store=DenseDocumentStore(), top_k=50)
    docs = retriever.run(query_embedding=vector, filters=filters)["documents"]
    ```
    """

    def __init__(self, *, document_store: DenseDocumentStore, top_k: int = 50) -> None:
        """
        :param document_store: The dense store.
        :param top_k: Maximum number of documents.
        """
        if not isinstance(document_store, DenseDocumentStore):
            raise ValueError("document_store must be a DenseDocumentStore.")
        self.document_store = document_store
        self.top_k = top_k

    @component.output_types(documents=list[Document])
    def run(
        self, query_embedding: list[float] | Vector, filters: dict[str, Any], top_k: int | None = None
    ) -> dict[str, Any]:
        """
        Retrieve documents.

        :param query_embedding: The query vector.
        :param filters: Haystack filters (mandatory: the tenant filter always precedes retrieval).
        :param top_k: Overrides the init `top_k`; 0 retrieves nothing.
        :returns: `documents`, best first.
        """
        limit = self.top_k if top_k is None else top_k
        documents = self.document_store.embedding_retrieval(list(query_embedding), filters=filters, top_k=limit)
        return {"documents": [replace(d, meta={**d.meta, "dense_score": d.score}) for d in documents]}
