"""
Text safe to show on a terminal or in a plain-text field: terminal escape sequences, control characters and
invisible format characters (bidirectional controls, zero-width characters) removed. Document text reaches logs, the
command line and every answer the server sends: the CLI prints through `printable` and the server passes all it
sends through `printable_data`, so both apply one definition.

Usage:
```python
from gatehouse.components.printable import printable, printable_data

printable("\\x1b[2Jhi\\u202e\\u200b")                 # "hi"
printable_data({"answer": "hi\\x1b]0;title\\x07", "n": 2})   # {"answer": "hi", "n": 2}
```
"""

import functools
import re
import sys
import unicodedata
from collections.abc import Mapping
from typing import Any

#: Terminal escape sequences: CSI (`ESC [ ... m`, cursor moves, clear screen), OSC (`ESC ] ... BEL`, window titles,
#: hyperlinks), DCS/SOS/PM/APC strings, two-character escapes, and the 8-bit CSI.
_TERMINAL_ESCAPE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x9b[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?|\x1b[ -~]?"
)
#: The Unicode categories removed: control characters (Cc; newline and tab are kept) and format characters (Cf), which
#: are invisible but reorder or hide text: bidirectional overrides, embeddings, isolates and marks (U+202A..U+202E,
#: U+2066..U+2069, U+200E, U+200F, U+061C), zero-width space, non-joiner and joiner (U+200B..U+200D), word joiner and
#: invisible operators (U+2060..U+2064), the byte order mark (U+FEFF), the soft hyphen, tag characters
#: (U+E0001, U+E0020..U+E007F) and the interlinear annotation marks (U+FFF9..U+FFFB).
REMOVED_CATEGORIES = frozenset({"Cc", "Cf"})
KEPT_CONTROLS = "\n\t"
#: The ASCII characters removed (C0 controls but newline and tab, and DEL), for the common all-ASCII text.
_ASCII_REMOVED = {code: None for code in (*range(0x20), 0x7F) if chr(code) not in KEPT_CONTROLS}


@functools.cache
def _removed() -> re.Pattern[str]:
    """Runs of the characters removed, as one character class of ranges (built from the Unicode database on first
    use: reading it takes a moment)."""
    ranges: list[list[int]] = []
    for code in range(sys.maxunicode + 1):
        if unicodedata.category(chr(code)) not in REMOVED_CATEGORIES or chr(code) in KEPT_CONTROLS:
            continue
        if ranges and ranges[-1][1] == code - 1:
            ranges[-1][1] = code
        else:
            ranges.append([code, code])
    return re.compile("[" + "".join(f"{re.escape(chr(first))}-{re.escape(chr(last))}" for first, last in ranges) + "]+")


def printable(text: str) -> str:
    """
    Text safe to show on a terminal or in a plain-text field: escape sequences, control characters (but newline and
    tab) and format characters (bidirectional controls, zero-width characters, see `REMOVED_CATEGORIES`) removed.

    :param text: Any text, e.g. from a document.
    :returns: The text without them (`"\\x1b[2Jhi\\u202e"` -> `"hi"`).
    """
    if "\x1b" in text or "\x9b" in text:
        text = _TERMINAL_ESCAPE.sub("", text)
    if text.isascii():
        return text.translate(_ASCII_REMOVED)
    if text.replace("\n", " ").replace("\t", " ").isprintable():  # no Cc or Cf character (nor Z*, Co, Cn)
        return text
    return _removed().sub("", text)


def printable_data(value: Any) -> Any:
    """
    `printable` applied to every string of a JSON-like value: what the server sends (answers, citations, retrieved
    passages and their metadata, stream deltas, tool results).

    :param value: A string, or mappings and lists of them nested, with any other values (numbers, None) among them.
    :returns: A copy with every string, mapping keys included, made printable (mappings as dicts, tuples as lists);
        other values as they are.
    """
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, Mapping):
        return {printable_data(key): printable_data(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [printable_data(item) for item in value]
    return value
