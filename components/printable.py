"""
Text safe to show on a terminal or in a plain-text field: terminal escape sequences, control characters and
bidirectional controls removed (document text reaches logs, the command line and answers).

Usage:
```python
from gatehouse.components.printable import printable

printable("\\x1b[2Jhi\\u202e")   # "hi"
```
"""

import re
import unicodedata

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
