"""Embeds the sentences of chunks into the embedding cache at ingest time, for the retrieval's `SentenceScorer`."""

from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict

from gatehouse.components.embedders.embedding import EmbeddingBackend
from gatehouse.components.sentences import sentence_settings, sentence_texts


@component
class SentenceEmbedder:
    """
    Passes chunks through unchanged after embedding each of their sentences into the on-disk embedding cache, so
    that `SentenceScorer` in `retrieve.yml` reads sentence vectors instead of encoding them per query. Its
    `sentences` settings must match the scorer's. With the cache switched off it does nothing.

    Usage:
    ```python
    from gatehouse.components.embedders.sentence_embedder import SentenceEmbedder

    chunks = SentenceEmbedder(sentences={"context_fields": ["title"]}).run(documents=embedded_chunks)["documents"]
    ```
    """

    def __init__(
        self,
        *,
        model: str | None = None,
        cache_dir: str | None = None,
        sentences: dict[str, Any] | None = None,
        batch_size: int = 64,
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
        self._backend: EmbeddingBackend | None = None

    def warm_up(self) -> None:
        """Load the model."""
        if self._backend is None:
            self._backend = EmbeddingBackend.get(model=self.model, cache_dir=self.cache_dir)

    @component.output_types(documents=list[Document])
    def run(self, documents: list[Document]) -> dict[str, Any]:
        """
        Cache the sentence vectors of the chunks.

        :param documents: Chunks.
        :returns: `documents`, the same chunks.
        """
        self.warm_up()
        assert self._backend is not None
        if self._backend.cache is not None:
            texts = [text for doc in documents for text in sentence_texts(doc, self.sentences)]
            self._backend.embed(texts, batch_size=self.batch_size)
        return {"documents": documents}

    def to_dict(self) -> dict[str, Any]:
        """Serialise the component."""
        return default_to_dict(
            self, model=self.model, cache_dir=self.cache_dir, sentences=self.sentences, batch_size=self.batch_size
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SentenceEmbedder":
        """Deserialise the component."""
        return default_from_dict(cls, data)
