"""
Small text helpers shared by the Gatehouse components: markdown-aware sentence splitting, content-word tokens
for lexical overlap, and the `[S1]` citation-marker syntax.

Everything here is a plain function with its defaults exposed as module constants, so a component can take the
tunable parts (stopwords, abbreviations, the marker pattern) as init parameters and pass them through.

Usage:
```python
from gatehouse.components.text import split_sentences, content_words, find_markers

split_sentences("To rotate a key:\\n1. Open Settings. [S1]\\n2. Click Rotate. [S1]")
# ['To rotate a key:', '1. Open Settings. [S1]', '2. Click Rotate. [S1]']
content_words("How do I rotate an API key?")   # {'rotat', 'api', 'key'}
find_markers("Keys expire. [S1, S3]")           # [(13, 21, ['S1', 'S3'])]
```
"""

import math
import re
import unicodedata
from functools import lru_cache
from typing import Callable, Iterable, NamedTuple

from gatehouse.document_stores.analysis import DEFAULT_STOPWORDS  # one list for the gates and the BM25 index

#: Lower-cased words that end with a period without ending a sentence.
DEFAULT_ABBREVIATIONS: frozenset[str] = frozenset(
    "e.g i.e etc vs cf al approx dept fig no nos mr mrs ms dr prof inc ltd co jr sr st eq ref vol p pp".split()
)

#: A citation marker: `[S1]`, `[S1, S3]`, `[s2; S4]`. Group 1 holds the ids.
DEFAULT_CITATION_PATTERN = r"\[\s*((?:S\d+)(?:\s*[,;]\s*S\d+)*)\s*\]"
_ID_PATTERN = re.compile(r"S\d+", re.IGNORECASE)

_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+•]|\d{1,3}[.)])\s+")
_ORDERED_ITEM = re.compile(r"^\s*\d{1,3}[.)]\s+")
_FENCE = re.compile(r"^\s*(```|~~~)")
_TABLE = re.compile(r"^\s*\|")
_SENTENCE_END = re.compile(r"[.!?…]+[\"'”’)\]]*\s+")
_WORD = re.compile(r"\w+", re.UNICODE)
_TERM = re.compile(r"[^\W_]+")
_SPACES = re.compile(r"\s+")


class Unit(NamedTuple):
    """
    One piece of a markdown text: a prose sentence, a list item, a heading, a code block or a table.

    `block` numbers the markdown block (paragraph, list item, heading...) the unit came from, so that sentences of
    one paragraph can be told apart from those of the next.
    """

    kind: str  # "sentence" | "item" | "heading" | "code" | "table"
    text: str
    block: int


def normalize_space(text: str) -> str:
    """
    Collapse runs of whitespace to one space and strip the ends.

    :param text: Any text.
    :returns: The text on one line.
    """
    return _SPACES.sub(" ", text).strip()


