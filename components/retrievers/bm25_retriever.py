"""Lexical retrieval from the BM25 index, keeping the raw BM25 score."""

from dataclasses import replace
from typing import Any

from haystack import Document, component

from gatehouse.document_stores.lexical_document_store import LexicalDocumentStore


@component
class BM25Retriever:
    """
    Retrieves chunks by BM25; each carries its raw score in `meta[score_field]` (`bm25_score` by default; a second
    lexical retriever in the same pipeline names its own field, so fusion keeps both).

    Usage:
    ```python
    from gatehouse.components.retrievers.bm25_retriever import BM25Retriever
    from gatehouse.document_stores.lexical_document_store import LexicalDocumentStore

    retriever = BM25Retriever(document_store=LexicalDocumentStore(), top_k=50)
    trigrams = BM25Retriever(document_store=LexicalDocumentStore(analysis="ngrams"), score_field="ngram_score")
    docs = retriever.run(query="rotate api key", filters=filters)["documents"]
    ```
    """

    def __init__(self, *, document_store: LexicalDocumentStore, top_k: int = 50, score_field: str = "bm25_score") -> None:
        """
        :param document_store: The lexical store.
        :param top_k: Maximum number of documents.
        :param score_field: The metadata key that receives the BM25 score.
        """
        if not isinstance(document_store, LexicalDocumentStore):
            raise ValueError("document_store must be a LexicalDocumentStore.")
        self.document_store = document_store
        self.top_k = top_k
        self.score_field = score_field

    @component.output_types(documents=list[Document])
    def run(self, query: str, filters: dict[str, Any], top_k: int | None = None) -> dict[str, Any]:
        """
        Retrieve documents.

        :param query: The query text.
        :param filters: Haystack filters (mandatory: the tenant filter always precedes retrieval).
        :param top_k: Overrides the init `top_k`.
        :returns: `documents`, best first.
        """
        documents = self.document_store.bm25_retrieval(
            query, filters=filters, top_k=self.top_k if top_k is None else top_k
        )
        return {"documents": [replace(d, meta={**d.meta, self.score_field: d.score}) for d in documents]}
