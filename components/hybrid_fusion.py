"""Fuses the dense and lexical result lists into one ranking."""

from dataclasses import replace
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict

METHODS = ("rrf", "weighted_sum")


@component
class HybridFusion:
    """
    Joins dense and lexical hits: reciprocal-rank fusion (default) or a weighted sum of min-max normalised scores.

    A chunk found by both retrievers keeps both raw scores in its metadata (`dense_score`, `bm25_score`) and
    their ranks (`dense_rank`, `bm25_rank`), so later gates can reason about calibrated similarity.

    Usage:
    ```python
    from components.hybrid_fusion import HybridFusion

    fusion = HybridFusion(method="rrf", weights={"dense": 1.0, "lexical": 1.0}, rrf_k=60, top_k=20)
    docs = fusion.run(dense=dense_docs, lexical=bm25_docs)["documents"]
    ```
    """

    def __init__(
        self,
        *,
        method: str = "rrf",
        weights: dict[str, float] | None = None,
        rrf_k: int = 60,
        top_k: int = 20,
    ) -> None:
        """
        :param method: `rrf` (reciprocal-rank fusion) or `weighted_sum` (min-max normalised scores).
        :param weights: Weight per list, keys `dense` and `lexical` (1.0 each by default).
        :param rrf_k: The RRF rank constant.
        :param top_k: Number of fused documents to keep.
        """
        if method not in METHODS:
            raise ValueError(f"Unknown fusion method '{method}'. Use one of: {', '.join(METHODS)}.")
        self.method = method
        self.weights = {"dense": 1.0, "lexical": 1.0, **(weights or {})}
        self.rrf_k = rrf_k
        self.top_k = top_k

    def _contributions(self, documents: list[Document], name: str) -> dict[str, float]:
        weight = self.weights[name]
        if self.method == "rrf":
            return {doc.id: weight / (self.rrf_k + rank) for rank, doc in enumerate(documents, start=1)}
        scores = [doc.score or 0.0 for doc in documents]
        low, high = (min(scores), max(scores)) if scores else (0.0, 0.0)
        span = high - low
        return {doc.id: weight * (((doc.score or 0.0) - low) / span if span else 1.0) for doc in documents}

    @component.output_types(documents=list[Document])
    def run(
        self, dense: list[Document] | None = None, lexical: list[Document] | None = None, top_k: int | None = None
    ) -> dict[str, Any]:
        """
        Fuse the two lists.

        :param dense: Documents from the dense retriever, best first.
        :param lexical: Documents from the lexical retriever, best first.
        :param top_k: Overrides the init `top_k`.
        :returns: `documents`, best first, with the fused `score`.
        """
        dense, lexical = dense or [], lexical or []
        merged: dict[str, Document] = {}
        fused: dict[str, float] = {}
        for name, documents in (("dense", dense), ("lexical", lexical)):
            rank_key = "dense_rank" if name == "dense" else "bm25_rank"
            for rank, doc in enumerate(documents, start=1):
                known = merged.get(doc.id)
                meta = {**(known.meta if known else {}), **doc.meta, rank_key: rank}
                merged[doc.id] = replace(known or doc, meta=meta)
            for doc_id, value in self._contributions(documents, name).items():
                fused[doc_id] = fused.get(doc_id, 0.0) + value
        ranked = sorted(merged.values(), key=lambda doc: -fused[doc.id])[: top_k or self.top_k]
        return {"documents": [replace(doc, score=fused[doc.id]) for doc in ranked]}

    def to_dict(self) -> dict[str, Any]:
        """Serialise the component."""
        return default_to_dict(self, method=self.method, weights=self.weights, rrf_k=self.rrf_k, top_k=self.top_k)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "HybridFusion":
        """Deserialise the component."""
        return default_from_dict(cls, data)
