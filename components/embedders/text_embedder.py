"""Embeds a query with the shared embedding backend."""

from typing import Any

from haystack import component

from gatehouse.components.embedders.embedding import EmbeddingModel
from gatehouse.components.embedders.vector import Vector


@component
class TextEmbedder(EmbeddingModel):
    """
    Embeds one text (a query) with a SentenceTransformers model, loaded once per process.

    Usage:
    ```python
    from gatehouse.components.embedders.text_embedder import TextEmbedder

    embedder = TextEmbedder()            # GATEHOUSE_EMBEDDING_MODEL or the packaged all-MiniLM-L6-v2
    embedding = embedder.run(text="How do I rotate an API key?")["embedding"]
    ```
    """

    def __init__(self, *, model: str | None = None, cache_dir: str | None = "off", prefix: str = "") -> None:
        """
        :param model: Model path or name; None uses the configured default (offline).
        :param cache_dir: Embedding cache folder; `"off"` (default for queries) disables it, None uses the default.
        :param prefix: Text prepended to every query (some models want e.g. `"query: "`).
        """
        self.model = model
        self.cache_dir = cache_dir
        self.prefix = prefix

    @component.output_types(embedding=Vector)
    def run(self, text: str) -> dict[str, Any]:
        """
        Embed a text.

        :param text: The text to embed.
        :returns: `embedding`, an L2-normalised `Vector` (a read-only sequence of floats, which the pipeline passes on
            without copying it float by float; Gatehouse's retrievers take it, `list(embedding)` gives a list).
        :raises TypeError: If `text` is not a string.
        """
        if not isinstance(text, str):
            raise TypeError("TextEmbedder expects a string; use DocumentEmbedder for documents.")
        return {"embedding": Vector(self.backend().embed([self.prefix + text])[0])}
