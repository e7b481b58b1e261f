"""
The evidence the first passages hold for a question, as the answerability gate weighs it (plain Python, not a
component).

Every answer unit (`gatehouse.components.answer_units`) of the first `passages` passages gets

- `cosine`: the embedding similarity of the question and the unit, read from the vectors of the chunk's sentences,
  the texts ingest embedded for retrieval (`gatehouse.components.sentences`): the embedding cache holds them, so a warm
  question encodes nothing but itself (a unit no stored sentence covers, such as text a user sent, is embedded);
- `coverage`: the share of the question's content terms in the unit (with its lead-in), each term weighted by how rare
  it is among the units (a term in every unit is the topic; one in few units is the point); a list's or block's is
  its best item's with the lead (a long list names many terms without stating any one thing);
- `score`: `embedding_weight * cosine + lexical_weight * coverage`.

A passage's `heading` is the same share of the question's terms in its own heading (its section's; its document's title
when it has none): in documentation a heading says what its section answers, so a heading holding at least
`heading_match` of them is strong evidence: the passage's evidence, its best unit's score, gets `heading_bonus` and is
at least that share. The answer keeps retrieval's order: it is read from the first passage
unless another passage's evidence beats it by at least `switch_margin` (a heading match, or a unit clearly closer).

Usage:
```python
from haystack import Document
from gatehouse.components.answerability.evidence import EVIDENCE, weigh
from gatehouse.components.answerability.lexicon import Lexicon
from gatehouse.components.embedders.embedding import EmbeddingBackend

passages = [Document(content="Revoking is immediate. Open the key's menu and choose Revoke.",
                     meta={"source_id": "S1", "section": "Revoke an API key", "heading_path": ["Revoke an API key"]})]
reading = weigh("How do I revoke an API key?", passages, lexicon=Lexicon(), embed=EmbeddingBackend.get().embed,
                settings=EVIDENCE)
reading.chosen, reading.key.unit.text, reading.evidence   # 0, "Open the key's menu and choose Revoke.", 1.1...
```
"""

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from haystack import Document

from gatehouse.components.answer_units import AnswerUnit, answer_units, shown_text
from gatehouse.components.answerability.lexicon import Lexicon
from gatehouse.components.sentences import sentence_parts, sentence_settings, sentence_texts
from gatehouse.components.terms import stem, text_terms, tokens

#: How evidence is weighed (keys of the gate's `evidence` setting): the first `passages` passages are read; a unit
#: scores `embedding_weight * cosine + lexical_weight * coverage`; a heading holding `heading_match` of the question's
#: terms adds `heading_bonus`; another passage is answered from when its evidence beats the first one's by
#: `switch_margin`; `sentences` is how ingest cut chunks into the sentences it embedded (`index.yml`'s
#: `sentence_embedder.sentences`, None: its default), whose vectors give the units' cosines.
EVIDENCE: dict[str, Any] = {"passages": 4, "embedding_weight": 0.5, "lexical_weight": 0.5, "heading_match": 0.75,
                            "heading_bonus": 0.1, "switch_margin": 0.05, "sentences": None}
#: The least share of a unit's (or a sentence's) words the other holds for the sentence's vector to stand for the unit.
SHARED_WORDS = 0.6


@dataclass
class UnitEvidence:
    """An answer unit with its cosine to the question, its coverage of the question's terms and its score."""

    unit: AnswerUnit
    cosine: float
    coverage: float
    score: float


@dataclass
class Reading:
    """What the gate read: every unit's evidence (best first), each passage's, the passage chosen and its best unit."""

    units: list[UnitEvidence]
    passages: dict[int, float]  # passage index -> evidence (its best unit's score, with the heading bonus)
    headings: dict[int, float]  # passage index -> the share of the question's terms in its headings
    chosen: int | None
    question_terms: list[str] = field(default_factory=list)

    @property
    def key(self) -> UnitEvidence | None:
        """The chosen passage's best unit (None when no passage has a unit)."""
        return next((u for u in self.units if u.unit.passage == self.chosen), None)

    @property
    def evidence(self) -> float:
        """The chosen passage's evidence (0 when none was chosen)."""
        return self.passages.get(self.chosen, 0.0) if self.chosen is not None else 0.0

    def of_passage(self, index: int) -> list[UnitEvidence]:
        """The units of one passage, best first."""
        return [u for u in self.units if u.unit.passage == index]


def _words(text: str) -> set[str]:
    return {stem(w) for w in tokens(text)}


def heading_text(passage: Document) -> str:
    """A passage's own heading: the last of its heading path (its section's), else its document's title."""
    meta = passage.meta or {}
    path = [str(h) for h in (meta.get("heading_path") or ([meta["section"]] if meta.get("section") else []))]
    return path[-1] if path else str(meta.get("title") or "")


