"""
The answerability gate: does some passage *answer* the question, rather than only share its topic?

It runs after the passages are assembled. Every answer unit of every passage (`gatehouse.components.answer_units`: a
sentence, a list item with its lead-in, a list, a setting's key-value block, a code block with its lead-in, a short
section) is a candidate answer and gets signals that compare it with the question as an answer, not as a topic:

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

A question that states a name or number no passage contains at all is not answered, whatever the score
(`require_entities`); with `require_type`, the units of the expected type rank first, and a typed question no unit
answers in its type is not answered either.

A logistic model turns the signals into a score in 0..1 (`bias` + `weights`, fitted by `gatehouse bench
answerability --fit` on data that is not the report data). The best candidate decides: at or above `threshold` the
state goes on `answerable`, with the ranked candidates in `state["answer_candidates"]` for the answerer (status
`partial` with a warning below `success_threshold`); below it the state goes on `unanswerable` with the fallback
message and the reason (which terms were not found), or, with `on_unanswerable: partial`, on `answerable` with
status `partial` and that reason as a warning. An optional LLM tier rates the best candidates and is blended in with
`llm_weight`.

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

import math
import re
import time
from dataclasses import dataclass
from typing import Any

from haystack import Document, component

from gatehouse.components.answer_units import PROCEDURE_QUESTION, AnswerUnit, answer_units
from gatehouse.components.chat import ChatGeneratorSerialization, ask_chat_generator
from gatehouse.components.state import FALLBACK_MESSAGE, State, advance, with_validation
from gatehouse.components.text import (
    DEFAULT_ABBREVIATIONS,
    DEFAULT_STOPWORDS,
    numbers,
    stem,
    strip_list_marker,
    tokens,
)


#: Question patterns (regular expressions, matched case-insensitively, first match wins) and the answer type
#: each one expects. A question matching none expects no particular type.
DEFAULT_ANSWER_TYPES: list[list[str]] = [
    [r"^\W*(?:please\s+|can you\s+|could you\s+)?(?:write|show|give|generate|create|provide)\b.*"
     r"\b(?:code|example|snippet|function|script|config(?:uration)?|command)s?\b", "code"],
    [r"\b(?:code|snippet|example) (?:for|of|that|to|showing)\b", "code"],
    [r"\b(what|which|in what|by what)\s+(year|years|decade|century|date|day|month|time period|era|period)\b", "date"],
    [r"^\s*(and\s+)?when\b|\bwhen (did|does|do|was|were|is|are|will|can|could|should|has|have|had)\b", "date"],
    [r"\bhow (many|much|long|old|often|far|large|big|high|tall|fast|frequently)\b", "number"],
    [r"\b(what|which)(?:'s|\s+is|\s+are)?(?:\s+the)?\s+(?:\w+\s+)?(percentage|percent|proportion|share|number|"
     r"amount|price|cost|fee|rate|size|limit|maximum|minimum|max|min)\b|\b(?:number|amount|count|percentage) of\b|"
     r"\bat (?:most|least)\b", "number"],
    [r"\bdefaults?\b|\b(?:what|which)(?:'s|\s+is|\s+are)?(?:\s+the)?\s+(?:\w+\s+)?(?:port|version|timeout|value|"
     r"interval|setting)s?\b", "value"],
    [r"\b(?:what|which)\s+(?:\w+\s+){0,2}?(?:function|method|class|exception|option|flag|parameter|argument|"
     r"setting|variable|header|command|property|attribute|field|key|label|endpoint|module|package|file|directory|"
     r"format|channel|tool)s?\b|\bwhat(?:'s| is) (?:it|this|that|the \w+) called\b|\bname of\b", "identifier"],
    [r"\bwho(m|se)?\b", "name"],
    [r"\bwhere\b", "place"],
]

#: What counts as an answer of each type in a sentence (regular expressions). A `name` is also any capitalised word
#: that is not the sentence's first word.
DEFAULT_TYPE_PATTERNS: dict[str, str] = {
    "date": r"\b(1\d{3}|20\d{2})s?\b|\b(january|february|march|april|june|july|august|september|october|"
    r"november|december|yesterday|today|monday|tuesday|wednesday|thursday|friday|saturday|sunday|annually|daily|"
    r"weekly|monthly)\b|\bmay\s+\d|\d\s*(?:st|nd|rd|th)?\s*(?:century|centuries|decades?|hours?|days?|weeks?|months?|"
    r"years?|minutes?|seconds?)\b|\b(?:every|each|per|a)\s+(?:hour|day|week|month|year|minute|second)\b",
    "number": r"\d|\b(one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|(?:thir|four|fif|six|seven|eigh|"
    r"nine)teen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred|hundreds|thousand|thousands|million|millions|billion|billions|dozen|half|once|twice|several|"
    r"free|unlimited|none)\b|[$€£%]",
    "value": r"\d|`[^`]+`|\b(true|false|none|null|enabled|disabled|unlimited)\b",
    "place": r"`[^`]+`|\S+@\S+\.\w+|https?://\S+|\]\([^)]+\)|(?<!\w)/[\w./-]+|\b[\w-]+\.(?:md|html|ya?ml|toml|json|"
             r"cfg|ini|txt)\b|(?<!^)(?<![.!?]\s)\b[A-Z][\w'-]*",
    "identifier": r"`[^`]+`|\b[A-Za-z_][\w]*(?:[._/][\w]+)+\b|\b[a-z]+[A-Z]\w*|\b[A-Z][a-z]+[A-Z]\w*|(?<!\w)--?[a-z][\w-]+"
                  r"|\b[A-Z][A-Z0-9_]{2,}\b",
}

#: Answer types a unit can be checked for (a number, a date, a literal value, an identifier, a place, a name).
TYPED_ANSWERS = frozenset(["number", "date", "value", "identifier", "place", "name"])

#: Words that may follow a number or date in an answer span ("90 days", "$49 per user").
DEFAULT_UNITS: list[str] = ["per", "percent", "%", "days", "day", "hours", "hour", "minutes", "minute", "seconds",
                            "weeks", "week", "months", "month", "years", "year", "century", "bc", "ad", "gb", "mb",
                            "tb", "kb", "users", "user", "seats", "requests", "tokens", "dollars", "euros", "people",
                            "km", "miles", "metres", "meters", "feet", "kg", "tons", "tonnes"]  # fmt: skip

#: Words that negate a statement.
DEFAULT_NEGATIONS: list[str] = ["not", "no", "never", "none", "nor", "neither", "without", "cannot", "nothing", "nobody",
                                "n't", "unable", "lack", "lacks", "lacked", "fail", "fails", "failed"]  # fmt: skip

#: Pairs of opposites; either word of a pair in the question, with the other in the sentence instead, is an antonym.
DEFAULT_ANTONYMS: list[list[str]] = [
    ["born", "died"], ["birth", "death"], ["first", "last"], ["start", "end"], ["begin", "end"], ["began", "ended"],
    ["start", "finish"], ["largest", "smallest"], ["biggest", "smallest"], ["most", "least"], ["more", "less"],
    ["higher", "lower"], ["highest", "lowest"], ["increase", "decrease"], ["increased", "decreased"],
    ["before", "after"], ["earliest", "latest"], ["early", "late"], ["oldest", "newest"], ["older", "newer"],
    ["always", "never"], ["included", "excluded"], ["include", "exclude"], ["allow", "forbid"], ["allowed", "banned"],
    ["enable", "disable"], ["enabled", "disabled"], ["required", "optional"], ["minimum", "maximum"],
    ["min", "max"], ["win", "lose"], ["won", "lost"], ["victory", "defeat"], ["success", "failure"],
    ["accept", "reject"], ["accepted", "rejected"], ["north", "south"], ["east", "west"], ["import", "export"],
    ["public", "private"], ["free", "paid"], ["upper", "lower"], ["inside", "outside"], ["major", "minor"],
    ["strongest", "weakest"], ["fastest", "slowest"], ["longest", "shortest"], ["best", "worst"],
]  # fmt: skip

#: Question words that say what kind of answer is wanted, not what it is about; they are not content terms.
DEFAULT_QUESTION_WORDS: list[str] = [
    "year", "years", "many", "much", "long", "often", "name", "named", "called", "kind", "type", "sort", "number",
    "percentage", "percent", "amount", "date", "day", "time", "happen", "happened", "happens", "occur", "occurred",
    "take", "took", "place", "one", "two", "main", "example", "something", "someone", "thing", "things", "way",
    "mean", "means", "term", "describe", "described", "refer", "refers", "referred", "known", "considered",
]  # fmt: skip

#: Signal weights, bias and threshold of the logistic model, fitted by `gatehouse bench answerability --fit` on SQuAD
#: 2.0's tune articles (never the report articles). SQuAD paragraphs have no section headings, so `heading_coverage`
#: cannot be fitted there: its weight is set by hand for structured documentation.
DEFAULT_WEIGHTS: dict[str, float] = {
    "coverage": 2.446,
    "window_coverage": 1.728,
    "passage_coverage": -0.866,
    "heading_coverage": 2.0,
    "missing_entity": -0.121,
    "type_missing": -1.555,
    "negation_mismatch": 0.08,
    "antonym": -1.121,
    "cosine": 3.318,
    "novelty": 0.682,
    "bigram_coverage": 0.832,
    "passage_score": 3.869,
    "kind_fit": 1.5,
}
DEFAULT_BIAS = -9.908
DEFAULT_THRESHOLD = 0.066
SIGNALS = tuple(DEFAULT_WEIGHTS)

DEFAULT_LLM_PROMPT = (
    "Does the passage answer the question? Answer only yes or no.\n"
    "Question: {question}\n"
    "Passage: {passage}"
)

_CAPITALISED = re.compile(r"(?<![.!?:]\s)(?<!^)\b([A-Z][\w'’-]*)")


@dataclass
class _Candidate:
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


@component
class AnswerabilityGate(ChatGeneratorSerialization):
    """
    Routes the state to `answerable` when some passage sentence answers the question, else to `unanswerable`.

    See the module documentation for the signals. Every run appends `answerable_{s:.2f}` or
    `not_answerable_{s:.2f}` to the path and records `state["answerability"]`: the score, the best candidate and
    its signals, and the question terms no passage contains (`missing_terms`).
    """

    def __init__(  # noqa: PLR0913
        self,
        *,
        threshold: float = DEFAULT_THRESHOLD,
        weights: dict[str, float] | None = None,
        bias: float = DEFAULT_BIAS,
        require_entities: bool = True,
        on_unanswerable: str = "fallback",
        fallback_message: str = FALLBACK_MESSAGE,
        max_candidates: int = 5,
        answer_types: list[list[str]] | None = None,
        type_patterns: dict[str, str] | None = None,
        negations: list[str] | None = None,
        antonyms: list[list[str]] | None = None,
        question_words: list[str] | None = None,
        units: list[str] | None = None,
        stopwords: list[str] | None = None,
        abbreviations: list[str] | None = None,
        skip_statuses: list[str] | None = None,
        embedding_model: str | None = None,
        cache_dir: str | None = None,
        chat_generator: Any = None,
        llm_weight: float = 0.5,
        llm_prompt: str = DEFAULT_LLM_PROMPT,
        llm_candidates: int = 1,
        success_threshold: float | None = None,
        require_type: bool = True,
    ) -> None:
        """
        Create the gate.

        :param threshold: Lowest score (0..1) of the best candidate for the question to count as answered.
        :param weights: Weight of each signal in the logistic model; None uses the built-in fit. Unknown signal names
            are an error; signals left out weigh 0.
        :param bias: The logistic model's intercept.
        :param require_entities: Judge the question unanswered when a name or number it states (a capitalised word
            after its first word, a number) is in none of the passages.
        :param on_unanswerable: `fallback` (the fallback message, status `fallback`) or `partial` (let the generator
            answer, status `partial`, with a warning naming what was not found).
        :param fallback_message: The answer when the question is not answered and `on_unanswerable` is `fallback`.
        :param max_candidates: How many ranked candidates go to the answerer in `state["answer_candidates"]`.
        :param answer_types: `[pattern, type]` pairs: a question matching `pattern` expects an answer of `type`;
            None uses the built-in English list.
        :param type_patterns: For each type, a regex an answer of that type matches; None uses the built-in list.
        :param negations: Words that negate a statement; None uses the built-in list.
        :param antonyms: Pairs of opposite words; None uses the built-in list.
        :param question_words: Words that say what kind of answer is wanted (not content terms); None uses the
            built-in list.
        :param units: Words that may follow a number or date in an answer span; None uses the built-in list.
        :param stopwords: Function words that are not content terms; None uses the built-in English list.
        :param abbreviations: Words whose trailing period does not end a sentence; None uses the built-in list.
        :param skip_statuses: Statuses passed on `answerable` untouched (nothing to judge); None means `["fallback"]`.
        :param embedding_model: Embedding model; None uses the configured default.
        :param cache_dir: Embedding cache directory; None uses the configured default, `"off"` disables it.
        :param chat_generator: Optional Haystack chat generator asked whether the best candidates' passages answer
            the question; None (default) disables the LLM tier.
        :param llm_weight: Share of the LLM's verdict (yes 1, no 0) in the best candidate's score.
        :param llm_prompt: The LLM tier's prompt; `{question}` and `{passage}` are replaced.
        :param llm_candidates: How many of the best candidates the LLM rates; once it has rated any, only those are
            ranked, so a "no" on all of them can refuse the question.
        :param success_threshold: Lowest score of the best candidate for an answer to be a `success`: between
            `threshold` and this the question is answered with status `partial` and a warning that the passages may
            not answer it. None: every answered question may be a success.
        :param require_type: When the question asks for a number, date, value, identifier, place or name, the units
            that hold one rank first, and with none the question is not answered.
        :raises ValueError: On an unknown signal, mode, or a value out of range.
        """
        unknown = set(weights or {}) - set(SIGNALS)
        if unknown:
            raise ValueError(f"Unknown answerability signals {sorted(unknown)}; use {', '.join(SIGNALS)}.")
        if on_unanswerable not in ("fallback", "partial"):
            raise ValueError(f"on_unanswerable must be 'fallback' or 'partial', got '{on_unanswerable}'.")
        if not 0.0 <= threshold <= 1.0:
            raise ValueError("threshold must be between 0 and 1.")
        if success_threshold is not None and not threshold <= success_threshold <= 1.0:
            raise ValueError("success_threshold must be between threshold and 1.")
        if not 0.0 <= llm_weight <= 1.0:
            raise ValueError("llm_weight must be between 0 and 1.")
        if max_candidates < 1 or llm_candidates < 1:
            raise ValueError("max_candidates and llm_candidates must be at least 1.")
        self.threshold = threshold
        self.weights = weights
        self.bias = bias
        self.require_entities = require_entities
        self.on_unanswerable = on_unanswerable
        self.fallback_message = fallback_message
        self.max_candidates = max_candidates
        self.answer_types = answer_types
        self.type_patterns = type_patterns
        self.negations = negations
        self.antonyms = antonyms
        self.question_words = question_words
        self.units = units
        self.stopwords = stopwords
        self.abbreviations = abbreviations
        self.skip_statuses = skip_statuses
        self.embedding_model = embedding_model
        self.cache_dir = cache_dir
        self.chat_generator = chat_generator
        self.llm_weight = llm_weight
        self.llm_prompt = llm_prompt
        self.llm_candidates = llm_candidates
        self.success_threshold = success_threshold
        self.require_type = require_type

        self._weights = {name: float((DEFAULT_WEIGHTS if weights is None else weights).get(name, 0.0))
                         for name in SIGNALS}
        self._answer_types = [(re.compile(p, re.IGNORECASE), t) for p, t in (answer_types or DEFAULT_ANSWER_TYPES)]
        patterns = DEFAULT_TYPE_PATTERNS if type_patterns is None else type_patterns
        self._type_patterns = {t: re.compile(p, re.IGNORECASE) for t, p in patterns.items()}
        self._negations = frozenset(w.lower() for w in (DEFAULT_NEGATIONS if negations is None else negations))
        opposites: dict[str, set[str]] = {}
        for pair in DEFAULT_ANTONYMS if antonyms is None else antonyms:
            if len(pair) != 2:
                raise ValueError(f"Each antonym entry must be a pair of words, got {pair!r}.")
            a, b = (w.lower() for w in pair)
            opposites.setdefault(a, set()).add(b)
            opposites.setdefault(b, set()).add(a)
        self._opposites = opposites
        self._stop = frozenset(w.lower() for w in (DEFAULT_STOPWORDS if stopwords is None else stopwords))
        self._question_words = frozenset(
            w.lower() for w in (DEFAULT_QUESTION_WORDS if question_words is None else question_words)
        )
        self._units = frozenset(w.lower() for w in (DEFAULT_UNITS if units is None else units))
        self._backend: Any = None

    def warm_up(self) -> None:
        """Load the embedding model and warm up the optional chat generator."""
        if self._backend is None:
            from gatehouse.components.embedders.embedding import EmbeddingBackend

            self._backend = EmbeddingBackend.get(model=self.embedding_model, cache_dir=self.cache_dir)
        if self.chat_generator is not None and hasattr(self.chat_generator, "warm_up"):
            self.chat_generator.warm_up()

    # -- signals -------------------------------------------------------------------------------------------------
    def expected_type(self, question: str) -> str | None:
        """
        The answer type a question expects (`date`, `number`, `name`, ...), or None.

        :param question: The question.
        :returns: The type of the first matching `answer_types` pattern.
        """
        for pattern, answer_type in self._answer_types:
            if pattern.search(question):
                return answer_type
        return None

    def question_terms(self, question: str) -> list[str]:
        """
        The question's content terms: stemmed words that are neither function words nor question-form words.

        :param question: The question.
        :returns: The distinct stems in order.
        """
        words = [w for w in tokens(question) if w not in self._stop and w not in self._question_words]
        return list(dict.fromkeys(stem(w) for w in words if len(w) > 1 or w.isdigit()))

    def missing_entities(self, question: str, passages: list[Document]) -> list[str]:
        """
        The names and numbers the question states that no passage contains (title and section included).

        :param question: The question.
        :param passages: The passages.
        :returns: The missing stems, sorted.
        """
        found: set[str] = set()
        for passage in passages:
            meta_text = " ".join(str((passage.meta or {}).get(k) or "") for k in ("title", "section"))
            text = meta_text + " " + (passage.content or "")
            found |= {stem(w) for w in tokens(text)} | numbers(text)
        return sorted(self._stated_entities(question) - found)

    def _stated_entities(self, question: str) -> set[str]:
        """
        Names and numbers the question states: capitalised words after a sentence's first word, and numbers.

        A contraction ("I'm", "Isn't") is no name; in a headline ("Investment Portfolio Setup for beginner": no
        question mark, most words capitalised) capitals say nothing, so only its numbers count.
        """
        words = [w for w in re.findall(r"[A-Za-z][\w'’-]*", question)[1:] if re.split(r"['’]", w)[0] != "I"]
        if "?" not in question and len(words) > 1 and sum(w[0].isupper() for w in words) > 0.5 * len(words):
            return numbers(question)
        found = set()
        for match in _CAPITALISED.finditer(question.strip()):
            word = re.split(r"['’]", match.group(1).lower())[0]
            for part in tokens(word):  # "ERR-3001" is stated as its parts, as passages are indexed
                if len(part) > 1 and part not in self._stop and part not in self._question_words:
                    found.add(stem(part))
        return found | numbers(question)

    def _has_type(self, answer_type: str, text: str, question_words: set[str], kind: str = "sentence") -> bool:
        """Whether `text` (a unit of `kind`), once the question's own words are removed, holds an `answer_type`."""
        if answer_type == "code":
            return kind == "code"
        if answer_type in ("value", "identifier", "place"):
            pattern = self._type_patterns.get(answer_type)
            return pattern is not None and any(
                not set(stem(w) for w in tokens(match.group(0))) <= question_words
                for match in pattern.finditer(text))
        rest = " ".join(
            w for w in re.findall(r"[\w$€£%'’-]+", text) if stem(w.lower().strip("'’-")) not in question_words
        )
        pattern = self._type_patterns.get(answer_type)
        if pattern is not None and pattern.search(rest):
            return True
        if answer_type == "name":
            words = rest.split()
            return any(w[:1].isupper() for w in words[1:]) or (
                bool(words) and words[0][:1].isupper() and not text.startswith(words[0])
            )
        return False

    def answer_span(self, answer_type: str | None, text: str, question_terms: set[str]) -> str | None:
        """
        The shortest phrase of `text` that is an answer of `answer_type`: the first run of words matching the type
        (with the number words, units or capitalised words around it) that the question does not already contain.

        :param answer_type: The expected type (`expected_type`), or None.
        :param text: The candidate sentence.
        :param question_terms: The question's content terms (stems).
        :returns: The phrase, or None when the type is unknown or not found.
        """
        if answer_type is None or answer_type == "code":
            return None
        if answer_type in ("value", "identifier", "place"):
            pattern = self._type_patterns.get(answer_type)
            for match in pattern.finditer(text) if pattern is not None else ():
                if not set(stem(w) for w in tokens(match.group(0))) <= question_terms:
                    return match.group(0)
            return None
        words = text.split()
        pattern = self._type_patterns.get(answer_type)

        def bare(word: str) -> str:
            return word.strip(".,;:!?()[]\"'“”‘’")

        def fits(word: str, position: int) -> bool:
            clean = bare(word)
            if not clean or stem(clean.lower()) in question_terms:
                return False
            if answer_type == "name":
                return clean[:1].isupper() and position > 0
            return bool(pattern is not None and pattern.search(clean))

        for start, word in enumerate(words):
            if not fits(word, start):
                continue
            end = start + 1
            while end < len(words) and (fits(words[end], end) or (
                answer_type != "name" and bare(words[end]).lower() in self._units
            )):
                end += 1
            numeric = self._type_patterns.get("number")
            while start > 0 and (fits(words[start - 1], start - 1) or (
                answer_type != "name" and numeric is not None and numeric.search(bare(words[start - 1]))
            )):
                start -= 1
            return bare(" ".join(words[start:end])) or None
        return None

    def _negated(self, words: list[str]) -> bool:
        return any(w in self._negations or w.endswith("n't") for w in words)

    def candidates(self, question: str, passages: list[Document]) -> list[_Candidate]:
        """
        Every answer unit of the passages (`gatehouse.components.answer_units`) with its signals and score, best
        first (no LLM).

        :param question: The question.
        :param passages: The passages, each with `meta["source_id"]`.
        :returns: The scored candidates.
        """
        abbreviations = DEFAULT_ABBREVIATIONS if self.abbreviations is None else self.abbreviations
        units = [u for u in answer_units(passages, abbreviations=abbreviations) if len(u.text.split()) >= 2]
        if not units:
            return []
        passage_terms = [{stem(w) for w in tokens(" ".join(str((p.meta or {}).get(k) or "") for k in
                                                             ("title", "section")) + " " + (p.content or ""))}
                         for p in passages]

        q_terms = self.question_terms(question)
        q_set = set(q_terms)
        q_bigrams = set(zip(q_terms, q_terms[1:]))
        # Passages without a retrieval score (a user's own context) all count as fully retrieved.
        unscored = all(p.score is None for p in passages)
        scores = [1.0 if unscored else float(p.score) if p.score is not None else 0.0 for p in passages]
        top_score = max(scores) if scores and max(scores) > 0 else 1.0
        q_words = tokens(question)
        q_negated = self._negated(q_words)
        q_entities = self._stated_entities(question)
        answer_type = self.expected_type(question)
        procedural = bool(PROCEDURE_QUESTION.search(question))
        shown = [strip_list_marker(f"{u.lead} {u.text}" if u.lead and not u.text.startswith(u.lead) else u.text)
                 for u in units]
        unit_terms = [{stem(w) for w in tokens(text)} for text in shown]
        context_terms = [{stem(w) for w in tokens(u.context)} for u in units]
        # Rarity among the candidates: a term in every unit is the topic, one in few units is the point.
        total = len(units)
        weight = {t: math.log(1.0 + total / (1.0 + sum(t in terms for terms in unit_terms))) for t in q_terms}
        weight_sum = sum(weight.values())

        def share(found: set[str]) -> float:
            return sum(weight[t] for t in q_terms if t in found) / weight_sum if weight_sum > 0 else 0.0

        self.warm_up()
        vectors = self._backend.embed([question] + shown)
        scored: list[_Candidate] = []
        for index, (unit, text, terms) in enumerate(zip(units, shown, unit_terms)):
            p = unit.passage
            window = terms | context_terms[index]
            for neighbour in (index - 1, index + 1):
                if 0 <= neighbour < total and units[neighbour].passage == p:
                    window |= unit_terms[neighbour]
            words = tokens(text)
            word_set = set(words)
            content = [stem(w) for w in words if w not in self._stop and w not in self._question_words]
            bigrams = set(zip(content, content[1:]))
            antonym = any(
                w not in word_set and self._opposites.get(w, set()) & word_set for w in q_words
            )
            signals = {
                "coverage": share(terms),
                "window_coverage": share(window),
                "passage_coverage": share(passage_terms[p]),
                "heading_coverage": share(context_terms[index]),
                "missing_entity": float(bool(q_entities - passage_terms[p] - numbers(passages[p].content or ""))),
                "type_missing": float(answer_type is not None and not self._has_type(answer_type, text, q_set,
                                                                                       unit.kind)),
                "negation_mismatch": float(q_negated != self._negated(words)),
                "antonym": float(antonym),
                "cosine": max(0.0, float(vectors[index + 1] @ vectors[0])),
                "novelty": min(1.0, len({stem(w) for w in words if w not in self._stop} - q_set) / 10.0),
                "bigram_coverage": len(q_bigrams & bigrams) / len(q_bigrams) if q_bigrams else 0.0,
                "passage_score": max(0.0, scores[p] / top_score),
                "kind_fit": float(unit.kind == "code" if answer_type == "code" else
                                  procedural and unit.kind in ("list", "code")),
            }
            source_id = str((passages[p].meta or {}).get("source_id") or f"S{p + 1}")
            scored.append(_Candidate(unit=unit, source_id=source_id, signals=signals, score=self.score(signals)))
        scored.sort(key=lambda c: (-c.score, c.unit.key))
        seen: set[str] = set()  # overlapping windows of one section repeat their units: keep the best of each text
        return [c for c in scored if not (c.unit.text in seen or seen.add(c.unit.text))]

    def score(self, signals: dict[str, float]) -> float:
        """
        The logistic model's score of one candidate's signals.

        :param signals: Signal values by name.
        :returns: A score in 0..1.
        """
        z = self.bias + sum(self._weights[name] * float(signals.get(name, 0.0)) for name in SIGNALS)
        return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, z))))

    def _llm_verdict(self, question: str, passage: Document) -> tuple[float | None, str | None]:
        prompt = self.llm_prompt.replace("{question}", question).replace("{passage}", passage.content or "")
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
        skip = ["fallback"] if self.skip_statuses is None else self.skip_statuses
        passages = list(state.get("passages") or [])
        if state.get("status") in skip:
            return {"answerable": advance(state, stage="answerability", started=started)}
        question = str(state.get("condensed_query") or state.get("original_query") or state.get("query") or "")

        ranked = self.candidates(question, passages) if question.strip() else []
        warnings: list[str] = []
        best_score = ranked[0].score if ranked else 0.0
        if ranked and self.chat_generator is not None:
            rated = []
            for candidate in ranked[: self.llm_candidates]:
                verdict, warning = self._llm_verdict(question, passages[candidate.passage])
                if warning:
                    warnings.append(warning)
                if verdict is not None:
                    candidate.score = (1.0 - self.llm_weight) * candidate.score + self.llm_weight * verdict
                    rated.append(candidate)
            # Once the LLM has rated candidates, only those are ranked: a candidate it rated "no" must not be replaced
            # by one it never read. When every call failed, the heuristic ranking stands.
            ranked = sorted(rated or ranked, key=lambda c: (-c.score, c.unit.key))
            best_score = ranked[0].score

        untyped = False
        answer_type = self.expected_type(question)
        if self.require_type and answer_type in TYPED_ANSWERS and ranked:
            typed = [c for c in ranked if not c.signals.get("type_missing")]
            untyped = not typed  # "how many ..." that no unit answers with a number
            ranked = typed + [c for c in ranked if c.signals.get("type_missing")]
            best_score = ranked[0].score
        absent = self.missing_entities(question, passages) if self.require_entities else []
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
            for c in ranked[: self.max_candidates]
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
