"""Embeds the sentences of chunks at ingest time, for hybrid search's sentence scores."""

from typing import Any

from haystack import Document, component

from gatehouse.components.embedders.embedding import EmbeddingModel
from gatehouse.components.sentences import per_chunk, sentence_settings, sentence_texts


@component
class SentenceEmbedder(EmbeddingModel):
    """
    Passes chunks through unchanged and gives the vectors of each one's sentences, which `IndexWriter` stores with
    the chunk: `HybridRetriever` scores a chunk by its best sentence. The vectors also go to the embedding cache
    (unless it is off), so a re-ingest encodes none of them again.

    Usage:
    ```python
    from gatehouse.components.embedders.sentence_embedder import SentenceEmbedder

    result = SentenceEmbedder(sentences={"context_fields": ["title"]}).run(documents=embedded_chunks)
    result["documents"], result["sentence_embeddings"]     # the chunks, {chunk id: array of sentence vectors}
    ```
    """

    def __init__(
        self,
        *,
        model: str | None = None,
        cache_dir: str | None = None,
        sentences: dict[str, Any] | None = None,
        batch_size: int = 32,
    ) -> None:
        """
        :param model: Embedding model (the retrieval's); None uses the configured default.
        :param cache_dir: Embedding cache folder; None uses the default, `"off"` disables this stage.
        :param sentences: How chunks are cut into sentences (`pattern`, `context_fields`, `min_words`; see
            `gatehouse.components.sentences`).
        :param batch_size: Encoding batch size.
        """
        self.model = model
        self.cache_dir = cache_dir
        self.sentences = sentence_settings(sentences)
        self.batch_size = batch_size

    @component.output_types(documents=list[Document], sentence_embeddings=dict[str, Any])
    def run(self, documents: list[Document]) -> dict[str, Any]:
        """
        Embed the sentences of the chunks.

        :param documents: Chunks.
        :returns: `documents`, the same chunks, and `sentence_embeddings`: chunk id to a (sentences x dimensions)
            array (chunks without a sentence left out).
        """
        texts = [sentence_texts(doc, self.sentences) for doc in documents]
        vectors = self.backend().embed([text for chunk in texts for text in chunk], batch_size=self.batch_size)
        embeddings = {doc.id: rows for doc, rows in zip(documents, per_chunk(vectors, texts), strict=True) if len(rows)}
        return {"documents": documents, "sentence_embeddings": embeddings}
