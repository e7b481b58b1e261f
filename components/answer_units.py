"""
Answer units: the pieces of a passage that the document itself makes a unit, so that an answer quotes what the
document says together with what it belongs to.

| kind | what | shown as |
| --- | --- | --- |
| `sentence` | a prose sentence | the sentence |
| `item` | one list item (a table row is an item that keeps its column headers, a record shown alone) | its lead-in, then the item |
| `list` | a list with the sentence ending in `:` that introduces it, or a numbered list (a procedure) | the lead-in, then the items |
| `block` | a key-value block: a heading followed by `Key: value` items (a setting with its `Default:` and `Description:`) | the heading, then the items |
| `code` | a fenced code block with the sentence that leads into it | the lead-in, then the code |
| `section` | a short section: its heading and its few sentences or items | the heading, then each of them |

Every unit has a `context`: the section heading path of its passage and the headings inside the passage above it,
and for an item its list's lead-in. What a unit is about is often written there only ("### PORT" / "- Default: 1416").

A table's rows make no `list` unit: each row is a record (`fields`), and an answer quotes the row that matches with its
table's caption, never the table. An answer shows a unit with what completes it (`completed`): an item as its list
with the lead-in, then the units that follow it in its section (the next sentence or code block often holds the value
a sentence names), within a reading bound; or a passage's section from its start (`section_start`).

Usage:
```python
from haystack import Document
from gatehouse.components.answer_units import answer_units, render

passage = Document(content="#### PORT\\n\\n- Default: 1416\\n- Description: Port for the server",
                   meta={"source_id": "S1", "section": "Settings"})
units = answer_units([passage])
[u.kind for u in units]          # ["item", "item", "block"]
render(units[-1], "S1")          # "PORT: [S1]\\n\\n- Default: 1416 [S1]\\n- Description: Port for the server [S1]"
```
"""

import math
import re
from dataclasses import dataclass
from typing import Any, Iterable

from gatehouse.components.citation_markers import strip_markers
from gatehouse.components.sentences import SENTENCE_PATTERN
from gatehouse.components.terms import text_terms
from gatehouse.components.text_units import (
    DEFAULT_ABBREVIATIONS,
    Unit,
    is_ordered_item,
    normalize_space,
    split_units,
    strip_heading_markers,
    strip_list_marker,
)

KINDS = ("sentence", "item", "list", "block", "code", "section")
#: `Key: value` in a list item: a key of at most four words before the colon.
_KEY_VALUE = re.compile(r"^(?:\*\*|`)?[\w./`*() -]{1,40}?(?:\*\*|`)?\s*:\s+\S")
#: Questions that ask how to do something: a list of steps or a code block (with its lead-in) answers them best.
PROCEDURE_QUESTION = re.compile(r"^\W*(?:and\s+)?(?:how (?:do|can|should|would|could|to) (?:i|we|you|one)?\b|how to\b|"
                                r"what are the steps|walk me through)|\bsteps? (?:to|for)\b", re.IGNORECASE)
_WORD = re.compile(r"[^\W_]")  # a unit without one ("---", a rule) says nothing
_LEADING_MARKER = re.compile(r"^\s*(?:[-*+]|\d{1,3}[.)])\s+")
#: Marks where a shortened unit leaves text out (the citation still points at the whole passage).
CUT = "…"
SHORT_SECTION_UNITS = 4
SHORT_SECTION_WORDS = 60
MAX_FIELD_NAME_CHARS = 60  # a longer text before ": " is a sentence, not a field's name
MAX_FIELD_NAME_WORDS = 6


@dataclass(frozen=True)
class AnswerUnit:
    """One unit of a passage: its kind, where it is (`passage`, units `first`..`last` of `split_units`), its text."""

    kind: str
    passage: int
    first: int
    last: int
    text: str
    context: str
    lead: str = ""  # the line shown before the unit: a list's lead-in, a block's heading, a code block's lead-in
    items: tuple[str, ...] = ()  # the items of a list, block or item unit (list markers kept)
    more: tuple[str, ...] = ()  # a list's or block's items after the most shown (`max_list_items`)

    @property
    def key(self) -> tuple[int, int, int]:
        """Identifies the unit within the passages: `(passage, first, last)`."""
        return self.passage, self.first, self.last


def _clean(text: str) -> str:
    return normalize_space(strip_heading_markers(strip_markers(text)))


