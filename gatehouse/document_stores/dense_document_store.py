"""
The dense vector store: Qdrant, on disk by default, a Qdrant server when `GATEHOUSE_QDRANT_URL` is set.

In local mode Qdrant allows one client per folder, so every store of one process that points at the same
folder shares one client: the index, retrieve and ask pipelines can be loaded side by side. Local Qdrant is not
thread-safe while it writes, so that client holds the folder's readers-writer lock around each of its calls (searches
run together, a write runs alone; see `gatehouse.document_stores.locking`). The folder is opened when the store is
created, so a folder held by another process (a running `gatehouse serve`) or read-only is a `DataDirError` saying so
when a pipeline loads, not when it first runs; a full disk is one at the write that fails.

Usage:
```python
from gatehouse.document_stores.dense_document_store import DenseDocumentStore

store = DenseDocumentStore(index="gatehouse", embedding_dim=384)   # <GATEHOUSE_DATA_DIR>/qdrant, or the server
```
"""

import atexit
import threading
from pathlib import Path
from typing import Any, ClassVar

import portalocker
import qdrant_client
from haystack import default_from_dict, default_to_dict
from haystack.utils import Secret
from haystack_integrations.document_stores.qdrant import QdrantDocumentStore

from gatehouse import settings
from gatehouse.document_stores.errors import DataDirInUseError, data_dir_errors, require_writable
from gatehouse.document_stores.locking import LockedQdrantClient

DEFAULT_PAYLOAD_INDEXES = [
    {"field_name": "meta.tenant", "field_schema": "keyword"},
    {"field_name": "meta.kb", "field_schema": "keyword"},
    {"field_name": "meta.doc_id", "field_schema": "keyword"},
]


def _held_by_another_process(folder: Path) -> bool:
    """Whether another process holds the lock file local Qdrant takes on `folder` (an exclusive `flock`)."""
    lock_file = folder / ".lock"
    if not lock_file.is_file():
        return False
    with lock_file.open("r+") as handle:
        try:
            portalocker.lock(handle, portalocker.LockFlags.EXCLUSIVE | portalocker.LockFlags.NON_BLOCKING)
        except portalocker.exceptions.LockException:
            return True
        portalocker.unlock(handle)
    return False


def _open_local_client(folder: Path) -> LockedQdrantClient:
    """
    This process's client of a local Qdrant folder, guarded by a readers-writer lock.

    :raises DataDirError: When another process holds the folder, or it is read-only or on a full disk.
    """
    require_writable(folder)
    with data_dir_errors(folder):
        try:
            client = qdrant_client.QdrantClient(path=str(folder))
        except RuntimeError as error:  # Qdrant's "already accessed by another instance"
            if _held_by_another_process(folder):
                raise DataDirInUseError(folder) from error
            raise
    atexit.register(client.close)
    return LockedQdrantClient(client, folder=folder)


class DenseDocumentStore(QdrantDocumentStore):
    """A `QdrantDocumentStore` whose location comes from the environment and whose local client is shared."""

    _local_clients: ClassVar[dict[str, LockedQdrantClient]] = {}
    _local_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(
        self,
        *,
        index: str = "gatehouse",
        embedding_dim: int = 384,
        path: str | None = None,
        url: str | None = None,
        similarity: str = "cosine",
        payload_fields_to_index: list[dict[str, Any]] | None = None,
        return_embedding: bool = False,
    ) -> None:
        """
        :param index: Collection name.
        :param embedding_dim: Vector size (384 for all-MiniLM-L6-v2).
        :param path: Folder of the local store; None uses `<GATEHOUSE_DATA_DIR>/qdrant`.
        :param url: Qdrant server URL; None reads `GATEHOUSE_QDRANT_URL`, and the local store is used when both
            are unset. The server's key is read from `GATEHOUSE_QDRANT_API_KEY`.
        :param similarity: `cosine`, `dot_product` or `l2`.
        :param payload_fields_to_index: Payload indexes to create on a server (tenant, kb and doc id by default);
            the local store has no payload indexes.
        :param return_embedding: Return embeddings with retrieved documents.
        """
        self.configured_path = path
        self.configured_url = url
        self.configured_payload_fields = payload_fields_to_index
        server = url or settings.qdrant_url()
        location_kwargs: dict[str, Any]
        if server:
            location_kwargs = {
                "url": server,
                "api_key": Secret.from_env_var("GATEHOUSE_QDRANT_API_KEY", strict=False),
            }
        else:
            location_kwargs = {"path": str(Path(path).expanduser().resolve() if path else settings.data_dir() / "qdrant")}
        super().__init__(
            index=index,
            embedding_dim=embedding_dim,
            similarity=similarity,
            payload_fields_to_index=(payload_fields_to_index or DEFAULT_PAYLOAD_INDEXES) if server else None,
            return_embedding=return_embedding,
            wait_result_from_api=True,
            progress_bar=False,
            **location_kwargs,
        )
        if self.path is not None:
            self._initialize_client()

    def _initialize_client(self) -> None:
        if self._client is not None or self.path is None:
            super()._initialize_client()
            return
        with self._local_lock:
            shared = self._local_clients.get(self.path)
            if shared is None:
                shared = _open_local_client(Path(self.path))
                self._local_clients[self.path] = shared
            self._client = shared
            self._set_up_collection(
                self.index,
                self.embedding_dim,
                self.recreate_index,
                self.similarity,
                self.use_sparse_embeddings,
                self.sparse_idf,
                self.on_disk,
                self.payload_fields_to_index,
            )

    def close(self) -> None:
        """Release the client unless it is the shared local one (which lives as long as the process)."""
        if self.path is None:
            super().close()

    def to_dict(self) -> dict[str, Any]:
        """Serialise the store's settings as configured (not as resolved from the environment)."""
        return default_to_dict(
            self,
            index=self.index,
            embedding_dim=self.embedding_dim,
            path=self.configured_path,
            url=self.configured_url,
            similarity=self.similarity,
            payload_fields_to_index=self.configured_payload_fields,
            return_embedding=self.return_embedding,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "DenseDocumentStore":
        """Deserialise the store from `to_dict` output."""
        return default_from_dict(cls, data)
