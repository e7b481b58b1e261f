"""
The files a converter reads: each source as bytes with a display name and the metadata of its document, the way
Haystack's converters merge it (the source's own meta, then the `meta` argument; `file_path` shortened to its name);
and `FileConverter`, the base class that gives a converter its `run` (one document per readable source).

Usage:
```python
from gatehouse.components.converters.sources import read_sources

for data, name, meta in read_sources(["notes.txt"], {"kb": "handbook"}, unnamed="text file"):
    ...   # name "notes.txt", meta {"file_path": "notes.txt", "kb": "handbook"}
```
"""

import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

from haystack import Document, component
from haystack.components.converters.utils import get_bytestream_from_source, normalize_metadata
from haystack.dataclasses import ByteStream

logger = logging.getLogger(__name__)


def read_sources(
    sources: list[str | Path | ByteStream], meta: dict[str, Any] | list[dict[str, Any]] | None, *, unnamed: str
) -> Iterator[tuple[bytes, str, dict[str, Any]]]:
    """
    Each readable source's bytes, name and document metadata; an unreadable source is skipped with a warning, as
    Haystack's converters do.

    :param sources: File paths or ByteStreams.
    :param meta: Metadata for all documents (a dict) or per source (a list as long as `sources`).
    :param unnamed: The name of a source that has neither `file_name` nor `file_path`.
    """
    for source, metadata in zip(sources, normalize_metadata(meta, sources_count=len(sources)), strict=True):
        try:
            stream = get_bytestream_from_source(source)
        except Exception as error:  # noqa: BLE001 - any unreadable source is skipped
            logger.warning("Could not read %s, skipping it: %s", source, error)
            continue
        name = Path(str(stream.meta.get("file_name") or stream.meta.get("file_path") or unnamed)).name
        merged = {**stream.meta, **metadata}
        if file_path := merged.get("file_path"):
            merged["file_path"] = os.path.basename(file_path)
        yield stream.data, name, merged


def file_title(name: str) -> str:
    """A document's title from its file's name: the name without its extension, `-` and `_` as spaces."""
    return Path(name).stem.replace("-", " ").replace("_", " ").strip() or "Untitled"


class FileConverter:
    """
    The base class of a converter of files to documents, which gives it its `run`. The converter sets `unnamed` (the
    name of a source without `file_name` or `file_path`) and defines `convert(data, name)`: the text of one file and
    the metadata it gives its document (a `title`), None to skip it (logged), a `ValueError` naming the file when the
    file fails. A converter whose text is markdown sets
    `produces` to "text/markdown": its documents' `mime_type` then says so, and the cleaner and splitter treat them
    as markdown (headings make sections).
    """

    unnamed: ClassVar[str]
    produces: ClassVar[str | None] = None
    convert: Callable[[bytes, str], tuple[str, dict[str, Any]] | None]

    @component.output_types(documents=list[Document])
    def run(
        self, sources: list[str | Path | ByteStream], meta: dict[str, Any] | list[dict[str, Any]] | None = None
    ) -> dict[str, list[Document]]:
        """
        Convert files to documents.

        :param sources: File paths or ByteStreams.
        :param meta: Metadata for all documents (a dict) or per source (a list as long as `sources`); a ByteStream's
            own `meta` comes first, then `meta`, then what the converter read of the file (its `title`).
        :returns: `{"documents": [...]}`, one per readable file whose `convert` is not None.
        :raises ValueError: When a file fails (see the converter's `convert`).
        """
        documents = []
        for data, name, document_meta in read_sources(sources, meta, unnamed=self.unnamed):
            converted = self.convert(data, name)
            if converted is not None:
                text, read = converted
                document_meta = {**read, **document_meta}
                if self.produces:
                    document_meta["mime_type"] = self.produces
                documents.append(Document(content=text, meta=document_meta))
        return {"documents": documents}