def _is_key_value(item: str) -> bool:
    """One `Key: value` pair ("Default: 1416"); a table row ("A: x; B: y") is not."""
    key = strip_list_marker(item)
    return bool(_KEY_VALUE.match(key)) and len(key.split(":", 1)[0].split()) <= 4 and not re.search(r";\s*[\w ]+:", key)


def passage_units(passage: Any, index: int, *, abbreviations: Iterable[str] = DEFAULT_ABBREVIATIONS,
                  max_list_items: int = 8) -> list[AnswerUnit]:
    """
    The answer units of one passage, in reading order (a list's `list` or `block` unit after its items).

    :param passage: A Haystack Document (its `meta["section"]` / `heading_path` is the context).
    :param index: The passage's position (stored on each unit).
    :param abbreviations: Words whose trailing period does not end a sentence.
    :param max_list_items: Most items shown in a `list` or `block` unit.
    """
    meta = passage.meta or {}
    section = [str(h) for h in (meta.get("heading_path") or ([meta["section"]] if meta.get("section") else []))]
    units = split_units(passage.content or "", abbreviations=abbreviations)
    out: list[AnswerUnit] = []
    inner: list[str] = []  # headings inside the passage, the last one the nearest
    position = 0
    while position < len(units):
        unit = units[position]
        context = " › ".join([*section, *inner[-1:]])
        if unit.kind == "heading":
            inner.append(_clean(unit.text))
            position += 1
            continue
        if unit.kind == "sentence":
            text = _clean(unit.text)
            if text and not (text.endswith(":") and position + 1 < len(units)
                             and units[position + 1].kind in ("item", "code")):
                out.append(AnswerUnit("sentence", index, position, position, text, context))
            position += 1
            continue
        if unit.kind == "code":
            lead, first = _lead_in(units, position)
            code = strip_markers(unit.text).strip("\n")
            text = f"{lead}\n\n{code}" if lead else code
            out.append(AnswerUnit("code", index, first, position, text, context, lead=lead))
            position += 1
            continue
        if unit.kind == "item":
            end = position
            while end + 1 < len(units) and units[end + 1].kind == "item":
                end += 1
            out.extend(_list_units(units, position, end, index, context, inner, section, max_list_items))
            position = end + 1
            continue
        position += 1  # a legacy table block: its rows are not units
    return out + _short_sections(units, index, section)


def _short_sections(units: list[Unit], index: int, section: list[str]) -> list[AnswerUnit]:
    """
    A short section (a heading and at most `SHORT_SECTION_UNITS` sentences or items, `SHORT_SECTION_WORDS` words, no
    code) as one unit: "System requirements" / "Python 3.10 or later." / "Note: ..." answers "what are the requirements".
    """
    out = []
    starts = [0] + [i + 1 for i, unit in enumerate(units) if unit.kind == "heading"]
    for number, start in enumerate(starts):
        end = (starts[number + 1] - 1) if number + 1 < len(starts) else len(units)
        body = units[start:end]
        heading = _clean(units[start - 1].text) if start > 0 else (section[-1] if section else "")
        if not heading or not 2 <= len(body) <= SHORT_SECTION_UNITS or any(u.kind not in ("sentence", "item")
                                                                           for u in body) \
                or all(u.kind == "item" for u in body):  # a list alone is a list (or block) unit already
            continue
        texts = [normalize_space(strip_markers(u.text)) for u in body]
        if sum(len(t.split()) for t in texts) > SHORT_SECTION_WORDS:
            continue
        context = " › ".join([*section, *([heading] if start > 0 else [])])
        out.append(AnswerUnit("section", index, start, end - 1, "\n".join([heading, *texts]), context, lead=heading,
                              items=tuple(texts)))
    return out


def _lead_in(units: list[Unit], position: int) -> tuple[str, int]:
    """The sentence directly before a list or code block that leads into it (ends with ':'), and its index."""
    if position > 0 and units[position - 1].kind == "sentence":
        text = _clean(units[position - 1].text)
        if text.endswith(":"):
            return text, position - 1
    return "", position


