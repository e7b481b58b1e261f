"""Embeds documents with the shared embedding backend and its on-disk cache."""

from dataclasses import replace
from typing import Any

from haystack import Document, component

from gatehouse.components.embedders.embedding import EmbeddingModel
from gatehouse.components.sentences import rows_as_words


def embedded_text(document: Document, meta_fields: list[str], separator: str = "\n") -> str:
    """
    The text a chunk is embedded as: its non-empty `meta_fields`, then its content (a table row as its cells that hold
    words: `sentences.rows_as_words`), joined by `separator`.
    """
    fields = [str(document.meta[key]) for key in meta_fields if document.meta.get(key)]
    return separator.join([*fields, rows_as_words(document.content or "")])


@component
class DocumentEmbedder(EmbeddingModel):
    """
    Embeds documents (optionally with metadata fields such as the title prepended), reusing cached vectors.

    Usage:
    ```python
    from haystack import Document
    from gatehouse.components.embedders.document_embedder import DocumentEmbedder

    embedder = DocumentEmbedder(meta_fields_to_embed=["title", "section"])
    docs = embedder.run(documents=[Document(content="Rotate keys monthly.", meta={"title": "API keys"})])["documents"]
    ```
    """

    def __init__(
        self,
        *,
        model: str | None = None,
        cache_dir: str | None = None,
        meta_fields_to_embed: list[str] | None = None,
        embedding_separator: str = "\n",
        batch_size: int = 32,
        progress_bar: bool = False,
    ) -> None:
        """
        :param model: Model path or name; None uses the configured default (offline).
        :param cache_dir: Embedding cache folder; None uses the default, `"off"` disables it.
        :param meta_fields_to_embed: Metadata fields embedded before the content.
        :param embedding_separator: Separator between the embedded fields.
        :param batch_size: Encoding batch size.
        :param progress_bar: Show a progress bar while encoding.
        """
        self.model = model
        self.cache_dir = cache_dir
        self.meta_fields_to_embed = meta_fields_to_embed or []
        self.embedding_separator = embedding_separator
        self.batch_size = batch_size
        self.progress_bar = progress_bar

    @component.output_types(documents=list[Document])
    def run(self, documents: list[Document]) -> dict[str, Any]:
        """
        Embed documents.

        :param documents: Documents to embed.
        :returns: `documents`, copies with `embedding` set.
        :raises TypeError: If `documents` is not a list of Documents.
        """
        if not isinstance(documents, list) or any(not isinstance(doc, Document) for doc in documents):
            raise TypeError("DocumentEmbedder expects a list of Documents; use TextEmbedder for a query.")
        if not documents:
            return {"documents": []}
        texts = [embedded_text(doc, self.meta_fields_to_embed, self.embedding_separator) for doc in documents]
        vectors = self.backend().embed(texts, batch_size=self.batch_size, progress_bar=self.progress_bar)
        return {"documents": [replace(doc, embedding=vector.tolist()) for doc, vector in zip(documents, vectors)]}