#: Terminal escape sequences: CSI (`ESC [ ... m`, cursor moves, clear screen), OSC (`ESC ] ... BEL`, window titles,
#: hyperlinks), DCS/SOS/PM/APC strings, two-character escapes, and the 8-bit CSI.
_TERMINAL_ESCAPE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x9b[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?|\x1b[ -~]?"
)
#: Characters that reorder or hide text (bidirectional overrides and isolates, the marks that steer them).
BIDI_CONTROLS = frozenset("\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def printable(text: str) -> str:
    """
    Text safe to show on a terminal or in a plain-text field: escape sequences, control characters (but newline and
    tab) and bidirectional controls removed.

    :param text: Any text, e.g. from a document.
    :returns: The text without them (`"\\x1b[2Jhi\\u202e"` -> `"hi"`).
    """
    text = _TERMINAL_ESCAPE.sub("", text)
    return "".join(
        char for char in text
        if char in "\n\t" or (unicodedata.category(char) != "Cc" and char not in BIDI_CONTROLS)
    )


def strip_heading_markers(text: str) -> str:
    """
    Remove leading markdown heading markers (`## `).

    :param text: A line of text.
    :returns: The text without heading markers.
    """
    return _HEADING.sub("", text).strip()


def strip_list_marker(text: str) -> str:
    """
    Remove a leading list marker (`- `, `* `, `1. `, `2) `).

    :param text: A line of text.
    :returns: The text without its list marker.
    """
    return _LIST_ITEM.sub("", text, count=1).strip()


def is_list_item(text: str) -> bool:
    """Whether the text starts with a markdown list marker."""
    return bool(_LIST_ITEM.match(text))


def is_ordered_item(text: str) -> bool:
    """Whether the text starts with a numbered list marker (`1.`, `2)`)."""
    return bool(_ORDERED_ITEM.match(text))


def _blocks(text: str) -> list[tuple[str, str]]:
    """Group lines into markdown blocks: (kind, text) with kind paragraph | item | heading | code | table."""
    blocks: list[tuple[str, list[str]]] = []
    current: tuple[str, list[str]] | None = None
    in_fence = False
    for line in text.splitlines():
        if in_fence:
            assert current is not None
            current[1].append(line)
            if _FENCE.match(line):
                in_fence = False
                current = None
            continue
        if _FENCE.match(line):
            current = ("code", [line])
            blocks.append(current)
            in_fence = True
            continue
        if not line.strip():
            current = None
            continue
        if _HEADING.match(line):
            blocks.append(("heading", [line]))
            current = None
        elif _LIST_ITEM.match(line):
            current = ("item", [line])
            blocks.append(current)
        elif _TABLE.match(line):
            if current is None or current[0] != "table":
                current = ("table", [])
                blocks.append(current)
            current[1].append(line)
        elif current is not None and current[0] in ("paragraph", "item"):
            current[1].append(line)  # continuation line
        else:
            current = ("paragraph", [line])
            blocks.append(current)
    return [(kind, "\n".join(lines)) for kind, lines in blocks]


def _sentence_spans(
    text: str, abbreviations: Iterable[str], citation_pattern: str
) -> list[str]:
    """Split one paragraph into sentences, keeping citation markers with the sentence before them."""
    abbreviations = {a.lower().rstrip(".") for a in abbreviations}
    pieces: list[str] = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        end = match.end()
        if end >= len(text):
            break
        following = text[end]
        if following.islower():
            continue
        before = text[start : match.start() + 1]
        last_word = before.split()[-1].lower().rstrip(".!?…") if before.split() else ""
        is_initial = len(last_word) == 1 and last_word.isalpha()
        if match.group(0).startswith(".") and (last_word in abbreviations or is_initial):
            continue
        pieces.append(text[start:end])
        start = end
    pieces.append(text[start:])
    # A piece that starts with citation markers belongs to the sentence before it: "Keys expire. [S1] Next."
    leading = re.compile(r"^\s*(?:" + citation_pattern + r"\s*)+", re.IGNORECASE)
    merged: list[str] = []
    for piece in pieces:
        match = leading.match(piece)
        if match and merged:
            merged[-1] = merged[-1].rstrip() + " " + match.group(0).strip()
            piece = piece[match.end() :]
        if piece.strip():
            merged.append(piece)
    return [normalize_space(p) for p in merged if p.strip()]


def split_units(
    text: str,
    *,
    abbreviations: Iterable[str] = DEFAULT_ABBREVIATIONS,
    citation_pattern: str = DEFAULT_CITATION_PATTERN,
) -> list[Unit]:
    """
    Split markdown text into units: headings, list items and code/table blocks whole, paragraphs into sentences.

    Sentence and list-item texts have their whitespace collapsed to single spaces, so a unit is a substring of
    the text once whitespace is normalised. Citation markers that follow a sentence end stay with that sentence.

    :param text: Markdown or plain text.
    :param abbreviations: Words after which a period does not end a sentence.
    :param citation_pattern: Regex of a citation marker.
    :returns: The units in reading order.
    """
    units: list[Unit] = []
    for block_index, (kind, block) in enumerate(_blocks(text or "")):
        if kind == "paragraph":
            for sentence in _sentence_spans(block, abbreviations, citation_pattern):
                units.append(Unit("sentence", sentence, block_index))
        elif kind in ("item", "heading"):
            units.append(Unit(kind, normalize_space(block), block_index))
        else:
            units.append(Unit(kind, block.strip("\n"), block_index))
    return units


def split_sentences(
    text: str,
    *,
    abbreviations: Iterable[str] = DEFAULT_ABBREVIATIONS,
    citation_pattern: str = DEFAULT_CITATION_PATTERN,
) -> list[str]:
    """
    Split markdown text into sentences; headings, list items, code blocks and tables count as one sentence each.

    :param text: Markdown or plain text.
    :param abbreviations: Words after which a period does not end a sentence.
    :param citation_pattern: Regex of a citation marker.
    :returns: The sentences in reading order.
    """
    return [u.text for u in split_units(text, abbreviations=abbreviations, citation_pattern=citation_pattern)]


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


def estimate_tokens(text: str, tokens_per_word: float = 1.3) -> int:
    """
    Estimate the LLM token count of a text as whitespace words times `tokens_per_word`, rounded up.

    :param text: Any text.
    :param tokens_per_word: Average tokens per English word (about 1.3 for BPE tokenisers).
    :returns: The estimated token count.
    """
    return math.ceil(len((text or "").split()) * tokens_per_word)


def find_markers(text: str, citation_pattern: str = DEFAULT_CITATION_PATTERN) -> list[tuple[int, int, list[str]]]:
    """
    Citation markers in a text.

    :param text: Any text.
    :param citation_pattern: Regex of a marker whose group 1 holds the ids.
    :returns: `(start, end, ids)` per marker, ids upper-cased (`["S1", "S3"]`).
    """
    return [
        (m.start(), m.end(), [i.upper() for i in _ID_PATTERN.findall(m.group(1))])
        for m in re.finditer(citation_pattern, text or "", re.IGNORECASE)
    ]


def strip_markers(text: str, citation_pattern: str = DEFAULT_CITATION_PATTERN) -> str:
    """
    Remove citation markers and tidy the spaces they leave.

    :param text: Any text.
    :param citation_pattern: Regex of a marker.
    :returns: The text without markers.
    """
    return re.sub(r"[ \t]*" + citation_pattern, "", text or "", flags=re.IGNORECASE).strip()


def rewrite_markers(
    text: str,
    keep: Callable[[list[str]], list[str]],
    citation_pattern: str = DEFAULT_CITATION_PATTERN,
) -> str:
    """
    Rewrite every citation marker through `keep`, which returns the ids to keep; a marker left with no ids is
    removed together with the spaces before it.

    :param text: Any text.
    :param keep: Called with a marker's ids (`["S1", "S9"]`), returns the ids to write back (`["S1"]`).
    :param citation_pattern: Regex of a marker whose group 1 holds the ids.
    :returns: The rewritten text.
    """
    compiled = re.compile(r"([ \t]*)(" + citation_pattern + r")", re.IGNORECASE)

    def replace(match: re.Match[str]) -> str:
        ids = keep([i.upper() for i in _ID_PATTERN.findall(match.group(3))])
        return f"{match.group(1)}[{', '.join(ids)}]" if ids else ""

    return compiled.sub(replace, text or "")


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
