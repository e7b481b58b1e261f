"""
What the answerability gate reads in a question and in a candidate answer: the answer type the question expects, its
content terms, the names and numbers it states, and the shortest answer span of a unit.

The built-in lists are English; each can be replaced from YAML (the gate's `signals` setting).

Usage:
```python
from gatehouse.components.answerability.lexicon import Lexicon

lexicon = Lexicon()
lexicon.expected_type("How many users can a workspace have?")        # "number"
lexicon.answer_span("number", "A workspace can have 10 users.", set(lexicon.question_terms("How many users?")))
# "10 users"
```
"""

import re
from typing import Iterable

from haystack import Document

from gatehouse.components.terms import DEFAULT_STOPWORDS, numbers, stem, text_terms, tokens
from gatehouse.components.text_units import DEFAULT_ABBREVIATIONS

#: Question patterns (regular expressions, matched case-insensitively, first match wins) and the answer type
#: each one expects. A question matching none expects no particular type.
DEFAULT_ANSWER_TYPES: list[list[str]] = [
    [r"^\W*(?:please\s+|can you\s+|could you\s+)?(?:write|show|give|generate|create|provide)\b.*"
     r"\b(?:code|example|snippet|function|script|config(?:uration)?|command)s?\b", "code"],
    [r"\b(?:code|snippet|example) (?:for|of|that|to|showing)\b", "code"],
    [r"\b(what|which|in what|by what)\s+(year|years|decade|century|date|day|month|time period|era|period)\b", "date"],
    # "when" asks for a time before an auxiliary or alone; "When I pass a string, what ...?" sets a condition
    [r"^\s*(and\s+)?when\W*$|\bwhen(?:'s\b| (did|does|do|was|were|is|are|will|can|could|should|has|have|had)\b)",
     "date"],
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

#: Question words that say what kind of answer is wanted, not what it is about; they are not content terms.
DEFAULT_QUESTION_WORDS: list[str] = [
    "year", "years", "many", "much", "long", "often", "name", "named", "called", "kind", "type", "sort", "number",
    "percentage", "percent", "amount", "date", "day", "time", "happen", "happened", "happens", "occur", "occurred",
    "take", "took", "place", "one", "two", "main", "example", "something", "someone", "thing", "things", "way",
    "mean", "means", "term", "describe", "described", "refer", "refers", "referred", "known", "considered",
]  # fmt: skip

_CAPITALISED = re.compile(r"(?<![.!?:]\s)(?<!^)\b([A-Z][\w'’-]*)")


def _lowered(words: Iterable[str]) -> frozenset[str]:
    return frozenset(w.lower() for w in words)


class Lexicon:
    """
    The answerability gate's word lists and patterns, compiled, and what they tell about a question or a unit.

    Every list is None for the built-in one (`DEFAULT_*` of this module): `answer_types` (`[pattern, type]` pairs, an
    empty list too), `type_patterns` (a regex per type), `question_words` (not content terms), `units` (words that may
    follow a number in an answer span), `stopwords`, `abbreviations` (words whose trailing period does not end a
    sentence).
    """

    def __init__(  # noqa: PLR0913
        self,
        *,
        answer_types: list[list[str]] | None = None,
        type_patterns: dict[str, str] | None = None,
        question_words: list[str] | None = None,
        units: list[str] | None = None,
        stopwords: list[str] | None = None,
        abbreviations: list[str] | None = None,
    ) -> None:
        self.answer_types = [(re.compile(p, re.IGNORECASE), t) for p, t in (answer_types or DEFAULT_ANSWER_TYPES)]
        patterns = DEFAULT_TYPE_PATTERNS if type_patterns is None else type_patterns
        self.type_patterns = {t: re.compile(p, re.IGNORECASE) for t, p in patterns.items()}
        self.stop = _lowered(DEFAULT_STOPWORDS if stopwords is None else stopwords)
        self.question_words = _lowered(DEFAULT_QUESTION_WORDS if question_words is None else question_words)
        self.units = _lowered(DEFAULT_UNITS if units is None else units)
        self.abbreviations = DEFAULT_ABBREVIATIONS if abbreviations is None else abbreviations

    def expected_type(self, question: str) -> str | None:
        """
        The answer type a question expects (`date`, `number`, `name`, ...), or None.

        :param question: The question.
        :returns: The type of the first matching `answer_types` pattern.
        """
        for pattern, answer_type in self.answer_types:
            if pattern.search(question):
                return answer_type
        return None

    def question_terms(self, question: str) -> list[str]:
        """
        The question's content terms: stemmed words that are neither function words nor question-form words.

        :param question: The question.
        :returns: The distinct stems in order.
        """
        words = [w for w in tokens(question) if self.is_content(w)]
        return list(dict.fromkeys(stem(w) for w in words if len(w) > 1 or w.isdigit()))

    def is_content(self, word: str) -> bool:
        """Whether a lower-cased word is neither a function word nor a question-form word."""
        return word not in self.stop and word not in self.question_words

    def missing_entities(self, question: str, passages: list[Document]) -> list[str]:
        """
        The names and numbers the question states that no passage contains (its title, section and file name
        included, and the words of names written as one word: `ISO4217` holds 4217).

        :param question: The question.
        :param passages: The passages.
        :returns: The missing stems, sorted.
        """
        found: set[str] = set()
        for passage in passages:
            meta_text = " ".join(str((passage.meta or {}).get(k) or "") for k in ("title", "section", "source"))
            text = meta_text + " " + (passage.content or "")
            found |= text_terms(text) | numbers(text)
        return sorted(self.stated_entities(question) - found)

    def stated_entities(self, question: str) -> set[str]:
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
                if len(part) > 1 and self.is_content(part):
                    found.add(stem(part))
        return found | numbers(question)

    def has_type(self, answer_type: str, text: str, question_words: set[str], kind: str = "sentence") -> bool:
        """Whether `text` (a unit of `kind`), once the question's own words are removed, holds an `answer_type`."""
        if answer_type == "code":
            return kind == "code"
        if answer_type in ("value", "identifier", "place"):
            pattern = self.type_patterns.get(answer_type)
            return pattern is not None and any(
                not set(stem(w) for w in tokens(match.group(0))) <= question_words
                for match in pattern.finditer(text))
        rest = " ".join(
            w for w in re.findall(r"[\w$€£%'’-]+", text) if stem(w.lower().strip("'’-")) not in question_words
        )
        pattern = self.type_patterns.get(answer_type)
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
            pattern = self.type_patterns.get(answer_type)
            for match in pattern.finditer(text) if pattern is not None else ():
                if not set(stem(w) for w in tokens(match.group(0))) <= question_terms:
                    return match.group(0)
            return None
        words = text.split()
        pattern = self.type_patterns.get(answer_type)

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
                answer_type != "name" and bare(words[end]).lower() in self.units
            )):
                end += 1
            numeric = self.type_patterns.get("number")
            while start > 0 and (fits(words[start - 1], start - 1) or (
                answer_type != "name" and numeric is not None and numeric.search(bare(words[start - 1]))
            )):
                start -= 1
            return bare(" ".join(words[start:end])) or None
        return None
