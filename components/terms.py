"""
Words and terms, as the gates compare texts: lower-cased word tokens, English Snowball stems, content words (tokens
without stopwords), the numbers a text writes, set overlap, the same words whatever case and spacing, a rough
singular, and `TermNormaliser` for components whose stopwords, stemmer and minimum term length are settings.

The one stopword list (`DEFAULT_STOPWORDS`) lives with the BM25 analyser (`gatehouse.document_stores.analysis`), so
the gates and the index drop the same words.

Usage:
```python
from gatehouse.components.terms import content_words, overlap, stem

content_words("How do I rotate an API key?")   # {'rotat', 'api', 'key'}
overlap(content_words("rotate a key"), content_words("Keys are rotated monthly."))   # 1.0
stem("rotating")                               # 'rotat'
```
"""

import re
import unicodedata
from functools import lru_cache
from typing import Iterable

from gatehouse.document_stores.analysis import DEFAULT_STOPWORDS  # one list for the gates and the BM25 index

_WORD = re.compile(r"\w+", re.UNICODE)
_TERM = re.compile(r"[^\W_]+")
#: Where a name written as one word changes word: `postalCode`, `HTTPServer`, `order2Id`, `ISO4217` (lower or digit
#: to upper, an upper-case run to a capitalised word, a letter to a digit).
_NAME_JOINT = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])|(?<=[A-Za-z])(?=[0-9])")


@lru_cache(maxsize=1)
def _stemmer():
    try:
        import Stemmer  # PyStemmer, a project dependency (also used by the store's BM25 analysis)
    except ImportError:  # pragma: no cover - optional
        return None
    return Stemmer.Stemmer("english")


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """
    The English Snowball stem of a lower-cased word (the word itself when PyStemmer is unavailable).

    :param word: A lower-cased word.
    :returns: Its stem.
    """
    stemmer = _stemmer()
    return stemmer.stemWord(word) if stemmer is not None else word


def tokens(text: str) -> list[str]:
    """
    Lower-cased word tokens (unicode letters, digits and underscores).

    :param text: Any text.
    :returns: The tokens in order.
    """
    return _WORD.findall((text or "").lower())


def name_words(text: str) -> list[str]:
    """
    The words of names written as one word, as `tokens` reads them: camelCase, snake_case and dotted key paths cut
    into their words (`shipAddress.postalCode` -> ship, address, postal, code; `ISO4217` -> iso, 4217), everything else
    as `tokens`.

    :param text: Any text.
    :returns: The tokens in order.
    """
    return _TERM.findall(_NAME_JOINT.sub(" ", text or "").lower())


def text_terms(text: str) -> set[str]:
    """
    What a text says to a question's terms: its words, stemmed, with the words of the names it writes as one word
    (a record's key `postalCode` says postal, code).

    :param text: Any text.
    :returns: The stemmed words.
    """
    return {stem(w) for w in [*tokens(text), *name_words(text)]}


def content_words(text: str, stopwords: Iterable[str] | None = None, *, stemmed: bool = True) -> set[str]:
    """
    The set of content words of a text: tokens minus stopwords, stemmed.

    :param text: Any text.
    :param stopwords: Words to ignore; None uses `DEFAULT_STOPWORDS`.
    :param stemmed: Reduce words to their stems so "rotate" matches "rotating".
    :returns: The content words.
    """
    stop = DEFAULT_STOPWORDS if stopwords is None else frozenset(w.lower() for w in stopwords)
    words = {t for t in tokens(text) if t not in stop and (len(t) > 1 or t.isdigit())}
    return {stem(w) for w in words} if stemmed else words


def numbers(text: str) -> set[str]:
    """
    The numbers written in a text (`90`, `2.5`, `1,000` as `1000`).

    :param text: Any text.
    :returns: The numbers as normalised strings.
    """
    found = re.findall(r"(?<![\w.])\d[\d,]*(?:\.\d+)?", text or "")
    return {n.replace(",", "").rstrip(".") for n in found}


def jaccard(a: set[str], b: set[str]) -> float:
    """
    Jaccard similarity of two sets (1.0 for two empty sets).

    :param a: A set.
    :param b: Another set.
    :returns: |a ∩ b| / |a ∪ b|.
    """
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def overlap(query_words: set[str], text_words: set[str]) -> float:
    """
    Share of `query_words` that occur in `text_words` (0.0 when `query_words` is empty).

    :param query_words: Content words of the query (or claim).
    :param text_words: Content words of the text.
    :returns: |q ∩ t| / |q|.
    """
    if not query_words:
        return 0.0
    return len(query_words & text_words) / len(query_words)


def same_words(a: str, b: str) -> bool:
    """Whether two texts are the same words once case and spacing are ignored ("Reset  Login" and "reset login")."""
    return " ".join(a.casefold().split()) == " ".join(b.casefold().split())


def singular(word: str) -> str:
    """A rough English singular by suffix: "policies" -> "policy", "plans" -> "plan"; "access", "status" stay."""
    lower = word.casefold()
    if len(word) > 4 and lower.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and lower.endswith("s") and not lower.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def tokenize(text: str) -> list[str]:
    """
    Split text into case-folded word tokens (NFKC; Unicode letters and digits; underscores and punctuation split,
    unlike `tokens`, which keeps `snake_case` identifiers whole).

    :param text: Any text.
    :returns: The tokens in order.
    """
    return _TERM.findall(unicodedata.normalize("NFKC", text or "").casefold())


class TermNormaliser:
    """
    Turns text into comparable content terms: tokens without stopwords and short tokens, optionally stemmed.

    :param stopwords: Words to drop; None uses `DEFAULT_STOPWORDS`.
    :param stemmer_language: A Snowball language for PyStemmer (e.g. `"english"`), or None for no stemming.
    :param min_term_length: Tokens shorter than this are dropped.
    """

    def __init__(self, stopwords: list[str] | None, stemmer_language: str | None, min_term_length: int) -> None:
        self.stopwords = frozenset(w.casefold() for w in (DEFAULT_STOPWORDS if stopwords is None else stopwords))
        self.min_term_length = min_term_length
        self._stemmer = None
        if stemmer_language:
            import Stemmer  # PyStemmer, a project dependency

            self._stemmer = Stemmer.Stemmer(stemmer_language)

    def is_content(self, token: str) -> bool:
        """Whether a lower-case token counts as a content term."""
        return len(token) >= self.min_term_length and token not in self.stopwords

    def stem(self, token: str) -> str:
        """The comparison key of a lower-case token."""
        return self._stemmer.stemWord(token) if self._stemmer is not None else token

    def terms(self, text: str) -> list[str]:
        """The stemmed content terms of a text, in order, with repetitions."""
        return [self.stem(t) for t in tokenize(text) if self.is_content(t)]
