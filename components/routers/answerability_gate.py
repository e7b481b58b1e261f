"""
The answerability gate: does some passage *answer* the question, rather than only share its topic?

It runs after the passages are assembled. Every sentence (or list item) of every passage is a candidate answer and
gets signals that compare it with the question as an answer, not as a topic:

- `coverage`, `window_coverage`, `passage_coverage`: the share of the question's content terms (stemmed, weighted
  by how rare each term is among the candidate sentences) found in the sentence, in the sentence with its
  neighbours, and anywhere in its passage (title and section included). A question whose key term is nowhere near
  the candidate ("the Platinum plan", "born" where the passage says "died") loses here.
- `heading_coverage`: the same share found in the passage's section heading (`meta["section"]`): in structured
  documentation the heading says what a section answers ("Revoke an API key").
- `missing_entity`: a name or number the question states (a capitalised word inside the question, a number) that the
  passage never states.
- `type_missing`: the question expects an answer type (when -> a date, how many -> a number, who -> a name, ...) and
  the sentence holds none outside the question's own words.
- `negation_mismatch`: exactly one of question and sentence is negated.
- `antonym`: the question uses a word whose opposite the sentence uses instead (largest/smallest, born/died).
- `cosine`: embedding similarity of question and sentence.
- `novelty`: how many words the sentence has beyond the question's (something left to answer with).
- `bigram_coverage`: the share of the question's pairs of adjacent content terms that the sentence also has.
- `passage_score`: the retrieval score of the sentence's passage relative to the best passage's (1 for passages
  without a score, such as a user's own context).

A question that states a name or number no passage contains at all ("the Platinum plan", "error E4242") is not
answered, whatever the score (`require_entities`): the passages are about something else.

A logistic model turns the signals into a score in 0..1 (`bias` + `weights`, learned on data that is not the report
data; see the README). The best candidate decides: at or above `threshold` the state goes on `answerable`, with the
ranked candidates in `state["answer_candidates"]` for the answerer; below it the state goes on `unanswerable` with
the fallback message and the reason (which terms were not found), or, with `on_unanswerable: partial`, on
`answerable` with status `partial` and that reason as a warning. An optional LLM tier rates the best candidates and is
blended in with `llm_weight`.

Usage:
```python
from haystack import Document
from gatehouse.components.routers.answerability_gate import AnswerabilityGate
from gatehouse.components.state import new_state

gate = AnswerabilityGate(threshold=0.5)
passage = Document(content="API keys expire after 90 days. Rotate them in Settings.", meta={"source_id": "S1"})
out = gate.run(state=new_state("When do API keys expire?", passages=[passage]))
list(out)                                   # ["answerable"]
out["answerable"]["answer_candidates"][0]   # {"source_id": "S1", "text": "API keys expire after 90 days.", ...}
gate.run(state=new_state("How much does the Platinum plan cost?", passages=[passage]))  # -> "unanswerable"
```
"""

import math
import re
import time
from dataclasses import dataclass
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict

from gatehouse.components.chat import ask_chat_generator, chat_generator_from_init_parameters, chat_generator_to_dict
from gatehouse.components.state import State, advance, with_validation
from gatehouse.components.text import (
    DEFAULT_ABBREVIATIONS,
    DEFAULT_STOPWORDS,
    normalize_space,
    numbers,
    split_units,
    stem,
    strip_heading_markers,
    strip_list_marker,
    strip_markers,
    tokens,
)

DEFAULT_FALLBACK_MESSAGE = "I couldn't locate specific documentation for this. Please verify the query or contact support."

#: Question patterns (regular expressions, matched case-insensitively, first match wins) and the answer type
#: each one expects. A question matching none expects no particular type.
DEFAULT_ANSWER_TYPES: list[list[str]] = [
    [r"\b(what|which|in what|by what)\s+(year|years|decade|century|date|day|month|time period|era|period)\b", "date"],
    [r"^\s*(and\s+)?when\b|\bwhen (did|does|do|was|were|is|are|will|can|could|should|has|have|had)\b", "date"],
    [r"\bhow (many|much|long|old|often|far|large|big|high|tall|fast|frequently)\b", "number"],
    [r"\b(what|which) (percentage|percent|proportion|share|number|amount|price|cost|fee|rate|size|limit)\b", "number"],
    [r"\bwho(m|se)?\b", "name"],
    [r"\bwhere\b", "name"],
]

