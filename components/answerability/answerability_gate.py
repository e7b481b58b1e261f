"""
The answerability gate: which passage answers the question, with which unit, and how sure that is; or that none does.

It runs after the passages are assembled and reads the first of them (`evidence.passages`) in retrieval's order
(`gatehouse.components.answerability.evidence`): every answer unit gets its cosine to the question (from the sentence
vectors ingest stored) and its coverage of the question's terms; a passage's evidence is its best unit's, and at
least its heading's match when its heading matches the question (strong evidence). The answer is read from the first
passage unless another one's evidence is clearly stronger (`evidence.switch_margin`).

The chosen passage's evidence decides:
- below `threshold`, or when the question states a name or number no passage contains (`rules.require_entities`),
  or expects a type of answer (a number, a date, a value, an identifier, a place, a name) that nothing the answer
  would show holds (`rules.require_type`): the state goes on `unanswerable` with the fallback message and the reason
  (with `on_unanswerable: partial`, on `answerable` with status `partial` and that reason as a warning);
- else on `answerable`, with status `partial` and a warning below `success_threshold`.

A follow-up the condenser made standalone (`condensed_query` other than `original_query`, not a plan's part) that the
standalone question's evidence refuses is read again on the terms the user wrote (`evidence.weigh`'s `own_words`):
when that reading answers, it does so with status `partial` and a warning, never `success`.

The answerer gets `state["answer_candidates"]`, best first: the key unit of the chosen passage (for a question
expecting a type of answer, its best unit whose answer shows one), or, when its units are too close to tell
(`rules.section_margin`) or too weak (below `threshold`) in a passage whose evidence reaches `success_threshold` (a
matching heading), its section (a candidate of kind `section`). An optional LLM tier rates the chosen passage and is
blended in with `llm.weight`.

Usage:
```python
from haystack import Document
from gatehouse.components.answerability.answerability_gate import AnswerabilityGate
from gatehouse.components.state import new_state

gate = AnswerabilityGate(threshold=0.3)
passage = Document(content="API keys expire after 90 days. Rotate them in Settings.", meta={"source_id": "S1"})
out = gate.run(state=new_state("When do API keys expire?", passages=[passage]))
list(out)                                   # ["answerable"]
out["answerable"]["answer_candidates"][0]   # {"source_id": "S1", "kind": "sentence", "text": "API keys expire ...", ...}
gate.run(state=new_state("How much does the Platinum plan cost?", passages=[passage]))  # -> "unanswerable"
```
"""

import time
from dataclasses import dataclass
from typing import Any, ClassVar

from haystack import Document, component

from gatehouse.components.answer_units import completed
from gatehouse.components.answerability.evidence import EVIDENCE, Reading, weigh
from gatehouse.components.answerability.lexicon import TYPED_ANSWERS, Lexicon
from gatehouse.components.chat import ChatGeneratorSerialization, ask_chat_generator
from gatehouse.components.setting_groups import MovedSettings, setting_group
from gatehouse.components.state import FALLBACK_MESSAGE, State, advance, with_validation
from gatehouse.components.terms import same_words, stem, tokens

#: The gate's rules beside the evidence: `require_entities` (a question stating a name or number no passage contains
#: is not answered), `require_type` (a question expecting a type of answer that nothing shown holds is not answered),
#: `section_margin` (the chosen passage's best units closer than this: its section answers), `max_words` (the reading
#: bound of what an answer shows, the same as the extractive answerer's), `max_candidates` (units handed to the
#: answerer), `skip_statuses` (states passed on unjudged; None means `["fallback"]`).
RULES: dict[str, Any] = {"require_entities": True, "require_type": True, "section_margin": 0.02, "max_words": 80,
                         "max_candidates": 5, "skip_statuses": None}