def _list_units(units: list[Unit], start: int, end: int, index: int, context: str, inner: list[str],
                section: list[str], max_items: int) -> list[AnswerUnit]:
    items = [normalize_space(strip_markers(units[i].text)) for i in range(start, end + 1)]
    lead, first = _lead_in(units, start)
    heading_above = (start > 0 and units[start - 1].kind == "heading") or (start == 0 and bool(section))
    label = lead or (inner[-1] if inner and heading_above and start > 0 else (section[-1] if section else ""))
    out = [AnswerUnit("item", index, i, i, _clean(items[i - start]), context, lead=label, items=(items[i - start],))
           for i in range(start, end + 1) if _clean(items[i - start])]
    if all(is_row(unit) for unit in out):  # a table's rows are records, each its own answer with the caption
        return out
    shown = tuple(items[:max_items])
    if len(items) >= 2 and heading_above and not lead and sum(map(_is_key_value, items)) >= 0.5 * len(items):
        text = "\n".join([label, *shown]) if label else "\n".join(shown)
        out.append(AnswerUnit("block", index, start, end, text, context, lead=label, items=shown,
                              more=tuple(items[max_items:])))
    elif len(items) >= 2 and (lead or all(is_ordered_item(item) for item in items)):
        text = "\n".join([lead, *shown]) if lead else "\n".join(shown)
        out.append(AnswerUnit("list", index, first, end, text, context, lead=lead, items=shown,
                              more=tuple(items[max_items:])))
    return out


def answer_units(passages: list[Any], *, abbreviations: Iterable[str] = DEFAULT_ABBREVIATIONS,
                 max_list_items: int = 8) -> list[AnswerUnit]:
    """The answer units of every passage, passage by passage (see `passage_units`)."""
    return [unit for index, passage in enumerate(passages)
            for unit in passage_units(passage, index, abbreviations=abbreviations, max_list_items=max_list_items)]


def flow(units: list[AnswerUnit], passage: int) -> list[AnswerUnit]:
    """
    One passage's units as a reader meets them, each once: sentences, code blocks, and each list as its `list` or
    `block` unit (its items alone when it has none), in reading order (a unit without a word, a rule, left out).
    """
    own = [u for u in units if u.passage == passage and u.kind != "section" and _WORD.search(u.text)]
    lists = [u for u in own if u.kind in ("list", "block")]
    covered = [u for u in own if u.kind == "item" and any(w.first <= u.first <= w.last for w in lists)]
    return sorted((u for u in own if u not in covered), key=lambda u: (u.first, -u.last))


def fields(unit: AnswerUnit) -> list[tuple[str, str]]:
    """
    The `name: value` fields of a record item: a table row's cells with their column names (`Name: Ada; Team: Data`,
    a cell without a column name as a value with the name ""; a group label before ` › ` left out), a key-value item's
    one field; [] for any other unit.
    """
    if unit.kind != "item":
        return []
    found = _line_fields(unit.text)
    row = len(found) >= 2 and sum(bool(name) for name, _ in found) >= 2
    return found if row or (len(found) == 1 and _is_key_value(unit.text)) else []


def _line_fields(line: str) -> list[tuple[str, str]]:
    """A line's `name: value` parts split at `; ` (a part without a name continues the value before it)."""
    text = strip_list_marker(line)
    label, mark, rest = text.partition(" › ")
    text = rest if mark and ":" not in label else text
    out: list[tuple[str, str]] = []
    for part in text.split("; "):
        name, colon, value = part.partition(": ")
        if colon and name.strip() and len(name) <= MAX_FIELD_NAME_CHARS and len(name.split()) <= MAX_FIELD_NAME_WORDS:
            out.append((name.strip(), value.strip()))
        elif out:
            out[-1] = (out[-1][0], f"{out[-1][1]}; {part}")
        else:
            out.append(("", part.strip()))
    return out


def is_row(unit: AnswerUnit) -> bool:
    """Whether a unit is a table row (an item of two named fields or more): it answers alone, with its lead."""
    return unit.kind == "item" and len(fields(unit)) >= 2


def reading_length(unit: AnswerUnit) -> int:
    """How long a unit is to read, in words: its words, a code block's lines instead of its words (code is scanned a
    line at a time) plus its lead-in's words."""
    if unit.kind == "code":
        code = unit.text[len(unit.lead):] if unit.lead else unit.text
        return len(unit.lead.split()) + sum(1 for line in code.splitlines() if line.strip() and not
                                            line.lstrip().startswith(("```", "~~~")))
    return len(unit.text.split())


