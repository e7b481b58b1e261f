"""
Score fusion of ranked lists, on plain `(chunk, group, score)` triples: what `HybridRetriever` does to the engine's
ids before it reads the chunks it keeps.

Usage:
```python
from gatehouse.components.joiners.fusion import Fusion

fusion = Fusion(method="rrf", weights={"dense": 1.0, "lexical": 1.0}, group=True)
fusion.rank({"dense": [("c1", "d1", 0.8), ("c2", "d2", 0.7)], "lexical": [("c2", "d2", 9.1)]}, top_k=10)
# [("c2", 0.0325...), ("c1", 0.0164...)]: d2 is in both lists
```
"""

from dataclasses import dataclass
from typing import Any

METHODS = ("rrf", "weighted_sum")
NORMALIZATIONS = ("minmax", "max", "zscore")

Hit = tuple[str, Any, float]  # (chunk key, group key or None, score), best first within a list


@dataclass(frozen=True, kw_only=True)
class Fusion:
    """
    Reciprocal-rank fusion or a weighted sum of normalised scores, per chunk or per group (a chunk's document).

    `weighted_sum` normalises each list's scores (`minmax`: (s - min) / (max - min); `max`: s / max; `zscore`:
    (s - mean) / sd) and adds them with the list weights; a key missing from one list gets that list's lowest
    normalised score when the list was cut at `depth` hits (it ranked below the cut-off), and nothing (0, or the
    lowest score if that is below 0) when the list is shorter than `depth`: it holds every key that matched at all (a
    BM25 list for a rare name or code), so the few that hold the term are not levelled with all the others. With
    `group` each list ranks a group by its best chunk,
    every chunk of a group gets the group's fused score, and `top_k` counts groups; within a group its chunks come
    best first by their own fused score, at most `chunks_per_group` of them.
    """

    method: str
    weights: dict[str, float]
    rrf_k: int = 60
    normalization: str = "minmax"
    group: bool = False
    chunks_per_group: int | None = None
    depth: int | None = None

    def __post_init__(self) -> None:
        """Check the settings."""
        if self.method not in METHODS:
            raise ValueError(f"Unknown fusion method '{self.method}'. Use one of: {', '.join(METHODS)}.")
        if self.normalization not in NORMALIZATIONS:
            raise ValueError(f"Unknown normalization '{self.normalization}'. Use one of: {', '.join(NORMALIZATIONS)}.")
        if not self.weights:
            raise ValueError("weights must name at least one list to fuse.")
        if self.chunks_per_group is not None and self.chunks_per_group < 1:
            raise ValueError("chunks_per_group must be at least 1 (or null for all chunks).")
        if self.depth is not None and self.depth < 1:
            raise ValueError("depth must be at least 1 (or null when the lists' cut-off is not known).")

    def rank(self, lists: dict[str, list[Hit]], top_k: int) -> list[tuple[str, float]]:
        """
        Fuse the lists (missing names count as empty).

        :returns: The kept chunk keys, best first, each with its fused score (its group's, when grouping).
        """
        ranked = {name: lists.get(name) or [] for name in self.weights}
        group_of: dict[str, Any] = {}
        for hits in ranked.values():
            for chunk, group, _ in hits:
                if chunk not in group_of:
                    group_of[chunk] = chunk if group is None or not self.group else str(group)
        complete = {name: self.depth is not None and len(hits) < self.depth for name, hits in ranked.items()}
        per_chunk = self._fuse({name: [(chunk, score) for chunk, _, score in hits] for name, hits in ranked.items()},
                               complete)
        fused = per_chunk if not self.group else self._fuse(
            {name: [(group_of[chunk], score) for chunk, _, score in hits] for name, hits in ranked.items()}, complete)
        order = {chunk: position for position, chunk in enumerate(group_of)}
        chunks = sorted(group_of, key=lambda chunk: (-fused[group_of[chunk]], -per_chunk[chunk], order[chunk]))
        if not self.group:
            return [(chunk, fused[chunk]) for chunk in chunks[:top_k]]
        groups: dict[Any, list[str]] = {}
        for chunk in chunks:
            groups.setdefault(group_of[chunk], []).append(chunk)
        return [(chunk, fused[key]) for key, members in list(groups.items())[:top_k]
                for chunk in members[: self.chunks_per_group]]

    def _fuse(self, lists: dict[str, list[tuple[Any, float]]], complete: dict[str, bool]) -> dict[Any, float]:
        """
        The fused score of every key found in any list (each list's contributions added in list order); a list that
        is `complete` gives the keys it lacks nothing.
        """
        fused = {key: 0.0 for hits in lists.values() for key, _ in hits}
        for name, hits in lists.items():
            values, floor = self._contributions(hits, self.weights[name], complete[name])
            if values:
                get = values.get
                for key in fused:
                    fused[key] += get(key, floor)
        return fused

    def _contributions(self, hits: list[tuple[Any, float]], weight: float,
                       complete: bool) -> tuple[dict[Any, float], float]:
        """Each key's contribution from one list (its best hit), and what a key absent from the list gets."""
        best: dict[Any, float] = {}
        for key, score in hits:
            score = score or 0.0
            if key not in best or score > best[key]:
                best[key] = score
        if not best:
            return {}, 0.0
        if self.method == "rrf":
            return {k: weight / (self.rrf_k + rank) for rank, k in enumerate(best, start=1)}, 0.0
        normalised = dict(zip(best, self._normalise(list(best.values())), strict=True))
        lowest = min(normalised.values())
        floor = min(0.0, lowest) if complete else lowest
        return {k: weight * value for k, value in normalised.items()}, weight * floor

    def _normalise(self, scores: list[float]) -> list[float]:
        if self.normalization == "max":
            high = max(scores)
            return [s / high if high > 0 else 1.0 for s in scores]
        if self.normalization == "zscore":
            mean = sum(scores) / len(scores)
            sd = (sum((s - mean) ** 2 for s in scores) / len(scores)) ** 0.5
            return [(s - mean) / sd if sd else 0.0 for s in scores]
        low, high = min(scores), max(scores)
        return [(s - low) / (high - low) if high > low else 1.0 for s in scores]
