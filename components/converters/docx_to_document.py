"""
DOCXToDocument: Word files to markdown documents, each file extracted in a child process within a time, character and
memory budget and a cap on what its zip parts unzip to (a zip bomb fails at once). What the markdown holds:
`docx_text` (headings as markdown headings, so each heading starts a section with its heading path; tables as rows
with their column headers). Haystack's `DOCXToDocument` gives each paragraph's text without its heading level, so no
sections.

Usage:
```python
from gatehouse.components.converters.docx_to_document import DOCXToDocument

DOCXToDocument(timeout_s=60, max_chars=2_000_000).run(sources=["handbook.docx"])["documents"][0].content
```
"""

from haystack import component

from gatehouse.components.converters.bounded import ZipConverter


@component
class DOCXToDocument(ZipConverter):
    """
    Converts Word files to markdown documents (`mime_type` "text/markdown"), one child process per file (see
    `ZipConverter`); `run` (from `FileConverter`) gives one document per file and raises a `ValueError` naming the
    file for a file that is unreadable or over a bound.
    """

    unnamed = "Word file"
    kind = "docx"
    label = "Word file"
    setting = "docx_converter"
    produces = "text/markdown"
