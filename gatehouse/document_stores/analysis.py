"""
Text analysis for the lexical side of the store: terms (or character n-grams of terms) and their BM25 sparse vectors.

A document's sparse vector holds, per term, BM25's term-frequency part `tf·(k1+1) / (tf + k1·(1 − b + b·len/avg_len))`;
the engine multiplies it by the term's IDF over every document of the shard (Qdrant's `Idf` modifier), so
the dot product with a query vector of term counts is the BM25 score. Terms are hashed to 31-bit indices.

Usage:
```python
from gatehouse.document_stores.analysis import Analyzer, Bm25Encoder

analyzer = Analyzer(stemmer="english", stopwords="en")
encoder = Bm25Encoder(analyzer, k1=1.2, b=0.75)
vector = encoder.document("Rotate API keys from the console.", avg_len=40.0)   # (indices, values)
query = encoder.query("rotate key")
```
"""

import re
import zlib
from collections import Counter

TOKEN_PATTERN = r"(?u)\b\w\w*\b"

#: Gatehouse's one English stopword list (function words and question words that carry no topic): lexical overlap,
#: the gates' content terms and the BM25 index (`stopwords: en`) all use it unless a component is given its own list.
DEFAULT_STOPWORDS: frozenset[str] = frozenset(
    """
    a about above after again against all also am an and any are as at be because been before being below
    between both but by can could did do does doing done down during each either else etc ever every few for from
    further get gets getting got had has have having he her here hers herself him himself his how i if in into is
    it its itself just know let like me might more most much must my myself need no nor not now of off on once one
    only or other our ours ourselves out over own please same shall she should so some such tell than that the
    their theirs them themselves then there these they this those through to too under until up upon us very via
    want was we were what when where whether which while who whom whose why will with within without would yes you
    your yours yourself yourselves
    """.split()
)


class Analyzer:
    """
    Lower-cases, splits on a token pattern, drops stopwords and stems (Snowball via PyStemmer); with
    `char_ngrams` each remaining term becomes its character n-grams (padded with a space on both sides, so
    `" gene "` gives `" ge"`, `"gen"`, `"ene"`, `"ne "`), which match spelling and morphological variants.
    """

    def __init__(
        self,
        *,
        token_pattern: str = TOKEN_PATTERN,
        stopwords: str | list[str] | None = "en",
        stemmer: str | None = "english",
        char_ngrams: int | None = None,
    ) -> None:
        if char_ngrams is not None and char_ngrams < 2:
            raise ValueError(f"char_ngrams must be at least 2 (or null for whole terms), got {char_ngrams}.")
        self._char_ngrams = char_ngrams
        self._pattern = re.compile(token_pattern)
        if stopwords == "en":
            self._stopwords = DEFAULT_STOPWORDS  # Gatehouse's one list, as the gates use it
        elif isinstance(stopwords, str):
            raise ValueError(f"Unknown stopword list '{stopwords}'. Use 'en', a list of words, or null.")
        else:
            self._stopwords = frozenset(word.lower() for word in stopwords or [])
        if stemmer:
            import Stemmer

            if stemmer not in Stemmer.algorithms():
                raise ValueError(f"Unknown stemmer '{stemmer}'. Available: {', '.join(Stemmer.algorithms())}.")
            self._stem = Stemmer.Stemmer(stemmer).stemWords
        else:
            self._stem = None

    def __call__(self, text: str) -> list[str]:
        tokens = [t for t in self._pattern.findall(text.lower()) if t not in self._stopwords]
        if self._stem:
            tokens = self._stem(tokens)
        if self._char_ngrams is None:
            return tokens
        size = self._char_ngrams
        padded = [f" {token} " for token in tokens]
        return [term[i : i + size] for term in padded for i in range(max(1, len(term) - size + 1))]


def term_index(term: str) -> int:
    """The sparse-vector index of a term (CRC-32, 31 bits)."""
    return zlib.crc32(term.encode("utf-8")) & 0x7FFFFFFF


class Bm25Encoder:
    """BM25 sparse vectors of one analysis: a document's term-frequency weights and a query's term counts."""

    def __init__(self, analyzer: Analyzer, *, k1: float = 1.2, b: float = 0.75) -> None:
        if k1 < 0 or not 0.0 <= b <= 1.0:
            raise ValueError(f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={k1}, b={b}.")
        self.analyzer = analyzer
        self.k1 = k1
        self.b = b

    def length(self, text: str) -> int:
        """The number of terms of `text` under this analysis."""
        return len(self.analyzer(text))

    def document(self, text: str, avg_len: float) -> tuple[list[int], list[float]]:
        """The document vector of `text`, its length normalised against `avg_len` terms."""
        counts = Counter(term_index(term) for term in self.analyzer(text))
        norm = self.k1 * (1.0 - self.b + self.b * sum(counts.values()) / max(avg_len, 1.0))
        indices = sorted(counts)
        return indices, [counts[i] * (self.k1 + 1.0) / (counts[i] + norm) for i in indices]

    def query(self, text: str) -> tuple[list[int], list[float]]:
        """The query vector of `text`: each term's count (a repeated term weighs more, as in BM25's sum)."""
        counts = Counter(term_index(term) for term in self.analyzer(text))
        indices = sorted(counts)
        return indices, [float(counts[i]) for i in indices]
