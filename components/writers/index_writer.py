"""Writes chunks to the dense and the lexical store, replacing a changed document's old chunks."""

from collections import defaultdict
from typing import Any

from haystack import Document, component
from haystack.document_stores.types import DuplicatePolicy

from gatehouse.document_stores.dense_document_store import DenseDocumentStore
from gatehouse.document_stores.lexical_document_store import LexicalDocumentStore


@component
class IndexWriter:
    """
    Writes each document's chunks, then removes that document's chunks that are no longer produced. New chunks are
    written before old ones are deleted, so a failure never loses stored data. When both stores are the local shard
    (the default) a document's chunks are one write of dense and BM25 vectors together, and a crash between the new
    version and the removal of the old is repaired when the shard opens next (see `EdgeDocumentStore`); when both are
    one PostgreSQL table, a document's replacement is one transaction (`PostgresDocumentStore`); with a Qdrant
    server and Elasticsearch each store is written in turn.

    It completes the ingest report of `IngestPlanner`: `written` (per document: chunks), and `failed` for planned
    documents that produced no chunk (nothing could be extracted).

    Usage:
    ```python
    from gatehouse.components.writers.index_writer import IndexWriter

    writer = IndexWriter(dense_store=DenseDocumentStore(), lexical_store=LexicalDocumentStore())
    report = writer.run(documents=embedded_chunks, report=planner_report)["report"]
    ```
    """

    def __init__(self, *, dense_store: DenseDocumentStore, lexical_store: LexicalDocumentStore) -> None:
        """
        :param dense_store: The vector store.
        :param lexical_store: The BM25 index.
        """
        self.dense_store = dense_store
        self.lexical_store = lexical_store

    @component.output_types(report=dict[str, Any])
    def run(
        self, report: dict[str, Any], documents: list[Document] | None = None,
        sentence_embeddings: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """
        Write chunks.

        :param report: The planner's report (planned, skipped and failed sources).
        :param documents: Embedded chunks, each with `meta["doc_id"]`; absent when no source was converted.
        :param sentence_embeddings: Chunk id to the vectors of its sentences (`SentenceEmbedder`), kept by the local
            store for hybrid search's sentence scores.
        :returns: `report` with `written`, `skipped` and `failed` lists and totals.
        :raises ValueError: If a chunk has no `doc_id` or no embedding.
        """
        report = dict(report)
        by_doc: dict[str, list[Document]] = defaultdict(list)
        for doc in documents or []:
            if "doc_id" not in doc.meta or doc.embedding is None:
                raise ValueError(f"Chunk {doc.id} has no doc_id or no embedding: run the splitter and embedder first.")
            by_doc[doc.meta["doc_id"]].append(doc)
        written = []
        failed = list(report.get("failed", []))
        planned = {entry["doc_id"]: entry for entry in report.get("planned", [])}
        for doc_id in list(planned) + [d for d in by_doc if d not in planned]:
            chunks = by_doc.get(doc_id, [])
            entry = planned.get(doc_id, {"source": doc_id, "doc_id": doc_id, "changed": False})
            if not chunks:
                failed.append({"source": entry["source"], "reason": "no text could be extracted"})
                continue
            written.append({**entry, "chunks": len(chunks), "replaced_chunks": self._replace(doc_id, chunks,
                                                                                         sentence_embeddings or {})})
        report.update(
            written=written,
            failed=failed,
            totals={
                "documents_written": len(written),
                "chunks_written": sum(item["chunks"] for item in written),
                "skipped": len(report.get("skipped", [])),
                "failed": len(failed),
            },
        )
        return {"report": report}

    def _replace(self, doc_id: str, chunks: list[Document], sentence_embeddings: dict[str, Any]) -> int:
        """Make `chunks` the chunks of `doc_id` in both stores; returns how many earlier chunks went."""
        dense, lexical = self.dense_store.store, self.lexical_store.store
        shares = getattr(dense, "shares_shard", None)  # the local shard or a PostgreSQL table: one write holds both
        if shares is not None and shares(lexical):
            return dense.replace_documents(doc_id, chunks, sentence_embeddings=sentence_embeddings)
        doc_filter = {"field": "meta.doc_id", "operator": "==", "value": doc_id}
        old_ids = {doc.id for store in (self.dense_store, self.lexical_store)  # a crash may have left one ahead
                   for doc in store.filter_documents(filters=doc_filter)}
        self.dense_store.write_documents(chunks, policy=DuplicatePolicy.OVERWRITE)
        self.lexical_store.write_documents(chunks, policy=DuplicatePolicy.OVERWRITE)
        stale = sorted(old_ids - {doc.id for doc in chunks})
        if stale:
            self.dense_store.delete_documents(stale)
            self.lexical_store.delete_documents(stale)
        return len(stale)
