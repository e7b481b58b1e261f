"""
CSVToDocument: CSV files to markdown documents, each file extracted in a child process within a time, character and
memory budget. What the markdown holds: `csv_text` (each row an item with its column headers). Haystack's
`CSVToDocument` keeps the raw CSV text (a row's cells without their headers) or, by row, makes one document per row
where Gatehouse stores one per file.

Usage:
```python
from gatehouse.components.converters.csv_to_document import CSVToDocument

CSVToDocument(timeout_s=60, max_chars=2_000_000).run(sources=["contacts.csv"])["documents"][0].content
```
"""

from haystack import component

from gatehouse.components.converters.bounded import BoundedConverter


@component
class CSVToDocument(BoundedConverter):
    """
    Converts CSV files to markdown documents (`mime_type` "text/markdown"), one child process per file (see
    `BoundedConverter`); `run` (from `FileConverter`) gives one document per file and raises a `ValueError` naming the
    file for a file that is unreadable or over a bound.
    """

    unnamed = "CSV file"
    kind = "csv"
    label = "CSV file"
    setting = "csv_converter"
    produces = "text/markdown"
