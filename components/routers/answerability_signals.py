"""
The answerability gate's signals: every answer unit of the passages (`gatehouse.components.answer_units`) is a
candidate answer, measured against the question as an answer, not as a topic.

- `coverage`, `window_coverage`, `passage_coverage`: the share of the question's content terms (stemmed, weighted
  by how rare each term is among the candidates) found in the unit (with its lead-in), in the unit with its
  headings and neighbours, and anywhere in its passage (title and section included).
- `heading_coverage`: the same share found in the unit's headings (the section path and the headings above it in
  the passage): in structured documentation the heading says what a section answers ("LISTEN_PORT").
- `missing_entity`: a name or number the question states that the passage never states.
- `type_missing`: the question expects an answer type (how many -> a number, when -> a date, the default -> a
  value, which option/function/flag -> an identifier, where -> a place, a link or an address, who -> a name, write
  code -> a code block) and the unit holds none outside the question's own words.
- `negation_mismatch`: exactly one of question and unit is negated.
- `antonym`: the question uses a word whose opposite the unit uses instead (largest/smallest, born/died).
- `cosine`: embedding similarity of question and unit.
- `novelty`: how many words the unit has beyond the question's (something left to answer with).
- `bigram_coverage`: the share of the question's pairs of adjacent content terms that the unit also has.
- `passage_score`: the retrieval score of the unit's passage relative to the best passage's (1 for passages
  without a score, such as a user's own context).
- `kind_fit`: a list or code block for a how-to question, a code block for a request for code.

Usage:
```python
from haystack import Document
from gatehouse.components.embedders.embedding import EmbeddingBackend
from gatehouse.components.routers.answerability_lexicon import Lexicon
from gatehouse.components.routers.answerability_model import DEFAULT_BIAS, DEFAULT_WEIGHTS, logistic_score
from gatehouse.components.routers.answerability_signals import answer_candidates

passage = Document(content="API keys expire after 90 days.", meta={"source_id": "S1"})
best = answer_candidates("When do API keys expire?", [passage], lexicon=Lexicon(), embed=EmbeddingBackend.get().embed,
                         score=lambda signals: logistic_score(signals, DEFAULT_WEIGHTS, DEFAULT_BIAS))[0]
best.signals["coverage"]   # 1.0
```
"""

import math
from dataclasses import dataclass
from typing import Any, Callable

from haystack import Document

from gatehouse.components.answer_units import PROCEDURE_QUESTION, AnswerUnit, answer_units, shown_text
from gatehouse.components.routers.answerability_lexicon import Lexicon
from gatehouse.components.terms import numbers, stem, tokens


@dataclass
class Candidate:
    """An answer unit with the source id of its passage, its signals and its score."""

    unit: AnswerUnit
    source_id: str
    signals: dict[str, float]
    score: float = 0.0

    @property
    def passage(self) -> int:
        """The candidate's passage index."""
        return self.unit.passage

    @property
    def text(self) -> str:
        """The candidate's text."""
        return self.unit.text


def answer_candidates(question: str, passages: list[Document], *, lexicon: Lexicon,
                      embed: Callable[[list[str]], Any], score: Callable[[dict[str, float]], float]) -> list[Candidate]:
    """
    Every answer unit of the passages with its signals and score, best first; of units with the same text (the
    overlapping windows of one section) only the best.

    :param question: The question.
    :param passages: The passages, each with `meta["source_id"]`.
    :param lexicon: The word lists and patterns the signals read.
    :param embed: The L2-normalised embeddings of texts (the `cosine` signal).
    :param score: The score of a unit's signals.
    :returns: The scored candidates.
    """
    units = [u for u in answer_units(passages, abbreviations=lexicon.abbreviations) if len(u.text.split()) >= 2]
    if not units:
        return []
    passage_terms = [{stem(w) for w in tokens(" ".join(str((p.meta or {}).get(k) or "") for k in
                                                         ("title", "section")) + " " + (p.content or ""))}
                     for p in passages]

    q_terms = lexicon.question_terms(question)
    q_set = set(q_terms)
    q_bigrams = set(zip(q_terms, q_terms[1:]))
    # Passages without a retrieval score (a user's own context) all count as fully retrieved.
    unscored = all(p.score is None for p in passages)
    scores = [1.0 if unscored else float(p.score) if p.score is not None else 0.0 for p in passages]
    top_score = max(scores) if scores and max(scores) > 0 else 1.0
    q_words = tokens(question)
    q_negated = lexicon.negated(q_words)
    q_entities = lexicon.stated_entities(question)
    answer_type = lexicon.expected_type(question)
    procedural = bool(PROCEDURE_QUESTION.search(question))
    shown = [shown_text(u) for u in units]
    unit_terms = [{stem(w) for w in tokens(text)} for text in shown]
    context_terms = [{stem(w) for w in tokens(u.context)} for u in units]
    # Rarity among the candidates: a term in every unit is the topic, one in few units is the point.
    total = len(units)
    weight = {t: math.log(1.0 + total / (1.0 + sum(t in terms for terms in unit_terms))) for t in q_terms}
    weight_sum = sum(weight.values())

    def share(found: set[str]) -> float:
        return sum(weight[t] for t in q_terms if t in found) / weight_sum if weight_sum > 0 else 0.0

    vectors = embed([question] + shown)
    scored: list[Candidate] = []
    for index, (unit, text, terms) in enumerate(zip(units, shown, unit_terms)):
        p = unit.passage
        window = terms | context_terms[index]
        for neighbour in (index - 1, index + 1):
            if 0 <= neighbour < total and units[neighbour].passage == p:
                window |= unit_terms[neighbour]
        words = tokens(text)
        word_set = set(words)
        content = [stem(w) for w in words if lexicon.is_content(w)]
        bigrams = set(zip(content, content[1:]))
        antonym = any(w not in word_set and lexicon.opposites.get(w, set()) & word_set for w in q_words)
        signals = {
            "coverage": share(terms),
            "window_coverage": share(window),
            "passage_coverage": share(passage_terms[p]),
            "heading_coverage": share(context_terms[index]),
            "missing_entity": float(bool(q_entities - passage_terms[p] - numbers(passages[p].content or ""))),
            "type_missing": float(answer_type is not None
                                  and not lexicon.has_type(answer_type, text, q_set, unit.kind)),
            "negation_mismatch": float(q_negated != lexicon.negated(words)),
            "antonym": float(antonym),
            "cosine": max(0.0, float(vectors[index + 1] @ vectors[0])),
            "novelty": min(1.0, len({stem(w) for w in words if w not in lexicon.stop} - q_set) / 10.0),
            "bigram_coverage": len(q_bigrams & bigrams) / len(q_bigrams) if q_bigrams else 0.0,
            "passage_score": max(0.0, scores[p] / top_score),
            "kind_fit": float(unit.kind == "code" if answer_type == "code" else
                              procedural and unit.kind in ("list", "code")),
        }
        source_id = str((passages[p].meta or {}).get("source_id") or f"S{p + 1}")
        scored.append(Candidate(unit=unit, source_id=source_id, signals=signals, score=score(signals)))
    scored.sort(key=lambda c: (-c.score, c.unit.key))
    seen: set[str] = set()  # overlapping windows of one section repeat their units: keep the best of each text
    return [c for c in scored if not (c.unit.text in seen or seen.add(c.unit.text))]
