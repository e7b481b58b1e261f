"""
Moving a data folder written by an older Gatehouse (chunks in qdrant-client's local mode under `<data>/qdrant`, BM25
in SQLite under `<data>/bm25`) into the embedded shard (`<data>/store`).

The old Qdrant collections hold every chunk whole (content, metadata and vector), so nothing needs embedding again:
the chunks are written to a new shard beside the target (`store.migrating`), which is renamed into place once every
chunk is in. A migration that stops half-way leaves the old folders as they were and starts again on the next
opening. The old folders are never changed; delete them once the new store answers as it should.

Usage:
```python
from pathlib import Path
from gatehouse.document_stores.migration import legacy_collections, migrate

if legacy_collections(Path("data")):
    migrate(Path("data"), Path("data/store"), open_store=lambda folder: EdgeDocumentStore(path=str(folder)))
```
"""

import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gatehouse.document_stores.errors import DataDirError, data_dir_errors

logger = logging.getLogger(__name__)

BATCH = 256


def legacy_collections(data_folder: Path) -> list[str]:
    """The collections of an older Gatehouse's local Qdrant folder in `data_folder` (none when there is none)."""
    collections = data_folder / "qdrant" / "collection"
    return sorted(path.name for path in collections.iterdir() if path.is_dir()) if collections.is_dir() else []


def migrate(data_folder: Path, target: Path, open_store: Callable[[Path], Any]) -> int:
    """
    Copy every chunk of the old local Qdrant folder into a new shard at `target`.

    :param data_folder: The data folder holding `qdrant/` (and `bm25/`, whose documents are the same chunks).
    :param target: The new shard's folder (must not exist yet).
    :param open_store: Opens an `EdgeDocumentStore` on a folder.
    :returns: The number of chunks copied.
    :raises DataDirError: When the old folder is held by a running older server or cannot be read.
    """
    import qdrant_client
    from haystack.document_stores.types import DuplicatePolicy

    staging = target.with_name(f"{target.name}.migrating")
    with data_dir_errors(data_folder):
        shutil.rmtree(staging, ignore_errors=True)
        try:
            client = qdrant_client.QdrantClient(path=str(data_folder / "qdrant"))
        except RuntimeError as error:
            raise DataDirError(
                f"the data directory {data_folder} was written by an older Gatehouse and its qdrant folder is in use "
                f"by another process (an older `gatehouse serve`?): stop it, then run Gatehouse again to move the "
                f"knowledge bases into {target}"
            ) from error
    store = open_store(staging)
    copied = 0
    try:
        for collection in legacy_collections(data_folder):
            offset = None
            while True:
                points, offset = client.scroll(collection, limit=BATCH, offset=offset, with_payload=True,
                                               with_vectors=True)
                documents = [_document(point) for point in points]
                copied += store.write_documents([d for d in documents if d is not None],
                                                policy=DuplicatePolicy.OVERWRITE)
                if offset is None:
                    break
    finally:
        client.close()
        store.close()
    with data_dir_errors(data_folder):
        staging.rename(target)
    logger.warning("Moved %d chunks of %s into %s; the old qdrant/ and bm25/ folders are no longer read: delete them "
                   "when the knowledge bases answer as before. The old folders kept no sentence vectors: "
                   "`gatehouse ingest --force` writes them, for sentence scores in search", copied, data_folder, target)
    return copied


def _document(point: Any) -> Any:
    """The Haystack document a point of the old collection holds (None for a point without one)."""
    from haystack import Document

    payload = point.payload or {}
    if not payload.get("id"):
        return None
    vector = point.vector if isinstance(point.vector, list) else None
    return Document(id=payload["id"], content=payload.get("content"), meta=dict(payload.get("meta") or {}),
                    embedding=vector)
