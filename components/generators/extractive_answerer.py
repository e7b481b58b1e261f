"""
The extractive answerer: the offline default generator. It answers with units copied from the passages, so it
cannot invent anything.
"""

import time
from typing import Any

from haystack import component

from gatehouse.components.answer_units import PROCEDURE_QUESTION, AnswerUnit, answer_units, is_procedure, render
from gatehouse.components.setting_groups import MovedSettings, setting_group
from gatehouse.components.state import State, advance
from gatehouse.components.terms import content_words, jaccard, overlap
from gatehouse.components.text_units import DEFAULT_ABBREVIATIONS, strip_list_marker

DEFAULT_NO_ANSWER_MESSAGE = (
    "I couldn't find an answer to this in the available documentation. "
    "Please rephrase the question or contact support."
)

#: How units are ranked when the answerability gate's ranking is not used: `embedding_weight` x the query-unit
#: embedding cosine + `lexical_weight` x the share of the query's content words in the unit, plus `procedure_bonus`
#: for a list or code block when the question asks how to do something; a unit is picked when it scores at least
#: `min_score`, and skipped when its content words have a Jaccard similarity of `duplicate_threshold` or more with a
#: unit already picked. `embedding_model` and `cache_dir` (None: the configured defaults, `"off"`: no cache) embed
#: the units.
OWN_RANKING: dict[str, Any] = {"min_score": 0.35, "embedding_weight": 0.6, "lexical_weight": 0.4,
                               "duplicate_threshold": 0.8, "procedure_bonus": 0.1, "embedding_model": None,
                               "cache_dir": None}
#: How the picked units are laid out: in reading `order` (`passage`) or best first (`score`), a list or key-value
#: block shown with at most `max_list_items` items.
LAYOUT: dict[str, Any] = {"order": "passage", "max_list_items": 8}


def _check_settings(max_units: int, order: str, style: str) -> None:
    if max_units < 1:
        raise ValueError(f"max_units must be at least 1, got {max_units}")
    if order not in ("passage", "score"):
        raise ValueError(f"layout.order must be 'passage' or 'score', got '{order}'")
    if style not in ("span", "unit"):
        raise ValueError(f"style must be 'span' or 'unit', got '{style}'")


