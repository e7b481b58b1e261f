"""
The knowledge-base router's scoring tiers (plain Python, not a component): a set of checked KB entries with their
keyword, pattern and example tiers (`tiered_classifier`), and the score of every entry for a query.

Usage:
```python
from gatehouse.components.kb_routing.kb_entries import check_entries
from gatehouse.components.kb_routing.kb_router_settings import SCORING_DEFAULTS
from gatehouse.components.kb_routing.kb_tiers import KBTiers

tiers = KBTiers.build(check_entries([{"name": "faq", "description": "accounts and billing"},
                                     {"name": "ops", "description": "deployment", "keywords": ["docker"]}], 0.5),
                      SCORING_DEFAULTS)
scores, tier = tiers.score("How do I run it with docker?")   # ops first; tier "keywords" (only ops had a hit)
```
"""

from dataclasses import dataclass
from typing import Any

from gatehouse.components.tiered_classifier import ExampleIndex, KeywordMatcher, PatternMatcher


@dataclass
class KBTiers:
    """A set of KB entries with their keyword, pattern and example tiers, and the `scoring` settings they score with."""

    kbs: list[dict[str, Any]]
    keywords: KeywordMatcher
    patterns: PatternMatcher
    index: ExampleIndex
    scoring: dict[str, Any]

    @classmethod
    def build(cls, kbs: list[dict[str, Any]], scoring: dict[str, Any]) -> "KBTiers":
        """
        The tiers of a set of entries.

        :param kbs: Checked entries (`kb_entries.check_entries`).
        :param scoring: The complete `scoring` settings (`kb_router_settings.SCORING_DEFAULTS`' keys).
        :raises ValueError: If a keyword or pattern does not compile.
        """
        return cls(
            kbs=kbs,
            keywords=KeywordMatcher({kb["name"]: kb["keywords"] for kb in kbs}, owner="knowledge_bases keywords"),
            patterns=PatternMatcher({kb["name"]: kb["patterns"] for kb in kbs}, owner="knowledge_bases patterns"),
            index=ExampleIndex(
                {kb["name"]: [text for text in (kb["description"], *kb["examples"]) if text]
                 for kb in kbs if kb["description"] or kb["examples"]},
                embedding_model=scoring["embedding_model"], cache_dir=scoring["cache_dir"],
                top_k=scoring["embedding_top_k"], owner="knowledge_bases",
            ),
            scoring=scoring,
        )

    @property
    def names(self) -> list[str]:
        """The entries' KB names, in order."""
        return [kb["name"] for kb in self.kbs]

    def score(self, query: str) -> tuple[dict[str, float], str]:
        """
        Score every entry for a query: the lexical score (keyword hits, each matching pattern `pattern_weight` hits,
        saturated) combined with the embedding score by their weights, or the embedding score alone when nothing hit.

        :param query: The (normalised) query.
        :returns: `(score per KB, best first; the tier that drove the scores: keywords, embedding or combined)`;
            `({}, "none")` without entries.
        """
        if not self.kbs:
            return {}, "none"
        settings = self.scoring
        keyword_hits = self.keywords.hits(query)
        pattern_hits = self.patterns.matches(query)
        hits = {
            name: len(keyword_hits.get(name, [])) + settings["pattern_weight"] * len(pattern_hits.get(name, []))
            for name in self.names
        }
        total = sum(hits.values())
        similarity = self.index.scores(self.index.embed_query(query)) if not self.index.empty else {}
        keyword_weight, embedding_weight = settings["keyword_weight"], settings["embedding_weight"]
        scores: dict[str, float] = {}
        for name in self.names:
            embedding = max(similarity.get(name, 0.0), 0.0)
            if total > 0:
                lexical = hits[name] / (hits[name] + settings["keyword_saturation"]) if hits[name] else 0.0
                scores[name] = (keyword_weight * lexical + embedding_weight * embedding) / (
                    keyword_weight + embedding_weight
                )
            else:
                scores[name] = embedding
        ranked = dict(sorted(scores.items(), key=lambda item: item[1], reverse=True))
        if total == 0:
            tier = "embedding"
        else:
            lexical_best = max(hits, key=lambda name: hits[name])
            only_one = sum(1 for value in hits.values() if value > 0) == 1
            tier = "keywords" if only_one and lexical_best == next(iter(ranked)) else "combined"
        return {name: round(value, 4) for name, value in ranked.items()}, tier
