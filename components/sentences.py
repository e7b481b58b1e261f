"""
How a chunk is cut into the sentences that `SentenceEmbedder` embeds at ingest, and how the vectors of many chunks'
sentences, embedded in one batch, are cut back into each chunk's.

Usage:
```python
import numpy as np
from haystack import Document
from gatehouse.components.sentences import per_chunk, sentence_parts, sentence_settings, sentence_texts

settings = sentence_settings({"context_fields": ["title"], "min_words": 3})
sentence_texts(Document(content="One. Two words here.", meta={"title": "T"}), settings)  # ["T\\nTwo words here."]
sentence_parts(Document(content="One. Two words here.", meta={"title": "T"}), settings)  # ["Two words here."]
per_chunk(np.arange(3), [["a", "b"], [], ["c"]])   # [array([0, 1]), array([], dtype=int64), array([2])]
```
"""

import re
from typing import Any

import numpy as np
from haystack import Document

SENTENCE_PATTERN = r"(?<=[.!?])\s+(?=[A-Z0-9(\[])"
_LETTER = re.compile(r"[^\W\d_]")
ROW_WORDS = 24
ROWS_EMBEDDED_WORDS = 64
_ROW_START = re.compile(r"\s*[-*+]\s[^;\n]{1,80}?:\s")  # a list item's first `name: ` (its earliest)
_ROW_NEXT_CELL = re.compile(r";\s[^;\n]{1,80}?:\s")  # a later `; name: `
DEFAULTS: dict[str, Any] = {"pattern": SENTENCE_PATTERN, "context_fields": ["title"], "min_words": 1}


def is_table_row(line: str) -> bool:
    """
    Whether a line is a table row or a record: a list item of two `name: value` pairs or more
    (`- Name: Ada; Team: Data`, `tables.py`). Two anchored or literal-led patterns, so the time is linear in the
    line's length (one pattern searched from every position of a run of spaces was quadratic).
    """
    start = _ROW_START.match(line)
    return start is not None and _ROW_NEXT_CELL.search(line, start.end()) is not None


def has_table_row(text: str) -> bool:
    """Whether any line of a text is a table row (`is_table_row`)."""
    return any(is_table_row(line) for line in text.split("\n"))


def sentence_settings(sentences: dict[str, Any] | None) -> dict[str, Any]:
    """
    The complete, checked sentence settings.

    :param sentences: `pattern` (regular expression that splits sentences), `context_fields` (metadata fields put
        before each sentence, each on its own line) and `min_words` (shorter sentences are left out); missing keys
        take the defaults (`DEFAULTS`).
    :returns: All three settings.
    :raises ValueError: On an unknown key, a pattern that does not compile or `min_words` below 1.
    """
    given = sentences or {}
    unknown = sorted(set(given) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"Unknown sentence setting(s) {unknown}: use {', '.join(DEFAULTS)}.")
    merged = {**DEFAULTS, **given}
    try:
        re.compile(merged["pattern"])
    except re.error as error:
        raise ValueError(f"The sentence pattern {merged['pattern']!r} does not compile: {error}.") from error
    if int(merged["min_words"]) < 1:
        raise ValueError(f"min_words must be at least 1, got {merged['min_words']}.")
    return {"pattern": merged["pattern"], "context_fields": list(merged["context_fields"]),
            "min_words": int(merged["min_words"])}


def sentence_parts(document: Document, settings: dict[str, Any]) -> list[str]:
    """
    A chunk's sentences, as `sentence_texts` embeds them but without their context fields: a table row
    (`is_table_row`) is a sentence of its own, as its `row_words`.

    :param document: A chunk.
    :param settings: The output of `sentence_settings`.
    :returns: The sentences, in order.
    """
    parts = [piece.strip() for part in re.split(settings["pattern"], document.content or "")
             for piece in _rows_apart(part)]
    return [part for part in parts if part and len(part.split()) >= settings["min_words"]]


def sentence_texts(document: Document, settings: dict[str, Any]) -> list[str]:
    """
    The texts a chunk's sentences are embedded as: its context fields and one sentence. A table row (`is_table_row`) is
    a sentence of its own, so that a row is found by what is in it however many rows its chunk holds: its cells that
    hold words (a name, a place, a code), figures left to the chunk's vector and BM25 (`row_words`).

    :param document: A chunk.
    :param settings: The output of `sentence_settings`.
    :returns: One text per sentence, in order.
    """
    context = [str(document.meta[field]) for field in settings["context_fields"] if document.meta.get(field)]
    return ["\n".join([*context, part]) for part in sentence_parts(document, settings)]


def row_words(line: str) -> str:
    """
    A table row's cells that hold a letter, with their column names (`Name: Ada; Desk: 4B`; `Seats: 10` left out), at
    most `ROW_WORDS` words: a record is named by its first cells (a name, an ID, a code), its long texts are its
    chunk's to embed.
    """
    cells = line.strip().lstrip("-*+").strip().split("; ")
    words = "; ".join(cell for cell in cells if _LETTER.search(cell.split(": ", 1)[-1])).split()
    return " ".join(words[:ROW_WORDS])


def rows_as_words(text: str) -> str:
    """
    A chunk's text as it is embedded: each table row line as its `row_words` (a row of figures only left out:
    figures are BM25's to match), the rows' words at most `ROWS_EMBEDDED_WORDS` (each row has a vector of its own),
    the other lines whole.
    """
    if not has_table_row(text):
        return text
    lines, budget = [], ROWS_EMBEDDED_WORDS
    for line in text.split("\n"):
        if is_table_row(line):
            words = row_words(line).split()[:budget] if budget > 0 else []
            budget -= len(words)
            line = " ".join(words)
        if line:
            lines.append(line)
    return "\n".join(lines)


def _rows_apart(text: str) -> list[str]:
    """A text cut before and after each table row line, a row as its `row_words` (other lines stay together)."""
    if "\n" not in text and not is_table_row(text):
        return [text]
    pieces: list[list[str]] = [[]]
    for line in text.split("\n"):
        if is_table_row(line):
            pieces += [[row_words(line)], []]
        else:
            pieces[-1].append(line)
    return ["\n".join(piece) for piece in pieces if piece]


def per_chunk(rows: np.ndarray, texts: list[list[str]]) -> list[np.ndarray]:
    """
    Rows computed for all chunks' texts at once (in order, flattened), cut back into each chunk's.

    :param rows: One row (a vector, a score) per text of `texts`, flattened in order.
    :param texts: Each chunk's texts.
    :returns: Each chunk's rows, in the order of `texts` (empty for a chunk without texts).
    """
    return np.split(rows, np.cumsum([len(chunk) for chunk in texts])[:-1]) if texts else []
