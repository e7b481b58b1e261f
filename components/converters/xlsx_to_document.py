"""
XLSXToDocument: Excel files to markdown documents, each file extracted in a child process within a time, character and
memory budget and a cap on what its zip parts unzip to (a zip bomb fails at once). What the markdown holds:
`xlsx_text` (one section per sheet, each row an item with its column headers). Haystack's `XLSXToDocument` needs
pandas, reads whole sheets into memory and gives one document per sheet, where Gatehouse stores one per file.

Usage:
```python
from gatehouse.components.converters.xlsx_to_document import XLSXToDocument

XLSXToDocument(timeout_s=60, max_chars=2_000_000).run(sources=["budget.xlsx"])["documents"][0].content
```
"""

from haystack import component

from gatehouse.components.converters.bounded import ZipConverter


@component
class XLSXToDocument(ZipConverter):
    """
    Converts Excel files to markdown documents (`mime_type` "text/markdown"), one child process per file (see
    `ZipConverter`); `run` (from `FileConverter`) gives one document per file and raises a `ValueError` naming the
    file for a file that is unreadable or over a bound.
    """

    unnamed = "Excel workbook"
    kind = "xlsx"
    label = "Excel workbook"
    setting = "xlsx_converter"
    produces = "text/markdown"
