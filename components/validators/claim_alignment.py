"""
Claim/evidence alignment: the support score of a claim against the passages it cites, and the evidence sentences it
is checked for contradiction against. The citation verifier's `scoring` settings configure it.

The support score is the best, over the sentences of the cited passages (their headings included) and each cited
passage as a whole, of `embedding_weight * cosine + lexical_weight * containment`, where containment is the share
of the claim's content words (stemmed, stopwords removed) found in the passage sentence. A claim copied verbatim
scores 1.0; a claim citing an unrelated passage scores near 0. When the claim states a number that the cited
passages do not contain, or writes a `code name` they never write, its score is multiplied by
`unmatched_number_penalty`. A claim its cited passage holds word for word (a quote, as the extractive answerer
writes: a sentence, an item, a code block, a heading, or an excerpt whose pieces between `…` it holds) scores 1.0
and contradicts nothing, without being embedded.

Usage:
```python
from haystack import Document
from gatehouse.components.validators.claim_alignment import SCORING_DEFAULTS, ClaimAligner
from gatehouse.components.validators.citation_verifier import READING_DEFAULTS
from gatehouse.components.validators.contradiction import CONTRADICTION_DEFAULTS

aligner = ClaimAligner(SCORING_DEFAULTS, CONTRADICTION_DEFAULTS, READING_DEFAULTS)
claims = [{"claim": "API keys expire after 90 days.", "ids": ["S1"], "cues": []}]
aligner.score(claims, {"S1": Document(content="API keys expire after 90 days.")}, set())
claims[0]["score"]  # 1.0
```
"""

import re
from typing import Any

import numpy as np
from haystack import Document

from gatehouse.components.answer_units import CUT as EXCERPT_CUT
from gatehouse.components.citation_markers import strip_markers
from gatehouse.components.terms import content_words, numbers, overlap
from gatehouse.components.text_units import (
    DEFAULT_ABBREVIATIONS,
    normalize_space,
    split_units,
    strip_heading_markers,
    strip_list_marker,
)
from gatehouse.components.validators.contradiction import ContradictionDetector

#: The citation verifier's `scoring` settings and their defaults: the weights of the support score, the factor on a
#: claim with an unmatched number or code name, the lowest score of a passage a claim is re-attributed to, and the
#: embedding model and cache (None: the configured defaults; cache `"off"` disables it).
SCORING_DEFAULTS: dict[str, Any] = {
    "embedding_weight": 0.5, "lexical_weight": 0.5, "unmatched_number_penalty": 0.5, "reattribute_threshold": 0.7,
    "embedding_model": None, "cache_dir": None,
}

_CODE_SPAN = re.compile(r"`([^`\n]+)`")