#: What counts as an answer of each type in a sentence (regular expressions). A `name` is also any capitalised word
#: that is not the sentence's first word.
DEFAULT_TYPE_PATTERNS: dict[str, str] = {
    "date": r"\b(1\d{3}|20\d{2})s?\b|\b(january|february|march|april|may|june|july|august|september|october|"
    r"november|december|century|centuries|decade|yesterday|today|monday|tuesday|wednesday|thursday|friday|"
    r"saturday|sunday|annually|daily|weekly|monthly|hours?|days?|weeks?|months?|years?|minutes?|seconds?)\b",
    "number": r"\d|\b(one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|thirty|forty|fifty|"
    r"hundred|hundreds|thousand|thousands|million|millions|billion|billions|dozen|half|once|twice|several|"
    r"free|unlimited|none)\b|[$€£%]",
}

#: Words that may follow a number or date in an answer span ("90 days", "$49 per user").
DEFAULT_UNITS: list[str] = ["per", "percent", "%", "days", "day", "hours", "hour", "minutes", "minute", "seconds",
                            "weeks", "week", "months", "month", "years", "year", "century", "bc", "ad", "gb", "mb",
                            "tb", "kb", "users", "user", "seats", "requests", "tokens", "dollars", "euros", "people",
                            "km", "miles", "metres", "meters", "feet", "kg", "tons", "tonnes"]  # fmt: skip

#: Aspect words whose answer is a figure ("price", "uptime", "rate limits"): within a plan part, a sentence with a
#: number, amount or percentage answers such an aspect before one without.
DEFAULT_QUANTITY_TERMS: list[str] = [
    "price", "pricing", "cost", "fee", "charge", "uptime", "sla", "limit", "quota", "retention", "window", "rate",
    "rpm", "tpm", "time", "hour", "minute", "second", "day", "downtime", "duration", "size", "memory",
    "storage", "latency", "capacity", "throughput", "discount", "port", "version", "minimum", "maximum",
]  # fmt: skip

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
#: A product, model or error identifier: a word with a hyphen and a digit ("atlas-3", "swift-1", "CGW-3001").
_IDENTIFIER = re.compile(r"(?<![\w/-])[A-Za-z][A-Za-z0-9]*(?:[-.][A-Za-z0-9]+)*-[A-Za-z]*\d[A-Za-z0-9]*(?:[-.][A-Za-z0-9]+)*")
_HOW_MANY = re.compile(r"\bhow many\s+(?P<phrase>[\w' -]+)", re.IGNORECASE)


@dataclass
class _Candidate:
    passage: int
    unit: int
    source_id: str
    text: str
    signals: dict[str, float]
    score: float = 0.0


