"""
The `[S1]` citation-marker syntax: finding markers (`[S1]`, `[S1, S3]`, `[s2; S4]`), removing them and rewriting the
ids they cite.

Usage:
```python
from gatehouse.components.citation_markers import find_markers, rewrite_markers, strip_markers

find_markers("Keys expire. [S1, S3]")                            # [(13, 21, ['S1', 'S3'])]
strip_markers("Keys expire. [S1]")                               # 'Keys expire.'
rewrite_markers("Keys expire. [S1, S9]", lambda ids: ids[:1])    # 'Keys expire. [S1]'
```
"""

import re
from typing import Callable

#: A citation marker: `[S1]`, `[S1, S3]`, `[s2; S4]`. Group 1 holds the ids.
DEFAULT_CITATION_PATTERN = r"\[\s*((?:S\d+)(?:\s*[,;]\s*S\d+)*)\s*\]"
_ID_PATTERN = re.compile(r"S\d+", re.IGNORECASE)


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