class ClaimAligner:
    """Scores claims against the passages they cite and checks them for contradiction (see the module docs)."""

    def __init__(self, scoring: dict[str, Any], contradictions: dict[str, Any], reading: dict[str, Any]) -> None:
        """
        :param scoring: The `scoring` settings (every key of `SCORING_DEFAULTS`).
        :param contradictions: The `contradictions` settings (every key of `CONTRADICTION_DEFAULTS`); with `enabled`
            false no claim is checked for contradiction.
        :param reading: The citation verifier's `reading` settings: `citation_pattern`, `abbreviations` and
            `stopwords` (None: the built-in lists).
        :raises ValueError: If `contradictions.antonyms` are not pairs of word lists.
        """
        self.scoring = scoring
        self.detector = ContradictionDetector(contradictions, reading["stopwords"])
        self.detect = bool(contradictions["enabled"])
        self.stopwords = reading["stopwords"]
        self.abbreviations = DEFAULT_ABBREVIATIONS if reading["abbreviations"] is None else reading["abbreviations"]
        self.citation_pattern = reading["citation_pattern"]
        self._backend: Any = None

    def warm_up(self) -> None:
        """Load the embedding model."""
        if self._backend is None:
            from gatehouse.components.embedders.embedding import EmbeddingBackend

            self._backend = EmbeddingBackend.get(model=self.scoring["embedding_model"],
                                                 cache_dir=self.scoring["cache_dir"])

    def score(self, claims: list[dict[str, Any]], by_id: dict[str, Document], premise: set[str]) -> None:
        """
        Set each claim's `score` (0..1) and, when contradictions are checked, its `cues`.

        :param claims: `{"claim", "ids", ...}` per claim; `ids` are keys of `by_id`, at least one per claim.
        :param by_id: The passages by source id.
        :param premise: The words the question itself negates (see `ContradictionDetector.cues`).
        """
        quoted = [claim for claim in claims if any(self._quotes(claim["claim"], by_id[i]) for i in claim["ids"])]
        for claim in quoted:
            claim.update(score=1.0, cues=[])
        claims = [claim for claim in claims if claim not in quoted]
        if not claims:
            return
        self.warm_up()
        cited = list(dict.fromkeys(i for claim in claims for i in claim["ids"]))
        evidence = {source_id: self._evidence(by_id[source_id]) for source_id in cited}
        texts = list(dict.fromkeys([c["claim"] for c in claims] + [t for ts in evidence.values() for t in ts]))
        vectors = dict(zip(texts, self._backend.embed(texts)))
        words = {t: content_words(t, self.stopwords) for t in texts}
        weights = self.scoring["embedding_weight"], self.scoring["lexical_weight"]
        penalty = self.scoring["unmatched_number_penalty"]
        for claim in claims:
            claim_vector = vectors[claim["claim"]]
            aligned: list[tuple[float, str]] = []
            for source_id in claim["ids"]:
                for index, piece in enumerate(evidence[source_id]):
                    cosine = float(np.clip(claim_vector @ vectors[piece], 0.0, 1.0))
                    containment = overlap(words[claim["claim"]], words[piece])
                    pair = weights[0] * cosine + weights[1] * containment
                    aligned.append((pair, piece if index < len(evidence[source_id]) - 1 else ""))
            best = max(pair for pair, _ in aligned)
            available = set().union(*(numbers(" ".join(evidence[i])) for i in claim["ids"]))
            stated = numbers(claim["claim"])
            if stated - available:
                best *= penalty
            cited_text = " ".join(evidence[i][-1] for i in claim["ids"])
            if any(name not in cited_text for name in _CODE_SPAN.findall(claim["claim"])):
                best *= penalty  # a `name` the passage never writes ("TimeoutError")
            if self.detect:
                sentences = [piece for _, piece in sorted(aligned, key=lambda a: -a[0]) if piece]
                claim["cues"] = self.detector.cues(claim["claim"], sentences, available, premise)
            claim["score"] = min(1.0, best)

    def _quotes(self, claim: str, passage: Document) -> bool:
        """
        Whether the passage holds the claim word for word (its text, or one of the headings it sits under); an excerpt
        ("A; …; B", "… A. B …": what is cut marked `…`) when it holds each piece, every piece of two words or more.
        """
        said = normalize_space(claim).rstrip(":").strip()
        if not said:
            return False
        meta = passage.meta or {}
        headings = [normalize_space(str(h)) for h in (meta.get("heading_path") or [meta.get("section")]) if h]
        text = normalize_space(strip_markers(passage.content or "", self.citation_pattern))
        if said in headings or re.search(rf"(?<!\w){re.escape(said)}(?!\w)", text) is not None:
            return True
        pieces = [piece.strip(" ;") for piece in said.split(EXCERPT_CUT)] if EXCERPT_CUT in said else []
        pieces = [piece for piece in pieces if piece]
        return bool(pieces) and all(len(piece.split()) >= 2 and re.search(rf"(?<!\w){re.escape(piece)}(?!\w)", text)
                                    for piece in pieces)

    def _evidence(self, passage: Document) -> list[str]:
        """The passage's sentences and the headings it sits under ("PORT" over "- Default: 1416"), then the whole
        passage as one text (always last)."""
        content = passage.content or ""
        meta = passage.meta or {}
        headings = [str(h) for h in (meta.get("heading_path") or [meta.get("section")]) if h]
        pieces = [
            strip_heading_markers(strip_list_marker(u.text))
            for u in split_units(content, abbreviations=self.abbreviations, citation_pattern=self.citation_pattern)
        ]
        return list(dict.fromkeys([p for p in pieces + headings if p])) + [normalize_space(content)]