def completed(key: AnswerUnit, units: list[AnswerUnit], *, max_words: int = 80,
              max_items: int = 8) -> list[AnswerUnit]:
    """
    The key unit and what completes it, in the order shown: a table row alone (its lead shows its caption), an item
    as its list (with the lead-in, when the list has a unit), then the units that follow it in its section while the
    answer stays within `max_words` words (`reading_length`) and `max_items` list items or rows (one procedure per
    answer: a procedure's completion stops before another one).

    :param key: The unit that answers.
    :param units: The units of the passages (`answer_units`).
    :param max_words: The answer's reading bound (the key unit is shown whatever its length).
    :param max_items: The most list items or rows the units that complete the key add up to with it.
    :returns: The units to show, the key's first.
    """
    if is_row(key):  # a table row is its own answer: the other rows are other records, not what completes it
        return [key]
    reading = flow(units, key.passage)
    if key.kind == "item":  # its list, unless the list is shown cut before it: then the item alone, with its lead
        key = next((u for u in reading if u.kind in ("list", "block") and u.first <= key.first <= u.last
                    and key.items[0] in u.items), key)
    shown, words, rows = [key], reading_length(key), len(key.items)
    for unit in reading:
        if unit.first <= shown[-1].last:
            continue
        if unit.context != key.context or words + reading_length(unit) > max_words or (is_procedure(key)
                                                                                and is_procedure(unit)) \
                or rows + len(unit.items) > max_items:
            break  # a heading in between (another section), the bounds, or a second procedure
        shown.append(unit)
        words += reading_length(unit)
        rows += len(unit.items)
    return shown


def excerpt(unit: AnswerUnit, terms: list[str], *, max_words: int = 80, max_fields: int = 8) -> AnswerUnit:
    """
    The part of a unit too long to read (more than `max_words` words, or a record of more than `max_fields` fields)
    that answers, `CUT` marking what is left out: a record (table row) as its first field, which names it, and the
    fields that say what the question asks (`_row_excerpt`); a long item or sentence (a paragraph, a slide's speaker
    notes) as the sentence the question's terms match best with the sentences around it; a list or block too long,
    or of more than `max_fields` items, as its items the terms match (`_items_excerpt`). A unit within the bounds, or
    code, is returned as it is.

    :param unit: The unit to show.
    :param terms: The question's terms (stemmed content words).
    :param max_words: The reading bound, the unit's lead included.
    :param max_fields: The most fields of a record shown.
    """
    budget = max(max_words - len(unit.lead.split()), 1)
    row = is_row(unit)
    if unit.kind in ("list", "block") and unit.more:
        return _items_excerpt(unit, terms, budget, max_fields)
    if unit.kind == "code" or (len(unit.text.split()) + len(unit.lead.split()) <= max_words
                               and not (row and len(fields(unit)) > max_fields)):
        return unit
    if unit.kind in ("list", "block"):
        return _items_excerpt(unit, terms, budget, max_fields)
    if row:
        line = _row_excerpt(unit, terms, budget - 1, max_fields)  # the list marker is a word too
    else:
        line = _sentences_excerpt(unit.items[0] if unit.items else unit.text, terms, budget)
    marker = _LEADING_MARKER.match(unit.items[0]).group(0) if unit.items and _LEADING_MARKER.match(unit.items[0]) \
        else ""
    return AnswerUnit(unit.kind, unit.passage, unit.first, unit.last, line, unit.context, lead=unit.lead,
                      items=(f"{marker}{line}",) if unit.items else ())


def _matches(text: str, terms: list[str]) -> int:
    words = text_terms(text)
    return sum(term in words for term in terms)


def _rarity(terms: list[str], parts: list[set[str]]) -> dict[str, float]:
    """Each term's weight among `parts` (the terms of each field or item): the fewer parts hold it, the more."""
    return {t: math.log(1.0 + len(parts) / (1.0 + sum(t in part for part in parts))) for t in terms}


def _row_excerpt(unit: AnswerUnit, terms: list[str], budget: int, max_fields: int) -> str:
    """
    A row's first field and the fields that say what the question asks, at most `max_fields` within `budget` words,
    in the row's order: chosen one at a time, the field whose question terms the kept ones lack weigh most, then
    whose name's terms weigh most (the field asked for; a term weighs more the fewer fields hold it; the first of
    equals).
    """
    found = fields(unit)
    words = [text_terms(f"{name} {value}") for name, value in found]
    names = [text_terms(name) for name, _ in found]
    weight = _rarity(terms, words)
    kept, size, covered = [0], len(f"{found[0][0]}: {found[0][1]}".split()), set(words[0])
    while len(kept) < max_fields:
        gains = {i: (sum(weight[t] for t in terms if t in words[i] and t not in covered),
                     sum(weight[t] for t in terms if t in names[i]))
                 for i in range(1, len(found)) if i not in kept
                 and size + len(f"{found[i][0]}: {found[i][1]}".split()) + 1 <= budget}  # the field and a cut
        best = max(gains, key=lambda i: (*gains[i], -i), default=None)
        if best is None or gains[best][0] <= 0:
            break
        kept.append(best)
        size += len(f"{found[best][0]}: {found[best][1]}".split()) + 1
        covered |= words[best]
    parts, last = [], -1
    for i in sorted(kept):
        if i > last + 1:
            parts.append(CUT)
        parts.append(f"{found[i][0]}: {found[i][1]}" if found[i][0] else found[i][1])
        last = i
    if last < len(found) - 1:
        parts.append(CUT)
    return _cut_words("; ".join(parts), terms, budget)