#: The word lists and patterns the gate reads (`Lexicon`; None: the built-in English ones), and the embedding model of
#: the cosines with its cache directory (None: the configured defaults; `"off"`: no cache, every sentence encoded).
SIGNAL_SETTINGS: dict[str, Any] = {"answer_types": None, "type_patterns": None, "question_words": None, "units": None,
                                   "stopwords": None, "abbreviations": None, "embedding_model": None, "cache_dir": None}

DEFAULT_LLM_PROMPT = (
    "Does the passage answer the question? Answer only yes or no.\n"
    "Question: {question}\n"
    "Passage: {passage}"
)

#: The optional LLM tier: `weight` of its verdict on the chosen passage (yes 1, no 0) in the evidence, and its `prompt`
#: (`{question}` and `{passage}` are replaced).
LLM_SETTINGS: dict[str, Any] = {"weight": 0.5, "prompt": DEFAULT_LLM_PROMPT}

#: Settings earlier gates took that this one does not, and why (a YAML setting them still loads, with a warning).
RETIRED_SETTINGS: dict[str, str] = {
    "model": "the logistic model of thirteen signals gave way to the evidence of `evidence` (cosine, coverage, "
             "heading)",
}


@dataclass
class Judgement:
    """What the gate decided of a question: its evidence, the record, the answerer's candidates, a rule's refusal."""

    score: float
    record: dict[str, Any]
    candidates: list[dict[str, Any]]
    refusal: str | None  # why a rule refuses the question (a name no passage names, a missing answer type), or None
    warnings: list[str]


def _check(gate: "AnswerabilityGate") -> None:
    if gate.on_unanswerable not in ("fallback", "partial"):
        raise ValueError(f"on_unanswerable must be 'fallback' or 'partial', got '{gate.on_unanswerable}'.")
    if gate.success_threshold is not None and gate.success_threshold < gate.threshold:
        raise ValueError("success_threshold must be at least threshold.")
    if not 0.0 <= gate.llm["weight"] <= 1.0:
        raise ValueError("llm.weight must be between 0 and 1.")
    if gate.rules["max_candidates"] < 1 or gate.evidence["passages"] < 1:
        raise ValueError("rules.max_candidates and evidence.passages must be at least 1.")


