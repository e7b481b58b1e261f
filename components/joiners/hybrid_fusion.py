"""Fuses the result lists of several retrievers into one ranking."""

from dataclasses import replace
from typing import Any

from haystack import Document, component

from gatehouse.components.joiners.fusion import Fusion

DEFAULT_WEIGHTS = {"dense": 1.0, "lexical": 1.0}


@component
class HybridFusion:
    """
    Joins the hits of several retrievers: reciprocal-rank fusion (default) or a convex combination of normalised
    scores. `weights` names the lists: each key is an input of the component (default `dense` and `lexical`), so
    a third retriever is one more weight and one more connection in YAML.

    `weighted_sum` normalises each list's scores (`minmax`: (s - min) / (max - min); `max`: s / max; `zscore`:
    (s - mean) / sd) and adds them with the list weights; a hit missing from one list gets that list's lowest
    normalised score (it ranked below that list's cut-off). With weights summing to 1 this is the convex
    combination that tends to beat RRF once its weight is tuned.

    With `group_by` (a metadata key such as `doc_id`) hits are fused per document rather than per chunk: each
    list ranks a document by its best chunk (max aggregation), the document's fused score is given to all its
    chunks, and `top_k` counts documents. Within a document its chunks come best first by their own fused score,
    and `chunks_per_group` keeps only that many of them, so one long document cannot fill a later `top_k` cut.

    A chunk found by several retrievers keeps the metadata each one set (`dense_score`, `bm25_score`) and its rank
    in every list (`<list>_rank`, e.g. `dense_rank`), so later gates can reason about calibrated similarity.

    Usage:
    ```python
    from gatehouse.components.joiners.hybrid_fusion import HybridFusion

    fusion = HybridFusion(method="rrf", weights={"dense": 1.0, "lexical": 1.0}, rrf_k=60, top_k=20)
    fusion = HybridFusion(method="weighted_sum", normalization="max",
                          weights={"dense": 0.6, "lexical": 0.2, "ngrams": 0.2}, group_by="doc_id", top_k=20)
    docs = fusion.run(dense=dense_docs, lexical=bm25_docs, ngrams=trigram_docs)["documents"]
    ```
    """

    def __init__(
        self,
        *,
        method: str = "rrf",
        weights: dict[str, float] | None = None,
        rrf_k: int = 60,
        top_k: int = 20,
        normalization: str = "minmax",
        group_by: str | None = None,
        chunks_per_group: int | None = None,
    ) -> None:
        """
        :param method: `rrf` (reciprocal-rank fusion) or `weighted_sum` (normalised scores, weighted).
        :param weights: The lists to fuse and their weights; each key becomes an input of the component (default
            `{"dense": 1.0, "lexical": 1.0}`).
        :param rrf_k: The RRF rank constant.
        :param top_k: Number of fused hits to keep (documents when `group_by` is set, chunks otherwise).
        :param normalization: Score normalisation of `weighted_sum`: `minmax`, `max` or `zscore`.
        :param group_by: Metadata key that names a chunk's document (e.g. `doc_id`) to fuse per document; None
            fuses per chunk.
        :param chunks_per_group: With `group_by`, the most chunks kept per document (best first); None keeps all.
        """
        lists = dict(DEFAULT_WEIGHTS if weights is None else weights)
        bad = [name for name in lists if not str(name).isidentifier() or name == "top_k"]
        if bad:
            raise ValueError(f"Fusion list name(s) {bad} cannot be inputs: use identifiers other than 'top_k'.")
        self._fusion = Fusion(method=method, weights=lists, rrf_k=rrf_k, normalization=normalization,
                              group=group_by is not None, chunks_per_group=chunks_per_group)
        self.method = method
        self.weights = lists
        self.rrf_k = rrf_k
        self.top_k = top_k
        self.normalization = normalization
        self.group_by = group_by
        self.chunks_per_group = chunks_per_group
        component.set_input_types(self, **{name: list[Document] | None for name in lists})

    @component.output_types(documents=list[Document])
    def run(self, top_k: int | None = None, **lists: list[Document] | None) -> dict[str, Any]:
        """
        Fuse the lists.

        :param top_k: Overrides the init `top_k`.
        :param lists: One keyword per weight: that retriever's documents, best first (missing or None: empty).
        :returns: `documents`, best first, with the fused `score`.
        """
        ranked = {name: lists.get(name) or [] for name in self.weights}
        merged: dict[str, Document] = {}
        for name, documents in ranked.items():
            for rank, doc in enumerate(documents, start=1):
                known = merged.get(doc.id)
                merged[doc.id] = replace(known or doc, meta={**(known.meta if known else {}), **doc.meta,
                                                             f"{name}_rank": rank})
        hits = {name: [(doc.id, doc.meta.get(self.group_by) if self.group_by else None, doc.score)
                       for doc in documents] for name, documents in ranked.items()}
        kept = self._fusion.rank(hits, self.top_k if top_k is None else top_k)
        return {"documents": [replace(merged[chunk], score=score) for chunk, score in kept]}
