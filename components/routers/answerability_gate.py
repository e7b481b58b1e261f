"""
The answerability gate: does some passage *answer* the question, rather than only share its topic?

It runs after the passages are assembled. Every answer unit of every passage (`gatehouse.components.answer_units`: a
sentence, a list item with its lead-in, a list, a setting's key-value block, a code block with its lead-in, a short
section) is a candidate answer and gets signals that compare it with the question as an answer, not as a topic
(`gatehouse.components.routers.answerability_signals`: the coverage of the question's rare terms, a name or number
or an expected answer type that is missing, negation and antonym clashes, embedding similarity, ...).

A question that states a name or number no passage contains at all is not answered, whatever the score
(`rules.require_entities`); with `rules.require_type`, the units of the expected type rank first, and a typed question
no unit answers in its type is not answered either.

A logistic model (`gatehouse.components.routers.answerability_model`) turns the signals into a score in 0..1 (`model`:
its `bias` and `weights`, fitted by `gatehouse bench answerability --fit` on data that is not the report data). The best
candidate decides: at or above `threshold` the state goes on `answerable`, with the ranked candidates in
`state["answer_candidates"]` for the answerer (status `partial` with a warning below `success_threshold`); below it
the state goes on `unanswerable` with the fallback message and the reason (which terms were not found), or, with
`on_unanswerable: partial`, on `answerable` with status `partial` and that reason as a warning. An optional LLM tier
rates the best candidates and is blended in with `llm.weight`.

Usage:
```python
from haystack import Document
from gatehouse.components.routers.answerability_gate import AnswerabilityGate
from gatehouse.components.state import new_state

gate = AnswerabilityGate(threshold=0.5)
passage = Document(content="API keys expire after 90 days. Rotate them in Settings.", meta={"source_id": "S1"})
out = gate.run(state=new_state("When do API keys expire?", passages=[passage]))
list(out)                                   # ["answerable"]
out["answerable"]["answer_candidates"][0]   # {"source_id": "S1", "kind": "sentence", "text": "API keys expire ...", ...}
gate.run(state=new_state("How much does the Platinum plan cost?", passages=[passage]))  # -> "unanswerable"
```
"""

import time
from typing import Any

from haystack import Document, component

from gatehouse.components.chat import ChatGeneratorSerialization, ask_chat_generator
from gatehouse.components.routers.answerability_lexicon import TYPED_ANSWERS, Lexicon
from gatehouse.components.routers.answerability_model import DEFAULT_THRESHOLD, logistic_score
from gatehouse.components.routers.answerability_settings import (
    LEXICON_SETTINGS,
    LLM_SETTINGS,
    MODEL,
    MOVED_SETTINGS,
    RULES,
    SIGNAL_SETTINGS,
    check_settings,
)
from gatehouse.components.routers.answerability_signals import Candidate, answer_candidates
from gatehouse.components.setting_groups import MovedSettings, setting_group
from gatehouse.components.state import FALLBACK_MESSAGE, State, advance, with_validation
from gatehouse.components.terms import stem, tokens


