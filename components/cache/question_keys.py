"""
What two questions must agree on to share an answer in the answer cache: the exact-match form of a question, its key
terms (names, versions, error codes, regions) and its meaning (content words and negations).

Usage:
```python
from gatehouse.components.cache.question_keys import key_terms, meaning, normalise_question

normalise_question("How do I rotate an API key?")          # "how do i rotate an api key"
key_terms("Can I upgrade from 3.2 to 3.4 in eu-west?")     # {"3.2", "3.4", "eu-west"}
meaning("Can I enable SSO?") != meaning("Can I disable SSO?")
```
"""

import re
import unicodedata

from gatehouse.components.terms import DEFAULT_STOPWORDS, stem

_WORD = re.compile(r"\w(?:[\w\-./]*\w)?")
_SENTENCE_START = re.compile(r"(?:^|[.!?:;])\s*$")

#: Words that turn a question's meaning around: with one in a question and not in the other, they differ.
_NEGATION = re.compile(r"n['’]t\b|\b(?:not|no|never|without|cannot|none|neither|nor)\b", re.IGNORECASE)

#: Function words that still change what is asked: order in time, how many, direction ("before / after the first
#: deployment", "one / every endpoint", "up / down"). `meaning` keeps them although they are stopwords.
_BEARING = frozenset(
    "above after all any before below both down each either every first from into last least less more most off "
    "on one only out over some to under up with".split()
)


def normalise_question(text: str) -> str:
    """
    The exact-match form of a question: NFKC, case-folded, punctuation turned into spaces, whitespace collapsed.

    :param text: The question.
    :returns: Its normalised form (`"How do I rotate an API key?"` -> `"how do i rotate an api key"`).
    """
    text = unicodedata.normalize("NFKC", text or "").casefold()
    return " ".join("".join(" " if unicodedata.category(ch).startswith("P") else ch for ch in text).split())


def _words(text: str) -> list[tuple[str, bool]]:
    """The words of a text (inner `-`, `.`, `/` kept: `v2-large`, `3.4`), each with "starts a sentence"."""
    text = unicodedata.normalize("NFKC", text or "")
    return [(m.group(), _SENTENCE_START.search(text, 0, m.start()) is not None) for m in _WORD.finditer(text)]


def _fold(word: str) -> str:
    """A word as key terms are compared: case-folded, and stemmed when it is only letters (`Agreements`)."""
    word = word.casefold()
    return stem(word) if word.isalpha() else word


def folded_words(text: str) -> frozenset[str]:
    """Every word of a text as `_fold` compares it."""
    return frozenset(_fold(word) for word, _ in _words(text))


def meaning(text: str) -> tuple[frozenset[str], int]:
    """
    What a semantic match must agree on: the question's content words (case-folded, stemmed; function words left
    out except those in `_BEARING`, so "How do I / How can I rotate a key" agree) and how many negations it has
    ("Can I" / "Can't I" do not).

    :param text: The question.
    :returns: `(content words, number of negations)`.
    """
    words = frozenset(_fold(word) for word, _ in _words(text)
                      if word.casefold() in _BEARING or word.casefold() not in DEFAULT_STOPWORDS)
    return words, len(_NEGATION.findall(unicodedata.normalize("NFKC", text or "")))


def key_terms(text: str) -> frozenset[str]:
    """
    The words of a question that name one thing among similar ones, case-folded: words with a digit (`P1`, `3.2`,
    `model-1`), with an inner `-`, `.` or `/` (`eu-west`, `/healthz`), with a capital after the first letter (`MySQL`,
    `HTTPS`) or capitalised inside a sentence (`Team`, `Business`). Two questions whose embeddings are close but whose
    key terms differ ("the basic tier" / "the premium tier") ask about different things.

    :param text: The question.
    :returns: Its key terms, case-folded (and stemmed when only letters).
    """
    terms = set()
    for word, starts_sentence in _words(text):
        digit_or_inner = any(ch.isdigit() or ch in "-./" for ch in word)
        capitals = any(ch.isupper() for ch in word[1:]) or (word[0].isupper() and not starts_sentence and word != "I")
        if digit_or_inner or capitals:
            terms.add(_fold(word))
    return frozenset(terms)
