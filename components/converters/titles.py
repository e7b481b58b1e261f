"""
What the extractors read as a document's title (run in their child processes, so nothing here imports Haystack):
the title its properties name, unless it is a file name or has no letter; else a first line that reads as a title
(short, no sentence, set apart by the document). Without one the converter titles the document by its file's name.

Usage:
```python
from gatehouse.components.converters.titles import property_title, reads_as_title

property_title("Microsoft Word - report.docx")   # "" (a file name)
property_title("(anonymous)")                     # "" (a placeholder)
reads_as_title("Annual Report 2019")              # True
reads_as_title("The report covers the year.")     # False
```
"""

import re

MAX_TITLE_WORDS = 15
MAX_TITLE_CHARS = 150
_FILE_NAME = re.compile(r"\.[A-Za-z0-9]{2,5}$")
#: Titles that applications give a new file, and placeholders such as "(anonymous)": not a document's own title.
_DEFAULT = re.compile(r"(?:untitled|document|book|presentation|powerpoint presentation|slide|sheet|title)[\s_-]?\d*"
                      r"|[(\[<].*[)\]>]", re.IGNORECASE)
_LETTER = re.compile(r"[^\W\d_]")
_LIST_MARK = re.compile(r"^(?:[-*•▪◦]|\(?\d{1,3}[.)])\s")


def property_title(value: object) -> str:
    """
    A title from a document's properties, on one line; empty when it names a file, is what an application names a new
    file ("Untitled", "Presentation1") or a placeholder in brackets, or holds no letter.
    """
    title = " ".join(str(value or "").split())
    if not title or _FILE_NAME.search(title) or _DEFAULT.fullmatch(title) or not _LETTER.search(title):
        return ""
    return title


def reads_as_title(line: str) -> bool:
    """
    Whether a line can be a document's title: 1 to `MAX_TITLE_WORDS` words with a letter, no list marker, not
    ending like a sentence or a lead-in (`.`, `:`, `;`, `,`).
    """
    line = " ".join(line.split())
    return (0 < len(line) <= MAX_TITLE_CHARS and len(line.split()) <= MAX_TITLE_WORDS and bool(_LETTER.search(line))
            and not _LIST_MARK.match(line) and not line.endswith((".", ":", ";", ",")))
