"""
The dense vector store: the embedded shard of the data folder by default, a Qdrant server or PostgreSQL when one is
configured.

The backend is chosen at start-up from the environment (`GATEHOUSE_QDRANT_URL`, `GATEHOUSE_POSTGRES_URL`) or fixed
in YAML (`url`, `postgres.url`), so the same pipelines run on one machine or against a server with no change to the
graph. Locally the chunks live in `EdgeDocumentStore` (`<GATEHOUSE_DATA_DIR>/store`), which also holds their BM25
vectors; on a Qdrant server they are a collection written through `qdrant-haystack` (tenant, kb and doc id payload
indexes), and the lexical side is Elasticsearch (see `lexical_document_store`); with PostgreSQL the chunks, their
vectors and their lexical index are one table (`PostgresDocumentStore`), which `LexicalDocumentStore` uses too. The
folder (or database) is opened when the store is created, so a folder held by another process or read-only, or a
database that cannot be reached, is a `DataDirError` when a pipeline loads, not when it first runs.

Usage:
```python
from gatehouse.document_stores.dense_document_store import DenseDocumentStore

store = DenseDocumentStore()                                   # <GATEHOUSE_DATA_DIR>/store, or the server
hits = store.embedding_retrieval(vector, filters=filters, top_k=10)
```
"""

from typing import Any

from haystack import Document, default_from_dict, default_to_dict
from haystack.document_stores.types import DuplicatePolicy

from gatehouse import settings
from gatehouse.document_stores.edge_document_store import EdgeDocumentStore
from gatehouse.document_stores.postgres_store_of import postgres_store

DEFAULT_PAYLOAD_INDEXES = [
    {"field_name": "meta.tenant", "field_schema": "keyword"},
    {"field_name": "meta.kb", "field_schema": "keyword"},
    {"field_name": "meta.doc_id", "field_schema": "keyword"},
]


class DenseDocumentStore:
    """A document store with `embedding_retrieval()`: the local shard, or a Qdrant server's collection."""

    def __init__(
        self,
        *,
        index: str = "gatehouse",
        embedding_dim: int = 384,
        path: str | None = None,
        url: str | None = None,
        similarity: str = "cosine",
        payload_fields_to_index: list[dict[str, Any]] | None = None,
        postgres: dict[str, Any] | None = None,
    ) -> None:
        """
        :param index: Collection name on a Qdrant server.
        :param embedding_dim: Vector size (384 for all-MiniLM-L6-v2).
        :param path: Folder of the local shard; None uses `<GATEHOUSE_DATA_DIR>/store`.
        :param url: Qdrant server URL; None reads `GATEHOUSE_QDRANT_URL`, and the local shard is used when both are
            unset. The server's key is read from `GATEHOUSE_QDRANT_API_KEY`. `:memory:` runs the same store class in
            qdrant-client's in-process mode (nothing kept; what the tests run the Qdrant path on).
        :param similarity: `cosine`, `dot_product` or `l2`.
        :param payload_fields_to_index: Payload indexes to create on a server (tenant, kb and doc id by default).
        :param postgres: Init parameters of the `PostgresDocumentStore` (`url`, `table`, `language`, ...; the vector
            size is `embedding_dim`), used when its `url` or `GATEHOUSE_POSTGRES_URL` is set. Exclusive with Qdrant.
        :raises ValueError: If both a Qdrant server and PostgreSQL are configured, or on a bad similarity.
        """
        self.index = index
        self.embedding_dim = embedding_dim
        self.path = path
        self.url = url
        self.similarity = similarity
        self.payload_fields_to_index = payload_fields_to_index
        self.postgres = postgres or {}
        server = url or settings.qdrant_url()
        database = self.postgres.get("url") or settings.postgres_url()
        if server and database:
            raise ValueError("Both a Qdrant server and PostgreSQL are configured for the dense store: set "
                             "GATEHOUSE_QDRANT_URL (or url) or GATEHOUSE_POSTGRES_URL (or postgres.url), not both.")
        self.active_backend = "qdrant" if server else "postgres" if database else "local"
        if database:
            if similarity != "cosine":
                raise ValueError(f"The PostgreSQL store scores by cosine only, not '{similarity}'.")
            self._store: Any = postgres_store(self.postgres, embedding_dim=embedding_dim)
        elif server:
            from haystack.utils import Secret
            from haystack_integrations.document_stores.qdrant import QdrantDocumentStore

            self._store = QdrantDocumentStore(
                location=server,  # a server's URL, or ":memory:" for qdrant-client's in-process mode (the tests')
                api_key=Secret.from_env_var("GATEHOUSE_QDRANT_API_KEY", strict=False),
                index=index,
                embedding_dim=embedding_dim,
                similarity=similarity,
                payload_fields_to_index=payload_fields_to_index or DEFAULT_PAYLOAD_INDEXES,
                wait_result_from_api=True,
                progress_bar=False,
            )
        else:
            self._store = EdgeDocumentStore(path=path, embedding_dim=embedding_dim, similarity=similarity)

    @property
    def store(self) -> Any:
        """The backend store in use (`EdgeDocumentStore`, `PostgresDocumentStore` or `QdrantDocumentStore`)."""
        return self._store

    def count_documents(self) -> int:
        """The number of stored chunks."""
        return self._store.count_documents()

    def filter_documents(self, filters: dict[str, Any] | None = None) -> list[Document]:
        """Documents that match Haystack filters."""
        return self._store.filter_documents(filters=filters)

    def embedding_retrieval(
        self, query_embedding: list[float], filters: dict[str, Any] | None = None, top_k: int = 10
    ) -> list[Document]:
        """
        The `top_k` chunks nearest to `query_embedding` among those matching `filters`.

        :returns: Documents with `score` (cosine similarity by default), best first.
        """
        if top_k <= 0:
            return []
        if self.active_backend != "qdrant":
            return self._store.embedding_retrieval(query_embedding, filters=filters, top_k=top_k)
        return self._store._query_by_embedding(query_embedding=query_embedding, filters=filters, top_k=top_k)

    def write_documents(self, documents: list[Document], policy: DuplicatePolicy = DuplicatePolicy.NONE) -> int:
        """Write documents (with their embeddings)."""
        return self._store.write_documents(documents, policy=policy)

    def delete_documents(self, document_ids: list[str]) -> None:
        """Delete documents by id."""
        self._store.delete_documents(document_ids)

    def delete_by_filter(self, filters: dict[str, Any]) -> int:
        """Delete the documents that match `filters`; returns how many."""
        return self._store.delete_by_filter(filters)

    def to_dict(self) -> dict[str, Any]:
        """Serialise the store's settings as configured (not as resolved from the environment)."""
        return default_to_dict(
            self,
            index=self.index,
            embedding_dim=self.embedding_dim,
            path=self.path,
            url=self.url,
            similarity=self.similarity,
            payload_fields_to_index=self.payload_fields_to_index,
            postgres=self.postgres,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "DenseDocumentStore":
        """Deserialise the store from `to_dict` output."""
        return default_from_dict(cls, data)