def _pieces(unit: AnswerUnit) -> list[str]:
    """What a unit states, one statement at a time: a list's or block's lead with each item, else itself."""
    if unit.kind in ("list", "block") and unit.items:
        return [f"{unit.lead} {item}" for item in unit.items]
    return [shown_text(unit)]


def unit_cosines(question_vector: np.ndarray, passage: Document, units: list[AnswerUnit],
                 embed: Callable[[list[str]], Any], settings: dict[str, Any]) -> list[float]:
    """
    The cosine of the question to each unit of one passage: its best stored sentence's (see the module docs).

    :param question_vector: The question's L2-normalised embedding.
    :param passage: The passage the units are of.
    :param units: Its units.
    :param embed: Embeds texts (L2-normalised rows); reads the embedding cache first.
    :param settings: The sentence settings of ingest (`sentence_settings`).
    :returns: One cosine per unit.
    """
    parts = sentence_parts(passage, settings)
    vectors = embed(sentence_texts(passage, settings)) if parts else np.zeros((0, len(question_vector)))
    part_cosines = [float(v @ question_vector) for v in vectors]
    part_words = [_words(part) for part in parts]
    cosines: list[float | None] = []
    for unit in units:
        words = _words(unit.text)
        matched = [cosine for cosine, piece in zip(part_cosines, part_words)
                   if words and piece and len(words & piece) >= SHARED_WORDS * min(len(words), len(piece))]
        cosines.append(max(matched) if matched else None)
    missing = [i for i, cosine in enumerate(cosines) if cosine is None]
    if missing:
        fresh = embed([shown_text(units[i]) for i in missing])
        for i, vector in zip(missing, fresh):
            cosines[i] = float(vector @ question_vector)
    return [max(0.0, float(c)) for c in cosines]


def weigh(question: str, passages: list[Document], *, lexicon: Lexicon, embed: Callable[[list[str]], Any],
          settings: dict[str, Any], own_words: str | None = None) -> Reading:
    """
    Weigh the evidence of the first passages for a question (see the module docs).

    :param question: The question (its embedding gives the cosines).
    :param own_words: What the user wrote when `question` is a follow-up made standalone: only the question's terms
        the user wrote are covered (the topic the condenser added found the passages; it is not a term the answer
        must state). None, or no such term: all the question's.
    :param passages: The passages, best first.
    :param lexicon: The question terms' word lists.
    :param embed: Embeds texts (L2-normalised rows).
    :param settings: `EVIDENCE`'s keys.
    :returns: The reading: every unit's evidence, each passage's and the passage chosen.
    """
    read = passages[: settings["passages"]]
    units = [u for u in answer_units(read, abbreviations=lexicon.abbreviations)
             if len(u.text.split()) >= 2 and u.kind != "section"]  # a section answers only when its units tie
    terms = lexicon.question_terms(question)
    own = set(lexicon.question_terms(own_words or ""))
    terms = [t for t in terms if t in own] or terms
    if not units:
        return Reading(units=[], passages={}, headings={}, chosen=None, question_terms=terms)
    unit_words = [text_terms(shown_text(u)) for u in units]
    piece_words = [[text_terms(piece) for piece in _pieces(u)] for u in units]
    weight = {t: math.log(1.0 + len(units) / (1.0 + sum(t in words for words in unit_words))) for t in terms}
    total = sum(weight.values())

    def share(words: set[str]) -> float:
        return sum(weight[t] for t in terms if t in words) / total if total > 0 else 0.0

    question_vector = embed([question])[0]
    sentences = sentence_settings(settings["sentences"])
    cosines: dict[tuple[int, int, int], float] = {}
    for index, passage in enumerate(read):
        own = [u for u in units if u.passage == index]
        cosines.update({u.key: c for u, c in zip(own, unit_cosines(question_vector, passage, own, embed, sentences))})
    scored = []
    for unit, pieces in zip(units, piece_words):
        coverage = max(share(words) for words in pieces)
        cosine = cosines[unit.key]
        scored.append(UnitEvidence(unit=unit, cosine=cosine, coverage=coverage,
                                   score=settings["embedding_weight"] * cosine + settings["lexical_weight"] * coverage))
    scored.sort(key=lambda u: (-u.score, u.unit.key))
    headings = {index: share(text_terms(heading_text(passage))) for index, passage in enumerate(read)}
    evidence: dict[int, float] = {}
    for unit in scored:
        evidence.setdefault(unit.unit.passage, unit.score)
    for index in evidence:
        if headings[index] >= settings["heading_match"]:  # the heading says this section answers: strong evidence
            evidence[index] = max(evidence[index] + settings["heading_bonus"], headings[index])
    chosen = min(evidence)  # the best-ranked passage with a unit
    strongest = max(evidence, key=lambda i: (evidence[i], -i))
    if evidence[strongest] >= evidence[chosen] + settings["switch_margin"]:
        chosen = strongest
    return Reading(units=scored, passages=evidence, headings=headings, chosen=chosen, question_terms=terms)
