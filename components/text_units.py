"""
Markdown-aware splitting of a text into units: headings, list items, code blocks and tables whole, paragraphs into
sentences (abbreviations and initials do not end one; citation markers stay with the sentence before them), and the
small helpers around them (list and heading markers, whitespace).

Usage:
```python
from gatehouse.components.text_units import split_sentences, split_units

split_sentences("To rotate a key:\\n1. Open Settings. [S1]\\n2. Click Rotate. [S1]")
# ['To rotate a key:', '1. Open Settings. [S1]', '2. Click Rotate. [S1]']
[u.kind for u in split_units("# Keys\\n\\nKeys expire. Rotate them.")]   # ['heading', 'sentence', 'sentence']
```
"""

import re
from typing import Iterable, NamedTuple

from gatehouse.components.citation_markers import DEFAULT_CITATION_PATTERN

#: Lower-cased words that end with a period without ending a sentence.
DEFAULT_ABBREVIATIONS: frozenset[str] = frozenset(
    "e.g i.e etc vs cf al approx dept fig no nos mr mrs ms dr prof inc ltd co jr sr st eq ref vol p pp".split()
)

_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+•]|\d{1,3}[.)])\s+")
_ORDERED_ITEM = re.compile(r"^\s*\d{1,3}[.)]\s+")
_FENCE = re.compile(r"^\s*(```|~~~)")
_TABLE = re.compile(r"^\s*\|")
_SENTENCE_END = re.compile(r"(?<![.!?…])[.!?…]+[\"'”’)\]]*\s+")  # tried from a run's first mark only
_SPACES = re.compile(r"\s+")
#: How far back (characters) the word before a sentence end is read: further than any abbreviation or initial.
WORD_REACH = 64


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


def shortened(text: str, limit: int) -> str:
    """
    Text of at most `limit` characters: whole when it fits, else cut at a word and ended with "…" (the ellipsis
    within `limit`).

    :param text: Text on one line (see `normalize_space`).
    :param limit: The most characters returned.
    :returns: The text, or its start cut at a word, without a dangling `,;:-›`, and "…".
    """
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    if " " in cut:
        cut = cut[: cut.rfind(" ")]
    return cut.rstrip(" ,;:-›") + "…"


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
        # The word before the mark, from at most WORD_REACH characters back: the text since `start` grows with each
        # abbreviation skipped ("A. B. C. ..."), and reading all of it at each mark took quadratic time.
        words = text[max(start, match.start() - WORD_REACH) : match.start() + 1].split()
        last_word = words[-1].lower().rstrip(".!?…") if words else ""
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
    the text once whitespace is normalised. Citation markers that follow a sentence end stay with that sentence;
    markers on a line of their own after a code block or a table stay with that block.

    :param text: Markdown or plain text.
    :param abbreviations: Words after which a period does not end a sentence.
    :param citation_pattern: Regex of a citation marker.
    :returns: The units in reading order.
    """
    units: list[Unit] = []
    for block_index, (kind, block) in enumerate(_blocks(text or "")):
        if kind == "paragraph" and units and units[-1].kind in ("code", "table") and block.strip() \
                and not re.sub(citation_pattern, "", block).strip():
            # the markers on a line of their own after a code block or table cite that block
            units[-1] = units[-1]._replace(text=f"{units[-1].text}\n\n{block.strip()}")
            continue
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