@component
class AnswerabilityGate(MovedSettings, ChatGeneratorSerialization):
    """
    Routes the state to `answerable` when the passages answer the question, else to `unanswerable`.

    See the module documentation. Every run appends `answerable_{s:.2f}` or `not_answerable_{s:.2f}` to the path and
    records `state["answerability"]`: the evidence, the passage chosen, its heading match, the shape of the answer
    (`unit` or `section`), the best unit with its cosine and coverage, and the question terms no passage contains
    (`missing_terms`).
    """

    moved_settings: ClassVar[dict[str, str]] = {
        **{name: f"rules.{name}" for name in RULES}, **{name: f"signals.{name}" for name in SIGNAL_SETTINGS},
        **{f"llm_{name}": f"llm.{name}" for name in LLM_SETTINGS}}
    retired_settings: ClassVar[dict[str, str]] = RETIRED_SETTINGS

    def __init__(
        self,
        *,
        threshold: float = 0.35,
        success_threshold: float | None = None,
        evidence: dict[str, Any] | None = None,
        on_unanswerable: str = "fallback",
        fallback_message: str = FALLBACK_MESSAGE,
        rules: dict[str, Any] | None = None,
        signals: dict[str, Any] | None = None,
        chat_generator: Any = None,
        llm: dict[str, Any] | None = None,
    ) -> None:
        """
        :param threshold: Least evidence of the chosen passage for the question to count as answered.
        :param success_threshold: Least evidence for status `success` (below it: `partial`); None: no such limit.
        :param evidence: How evidence is weighed and the passage chosen (`EVIDENCE` of the evidence module).
        :param on_unanswerable: `fallback` (the fallback message) or `partial` (answer anyway, with a warning).
        :param fallback_message: The answer when the question is not answered and `on_unanswerable` is `fallback`.
        :param rules: `require_entities`, `require_type`, `section_margin`, `max_words`, `max_candidates`,
            `skip_statuses` (see `RULES`).
        :param signals: The word lists and patterns, `embedding_model` and `cache_dir` (see `SIGNAL_SETTINGS`).
        :param chat_generator: Optional Haystack chat generator that rates the chosen passage; None: no LLM tier.
        :param llm: The LLM tier's `weight` and `prompt` (see `LLM_SETTINGS`).
        :raises ValueError: On an unknown setting or mode, or a value out of range.
        """
        self.threshold = threshold
        self.success_threshold = success_threshold
        self.evidence = setting_group("evidence", evidence, EVIDENCE)
        self.on_unanswerable = on_unanswerable
        self.fallback_message = fallback_message
        self.rules = setting_group("rules", rules, RULES)
        self.signals = setting_group("signals", signals, SIGNAL_SETTINGS)
        self.chat_generator = chat_generator
        self.llm = setting_group("llm", llm, LLM_SETTINGS)
        _check(self)
        self._lexicon = Lexicon(**{key: value for key, value in self.signals.items()
                                   if key not in ("embedding_model", "cache_dir")})
        self._backend: Any = None

    def warm_up(self) -> None:
        """Load the embedding model and warm up the optional chat generator."""
        if self._backend is None:
            from gatehouse.components.embedders.embedding import EmbeddingBackend

            self._backend = EmbeddingBackend.get(model=self.signals["embedding_model"],
                                                 cache_dir=self.signals["cache_dir"])
        if self.chat_generator is not None and hasattr(self.chat_generator, "warm_up"):
            self.chat_generator.warm_up()

    def _embed(self, texts: list[str]) -> Any:
        self.warm_up()
        return self._backend.embed(texts)

    def read(self, question: str, passages: list[Document], own_words: str | None = None) -> Reading:
        """
        The evidence of the first passages for a question (no LLM, no rule): see `evidence.weigh`.

        :param question: The question.
        :param passages: The passages, best first, each with `meta["source_id"]`.
        :param own_words: The user's own words of a follow-up made standalone (their terms are the ones covered).
        """
        return weigh(question, passages, lexicon=self._lexicon, embed=self._embed, settings=self.evidence,
                     own_words=own_words)

    def _llm_verdict(self, question: str, passage: Document) -> tuple[float | None, str | None]:
        prompt = self.llm["prompt"].replace("{question}", question).replace("{passage}", passage.content or "")
        try:
            reply = ask_chat_generator(self.chat_generator, prompt).strip().lower()
        except Exception as error:  # noqa: BLE001 - any generator failure leaves the evidence as read
            return None, f"answerability: LLM tier unavailable ({type(error).__name__}); the evidence as read used"
        if reply.startswith("yes"):
            return 1.0, None
        if reply.startswith("no"):
            return 0.0, None
        return None, "answerability: LLM tier reply was neither yes nor no; the evidence as read used"

    def judge(self, question: str, passages: list[Document], own_words: str | None = None) -> Judgement:
        """
        Everything the gate decides but the route: the evidence (with the LLM tier's verdict when configured), the
        answerer's candidates, the record, and a rule that refuses the question.

        :param question: The question.
        :param passages: The passages, best first, each with `meta["source_id"]`.
        :param own_words: The user's own words when `question` is a follow-up made standalone: the terms the
            passages must cover and the ones reported missing are theirs (see `evidence.weigh`).
        :returns: The judgement; `run` answers when `refusal` is None and `score` reaches `threshold`.
        """
        reading = self.read(question, passages, own_words) if question.strip() and passages else None
        answer_type = self._lexicon.expected_type(question)
        typed = self.rules["require_type"] and answer_type in TYPED_ANSWERS
        key = self._key(reading, answer_type if typed else None, question) if reading else None
        score = reading.evidence if reading else 0.0
        warnings: list[str] = []
        if key is not None and self.chat_generator is not None:
            verdict, warning = self._llm_verdict(question, passages[key.unit.passage])
            warnings += [warning] if warning else []
            if verdict is not None:
                score = (1.0 - self.llm["weight"]) * score + self.llm["weight"] * verdict
        absent = self._lexicon.missing_entities(question, passages) if self.rules["require_entities"] else []
        found = set().union(*({stem(w) for w in tokens(f"{p.meta.get('title') or ''} {p.meta.get('section') or ''} "
                                                      f"{p.content or ''}")} for p in passages)) if passages else set()
        missing = [t for t in (reading.question_terms if reading else self._lexicon.question_terms(question))
                   if t not in found]
        refusal = ("no passage answers the question" if key is None
                   else f"no passage names {', '.join(absent)}" if absent
                   else f"nothing the answer would show gives a {answer_type}"
                   if typed and not self._shows(answer_type, reading, key, question) else None)
        # units too close to tell, or too weak, in a passage strong by its heading or its evidence: its section answers
        section = key is not None and key is reading.key and (
            self._uncertain(reading) or key.score < self.threshold) and (
            score >= (self.threshold if self.success_threshold is None else self.success_threshold))
        record = {
            "score": round(score, 4),
            "threshold": self.threshold,
            "success_threshold": self.success_threshold,
            "passage": None if key is None else str(passages[key.unit.passage].meta.get("source_id")),
            "heading": None if key is None else round(reading.headings[key.unit.passage], 4),
            "shape": "section" if section else "unit",
            "missing_terms": missing,
            "missing_entities": absent,
            "best": None if key is None else {
                "source_id": str(passages[key.unit.passage].meta.get("source_id")),
                "kind": key.unit.kind, "text": key.unit.text,
                "cosine": round(key.cosine, 4), "coverage": round(key.coverage, 4),
            },
        }
        candidates = self._candidates(reading, key, passages, answer_type, question, section) \
            if key is not None else []
        return Judgement(score=score, record=record, candidates=candidates, refusal=refusal, warnings=warnings)

    # -- run -----------------------------------------------------------------------------------------------------
    @component.output_types(answerable=State, unanswerable=State)
    def run(self, state: State) -> dict[str, dict[str, Any]]:
        """
        Judge whether the passages answer the question and route the state.

        :param state: The request state; reads `passages`, `condensed_query` / `original_query` / `query` and
            `status`.
        :returns: Exactly one of:
            - `answerable`: the state with `answerability` and `answer_candidates` (best first).
            - `unanswerable`: the state with the fallback `answer`, status `fallback` and no citations (the passages
              judged stay in `passages`).
        """
        started = time.perf_counter()
        skip = ["fallback"] if self.rules["skip_statuses"] is None else self.rules["skip_statuses"]
        passages = list(state.get("passages") or [])
        if state.get("status") in skip:
            return {"answerable": advance(state, stage="answerability", started=started)}
        question = str(state.get("condensed_query") or state.get("original_query") or state.get("query") or "")
        judged = self.judge(question, passages)
        answered = judged.refusal is None and judged.score >= self.threshold
        own = None if state.get("plan") else state.get("original_query")  # a plan's part is its own question
        leaned = None
        if not answered and own and not same_words(own, question):
            # A follow-up made standalone and refused: the condenser's topic ("Regarding X,") found the passages but
            # is no term the answer must state. Read on the user's own words, it may answer, never with `success`.
            mine = self.judge(question, passages, own)
            if mine.refusal is None and mine.score >= self.threshold:
                judged, answered, leaned = mine, True, judged.score
        score = judged.score
        step = f"{'answerable' if answered else 'not_answerable'}_{score:.2f}"
        base = with_validation(state, "confidence_warnings", *judged.warnings) if judged.warnings else state
        if answered:
            new = advance(base, stage="answerability", started=started, steps=[step], answerability=judged.record,
                          answer_candidates=judged.candidates)
            if leaned is not None:
                new = with_validation({**new, "status": "partial"}, "confidence_warnings",
                                      f"answerability: answered on the follow-up's own words (evidence {score:.2f}; "
                                      f"the standalone question's {leaned:.2f} < {self.threshold:.2f})")
            elif self.success_threshold is not None and score < self.success_threshold:
                new = with_validation({**new, "status": "partial"}, "confidence_warnings",
                                      f"answerability: the passage may not answer the question (evidence "
                                      f"{score:.2f} < {self.success_threshold:.2f})")
            return {"answerable": new}
        missing = judged.record["missing_terms"]
        reason = ("answerability: no passage answers the question"
                  + (f" (not found: {', '.join(missing)})" if missing else "")
                  + f"; {judged.refusal or f'evidence {score:.2f} < {self.threshold:.2f}'}")
        if self.on_unanswerable == "partial" and judged.candidates:
            new = advance(base, stage="answerability", started=started, steps=[step], answerability=judged.record,
                          answer_candidates=judged.candidates, status="partial")
            return {"answerable": with_validation(new, "confidence_warnings", reason)}
        new = advance(base, stage="answerability", started=started, steps=[step, "fallback"],
                      answerability=judged.record, answer=self.fallback_message, status="fallback", fallback=True,
                      fallback_reason="not_answerable", citations=[])
        return {"unanswerable": with_validation(new, "confidence_warnings", reason)}

    def _key(self, reading: Reading, answer_type: str | None, question: str) -> Any:
        """The chosen passage's best unit; for a question expecting a type of answer, its best unit whose answer shows
        one (the passage's best when none does)."""
        if answer_type is None:
            return reading.key
        return next((u for u in reading.of_passage(reading.chosen) if self._shows(answer_type, reading, u, question)),
                    reading.key)

    def _shows(self, answer_type: str, reading: Reading, key: Any, question: str) -> bool:
        """Whether what the answer shows for the key unit (the unit and what completes it) holds `answer_type`."""
        terms = set(self._lexicon.question_terms(question))
        shown = completed(key.unit, [u.unit for u in reading.units], max_words=self.rules["max_words"])
        return any(self._lexicon.has_type(answer_type, unit.text, terms, unit.kind) for unit in shown)

    def _uncertain(self, reading: Reading) -> bool:
        """Whether the chosen passage's two best units, apart in it, score too close to tell which answers."""
        units = reading.of_passage(reading.chosen)
        if len(units) < 2:
            return False
        best = units[0]
        shown = completed(best.unit, [u.unit for u in reading.units], max_words=self.rules["max_words"])
        runner = next((u for u in units[1:] if not any(s.first <= u.unit.first <= s.last or u.unit.first <= s.first
                                                       <= u.unit.last for s in shown)), None)
        return runner is not None and best.score - runner.score < self.rules["section_margin"]

    def _candidates(self, reading: Reading, key: Any, passages: list[Document], answer_type: str | None,
                    question: str, section: bool) -> list[dict[str, Any]]:
        """The answerer's candidates: the key unit (or the chosen passage's section) first, then the best others."""
        terms = set(self._lexicon.question_terms(question))
        ranked = [key] + [u for u in reading.units if u is not key]

        def entry(unit: Any, kind: str | None = None) -> dict[str, Any]:
            passage = unit.unit.passage
            return {"source_id": str(passages[passage].meta.get("source_id") or f"S{passage + 1}"),
                    "passage": passage, "kind": kind or unit.unit.kind, "first": unit.unit.first,
                    "last": unit.unit.last, "text": unit.unit.text, "score": round(unit.score, 4),
                    "span": self._lexicon.answer_span(answer_type, unit.unit.text, terms)}

        head = [{**entry(key, "section"), "first": 0, "text": passages[key.unit.passage].content or "",
                 "span": None}] if section else []
        return head + [entry(unit) for unit in ranked[: self.rules["max_candidates"]]]
