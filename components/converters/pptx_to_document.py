"""
PPTXToDocument: PowerPoint files to markdown documents, each file extracted in a child process within a time,
character and memory budget and a cap on what its zip parts unzip to (a zip bomb fails at once). What the markdown
holds: `pptx_text` (one section per slide: its title, then its bullets, tables and notes). Haystack's `PPTXToDocument`
joins a slide's text boxes with no title or bullet level.

Usage:
```python
from gatehouse.components.converters.pptx_to_document import PPTXToDocument

PPTXToDocument(timeout_s=60, max_chars=2_000_000).run(sources=["deck.pptx"])["documents"][0].content
```
"""

from haystack import component

from gatehouse.components.converters.bounded import ZipConverter


@component
class PPTXToDocument(ZipConverter):
    """
    Converts PowerPoint files to markdown documents (`mime_type` "text/markdown"), one child process per file (see
    `ZipConverter`); `run` (from `FileConverter`) gives one document per file and raises a `ValueError` naming the
    file for a file that is unreadable or over a bound.
    """

    unnamed = "PowerPoint file"
    kind = "pptx"
    label = "PowerPoint file"
    setting = "pptx_converter"
    produces = "text/markdown"
