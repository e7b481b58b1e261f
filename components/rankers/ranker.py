"""The ranking stage after fusion: a cross-encoder when one is configured, the fused order otherwise."""

from dataclasses import replace
from typing import Any

from haystack import Document, component

from gatehouse import settings


@component
class Ranker:
    """
    Re-ranks fused hits with a cross-encoder named by `model`; with no model it keeps the fused order.

    No cross-encoder weights ship with Gatehouse, so the default (`model: null`) needs none. Name a local
    folder or a model your machine has cached (loading is offline unless `HF_HUB_OFFLINE=0`).

    Usage:
    ```python
    from gatehouse.components.rankers.ranker import Ranker

    ranker = Ranker(top_k=10)                                            # fused order, cut to 10
    ranker = Ranker(model="/models/ms-marco-MiniLM-L-6-v2", top_k=10)    # cross-encoder
    docs = ranker.run(query="rotate api key", documents=fused)["documents"]
    ```
    """

    def __init__(self, *, model: str | None = None, top_k: int = 10, batch_size: int = 16) -> None:
        """
        :param model: Cross-encoder model path or name; None keeps the fused order.
        :param top_k: Number of documents to keep.
        :param batch_size: Cross-encoder batch size.
        """
        self.model = model
        self.top_k = top_k
        self.batch_size = batch_size
        self._cross_encoder: Any = None

    def warm_up(self) -> None:
        """
        Load the cross-encoder when one is configured.

        :raises RuntimeError: If the model cannot be loaded, naming the model.
        """
        if self.model is None or self._cross_encoder is not None:
            return
        from sentence_transformers import CrossEncoder

        try:
            self._cross_encoder = CrossEncoder(self.model, device="cpu", local_files_only=settings.models_offline())
        except Exception as error:
            raise RuntimeError(
                f"The ranker's cross-encoder '{self.model}' could not be loaded ({error}). Set `model: null` in "
                "the YAML to rank without one, or point `model` at a local copy of the weights."
            ) from error

    @component.output_types(documents=list[Document])
    def run(self, query: str, documents: list[Document], top_k: int | None = None) -> dict[str, Any]:
        """
        Rank documents.

        :param query: The query text.
        :param documents: Fused documents, best first.
        :param top_k: Overrides the init `top_k`.
        :returns: `documents`, best first; with a cross-encoder, `meta["rerank_score"]` holds its score.
        """
        limit = self.top_k if top_k is None else top_k
        if self.model is None or not documents:
            return {"documents": documents[:limit]}
        self.warm_up()
        scores = self._cross_encoder.predict(
            [(query, doc.content or "") for doc in documents], batch_size=self.batch_size, show_progress_bar=False
        )
        ranked = sorted(zip(documents, scores), key=lambda pair: -float(pair[1]))[:limit]
        return {"documents": [replace(doc, meta={**doc.meta, "rerank_score": float(score)}) for doc, score in ranked]}
