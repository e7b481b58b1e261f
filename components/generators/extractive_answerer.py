"""
The extractive answerer: the offline default generator. It answers with sentences copied from the passages, so it
cannot invent anything.
"""

import time
from dataclasses import dataclass, field
from typing import Any

from haystack import component, default_from_dict, default_to_dict

from gatehouse.components.state import State, advance
from gatehouse.components.text import (
    DEFAULT_ABBREVIATIONS,
    Unit,
    content_words,
    is_ordered_item,
    jaccard,
    normalize_space,
    overlap,
    split_units,
    strip_heading_markers,
    strip_list_marker,
    strip_markers,
)

DEFAULT_NO_ANSWER_MESSAGE = (
    "I couldn't find an answer to this in the available documentation. "
    "Please rephrase the question or contact support."
)


@dataclass
class _Candidate:
    passage: int
    unit: int
    source_id: str
    text: str
    words: set[str]
    score: float = 0.0
    group: int | None = None


@dataclass
class _ListGroup:
    intro: int | None
    items: list[int] = field(default_factory=list)
    ordered: bool = False


@component
class ExtractiveAnswerer:
    """
    Answers from the passages by selecting their sentences most related to the query, each cited as `[S#]`.

    How it works:
    - Every passage in `state["passages"]` is split into prose sentences and list items (headings, code blocks
      and tables are context, not candidates).
    - Each candidate gets `embedding_weight * cosine(query, sentence) + lexical_weight * share of the query's
      content words found in the sentence` (stemmed, stopwords removed).
    - Candidates are taken best first while their score is at least `min_sentence_score` and at least
      `min_relative_score` times the best score, up to `max_sentences` picks, skipping near-duplicates of sentences
      already picked (content-word Jaccard >= `duplicate_threshold`).
    - Lists stay together (`keep_lists`): when a pick is a sentence ending with ':' that introduces a list, or an
      item of such a list, the introduction and the list's items (up to `max_list_items`) are taken together as one
      pick. Items of a numbered list without an introduction are also taken together (numbered lists are
      procedures), unless `group_ordered_lists` is False. This applies to picks scoring within
      `list_score_margin` of the best sentence, so "How do I rotate an API key?" returns the steps, while a list
      that is only loosely related does not flood the answer (its weak introduction is skipped, a weak item is
      taken alone).
    - The answer lists the picked sentences verbatim (whitespace collapsed, heading markers stripped), each
      followed by its passage's marker such as `[S2]`. They appear in reading order: by passage (S1 first,
      which is also relevance order) and by position within the passage, which keeps steps in sequence and
      reads naturally; set `order="score"` to list the picks best first instead.
    - When the answerability gate ran before it, its best candidate (`state["answer_candidates"][0]`, the sentence
      judged to answer the question) is the first pick whatever its own score; further picks follow as above.
    - `style` shapes the answer: `sentence` (the picks), `span` (only the gate's short answer phrase, e.g. a date
      or an amount, with its marker; the sentence when the gate found none) or `passage` (each pick with the rest of
      its paragraph). With `max_sentences: 1` the answer is the one sentence that answers.
    - If no candidate reaches `min_sentence_score` (or there are no passages) the answer is `no_answer_message`,
      with no markers, and the status is "fallback".

    Works the same in constrained-context mode, where the single passage is the user's own text.

    Usage example:
    ```python
    from haystack import Document
    from gatehouse.components.generators.extractive_answerer import ExtractiveAnswerer
    from gatehouse.components.state import new_state

    answerer = ExtractiveAnswerer(max_sentences=3)
    passage = Document(content="To rotate an API key:\\n1. Open Settings.\\n2. Click Rotate.", meta={"source_id": "S1"})
    result = answerer.run(state=new_state("How do I rotate an API key?", passages=[passage]))
    print(result["state"]["answer"])
    # To rotate an API key: [S1]
    #
    # 1. Open Settings. [S1]
    # 2. Click Rotate. [S1]
    ```
    """

    def __init__(
        self,
        *,
        max_sentences: int = 3,
        min_sentence_score: float = 0.35,
        min_relative_score: float = 0.6,
        embedding_weight: float = 0.6,
        lexical_weight: float = 0.4,
        duplicate_threshold: float = 0.8,
        min_sentence_words: int = 3,
        keep_lists: bool = True,
        group_ordered_lists: bool = True,
        max_list_items: int = 8,
        list_score_margin: float = 0.1,
        order: str = "passage",
        style: str = "sentence",
        use_answer_candidates: bool = True,
        no_answer_message: str = DEFAULT_NO_ANSWER_MESSAGE,
        embedding_model: str | None = None,
        cache_dir: str | None = None,
        stopwords: list[str] | None = None,
        abbreviations: list[str] | None = None,
    ) -> None:
        """
        Create the answerer.

        :param max_sentences: Most picks in the answer (a list taken together with its introduction is one pick).
        :param min_sentence_score: Lowest combined score a sentence needs to be picked (0..1).
        :param min_relative_score: A sentence also needs at least this share of the best sentence's score, so weak
            sentences do not pad a strong answer.
        :param embedding_weight: Weight of the query-sentence embedding cosine similarity.
        :param lexical_weight: Weight of the share of query content words present in the sentence.
        :param duplicate_threshold: Content-word Jaccard similarity at which a sentence duplicates a picked one.
        :param min_sentence_words: Sentences with fewer words are not candidates (list items always are).
        :param keep_lists: Take a list together with the sentence ending with ':' that introduces it.
        :param group_ordered_lists: Also take all the items of a numbered list without introduction together.
        :param max_list_items: Most list items taken with one list.
        :param list_score_margin: A list is taken whole only when its introduction or item scores within this
            margin of the best sentence; a weaker introduction is skipped and a weaker item is taken alone.
        :param order: "passage" (reading order: passage S1 first, then position) or "score" (best pick first).
        :param style: "sentence" (the picked sentences), "span" (only the short answer span of the best sentence that
            the answerability gate found, e.g. a date or a name; the sentence when it found none) or "passage" (each
            picked sentence with the rest of its paragraph, for context).
        :param use_answer_candidates: When the answerability gate ranked `state["answer_candidates"]`, its best
            candidate is the first pick (it is the sentence judged to answer the question); more picks follow by
            this component's own score.
        :param no_answer_message: The answer when no sentence reaches `min_sentence_score`.
        :param embedding_model: Embedding model; None uses the configured default.
        :param cache_dir: Embedding cache directory; None uses the configured default, `"off"` disables it.
        :param stopwords: Stopwords ignored by the lexical overlap; None uses the built-in English list.
        :param abbreviations: Words whose trailing period does not end a sentence; None uses the built-in list.
        """
        if max_sentences < 1:
            raise ValueError(f"max_sentences must be at least 1, got {max_sentences}")
        if order not in ("passage", "score"):
            raise ValueError(f"order must be 'passage' or 'score', got '{order}'")
        if style not in ("span", "sentence", "passage"):
            raise ValueError(f"style must be 'span', 'sentence' or 'passage', got '{style}'")
        self.max_sentences = max_sentences
        self.min_sentence_score = min_sentence_score
        self.min_relative_score = min_relative_score
        self.embedding_weight = embedding_weight
        self.lexical_weight = lexical_weight
        self.duplicate_threshold = duplicate_threshold
        self.min_sentence_words = min_sentence_words
        self.keep_lists = keep_lists
        self.group_ordered_lists = group_ordered_lists
        self.max_list_items = max_list_items
        self.list_score_margin = list_score_margin
        self.order = order
        self.style = style
        self.use_answer_candidates = use_answer_candidates
        self.no_answer_message = no_answer_message
        self.embedding_model = embedding_model
        self.cache_dir = cache_dir
        self.stopwords = stopwords
        self.abbreviations = abbreviations
        self._backend: Any = None

    def warm_up(self) -> None:
        """Load the embedding model."""
        if self._backend is None:
            from gatehouse.components.embedders.embedding import EmbeddingBackend

            self._backend = EmbeddingBackend.get(model=self.embedding_model, cache_dir=self.cache_dir)

    def to_dict(self) -> dict[str, Any]:
        """
        Serialize this component to a dictionary.

        :returns: The serialized component.
        """
        return default_to_dict(
            self,
            max_sentences=self.max_sentences,
            min_sentence_score=self.min_sentence_score,
            min_relative_score=self.min_relative_score,
            embedding_weight=self.embedding_weight,
            lexical_weight=self.lexical_weight,
            duplicate_threshold=self.duplicate_threshold,
            min_sentence_words=self.min_sentence_words,
            keep_lists=self.keep_lists,
            group_ordered_lists=self.group_ordered_lists,
            max_list_items=self.max_list_items,
            list_score_margin=self.list_score_margin,
            order=self.order,
            style=self.style,
            use_answer_candidates=self.use_answer_candidates,
            no_answer_message=self.no_answer_message,
            embedding_model=self.embedding_model,
            cache_dir=self.cache_dir,
            stopwords=self.stopwords,
            abbreviations=self.abbreviations,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ExtractiveAnswerer":
        """
        Deserialize this component from a dictionary.

        :param data: The dictionary from `to_dict()`.
        :returns: The component.
        """
        return default_from_dict(cls, data)

    @component.output_types(state=State)
    def run(self, state: State) -> dict[str, dict[str, Any]]:
        """
        Compose an extractive answer from `state["passages"]` for `state["query"]`.

        :param state: The request state; reads `query`, `passages` and the answerability gate's `answer_candidates`.
        :returns:
            - `state`: the state with `answer`, `status` ("success" or "fallback") and `generator` ("extractive").
        """
        started = time.perf_counter()
        query = str(state.get("query") or "")
        passages = list(state.get("passages") or [])
        candidates = list(state.get("answer_candidates") or []) if self.use_answer_candidates else []
        answer = self._answer(query, passages, candidates[0] if candidates else None) if query.strip() and passages \
            else None
        new_state = advance(
            state,
            stage="generate",
            started=started,
            steps=["generate_extractive"],
            answer=answer if answer else self.no_answer_message,
            # Keep an earlier verdict (e.g. the quality gate's "partial"); the response builder settles success.
            status=state.get("status") if answer else "fallback",
            generator="extractive",
        )
        return {"state": new_state}

    def _answer(self, query: str, passages: list[Any], best: dict[str, Any] | None) -> str | None:
        abbreviations = DEFAULT_ABBREVIATIONS if self.abbreviations is None else self.abbreviations
        units_by_passage: list[list[Unit]] = []
        groups: list[_ListGroup] = []
        candidates: list[_Candidate] = []
        for p, passage in enumerate(passages):
            source_id = str((passage.meta or {}).get("source_id") or f"S{p + 1}")
            units = split_units(passage.content or "", abbreviations=abbreviations)
            units_by_passage.append(units)
            group_of = self._list_groups(units, groups)
            for u, unit in enumerate(units):
                if unit.kind not in ("sentence", "item"):
                    continue
                text = strip_heading_markers(strip_markers(unit.text))
                if not text:
                    continue
                introduces = u in group_of and unit.kind == "sentence" and self.keep_lists
                if unit.kind == "sentence" and not introduces:
                    if len(text.split()) < self.min_sentence_words:
                        continue
                    if text.endswith(":"):
                        continue  # an introduction without the list it introduces says nothing
                candidates.append(
                    _Candidate(
                        passage=p,
                        unit=u,
                        source_id=source_id,
                        text=text,
                        words=content_words(strip_list_marker(text), self.stopwords),
                        group=group_of.get(u),
                    )
                )
        if not candidates:
            return None

        self.warm_up()
        vectors = self._backend.embed([query] + [strip_list_marker(c.text) for c in candidates])
        query_words = content_words(query, self.stopwords)
        for candidate, vector in zip(candidates, vectors[1:]):
            cosine = max(0.0, float(vector @ vectors[0]))
            candidate.score = self.embedding_weight * cosine + self.lexical_weight * overlap(
                query_words, candidate.words
            )

        by_key = {(c.passage, c.unit): c for c in candidates}
        picked: dict[tuple[int, int], float] = {}  # key -> rank score of the pick it belongs to
        picks = 0
        ranked = sorted(candidates, key=lambda c: -c.score)
        floor = max(self.min_sentence_score, self.min_relative_score * ranked[0].score)
        first = by_key.get((best.get("passage"), best.get("unit"))) if best else None
        if first is not None and normalize_space(first.text) != normalize_space(str(best.get("text") or "")):
            first = None  # the gate split the passage differently: rank by this component's own score
        if first is not None:
            if self.style == "span" and best.get("span"):
                return f"{best['span']} [{first.source_id}]"
            first.score = max(first.score, ranked[0].score)  # the sentence judged to answer leads
            ranked = [first] + [c for c in ranked if c is not first]
        for candidate in ranked:
            if picks >= self.max_sentences or (candidate.score < floor and candidate is not first):
                break
            key = (candidate.passage, candidate.unit)
            if key in picked:
                continue
            if any(
                jaccard(candidate.words, by_key[k].words) >= self.duplicate_threshold
                for k in picked
                if k in by_key and by_key[k].words
            ):
                continue
            keys = [key]
            if self.keep_lists and candidate.group is not None:
                if candidate.score >= ranked[0].score - self.list_score_margin:
                    keys = self._group_keys(candidate, groups[candidate.group])
                elif groups[candidate.group].intro == candidate.unit:
                    continue  # a weak introduction without its list says nothing
            new_keys = [k for k in keys if k not in picked and k in by_key]
            if not new_keys:
                continue
            for k in new_keys:
                picked[k] = candidate.score
            picks += 1

        if not picked:
            return None
        if self.style == "passage":
            for key in list(picked):
                block = units_by_passage[key[0]][key[1]].block
                for u, unit in enumerate(units_by_passage[key[0]]):
                    if unit.block == block and (key[0], u) in by_key:
                        picked.setdefault((key[0], u), picked[key])
        if self.order == "score":
            ordered = sorted(picked, key=lambda k: (-picked[k], k))
        else:
            ordered = sorted(picked)
        return self._compose([by_key[k] for k in ordered], units_by_passage)

    def _list_groups(self, units: list[Unit], groups: list[_ListGroup]) -> dict[int, int]:
        """Find the lists of one passage; returns unit index -> group index (for intros and items)."""
        group_of: dict[int, int] = {}
        u = 0
        while u < len(units):
            if units[u].kind != "item":
                u += 1
                continue
            start = u
            while u < len(units) and units[u].kind == "item":
                u += 1
            items = list(range(start, u))
            previous = units[start - 1] if start > 0 else None
            intro = start - 1 if previous is not None and previous.kind == "sentence" else None
            if intro is not None and not strip_markers(previous.text).rstrip().endswith(":"):
                intro = None
            ordered = all(is_ordered_item(units[i].text) for i in items)
            if intro is None and not (ordered and self.group_ordered_lists):
                continue
            groups.append(_ListGroup(intro=intro, items=items, ordered=ordered))
            index = len(groups) - 1
            for i in items:
                group_of[i] = index
            if intro is not None:
                group_of[intro] = index
        return group_of

    def _group_keys(self, candidate: _Candidate, group: _ListGroup) -> list[tuple[int, int]]:
        items = group.items
        if candidate.unit in items and items.index(candidate.unit) >= self.max_list_items:
            position = items.index(candidate.unit)
            window = items[position - self.max_list_items + 1 : position + 1]
        else:
            window = items[: self.max_list_items]
        members = ([group.intro] if group.intro is not None else []) + window
        return [(candidate.passage, u) for u in members]

    @staticmethod
    def _compose(selected: list[_Candidate], units_by_passage: list[list[Unit]]) -> str:
        parts: list[str] = []
        previous: _Candidate | None = None
        for candidate in selected:
            unit = units_by_passage[candidate.passage][candidate.unit]
            if previous is not None:
                previous_unit = units_by_passage[previous.passage][previous.unit]
                if unit.kind == "sentence" and previous_unit.kind == "sentence":
                    parts.append(" ")
                elif unit.kind == "item" and previous_unit.kind == "item":
                    parts.append("\n")
                else:
                    parts.append("\n\n")  # a blank line between prose and a list, as markdown needs
            parts.append(f"{normalize_space(candidate.text)} [{candidate.source_id}]")
            previous = candidate
        return "".join(parts)
