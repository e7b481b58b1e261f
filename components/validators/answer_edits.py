"""
The citation verifier's edits of the answer text: which passage each marker id names, marker ids that point nowhere
removed, failed sentences removed (with their markers) and re-attributed sentences' markers rewritten.

Usage:
```python
from haystack import Document
from gatehouse.components.validators.answer_edits import passages_by_id, without_invalid_markers

by_id = passages_by_id([Document(content="API keys expire after 90 days.", meta={"source_id": "S1"})])
without_invalid_markers("Keys expire after 90 days. [S1, S9]", set(by_id))
# ("Keys expire after 90 days. [S1]", ["S9"])
```
"""

import re
from typing import Any

from haystack import Document

from gatehouse.components.citation_markers import DEFAULT_CITATION_PATTERN, rewrite_markers


def passages_by_id(passages: list[Document]) -> dict[str, Document]:
    """
    The passages by the id their markers use: `meta["source_id"]` (upper-cased), else `S<position>`; the first
    passage of an id wins.

    :param passages: The passages an answer may cite.
    :returns: Each id's passage.
    """
    by_id: dict[str, Document] = {}
    for index, passage in enumerate(passages):
        by_id.setdefault(str((passage.meta or {}).get("source_id") or f"S{index + 1}").upper(), passage)
    return by_id


def without_invalid_markers(
    answer: str, valid: set[str], citation_pattern: str = DEFAULT_CITATION_PATTERN
) -> tuple[str, list[str]]:
    """
    Remove the marker ids that point nowhere (and repeated ids within a marker).

    :param answer: The answer or a part of it.
    :param valid: The ids that name a passage.
    :param citation_pattern: Regex of a citation marker whose group 1 holds the ids.
    :returns: The new answer (the same text when no id was removed) and the removed ids in order of first use.
    """
    removed: list[str] = []

    def keep(ids: list[str]) -> list[str]:
        kept: list[str] = []
        for marker_id in ids:
            if marker_id in valid:
                if marker_id not in kept:
                    kept.append(marker_id)
            elif marker_id not in removed:
                removed.append(marker_id)
        return kept

    cleaned = rewrite_markers(answer, keep, citation_pattern)
    return (cleaned if removed else answer), removed


def with_reattributed(
    answer: str, sentences: list[dict[str, Any]], valid: set[str], citation_pattern: str = DEFAULT_CITATION_PATTERN
) -> str:
    """
    The answer with each re-attributed sentence's markers rewritten: its `unit` in place of its `original_unit`.

    :param answer: The answer, its invalid marker ids already removed.
    :param sentences: The re-attributed sentences' verdicts.
    :param valid: The ids that name a passage.
    :param citation_pattern: Regex of a citation marker whose group 1 holds the ids.
    :returns: The new answer.
    """
    for sentence in sentences:
        unit, _ = without_invalid_markers(sentence["original_unit"], valid, citation_pattern)
        answer = re.sub(_loose(unit), lambda _match, new=sentence["unit"]: new, answer, count=1)
    return answer


def without_sentences(
    answer: str, failed: list[dict[str, Any]], valid: set[str], citation_pattern: str = DEFAULT_CITATION_PATTERN
) -> str:
    """
    The answer without the failed sentences (and their markers); emptied lines and paragraphs close up.

    :param answer: The answer, its invalid marker ids already removed.
    :param failed: The verdicts of the sentences to remove (their `unit`).
    :param valid: The ids that name a passage.
    :param citation_pattern: Regex of a citation marker whose group 1 holds the ids.
    :returns: The new answer.
    """
    for sentence in failed:
        unit, _ = without_invalid_markers(sentence["unit"], valid, citation_pattern)
        answer = re.sub(r"[ \t]*" + _loose(unit) + r"[ \t]*", " ", answer, count=1)
    lines = [line.strip(" \t") if line.strip() else "" for line in answer.splitlines()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _loose(text: str) -> str:
    """A regex matching `text` however its words are spaced or broken across lines."""
    return r"\s*".join(re.escape(word) for word in text.split())