def _sentences_excerpt(text: str, terms: list[str], budget: int) -> str:
    """
    The sentence of `text` the terms match most (the first of equals) with its immediate context: the sentences next
    to it that the terms match too, then one more on each side, while within `budget` words; a `Name: ` the text
    starts with is kept.
    """
    marker = _LEADING_MARKER.match(text)
    body = text[marker.end():] if marker else text
    name = ""
    if _is_key_value(body):
        name, body = body.split(": ", 1)
        name = f"{name}: "
    budget = max(budget - len(name.split()) - (1 if marker else 0) - 2, 1)  # the marker and two cuts are words too
    sentences = [part for part in re.split(SENTENCE_PATTERN, body) if part.strip()]
    scores = [_matches(sentence, terms) for sentence in sentences]
    best = max(range(len(sentences)), key=lambda i: (scores[i], -i))
    first = last = best
    words = len(sentences[best].split())
    for matched_only in (True, False):
        grown = True
        while grown:
            grown = False
            for i in (first - 1, last + 1):
                if 0 <= i < len(sentences) and (scores[i] or not matched_only) \
                        and words + len(sentences[i].split()) <= budget:
                    first, last, words, grown = min(first, i), max(last, i), words + len(sentences[i].split()), True
            grown = grown and matched_only
    shown = _cut_words(" ".join(sentences[first:last + 1]), terms, budget)
    before = f"{CUT} " if first > 0 and not shown.startswith(CUT) else ""
    after = f" {CUT}" if last < len(sentences) - 1 and not shown.endswith(CUT) else ""
    return f"{name}{before}{shown}{after}"


