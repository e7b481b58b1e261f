"""
JSONToDocument: JSON files to markdown documents, each file extracted in a child process within a time, character and
memory budget. What the markdown holds: `json_text` (each value with its key path, each record of a list of objects a
section). Haystack's `JSONConverter` needs a jq filter or a content key chosen per file layout and drops the key
paths.

Usage:
```python
from gatehouse.components.converters.json_to_document import JSONToDocument

JSONToDocument(timeout_s=60, max_chars=2_000_000).run(sources=["records.json"])["documents"][0].content
```
"""

from haystack import component

from gatehouse.components.converters.bounded import BoundedConverter


@component
class JSONToDocument(BoundedConverter):
    """
    Converts JSON files to markdown documents (`mime_type` "text/markdown"), one child process per file (see
    `BoundedConverter`); `run` (from `FileConverter`) gives one document per file and raises a `ValueError` naming the
    file for a file that is unreadable or over a bound.
    """

    unnamed = "JSON file"
    kind = "json"
    label = "JSON file"
    setting = "json_converter"
    produces = "text/markdown"
