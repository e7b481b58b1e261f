"""
PDFToDocument: PDF files to documents, each file extracted in a child process under a time budget, a character cap
and a memory cap (see `BoundedConverter`); ruled tables come out as rows that keep their column headers (see
`pdf_text`).

A PDF's content streams are compressed: a few kilobytes can expand into millions of characters, and pypdf's text
extraction of one hostile page can run for many minutes in a thread nobody can stop. A file over a bound fails alone
with a reason naming the bound. A PDF pypdf cannot read gives no document, as Haystack's `PyPDFToDocument` does.

Usage:
```python
from gatehouse.components.converters.pdf_to_document import PDFToDocument

converter = PDFToDocument(timeout_s=60, max_chars=2_000_000)
converter.run(sources=["manual.pdf"])["documents"][0].content     # pages separated by form feeds
```
"""

from haystack import component

from gatehouse.components.converters.bounded import BoundedConverter


@component
class PDFToDocument(BoundedConverter):
    """
    Converts PDF files to documents, one child process per file, within a time, character and memory budget; `run`
    (from `FileConverter`) gives one document per readable file, its pages' text separated by form feeds.
    """

    unnamed = "PDF"
    kind = "pdf"
    label = "PDF"
    setting = "pdf_converter"
    skip_unreadable = True
