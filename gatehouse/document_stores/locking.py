"""
Store-level concurrency: a readers-writer lock, and a Qdrant client that takes it around every call.

Local Qdrant (`QdrantClient(path=...)`) keeps a collection in numpy arrays and Python lists that an upsert or a delete
grows and edits in place, with no lock of its own: a search running while points are written fails
(`IndexError`, shapes that cannot be broadcast) or sees half a batch. Searches alone only read. So every store of one
folder shares one client whose reads run together and whose writes run alone, each for the duration of one client
call: an ingest that writes many batches lets searches in between, and no caller holds the lock across anything but
the store's own work.

Usage:
```python
from pathlib import Path

from qdrant_client import QdrantClient
from gatehouse.document_stores.locking import LockedQdrantClient, ReadWriteLock

client = LockedQdrantClient(QdrantClient(path="data/qdrant"), folder=Path("data/qdrant"))
client.query_points("gatehouse", query=vector, limit=5)      # shared: runs beside other reads
client.upsert("gatehouse", points=points)                   # exclusive: waits for running reads, blocks new ones

lock = ReadWriteLock()
with lock.read():
    ...
```
"""

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from gatehouse.document_stores.errors import data_dir_errors


class ReadWriteLock:
    """
    Many readers or one writer. A waiting writer stops new readers from entering, so a stream of searches cannot
    starve an ingest. Not reentrant: a holder must not take it again.
    """

    def __init__(self) -> None:
        self._condition = threading.Condition(threading.Lock())
        self._readers = 0
        self._writing = False
        self._waiting_writers = 0

    @contextlib.contextmanager
    def read(self) -> Iterator[None]:
        """Hold the lock shared (with other readers) for the block."""
        with self._condition:
            self._condition.wait_for(lambda: not (self._writing or self._waiting_writers))
            self._readers += 1
        try:
            yield
        finally:
            with self._condition:
                self._readers -= 1
                if not self._readers:
                    self._condition.notify_all()

    @contextlib.contextmanager
    def write(self) -> Iterator[None]:
        """Hold the lock exclusively for the block."""
        with self._condition:
            self._waiting_writers += 1
            try:
                self._condition.wait_for(lambda: not (self._writing or self._readers))
            finally:
                self._waiting_writers -= 1
            self._writing = True
        try:
            yield
        finally:
            with self._condition:
                self._writing = False
                self._condition.notify_all()


class LockedQdrantClient:
    """
    A local `QdrantClient` for threads: the calls in `READS` hold `lock` shared, every other call holds it
    exclusively (an unknown method counts as a write). Attributes that are not methods are passed through. A call that
    fails because the folder is read-only or its disk is full raises a `DataDirError` naming the folder.
    """

    READS = frozenset({
        "collection_exists", "count", "facet", "get_aliases", "get_collection", "get_collection_aliases",
        "get_collections", "info", "query_batch_points", "query_points", "query_points_groups", "retrieve", "scroll",
        "search_matrix_offsets", "search_matrix_pairs",
    })

    def __init__(self, client: Any, folder: Path, lock: ReadWriteLock | None = None) -> None:
        """
        :param client: The local client to guard (a Qdrant server needs no guard).
        :param folder: The client's storage folder, named in operator errors.
        :param lock: The lock; a new one by default.
        """
        self.client = client
        self.folder = folder
        self.lock = lock or ReadWriteLock()

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.client, name)
        if not callable(attribute):
            return attribute
        guard: Callable[[], contextlib.AbstractContextManager[None]] = (
            self.lock.read if name in self.READS else self.lock.write
        )

        @functools.wraps(attribute)
        def locked(*args: Any, **kwargs: Any) -> Any:
            with guard(), data_dir_errors(self.folder):
                return attribute(*args, **kwargs)

        return locked
