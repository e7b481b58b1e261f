"""
The files a converter reads: each source as bytes with a display name and the metadata of its document, the way
Haystack's converters merge it (the source's own meta, then the `meta` argument; `file_path` shortened to its name).

Usage:
```python
from gatehouse.components.converters.sources import read_sources

for data, name, meta in read_sources(["notes.txt"], {"kb": "handbook"}, unnamed="text file"):
    ...   # name "notes.txt", meta {"file_path": "notes.txt", "kb": "handbook"}
```
"""

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
