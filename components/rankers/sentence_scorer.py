"""Re-scores candidate chunks by their best-matching sentence (a bi-encoder late-interaction stage, no cross-encoder)."""

from dataclasses import replace
from typing import Any

import numpy as np
from haystack import Document, component
from haystack.core.component.types import Variadic

from gatehouse.components.embedders.document_embedder import embedded_text
from gatehouse.components.embedders.embedding import EmbeddingModel
from gatehouse.components.embedders.vector import Vector
from gatehouse.components.sentences import per_chunk, sentence_settings, sentence_texts


@component
class SentenceScorer(EmbeddingModel):
    """
    Scores each candidate chunk by the cosine similarity of the query to its best sentence, and to the whole chunk
    (`include_chunk`), whichever is higher.

    Short claims often match one sentence of a long passage much better than the passage's single vector, whose
    model also truncates long text. Candidates are the union of every connected retriever's hits; the output (best
    first, `meta["sentence_score"]` set) replaces the dense list in fusion. Sentence vectors come from the
    embedding cache, filled at ingest time by `SentenceEmbedder` in `index.yml` (its `sentences` settings must
    match these); what is missing is encoded on the fly.

    Usage:
    ```python
    from gatehouse.components.rankers.sentence_scorer import SentenceScorer

    scorer = SentenceScorer(sentences={"context_fields": ["title"]}, chunk_fields=["title", "section"])
    docs = scorer.run(query_embedding=vector, candidates=[dense_docs, bm25_docs])["documents"]
    ```
    """

    def __init__(
        self,
        *,
        model: str | None = None,
        cache_dir: str | None = None,
        sentences: dict[str, Any] | None = None,
        include_chunk: bool = True,
        chunk_fields: list[str] | None = None,
        batch_size: int = 64,
    ) -> None:
        """
        :param model: Embedding model (the one the index used); None uses the configured default.
        :param cache_dir: Embedding cache folder; None uses the default, `"off"` disables it (then every query
            encodes its candidates' sentences: slow).
        :param sentences: How chunks are cut into sentences (`pattern`, `context_fields`, `min_words`; see
            `gatehouse.components.sentences`); the same as `SentenceEmbedder`'s in `index.yml`.
        :param include_chunk: Also score the chunk as a whole (as `DocumentEmbedder` embedded it).
        :param chunk_fields: Metadata fields the index embedded before the chunk's content (default
            `["title", "section"]`, as `index.yml`'s embedder).
        :param batch_size: Encoding batch size for sentences missing from the cache.
        """
        self.model = model
        self.cache_dir = cache_dir
        self.sentences = sentence_settings(sentences)
        self.include_chunk = include_chunk
        self.chunk_fields = ["title", "section"] if chunk_fields is None else chunk_fields
        self.batch_size = batch_size

    def _units(self, document: Document) -> list[str]:
        units = sentence_texts(document, self.sentences)
        if self.include_chunk:
            units.append(embedded_text(document, self.chunk_fields))  # the chunk's vector, as the index embedded it
        return units

    @component.output_types(documents=list[Document])
    def run(self, query_embedding: list[float] | Vector, candidates: Variadic[list[Document]]) -> dict[str, Any]:
        """
        Score the union of the candidates.

        :param query_embedding: The query vector (L2-normalised, same model).
        :param candidates: The hit lists of the retrievers (one per connection).
        :returns: `documents`: every candidate once, best first, `score` = best sentence (or chunk) cosine.
        """
        union: dict[str, Document] = {}  # each candidate once: the first hit, with every hit's metadata merged
        metas: dict[str, dict[str, Any]] = {}
        for doc in (doc for hits in candidates for doc in hits or []):
            if doc.id in union:
                metas[doc.id].update(doc.meta)
            else:
                union[doc.id] = doc
                metas[doc.id] = dict(doc.meta)
        if not union:
            return {"documents": []}
        units = [self._units(doc) for doc in union.values()]
        flat = [text for texts in units for text in texts]
        if not flat:
            return {"documents": []}
        similarities = self.backend().embed(flat, batch_size=self.batch_size) @ np.asarray(query_embedding, np.float32)
        scored = []
        for doc, part in zip(union.values(), per_chunk(similarities, units)):
            if not len(part):
                continue
            sentence_part = part[:-1] if self.include_chunk else part
            meta = metas[doc.id]
            meta["sentence_score"] = float(sentence_part.max()) if len(sentence_part) else None
            scored.append(replace(doc, score=float(part.max()), meta=meta))
        scored.sort(key=lambda doc: -(doc.score or 0.0))
        return {"documents": scored}
