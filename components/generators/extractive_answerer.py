"""
The extractive answerer: the offline default generator. It answers with units copied from the passages, so it
cannot invent anything.
"""

import time
from typing import Any, ClassVar

from haystack import component

from gatehouse.components.answer_units import (
    PROCEDURE_QUESTION,
    AnswerUnit,
    answer_units,
    completed,
    excerpt,
    heading,
    is_procedure,
    render_all,
    section_start,
)
from gatehouse.components.answerability.evidence import EVIDENCE, weigh
from gatehouse.components.answerability.lexicon import Lexicon
from gatehouse.components.setting_groups import MovedSettings, setting_group
from gatehouse.components.state import State, advance

DEFAULT_NO_ANSWER_MESSAGE = (
    "I couldn't find an answer to this in the available documentation. "
    "Please rephrase the question or contact support."
)

#: How an answer is laid out: at most `max_words` words under its title line (a key unit longer than that is shown as
#: its part that answers, `answer_units.excerpt`), and a list, key-value block or record with at most `max_list_items`
#: items or fields.
LAYOUT: dict[str, Any] = {"max_words": 80, "max_list_items": 8}

#: Settings earlier answerers took that this one does not, and why (a YAML setting them still loads, with a warning).
RETIRED_SETTINGS: dict[str, str] = {
    "max_units": "an answer is one unit with what completes it, from one passage",
    "min_relative_score": "an answer is one unit with what completes it, from one passage",
    "use_answer_candidates": "the answerability gate's candidates are read when it ran; without them the answerer "
                             "weighs the passages as the gate does",
    "own_ranking": "without the gate's candidates the answerer weighs the passages as the gate does",
}