@component
class AnswerabilityGate:
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
        fallback_message: str = DEFAULT_FALLBACK_MESSAGE,
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
        focus_plan_parts: bool = True,
        quantity_terms: list[str] | None = None,
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
        :param focus_plan_parts: In a part of a plan (`state["plan"]`), rank the candidates by what the part asks
            (see `focus`): a sentence naming the part's entity and its aspect leads; with none that covers the aspect,
            that names the identifier the part asks about ("atlas-3") or that counts what "how many" asks, the part
            is not answered.
        :param quantity_terms: Aspect words whose answer is a figure (a sentence with a number answers them first);
            None uses the built-in English list.
        :raises ValueError: On an unknown signal, mode, or a value out of range.
        """
        unknown = set(weights or {}) - set(SIGNALS)
        if unknown:
            raise ValueError(f"Unknown answerability signals {sorted(unknown)}; use {', '.join(SIGNALS)}.")
        if on_unanswerable not in ("fallback", "partial"):
            raise ValueError(f"on_unanswerable must be 'fallback' or 'partial', got '{on_unanswerable}'.")
        if not 0.0 <= threshold <= 1.0:
            raise ValueError("threshold must be between 0 and 1.")
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
        self.focus_plan_parts = focus_plan_parts
        self.quantity_terms = quantity_terms

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
        self._quantities = frozenset(
            stem(w.lower()) for w in (DEFAULT_QUANTITY_TERMS if quantity_terms is None else quantity_terms)
        )
        self._backend: Any = None

    def warm_up(self) -> None:
        """Load the embedding model and warm up the optional chat generator."""
        if self._backend is None:
            from gatehouse.components.embedders.embedding import EmbeddingBackend

            self._backend = EmbeddingBackend.get(model=self.embedding_model, cache_dir=self.cache_dir)
        if self.chat_generator is not None and hasattr(self.chat_generator, "warm_up"):
            self.chat_generator.warm_up()

    def to_dict(self) -> dict[str, Any]:
        """
        Serialize this component to a dictionary.

        :returns: The serialized component.
        """
        return default_to_dict(
            self,
            threshold=self.threshold,
            weights=self.weights,
            bias=self.bias,
            require_entities=self.require_entities,
            on_unanswerable=self.on_unanswerable,
            fallback_message=self.fallback_message,
            max_candidates=self.max_candidates,
            answer_types=self.answer_types,
            type_patterns=self.type_patterns,
            negations=self.negations,
            antonyms=self.antonyms,
            question_words=self.question_words,
            units=self.units,
            stopwords=self.stopwords,
            abbreviations=self.abbreviations,
            skip_statuses=self.skip_statuses,
            embedding_model=self.embedding_model,
            cache_dir=self.cache_dir,
            chat_generator=chat_generator_to_dict(self.chat_generator),
            llm_weight=self.llm_weight,
            llm_prompt=self.llm_prompt,
            llm_candidates=self.llm_candidates,
            focus_plan_parts=self.focus_plan_parts,
            quantity_terms=self.quantity_terms,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "AnswerabilityGate":
        """
        Deserialize this component from a dictionary.

        :param data: The dictionary from `to_dict()`.
        :returns: The component.
        """
        return default_from_dict(cls, chat_generator_from_init_parameters(data))

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
            for part in tokens(word):  # "CGW-3001" is stated as its parts, as passages are indexed
                if len(part) > 1 and part not in self._stop and part not in self._question_words:
                    found.add(stem(part))
        return found | numbers(question)

    def _has_type(self, answer_type: str, text: str, question_words: set[str]) -> bool:
        """Whether `text`, once the question's own words are removed, holds an answer of `answer_type`."""
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
        if answer_type is None:
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
        Every candidate sentence of the passages with its signals and score, best first (no LLM).

        :param question: The question.
        :param passages: The passages, each with `meta["source_id"]`.
        :returns: The scored candidates.
        """
        abbreviations = DEFAULT_ABBREVIATIONS if self.abbreviations is None else self.abbreviations
        pieces: list[tuple[int, int, str, str]] = []  # passage, unit, source id, text
        passage_terms: list[set[str]] = []
        heading_terms: list[set[str]] = []
        for p, passage in enumerate(passages):
            source_id = str((passage.meta or {}).get("source_id") or f"S{p + 1}")
            meta_text = " ".join(str((passage.meta or {}).get(k) or "") for k in ("title", "section"))
            passage_terms.append({stem(w) for w in tokens(meta_text + " " + (passage.content or ""))})
            heading_terms.append({stem(w) for w in tokens(str((passage.meta or {}).get("section") or ""))})
            for u, unit in enumerate(split_units(passage.content or "", abbreviations=abbreviations)):
                if unit.kind not in ("sentence", "item"):
                    continue
                text = normalize_space(strip_heading_markers(strip_markers(unit.text)))
                if len(text.split()) >= 2:
                    pieces.append((p, u, source_id, text))
        if not pieces:
            return []

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
        sentence_terms = [{stem(w) for w in tokens(strip_list_marker(text))} for _, _, _, text in pieces]
        # Rarity among the candidates: a term in every sentence is the topic, one in few sentences is the point.
        total = len(pieces)
        weight = {t: math.log(1.0 + total / (1.0 + sum(t in terms for terms in sentence_terms))) for t in q_terms}
        weight_sum = sum(weight.values())

        self.warm_up()
        vectors = self._backend.embed([question] + [strip_list_marker(text) for _, _, _, text in pieces])
        scored: list[_Candidate] = []
        for index, ((p, u, source_id, text), terms) in enumerate(zip(pieces, sentence_terms)):
            window = set(terms)
            for neighbour in (index - 1, index + 1):
                if 0 <= neighbour < total and pieces[neighbour][0] == p:
                    window |= sentence_terms[neighbour]

            def share(found: set[str]) -> float:
                return sum(weight[t] for t in q_terms if t in found) / weight_sum if weight_sum > 0 else 0.0

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
                "heading_coverage": share(heading_terms[p]),
                "missing_entity": float(bool(q_entities - passage_terms[p] - numbers(passages[p].content or ""))),
                "type_missing": float(answer_type is not None and not self._has_type(answer_type, text, q_set)),
                "negation_mismatch": float(q_negated != self._negated(words)),
                "antonym": float(antonym),
                "cosine": max(0.0, float(vectors[index + 1] @ vectors[0])),
                "novelty": min(1.0, len({stem(w) for w in words if w not in self._stop} - q_set) / 10.0),
                "bigram_coverage": len(q_bigrams & bigrams) / len(q_bigrams) if q_bigrams else 0.0,
                "passage_score": max(0.0, scores[p] / top_score),
            }
            scored.append(_Candidate(passage=p, unit=u, source_id=source_id, text=text, signals=signals,
                                     score=self.score(signals)))
        scored.sort(key=lambda c: (-c.score, c.passage, c.unit))
        return scored

    def score(self, signals: dict[str, float]) -> float:
        """
        The logistic model's score of one candidate's signals.

        :param signals: Signal values by name.
        :returns: A score in 0..1.
        """
        z = self.bias + sum(self._weights[name] * float(signals.get(name, 0.0)) for name in SIGNALS)
        return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, z))))

    # -- the focus of a plan part -----------------------------------------------------------------------------------
    def focus(
        self, question: str, part: dict[str, Any], ranked: list[_Candidate], passages: list[Document]
    ) -> tuple[list[_Candidate], dict[str, Any]]:
        """
        Rank the candidates of one part of a plan by what the part asks.

        The part's *entity* is what it is about: a comparison's "Enterprise plan", told apart from the other compared
        entities by its own words ("Enterprise"), or, in a part that is a question of its own, the names it writes
        with a capital. Its *aspect* is what it asks about the entity ("price"; in a question, its other content
        terms). A candidate can answer the part only when it names every identifier the part names together with an
        aspect term (sentence or section heading: a sentence about "atlas-2-mini" does not answer "atlas-3", nor does
        one that names "atlas-3" without its context window) and, for "how many X", states a number of X ("five
        built-in roles" does not count custom roles). Those come first; among them the candidates naming the entity
        (sentence or section heading, unless the heading names another compared entity instead), then, for an aspect answered by a figure (`quantity_terms`, or a
        "how much"/"when" question), those holding one; then the score decides.

        ```python
        gate = AnswerabilityGate()
        part = {"entity": "Enterprise plan", "aspect": "price", "siblings": ["Team plan"]}
        ranked, record = gate.focus("Enterprise plan price", part, gate.candidates("Enterprise plan price", passages),
                                    passages)
        ranked[0].text   # "Enterprise pricing is negotiated and starts at $4,500 per month ..."
        ```

        :param question: The part's question.
        :param part: The plan part (`entity`, `aspect`, `siblings`; no entity for a question of its own).
        :param ranked: The scored candidates (`candidates`).
        :param passages: The passages the candidates come from.
        :returns: The candidates in focus order and `{"entity", "aspect", "identifiers", "focused"}`; `focused` is
            False when no candidate can answer the part.
        """
        entity = str(part.get("entity") or "")
        if entity:
            sibling_words = {w.lower() for other in part.get("siblings") or [] for w in re.findall(r"[\w'’-]+", other)}
            words = [w for w in re.findall(r"[\w'’-]+", entity) if w.lower() not in self._stop
                     and not _IDENTIFIER.fullmatch(w)]
            names = [w for w in words if w.lower() not in sibling_words] or words
            others = sorted(sibling_words - {w.lower() for w in words} - self._stop)
            identifiers = {m.group(0).lower() for m in _IDENTIFIER.finditer(entity)}
            aspect = self.question_terms(str(part.get("aspect") or ""))
        else:
            identifiers = {m.group(0).lower() for m in _IDENTIFIER.finditer(question)}
            others = []
            names = [m.group(1) for m in _CAPITALISED.finditer(question.strip()) if len(m.group(1)) > 1
                     and m.group(1).lower() not in self._stop and m.group(1).lower() not in self._question_words
                     and not _IDENTIFIER.fullmatch(m.group(1))]
            named = {stem(t) for name in [*names, *identifiers] for t in tokens(name)}
            aspect = [t for t in self.question_terms(question) if t not in named]
        quantity = bool(set(aspect) & self._quantities) or (
            not entity and self.expected_type(question) in ("number", "date"))
        counted = self._counted(question)

        def keyed(candidate: _Candidate) -> tuple[float, float, float, float]:
            heading = str((passages[candidate.passage].meta or {}).get("section") or "")
            text = f"{candidate.text} {heading}"
            lowered = text.lower()
            covers = not aspect or bool(set(aspect) & {stem(w) for w in tokens(text)})
            answers = (not identifiers or covers) and all(
                re.search(rf"(?<![\w-]){re.escape(i)}(?![\w-])", lowered) for i in identifiers
            ) and (counted is None or self._counts(candidate.text, counted))
            surface = set(re.findall(r"[\w'’-]+", text))
            names_entity = all(n in surface if n[:1].isupper() else n.lower() in lowered.split() for n in names)
            heading_words = {w.lower() for w in re.findall(r"[\w'’-]+", heading)}
            if heading_words & set(others) and not heading_words & {n.lower() for n in names}:
                names_entity = False  # a section about another compared entity ("Enterprise" for "Business")
            value = quantity and self._has_type("number", candidate.text, set(aspect))
            return float(answers), float(names_entity), float(value), candidate.score

        keys = {id(c): keyed(c) for c in ranked}
        ordered = sorted(ranked, key=lambda c: tuple(-k for k in keys[id(c)]) + (c.passage, c.unit))
        record = {"entity": names, "aspect": aspect, "identifiers": sorted(identifiers),
                  "focused": bool(ordered) and keys[id(ordered[0])][0] > 0}
        return ordered, record

    def _counted(self, question: str) -> list[str] | None:
        """The stems of what "how many X" counts ("how many custom roles can ..." -> ["custom", "role"]), or None."""
        match = _HOW_MANY.search(question)
        if match is None:
            return None
        phrase: list[str] = []
        for word in tokens(match["phrase"]):
            if word in self._stop:
                break
            phrase.append(stem(word))
        return phrase or None

    def _counts(self, text: str, counted: list[str]) -> bool:
        """Whether `text` states a number of `counted`: a number, then only its words, ending with its last word."""
        numeric = self._type_patterns.get("number")
        words = [w.strip(".,;:!?()[]\"'“”‘’`") for w in re.split(r"[\s-]+", text)]
        for position, word in enumerate(words):
            if not word or numeric is None or not numeric.search(word):
                continue
            for following in words[position + 1 : position + 2 + len(counted)]:
                stemmed = stem(following.lower())
                if stemmed == counted[-1]:
                    return True
                if stemmed not in counted:
                    break
        return False

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
            - `unanswerable`: the state with the fallback `answer`, status `fallback` and no passages.
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
            ranked = sorted(rated or ranked, key=lambda c: (-c.score, c.passage, c.unit))
            best_score = ranked[0].score

        plan = state.get("plan") or {}
        focus = None
        if self.focus_plan_parts and ranked and plan.get("current") is not None:
            ranked, focus = self.focus(question, plan["parts"][plan["current"]], ranked, passages)
        absent = self.missing_entities(question, passages) if self.require_entities else []
        all_terms = set().union(*({stem(w) for w in tokens(p.content or "")} for p in passages)) if passages else set()
        question_terms = self.question_terms(question)
        missing = [t for t in question_terms if t not in all_terms]
        record = {
            "score": round(best_score, 4),
            "threshold": self.threshold,
            "missing_terms": missing,
            "missing_entities": absent,
            "focus": focus,
            "best": None if not ranked else {
                "source_id": ranked[0].source_id,
                "text": ranked[0].text,
                "signals": {k: round(v, 4) for k, v in ranked[0].signals.items()},
            },
        }
        answer_type, term_set = self.expected_type(question), set(question_terms)
        candidates = [
            {"source_id": c.source_id, "passage": c.passage, "unit": c.unit, "text": c.text,
             "score": round(c.score, 4), "span": self.answer_span(answer_type, c.text, term_set)}
            for c in ranked[: self.max_candidates]
        ]
        unfocused = focus is not None and not focus["focused"]
        answered = bool(ranked) and best_score >= self.threshold and not absent and not unfocused
        step = f"{'answerable' if answered else 'not_answerable'}_{best_score:.2f}"
        base = with_validation(state, "confidence_warnings", *warnings) if warnings else state
        if answered:
            new = advance(base, stage="answerability", started=started, steps=[step], answerability=record,
                          answer_candidates=candidates)
            return {"answerable": new}

        reason = "answerability: no passage answers the question" + (
            f" (not found: {', '.join(missing)})" if missing else ""
        ) + (f"; no passage names {', '.join(absent)}" if absent else
             "; no sentence answers this part's " + " ".join(focus["aspect"] + focus["identifiers"]) if unfocused else
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
            passages=[],
            citations=[],
        )
        return {"unanswerable": with_validation(new, "confidence_warnings", reason)}