@component
class ExtractiveAnswerer(MovedSettings):
    """
    Answers with the units of the passages that answer the query, each line cited as `[S#]`.

    The units are what the document makes a unit (`gatehouse.components.answer_units`): a sentence, a list item with
    its lead-in or heading, a list with its lead-in, a key-value block with its heading (a setting's `Default:` and
    `Description:` lines), a table row with its column headers, a code block with the sentence leading into it.

    - When the answerability gate ran before it, its ranking (`state["answer_candidates"]`) decides: its best unit,
      then (up to `max_units`) runners-up scoring at least `min_relative_score` times the best, an honest "one of
      these" when the gate cannot tell them apart; a unit overlapping one already picked is skipped, and so is a
      list of steps of another section when the best is one: one procedure per answer.
    - Without the gate's ranking, units are ranked by `own_ranking`: each gets `embedding_weight * cosine(query,
      unit) + lexical_weight * share of the query's content words in the unit`; units are taken best first while
      they score at least `min_score` and `min_relative_score` times the best, skipping overlapping units and
      near-duplicates (content-word Jaccard >= `duplicate_threshold`).
    - `style`: `unit` (the picks), `span` (only the gate's short answer, e.g. a value or a name, with its marker; the
      unit when the gate found none).
    - The picks appear in reading order (by passage, then position; `layout.order` `score` lists the best first).
    - With no passages or no unit above `own_ranking.min_score`, the answer is `no_answer_message` and the status
      "fallback".

    Usage example:
    ```python
    from haystack import Document
    from gatehouse.components.generators.extractive_answerer import ExtractiveAnswerer
    from gatehouse.components.state import new_state

    answerer = ExtractiveAnswerer()
    passage = Document(content="To rotate a key:\\n\\n1. Open Settings.\\n2. Click Rotate.", meta={"source_id": "S1"})
    print(answerer.run(state=new_state("How do I rotate a key?", passages=[passage]))["state"]["answer"])
    # To rotate a key: [S1]
    #
    # 1. Open Settings. [S1]
    # 2. Click Rotate. [S1]
    ```
    """

    moved_settings = {**{name: f"own_ranking.{name}" for name in OWN_RANKING},
                      **{name: f"layout.{name}" for name in LAYOUT}}

    def __init__(
        self,
        *,
        max_units: int = 1,
        min_relative_score: float = 0.6,
        layout: dict[str, Any] | None = None,
        style: str = "unit",
        use_answer_candidates: bool = True,
        no_answer_message: str = DEFAULT_NO_ANSWER_MESSAGE,
        own_ranking: dict[str, Any] | None = None,
    ) -> None:
        """
        :param max_units: Most units in the answer.
        :param min_relative_score: A further unit needs this share of the best unit's score (the gate's or its own).
        :param layout: How the picks are laid out (`LAYOUT`: keys and defaults).
        :param style: "unit" (the picked units) or "span" (the gate's short answer with its marker).
        :param use_answer_candidates: Take the answerability gate's best candidate as the first pick.
        :param no_answer_message: The answer when no unit qualifies.
        :param own_ranking: How units are ranked without the gate's ranking, and the embedding model of that ranking
            (`OWN_RANKING`: keys and defaults).
        :raises ValueError: If a setting is out of range or a group has an unknown key.
        """
        self.max_units = max_units
        self.min_relative_score = min_relative_score
        self.layout = setting_group("layout", layout, LAYOUT)
        self.style = style
        self.use_answer_candidates = use_answer_candidates
        self.no_answer_message = no_answer_message
        self.own_ranking = setting_group("own_ranking", own_ranking, OWN_RANKING)
        _check_settings(max_units, self.layout["order"], style)
        self._backend: Any = None

    def warm_up(self) -> None:
        """Load the embedding model."""
        if self._backend is None:
            from gatehouse.components.embedders.embedding import EmbeddingBackend

            self._backend = EmbeddingBackend.get(model=self.own_ranking["embedding_model"],
                                                 cache_dir=self.own_ranking["cache_dir"])

    @component.output_types(state=State)
    def run(self, state: State) -> dict[str, dict[str, Any]]:
        """
        Compose an extractive answer from `state["passages"]` for `state["query"]`.

        :param state: The request state; reads `query`, `passages` and the answerability gate's `answer_candidates`.
        :returns:
            - `state`: the state with `answer`, `status` ("fallback" when nothing answers) and `generator`.
        """
        started = time.perf_counter()
        query = str(state.get("condensed_query") or state.get("query") or "")
        passages = list(state.get("passages") or [])
        candidates = list(state.get("answer_candidates") or []) if self.use_answer_candidates else []
        answer = self.answer(query, passages, candidates) if query.strip() and passages else None
        new_state = advance(
            state,
            stage="generate",
            started=started,
            steps=["generate_extractive"],
            answer=answer if answer else self.no_answer_message,
            # Keep an earlier verdict (e.g. the gate's "partial"); the response builder settles success.
            status=state.get("status") if answer else "fallback",
            generator="extractive",
        )
        return {"state": new_state}

    def answer(self, query: str, passages: list[Any], candidates: list[dict[str, Any]] | None = None) -> str | None:
        """
        The answer text for a query from passages (None when no unit qualifies).

        :param query: The question.
        :param passages: The passages, each with `meta["source_id"]`.
        :param candidates: The answerability gate's ranked candidates (`passage`, `first`, `last`, `score`, `span`).
        """
        candidates = candidates or []
        units = answer_units(passages, abbreviations=DEFAULT_ABBREVIATIONS,
                             max_list_items=self.layout["max_list_items"])
        if not units:
            return None
        source = [str((p.meta or {}).get("source_id") or f"S{i + 1}") for i, p in enumerate(passages)]
        by_key = {u.key: u for u in units}
        ranked = [(by_key.get((c.get("passage"), c.get("first"), c.get("last"))), c) for c in candidates]
        ranked = [(unit, c) for unit, c in ranked if unit is not None]
        if ranked and self.style == "span" and ranked[0][1].get("span"):
            return f"{ranked[0][1]['span']} [{source[ranked[0][0].passage]}]"
        picks: list[AnswerUnit] = []
        for unit, candidate in ranked:  # the gate's ranking: its best, and close runners-up
            if len(picks) >= self.max_units or float(candidate.get("score") or 0.0) < self.min_relative_score * float(
                    ranked[0][1].get("score") or 0.0):
                break
            if any(_overlaps(unit, other) or unit.text == other.text for other in picks):
                continue
            if picks and is_procedure(unit) and is_procedure(picks[0]) and unit.context != picks[0].context:
                continue  # one procedure per answer: another section's steps answer another question
            picks.append(unit)
        if not picks:
            picks = self._more(query, units, picks)
        if not picks:
            return None
        if self.layout["order"] == "passage":
            picks = sorted(picks, key=lambda u: u.key)
        return "\n\n".join(render(u, source[u.passage]) for u in _with_items_together(picks))

    def _more(self, query: str, units: list[AnswerUnit], picks: list[AnswerUnit]) -> list[AnswerUnit]:
        """Add units by this component's own score until `max_units`."""
        self.warm_up()
        ranking = self.own_ranking
        texts = [strip_list_marker(f"{u.lead} {u.text}" if u.lead else u.text) for u in units]
        vectors = self._backend.embed([query, *texts])
        query_words = content_words(query)
        words = [content_words(text) for text in texts]
        steps = PROCEDURE_QUESTION.search(query) is not None  # a how-to question: a list of steps or code first
        scores = [ranking["embedding_weight"] * max(0.0, float(v @ vectors[0]))
                  + ranking["lexical_weight"] * overlap(query_words, w)
                  + (ranking["procedure_bonus"] if steps and u.kind in ("list", "code") else 0.0)
                  for u, v, w in zip(units, vectors[1:], words)]
        order = sorted(range(len(units)), key=lambda i: -scores[i])
        floor = max(ranking["min_score"], self.min_relative_score * scores[order[0]])
        chosen = list(picks)
        for i in order:
            if len(chosen) >= self.max_units or scores[i] < floor:
                break
            unit = units[i]
            if any(_overlaps(unit, other) for other in chosen):
                continue
            if any(jaccard(words[i], words[units.index(other)]) >= ranking["duplicate_threshold"]
                   for other in chosen):
                continue
            chosen.append(unit)
        return chosen


def _overlaps(a: AnswerUnit, b: AnswerUnit) -> bool:
    return a.passage == b.passage and a.first <= b.last and b.first <= a.last


def _with_items_together(picks: list[AnswerUnit]) -> list[AnswerUnit]:
    """The picks with the items of one list shown as one list (its lead once, items in their order), where the
    first of them was picked."""
    lists: dict[tuple[int, str, str], list[AnswerUnit]] = {}
    for unit in picks:
        if unit.kind == "item":
            lists.setdefault((unit.passage, unit.context, unit.lead), []).append(unit)
    shown: list[AnswerUnit] = []
    for unit in picks:
        together = lists.get((unit.passage, unit.context, unit.lead)) if unit.kind == "item" else None
        if not together or len(together) < 2:
            shown.append(unit)
        elif unit is together[0]:
            ordered = sorted(together, key=lambda u: u.first)
            items = tuple(item for u in ordered for item in u.items)
            shown.append(AnswerUnit("list", unit.passage, ordered[0].first, ordered[-1].last,
                                    "\n".join([unit.lead, *items]) if unit.lead else "\n".join(items), unit.context,
                                    lead=unit.lead, items=items))
    return shown