@component
class ExtractiveAnswerer(MovedSettings):
    """
    Answers with the unit of a passage that answers the query and what completes it, each line cited as `[S#]`.

    The units are what the document makes a unit (`gatehouse.components.answer_units`): a sentence, a list with its
    lead-in, a key-value block with its heading (a setting's `Default:` and `Description:` lines), a table row with its
    column headers, a code block with the sentence leading into it.

    - The key unit is the answerability gate's first candidate (`state["answer_candidates"]`); without the gate's
      candidates, the passages are weighed as the gate weighs them (`gatehouse.components.answerability.evidence`):
      the first passage unless another one is clearly stronger, its best unit.
    - The answer shows the key unit first, under its section's heading (what a section is about is often written
      there only), then what completes it (`answer_units.completed`): an item as its list with the lead-in, then the
      units that follow it in its section (the next sentence or code block holding the value a sentence names), within
      `layout.max_words` words; one procedure per answer.
    - A key unit too long to read is shown as its part that answers, `…` where it is cut (the citation still points at
      the whole passage): a record of more than `layout.max_list_items` fields as its first field and the fields the
      question asks, a long item or paragraph (a slide's speaker notes) as its best-matching sentence with its
      neighbours, a list or block as its matching items (`answer_units.excerpt`); the steps of a procedure a "how do
      I …" question asks for are shown whole (up to `layout.max_list_items`).
    - A candidate of kind `section` (the gate could not tell the passage's units apart) is answered with the passage's
      section from its start, under its heading, within the same bound.
    - `style`: `unit` (the above), `span` (only the gate's short answer, e.g. a value or a name, with its marker; the
      unit when the gate found none).
    - With no passages or no unit, the answer is `no_answer_message` and the status "fallback".

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

    moved_settings: ClassVar[dict[str, str]] = {name: f"layout.{name}" for name in LAYOUT}
    retired_settings: ClassVar[dict[str, str]] = RETIRED_SETTINGS

    def __init__(
        self,
        *,
        layout: dict[str, Any] | None = None,
        style: str = "unit",
        no_answer_message: str = DEFAULT_NO_ANSWER_MESSAGE,
    ) -> None:
        """
        :param layout: How the answer is laid out (`LAYOUT`: keys and defaults).
        :param style: "unit" (the key unit with what completes it) or "span" (the gate's short answer with its marker).
        :param no_answer_message: The answer when no unit qualifies.
        :raises ValueError: If a setting is out of range or a group has an unknown key.
        """
        self.layout = setting_group("layout", layout, LAYOUT)
        self.style = style
        self.no_answer_message = no_answer_message
        if style not in ("span", "unit"):
            raise ValueError(f"style must be 'span' or 'unit', got '{style}'")
        if self.layout["max_words"] < 1 or self.layout["max_list_items"] < 1:
            raise ValueError("layout.max_words and layout.max_list_items must be at least 1")
        self._lexicon = Lexicon()
        self._backend: Any = None

    def warm_up(self) -> None:
        """Load the embedding model (used only without the gate's candidates)."""
        if self._backend is None:
            from gatehouse.components.embedders.embedding import EmbeddingBackend

            self._backend = EmbeddingBackend.get()

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
        candidates = list(state.get("answer_candidates") or [])
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
        :param passages: The passages, best first, each with `meta["source_id"]`.
        :param candidates: The answerability gate's candidates, best first (`passage`, `kind`, `first`, `last`,
            `span`); None or empty: the passages are weighed here.
        """
        units = answer_units(passages, max_list_items=self.layout["max_list_items"])
        if not units:
            return None
        source = [str((p.meta or {}).get("source_id") or f"S{i + 1}") for i, p in enumerate(passages)]
        by_key = {u.key: u for u in units}
        best = (candidates or [None])[0]
        if best is None:
            self.warm_up()
            reading = weigh(query, passages, lexicon=self._lexicon, embed=self._backend.embed, settings=EVIDENCE)
            if reading.key is None:
                return None
            best = {"passage": reading.key.unit.passage, "first": reading.key.unit.first,
                    "last": reading.key.unit.last, "kind": reading.key.unit.kind}
        passage = best.get("passage")
        if not isinstance(passage, int) or not 0 <= passage < len(passages):
            return None
        marker = source[passage]
        terms = self._lexicon.question_terms(query)
        if best.get("kind") == "section":
            shown = section_start(passage, units, max_words=self.layout["max_words"])
            title = _section_title(passages[passage], shown)
            shown[:1] = [self._excerpt(shown[0], query, terms)] if shown else []
            body = render_all(shown, marker)
            return f"### {title}\n\n{body}" if title else body
        key = by_key.get((passage, best.get("first"), best.get("last")))
        if key is None:
            return None
        if self.style == "span" and best.get("span"):
            return f"{best['span']} [{marker}]"
        title = heading(key) if key.kind in ("sentence", "code") else ""  # a list or block shows its own lead
        shown = completed(key, units, max_words=self.layout["max_words"], max_items=self.layout["max_list_items"])
        shown[0] = self._excerpt(shown[0], query, terms)
        return "\n\n".join([f"{title}: [{marker}]"] * bool(title) + [render_all(shown, marker)])

    def _excerpt(self, unit: AnswerUnit, query: str, terms: list[str]) -> AnswerUnit:
        """
        A unit too long to read (or a record of too many fields) as its part that answers (`excerpt`); the steps of a
        procedure asked for ("how do I …") are shown whole, as a person follows them.
        """
        if is_procedure(unit) and PROCEDURE_QUESTION.search(query):
            return unit
        return excerpt(unit, terms, max_words=self.layout["max_words"], max_fields=self.layout["max_list_items"])


def _section_title(passage: Any, shown: list[AnswerUnit]) -> str:
    """The heading a section answer is shown under: the section's own heading, else its document's title."""
    meta = passage.meta or {}
    path = [str(h) for h in (meta.get("heading_path") or ([meta["section"]] if meta.get("section") else []))]
    return (heading(shown[0]) if shown else "") or (path[-1] if path else "") or str(meta.get("title") or "")