def _cut_words(text: str, terms: list[str], budget: int) -> str:
    """`text` itself when within `budget` words, else `budget` words of it: the first window that holds the most of the
    terms, moved to have the words of its rarest terms (in the text) in its middle; `CUT` where words are left out."""
    words = text.split()
    if len(words) <= budget:
        return text
    found = [[term for term in terms if term in said] for said in map(text_terms, words)]
    times = {term: sum(term in said for said in found) for term in terms}
    counts = {term: 0 for term in terms}  # each term's words in the window, the window slid one word at a time
    for said in found[:budget]:
        for term in said:
            counts[term] += 1
    start, most = 0, sum(1 for term in terms if counts[term])
    for first in range(1, len(words) - budget + 1):
        for term in found[first - 1]:
            counts[term] -= 1
        for term in found[first + budget - 1]:
            counts[term] += 1
        held = sum(1 for term in terms if counts[term])
        if held > most:
            start, most = first, held
    inside = [t for t in terms if any(t in said for said in found[start:start + budget])]
    rare = [t for t in inside if times[t] == min((times[u] for u in inside), default=0)]
    hits = [i for i in range(start, start + budget) if any(term in found[i] for term in rare)]
    if hits:  # the words of its rarest terms in its middle: what leads to them and what follows (often the value)
        start = min(max((hits[0] + hits[-1]) // 2 - budget // 2, 0), len(words) - budget)
    shown = " ".join(words[start:start + budget])
    before = f"{CUT} " if start else ""
    after = f" {CUT}" if start + budget < len(words) else ""
    return f"{before}{shown}{after}"


def _items_excerpt(unit: AnswerUnit, terms: list[str], budget: int, max_items: int) -> AnswerUnit:
    """
    A list or block, its items cut to those that answer, in order, `CUT` where items are left out, at most `max_items`
    within `budget` words: chosen one at a time, the item whose question terms the kept ones lack weigh most (a term
    weighs more the fewer items hold it: the one item naming the code asked about is kept beside the item that
    shares the question's other words), then the item the terms match most, then the first; a list cut only for its
    length (no item matches beyond the shown ones) keeps its first items.
    """
    items = [*unit.items, *unit.more]
    said = [text_terms(item) for item in items]
    weight = _rarity(terms, said)
    size = [len(item.split()) for item in items]
    kept: list[int] = []
    words, covered = 0, set()
    while len(kept) < max_items:
        fits = [i for i in range(len(items)) if i not in kept and (not kept or words + size[i] <= budget)]
        if not fits:
            break
        best = max(fits, key=lambda i: (sum(weight[t] for t in terms if t in said[i] and t not in covered),
                                        sum(weight[t] for t in terms if t in said[i]), -i))
        kept.append(best)
        words += size[best]
        covered |= said[best]
    shown, last = [], -1
    for i in sorted(kept):
        if i > last + 1:
            shown.append(CUT)
        item = items[i]
        if len(item.split()) > budget:
            marker = _LEADING_MARKER.match(item)
            item = (marker.group(0) if marker else "") + _sentences_excerpt(item, terms, budget)
        shown.append(item)
        last = i
    if last < len(items) - 1:
        shown.append(CUT)
    return AnswerUnit(unit.kind, unit.passage, unit.first, unit.last, "\n".join([unit.lead, *shown]).strip(),
                      unit.context, lead=unit.lead, items=tuple(shown))


def section_start(passage: int, units: list[AnswerUnit], *, max_words: int = 80) -> list[AnswerUnit]:
    """
    A passage's section from its start, as many units as stay within `max_words` words (at least the first).

    :param passage: The passage's index.
    :param units: The units of the passages (`answer_units`).
    :param max_words: The reading bound.
    :returns: The units to show, in reading order.
    """
    shown: list[AnswerUnit] = []
    words = 0
    for unit in flow(units, passage):
        if shown and unit.first <= shown[-1].last:
            continue
        if shown and words + reading_length(unit) > max_words:
            break
        shown.append(unit)
        words += reading_length(unit)
    return shown


def shown_text(unit: AnswerUnit) -> str:
    """The unit as the gates read it: its lead (a list's lead-in, a block's heading) and its text, without a list marker."""
    text = f"{unit.lead} {unit.text}" if unit.lead and not unit.text.startswith(unit.lead) else unit.text
    return strip_list_marker(text)


def render(unit: AnswerUnit, source_id: str) -> str:
    """
    The unit as answer markdown, every line that states something followed by the citation marker `[S#]`.

    A list, block or item shows its lead (the lead-in sentence or the heading) first, a list without a lead-in its
    section's heading (two lists of one answer never read as one); a code block shows its lead-in sentence, then the
    code, then the marker on a line of its own.
    """
    marker = f"[{source_id}]"
    if unit.kind == "sentence":
        return f"{unit.text} {marker}"
    if unit.kind == "code":
        code = unit.text[len(unit.lead):].strip("\n") if unit.lead else unit.text
        lead = f"{unit.lead} {marker}\n\n" if unit.lead else ""
        return f"{lead}{code}\n\n{marker}"
    lines = [item if item == CUT else f"{item} {marker}" for item in unit.items]
    lead = unit.lead or (heading(unit) if unit.kind == "list" else "")
    if lead:
        lead = lead if lead.endswith(":") else f"{lead}:"
        return f"{lead} {marker}\n\n" + "\n".join(lines)
    return "\n".join(lines)


def render_all(units: list[AnswerUnit], source_id: str) -> str:
    """
    Units shown together as answer markdown (`render`, a blank line between two units), an item that follows an item
    of the same lead continuing its list under that lead once (rows of one table read as one table).
    """
    parts: list[str] = []
    for position, unit in enumerate(units):
        previous = units[position - 1] if position else None
        if previous is not None and unit.kind == previous.kind == "item" and unit.lead == previous.lead:
            parts[-1] += "\n" + "\n".join(item if item == CUT else f"{item} [{source_id}]" for item in unit.items)
        else:
            parts.append(render(unit, source_id))
    return "\n\n".join(parts)


def heading(unit: AnswerUnit) -> str:
    """The nearest heading above a unit (the last part of its context), or empty."""
    return unit.context.rsplit(" › ", 1)[-1].strip()


def is_procedure(unit: AnswerUnit) -> bool:
    """Whether a unit is a procedure: a list of steps (a numbered list, or a list led in by a sentence)."""
    return unit.kind == "list" and len(unit.items) >= 2
