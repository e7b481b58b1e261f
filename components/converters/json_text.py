"""
A JSON file's text as markdown, for `JSONToDocument` (run in its child process, `extraction.py`): every value keeps
its key path (`- address.city: Paris`). A list of objects is a list of records: each record becomes one section,
headed by its path and its first short text value (`## staff[2] Ada Lovelace`), its fields below with their paths
inside the record. Under a top-level object, each key holding an object or a list becomes a section of its own.
"""

import json

from gatehouse.components.converters.encodings import text_of
from gatehouse.components.converters.extraction import Text, one_line

LABEL_CHARS = 80  # longest text value that names a record in its heading


def _scalar(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return one_line(value)


def _leaves(value, path: str):
    """(key path, text) of each value under `value`; a list of plain values is one leaf, its items comma-separated."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        if all(not isinstance(item, (dict, list)) for item in value):
            if value:
                yield path, ", ".join(_scalar(item) for item in value)
        else:
            for index, item in enumerate(value):
                yield from _leaves(item, f"{path}[{index}]")
    else:
        yield path, _scalar(value)


def _is_records(value) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(item, dict) for item in value)


def _add_leaves(value, text: Text, path: str = "") -> None:
    text.add(*(f"- {key}: {item}" if key else f"- {item}" for key, item in _leaves(value, path)))


def _records(records: list[dict], path: str, text: Text) -> None:
    for index, record in enumerate(records):
        label = next((one_line(item) for item in record.values()
                      if isinstance(item, str) and 0 < len(item.strip()) <= LABEL_CHARS), "")
        text.add("", f"## {path}[{index}]{' ' + label if label else ''}", "")
        _add_leaves(record, text)


def extract(data: bytes, text: Text) -> None:
    """Add the JSON file's markdown to `text`."""
    value = json.loads(text_of(data))
    if _is_records(value):
        _records(value, "", text)
        return
    if not isinstance(value, dict):
        _add_leaves(value, text)
        return
    plain = {key: item for key, item in value.items() if not isinstance(item, (dict, list))}
    _add_leaves(plain, text)
    for key, item in value.items():
        if _is_records(item):
            _records(item, str(key), text)
        elif isinstance(item, (dict, list)):
            text.add("", f"## {one_line(key)}", "")
            _add_leaves(item, text)