@component
class AnswerabilityGate(MovedSettings, ChatGeneratorSerialization):
    """
    Routes the state to `answerable` when some passage sentence answers the question, else to `unanswerable`.

    See the module documentation. Every run appends `answerable_{s:.2f}` or `not_answerable_{s:.2f}` to the path and
    records `state["answerability"]`: the score, the best candidate and its signals, and the question terms no
    passage contains (`missing_terms`).
    """

    moved_settings = MOVED_SETTINGS

    def __init__(
        self,
        *,
        threshold: float = DEFAULT_THRESHOLD,
        success_threshold: float | None = None,
        model: dict[str, Any] | None = None,
        on_unanswerable: str = "fallback",
        fallback_message: str = FALLBACK_MESSAGE,
        rules: dict[str, Any] | None = None,
        signals: dict[str, Any] | None = None,
        chat_generator: Any = None,
        llm: dict[str, Any] | None = None,
    ) -> None:
        """
        :param threshold: Lowest score (0..1) of the best candidate for the question to count as answered.
        :param success_threshold: Lowest best score for status `success` (below it: `partial`); None: no such limit.
        :param model: The logistic model's signal `weights` and `bias` (see `MODEL`).
        :param on_unanswerable: `fallback` (the fallback message) or `partial` (answer anyway, with a warning).
        :param fallback_message: The answer when the question is not answered and `on_unanswerable` is `fallback`.
        :param rules: `require_entities`, `require_type`, `max_candidates`, `skip_statuses` (see `RULES`).
        :param signals: The signals' word lists and patterns, `embedding_model` and `cache_dir` (`SIGNAL_SETTINGS`).
        :param chat_generator: Optional Haystack chat generator that rates the best candidates; None: no LLM tier.
        :param llm: The LLM tier's `weight`, `prompt` and `candidates` (see `LLM_SETTINGS`).
        :raises ValueError: On an unknown signal, setting or mode, or a value out of range.
        """
        self.threshold = threshold
        self.success_threshold = success_threshold
        self.model = setting_group("model", model, MODEL)
        self.on_unanswerable = on_unanswerable
        self.fallback_message = fallback_message
        self.rules = setting_group("rules", rules, RULES)
        self.signals = setting_group("signals", signals, SIGNAL_SETTINGS)
        self.chat_generator = chat_generator
        self.llm = setting_group("llm", llm, LLM_SETTINGS)
        check_settings(self)
        self._lexicon = Lexicon(**{key: self.signals[key] for key in LEXICON_SETTINGS})
        self._backend: Any = None

    def warm_up(self) -> None:
        """Load the embedding model and warm up the optional chat generator."""
        if self._backend is None:
            from gatehouse.components.embedders.embedding import EmbeddingBackend

            self._backend = EmbeddingBackend.get(model=self.signals["embedding_model"],
                                                 cache_dir=self.signals["cache_dir"])
        if self.chat_generator is not None and hasattr(self.chat_generator, "warm_up"):
            self.chat_generator.warm_up()

    def expected_type(self, question: str) -> str | None:
        """The answer type a question expects (`date`, `number`, `name`, ...), or None (`Lexicon.expected_type`)."""
        return self._lexicon.expected_type(question)

    def question_terms(self, question: str) -> list[str]:
        """The question's content terms, distinct stems in order (`Lexicon.question_terms`)."""
        return self._lexicon.question_terms(question)

    def missing_entities(self, question: str, passages: list[Document]) -> list[str]:
        """The names and numbers the question states that no passage contains, sorted (`Lexicon.missing_entities`)."""
        return self._lexicon.missing_entities(question, passages)

    def answer_span(self, answer_type: str | None, text: str, question_terms: set[str]) -> str | None:
        """The shortest phrase of `text` that is an answer of `answer_type`, or None (`Lexicon.answer_span`)."""
        return self._lexicon.answer_span(answer_type, text, question_terms)

    def candidates(self, question: str, passages: list[Document]) -> list[Candidate]:
        """
        Every answer unit of the passages with its signals and score, best first (no LLM).

        :param question: The question.
        :param passages: The passages, each with `meta["source_id"]`.
        :returns: The scored candidates.
        """
        return answer_candidates(question, passages, lexicon=self._lexicon, embed=self._embed, score=self.score)

    def _embed(self, texts: list[str]) -> Any:
        self.warm_up()
        return self._backend.embed(texts)

    def score(self, signals: dict[str, float]) -> float:
        """
        The logistic model's score of one candidate's signals.

        :param signals: Signal values by name.
        :returns: A score in 0..1.
        """
        return logistic_score(signals, self.model["weights"], self.model["bias"])

    def _llm_verdict(self, question: str, passage: Document) -> tuple[float | None, str | None]:
        prompt = self.llm["prompt"].replace("{question}", question).replace("{passage}", passage.content or "")
        try:
            reply = ask_chat_generator(self.chat_generator, prompt).strip().lower()
        except Exception as error:  # noqa: BLE001 - any generator failure leaves the heuristic score
            return None, f"answerability: LLM tier unavailable ({type(error).__name__}); heuristic score used"
        if reply.startswith("yes"):
            return 1.0, None
        if reply.startswith("no"):
            return 0.0, None
        return None, "answerability: LLM tier reply was neither yes nor no; heuristic score used"

    # -- run -----------------------------------------------------------------------------------------------------
    @component.output_types(answerable=State, unanswerable=State)
    def run(self, state: State) -> dict[str, dict[str, Any]]:
        """
        Judge whether the passages answer the question and route the state.

        :param state: The request state; reads `passages`, `condensed_query` / `original_query` / `query` and
            `status`.
        :returns: Exactly one of:
            - `answerable`: the state with `answerability` and `answer_candidates` (ranked, best first).
            - `unanswerable`: the state with the fallback `answer`, status `fallback` and no citations (the passages
              judged stay in `passages`).
        """
        started = time.perf_counter()
        skip = ["fallback"] if self.rules["skip_statuses"] is None else self.rules["skip_statuses"]
        passages = list(state.get("passages") or [])
        if state.get("status") in skip:
            return {"answerable": advance(state, stage="answerability", started=started)}
        question = str(state.get("condensed_query") or state.get("original_query") or state.get("query") or "")

        ranked = self.candidates(question, passages) if question.strip() else []
        warnings: list[str] = []
        best_score = ranked[0].score if ranked else 0.0
        if ranked and self.chat_generator is not None:
            rated = []
            for candidate in ranked[: self.llm["candidates"]]:
                verdict, warning = self._llm_verdict(question, passages[candidate.passage])
                if warning:
                    warnings.append(warning)
                if verdict is not None:
                    candidate.score = (1.0 - self.llm["weight"]) * candidate.score + self.llm["weight"] * verdict
                    rated.append(candidate)
            # Once the LLM has rated candidates, only those are ranked: a candidate it rated "no" must not be replaced
            # by one it never read. When every call failed, the heuristic ranking stands.
            ranked = sorted(rated or ranked, key=lambda c: (-c.score, c.unit.key))
            best_score = ranked[0].score

        untyped = False
        answer_type = self.expected_type(question)
        if self.rules["require_type"] and answer_type in TYPED_ANSWERS and ranked:
            typed = [c for c in ranked if not c.signals.get("type_missing")]
            untyped = not typed  # "how many ..." that no unit answers with a number
            ranked = typed + [c for c in ranked if c.signals.get("type_missing")]
            best_score = ranked[0].score
        absent = self.missing_entities(question, passages) if self.rules["require_entities"] else []
        all_terms = set().union(*({stem(w) for w in tokens(p.content or "")} for p in passages)) if passages else set()
        question_terms = self.question_terms(question)
        missing = [t for t in question_terms if t not in all_terms]
        record = {
            "score": round(best_score, 4),
            "threshold": self.threshold,
            "missing_terms": missing,
            "missing_entities": absent,
            "best": None if not ranked else {
                "source_id": ranked[0].source_id,
                "kind": ranked[0].unit.kind,
                "text": ranked[0].unit.text,
                "signals": {k: round(v, 4) for k, v in ranked[0].signals.items()},
            },
        }
        term_set = set(question_terms)
        candidates = [
            {"source_id": c.source_id, "passage": c.passage, "kind": c.unit.kind, "first": c.unit.first,
             "last": c.unit.last, "text": c.unit.text, "score": round(c.score, 4),
             "span": self.answer_span(answer_type, c.unit.text, term_set)}
            for c in ranked[: self.rules["max_candidates"]]
        ]
        answered = bool(ranked) and best_score >= self.threshold and not absent and not untyped
        step = f"{'answerable' if answered else 'not_answerable'}_{best_score:.2f}"
        base = with_validation(state, "confidence_warnings", *warnings) if warnings else state
        if answered:
            new = advance(base, stage="answerability", started=started, steps=[step], answerability=record,
                          answer_candidates=candidates)
            if self.success_threshold is not None and best_score < self.success_threshold:
                new = with_validation({**new, "status": "partial"}, "confidence_warnings",
                                      f"answerability: the best passage may not answer the question (score "
                                      f"{best_score:.2f} < {self.success_threshold:.2f})")
            return {"answerable": new}

        reason = "answerability: no passage answers the question" + (
            f" (not found: {', '.join(missing)})" if missing else ""
        ) + (f"; no passage names {', '.join(absent)}" if absent else
             f"; no passage gives a {answer_type}" if untyped else
             f"; best score {best_score:.2f} < {self.threshold:.2f}")
        if self.on_unanswerable == "partial" and ranked:
            new = advance(base, stage="answerability", started=started, steps=[step], answerability=record,
                          answer_candidates=candidates, status="partial")
            return {"answerable": with_validation(new, "confidence_warnings", reason)}
        new = advance(
            base,
            stage="answerability",
            started=started,
            steps=[step, "fallback"],
            answerability=record,
            answer=self.fallback_message,
            status="fallback",
            fallback=True,
            fallback_reason="not_answerable",
            citations=[],
        )
        return {"unanswerable": with_validation(new, "confidence_warnings", reason)}
