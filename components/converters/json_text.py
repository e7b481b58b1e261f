"""
A JSON file's text as markdown, for `JSONToDocument` (run in its child process, `extraction.py`). A list of objects,
at any depth, is a list of records:

- records whose fields fit on one line (no list of objects inside, at most `ROW_WORDS` words) are a table: one item
  per record that keeps its field names (`- name: Ada; team: Data`), so a record is found and quoted by any value in
  it however long the list;
- other records are one section each, headed by their path and first short text value (`## staff[2] Ada Lovelace`),
  their fields below as items (`- address.city: Paris`), a list of objects inside them as a table led in by its key
  (`orders:` then `- sku: B-1; qty: 3`), or as sections of their own one level down.

Fields of nested objects keep their key path inside the record (`contact.email`); a list of plain values is one
field, its items comma-separated. Under a top-level object, its plain fields come first, then each key holding an
object or a list is a section of its own.
"""

import json

from gatehouse.components.converters.encodings import text_of
from gatehouse.components.converters.extraction import Text, one_line

LABEL_CHARS = 80  # longest text value that names a record in its heading
ROW_WORDS = 80  # most words of a record shown as one table row
MAX_SECTION_LEVEL = 6


def _scalar(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return one_line(value)


def _is_records(value) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(item, dict) for item in value)


def _fields(value, path: str = "") -> tuple[list[tuple[str, str]], list[tuple[str, list]]]:
    """
    The fields of a value as (key path, text), and the lists of objects inside it as (key path, records). A list that
    mixes objects with other values gives each item a path with its index.
    """
    fields: list[tuple[str, str]] = []
    nested: list[tuple[str, list]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            inner_fields, inner_nested = _fields(item, f"{path}.{key}" if path else str(key))
            fields += inner_fields
            nested += inner_nested
    elif _is_records(value):
        nested.append((path, value))
    elif isinstance(value, list):
        if all(not isinstance(item, (dict, list)) for item in value):
            if value:
                fields.append((path, ", ".join(_scalar(item) for item in value)))
        else:
            for index, item in enumerate(value):
                inner_fields, inner_nested = _fields(item, f"{path}[{index}]")
                fields += inner_fields
                nested += inner_nested
    else:
        fields.append((path, _scalar(value)))
    return fields, nested


def _row(fields: list[tuple[str, str]]) -> str:
    return "- " + "; ".join(f"{key}: {value}" if key else value for key, value in fields if value)


def _fits_rows(read: list[tuple[list[tuple[str, str]], list]]) -> bool:
    """Whether records read by `_fields` are a table: none holds a list of objects or more than `ROW_WORDS` words."""
    return all(not nested and sum(len(value.split()) + 1 for _, value in fields) <= ROW_WORDS
               for fields, nested in read)


def _records(records: list[dict], path: str, text: Text, level: int, *, headed: bool = False) -> None:
    """
    A list of objects at `path`: a table when each fits on one line (under a heading of its path when `headed`,
    else led in by it), else a section per record at heading `level`.
    """
    read = [_fields(record) for record in records]
    if _fits_rows(read):
        rows = [_row(fields) for fields, _ in read if any(value for _, value in fields)]
        lead = ([f"{'#' * min(level, MAX_SECTION_LEVEL)} {path}", ""] if headed else [f"{path}:"]) if path else []
        text.add("", *lead, *rows, "")
        return
    for index, (record, (fields, nested)) in enumerate(zip(records, read)):
        label = next((one_line(item) for item in record.values()
                      if isinstance(item, str) and 0 < len(item.strip()) <= LABEL_CHARS), "")
        heading = f"{path}[{index}]{' ' + label if label else ''}"
        text.add("", f"{'#' * min(level, MAX_SECTION_LEVEL)} {heading}", "")
        text.add(*(f"- {key}: {value}" for key, value in fields))
        for key, items in nested:
            _records(items, key, text, level + 1)


def _section(value, text: Text, level: int) -> None:
    """A value under a heading of its own: its fields, then its lists of objects."""
    fields, nested = _fields(value)
    text.add(*(f"- {key}: {item}" if key else f"- {item}" for key, item in fields))
    for key, items in nested:
        _records(items, key, text, level)


def extract(data: bytes, text: Text) -> None:
    """Add the JSON file's markdown to `text`."""
    value = json.loads(text_of(data))
    if _is_records(value):
        _records(value, "", text, 2)
        return
    if not isinstance(value, dict):
        _section(value, text, 2)
        return
    _section({key: item for key, item in value.items() if not isinstance(item, (dict, list))}, text, 2)
    for key, item in value.items():
        if _is_records(item):
            _records(item, one_line(key), text, 2, headed=True)
        elif isinstance(item, (dict, list)):
            text.add("", f"## {one_line(key)}", "")
            _section(item, text, 3)
