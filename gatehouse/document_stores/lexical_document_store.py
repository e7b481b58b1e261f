"""
The lexical index behind `BM25Retriever`: the BM25 vectors of the local shard by default, Elasticsearch when
configured.

The backend is chosen at start-up from the environment (`GATEHOUSE_POSTGRES_URL`, `GATEHOUSE_ELASTICSEARCH_URL`) or
fixed in YAML, so the same pipelines run on one machine or against a server with no change to the graph. Locally the
documents and their BM25 vectors live in the same `EdgeDocumentStore` as their dense vectors (one write holds both);
`analysis` picks the vector searched (`words` or character `ngrams` of the words). With PostgreSQL the lexical index
is the full text (`words`) and trigrams (`ngrams`) of the table `DenseDocumentStore` writes. Every backend may be
shared by threads.

Usage:
```python
from gatehouse.document_stores.lexical_document_store import LexicalDocumentStore

store = LexicalDocumentStore()                  # the local shard under GATEHOUSE_DATA_DIR, or Elasticsearch if set
store = LexicalDocumentStore(analysis="ngrams")   # character n-grams of the words: spelling variants
```
"""

from typing import Any

from haystack import Document, default_from_dict, default_to_dict
from haystack.document_stores.types import DuplicatePolicy
from haystack.utils import Secret

from gatehouse import settings
from gatehouse.document_stores.edge_document_store import ANALYSES, EdgeDocumentStore
from gatehouse.document_stores.postgres_store_of import postgres_store

BACKENDS = ("auto", "local", "elasticsearch", "postgres")


class LexicalDocumentStore:
    """A document store with `bm25_retrieval()`, delegating to the local shard or to Elasticsearch."""

    def __init__(
        self,
        *,
        backend: str = "auto",
        analysis: str = "words",
        local: dict[str, Any] | None = None,
        elasticsearch_url: str | None = None,
        elasticsearch_index: str = "gatehouse",
        elasticsearch_fuzziness: str = "0",
        postgres: dict[str, Any] | None = None,
    ) -> None:
        """
        :param backend: `auto` (PostgreSQL when `GATEHOUSE_POSTGRES_URL` is set, Elasticsearch when
            `GATEHOUSE_ELASTICSEARCH_URL` is, else local), `local`, `elasticsearch` or `postgres`.
        :param analysis: Which BM25 vectors of the local shard are searched: `words` (stemmed terms) or `ngrams`
            (character n-grams of the terms, for spelling and word-form variants).
        :param local: Init parameters of the local `EdgeDocumentStore` (path; k1, b, stemmer, stopwords, ... are
            fixed when the shard is created).
        :param elasticsearch_url: Elasticsearch URL; None reads `GATEHOUSE_ELASTICSEARCH_URL`. Its API key is read
            from `GATEHOUSE_ELASTICSEARCH_API_KEY`.
        :param elasticsearch_index: Elasticsearch index name.
        :param elasticsearch_fuzziness: Fuzziness of Elasticsearch's BM25 match query.
        :param postgres: Init parameters of the `PostgresDocumentStore` (`url`, `table`, ...; `embedding_dim` None
            takes the table's), used when its `url` or `GATEHOUSE_POSTGRES_URL` is set.
        """
        if backend not in BACKENDS:
            raise ValueError(f"Unknown lexical backend '{backend}'. Use one of: {', '.join(BACKENDS)}.")
        if analysis not in ANALYSES:
            raise ValueError(f"Unknown analysis '{analysis}'. Use one of: {', '.join(ANALYSES)}.")
        self.backend = backend
        self.analysis = analysis
        self.local = local or {}
        self.elasticsearch_url = elasticsearch_url
        self.elasticsearch_index = elasticsearch_index
        self.elasticsearch_fuzziness = elasticsearch_fuzziness
        self.postgres = postgres or {}
        url = elasticsearch_url or settings.elasticsearch_url()
        database = self.postgres.get("url") or settings.postgres_url()
        if backend == "elasticsearch" and not url:
            raise ValueError("The elasticsearch backend needs GATEHOUSE_ELASTICSEARCH_URL or elasticsearch_url.")
        if backend == "postgres" and not database:
            raise ValueError("The postgres backend needs GATEHOUSE_POSTGRES_URL or postgres.url.")
        if backend == "auto" and url and database:
            raise ValueError("Both Elasticsearch and PostgreSQL are configured for the lexical store: set "
                             "GATEHOUSE_ELASTICSEARCH_URL or GATEHOUSE_POSTGRES_URL, not both.")
        self.active_backend = backend if backend != "auto" else "postgres" if database else (
            "elasticsearch" if url else "local")
        if self.active_backend == "postgres":
            self._store: Any = postgres_store(self.postgres)
        elif self.active_backend == "elasticsearch":
            try:
                from haystack_integrations.document_stores.elasticsearch import ElasticsearchDocumentStore
            except ImportError as error:
                raise RuntimeError(
                    "Elasticsearch is configured but 'elasticsearch-haystack' is not installed: "
                    "pip install 'gatehouse[elasticsearch]'."
                ) from error
            self._store = ElasticsearchDocumentStore(
                hosts=url,
                index=elasticsearch_index,
                api_key=Secret.from_env_var("GATEHOUSE_ELASTICSEARCH_API_KEY", strict=False),
            )
        else:
            self._store = EdgeDocumentStore(**self.local)

    @property
    def store(self) -> Any:
        """The backend store in use."""
        return self._store

    def count_documents(self) -> int:
        """The number of stored documents."""
        return self._store.count_documents()

    def metadata_counts(self, fields: list[str]) -> dict[tuple[Any, ...], int]:
        """
        How many documents hold each combination of values of the metadata `fields` (e.g. `["tenant", "kb"]`): one
        scan of the shard per write locally, a composite terms aggregation in Elasticsearch.

        :param fields: Metadata keys (without `meta.`).
        :returns: Document count per tuple of values (None where a document lacks the key).
        """
        if self.active_backend != "elasticsearch":
            return self._store.metadata_counts(fields)
        sources = [{field: {"terms": {"field": field, "missing_bucket": True}}} for field in fields]
        counts: dict[tuple[Any, ...], int] = {}
        after: dict[str, Any] | None = None
        while True:
            composite: dict[str, Any] = {"size": 1000, "sources": sources, **({"after": after} if after else {})}
            result = self._store.client.search(
                index=self.elasticsearch_index, size=0, aggs={"counts": {"composite": composite}}
            )["aggregations"]["counts"]
            for bucket in result["buckets"]:
                counts[tuple(bucket["key"][field] for field in fields)] = int(bucket["doc_count"])
            after = result.get("after_key")
            if not result["buckets"] or after is None:
                return counts

    def kb_generations(self) -> dict[tuple[str, str], int]:
        """
        A counter per (tenant, kb) that moves whenever a document of that KB is written or deleted, by any process:
        the local shard's or PostgreSQL's counters; with Elasticsearch, the document count per (tenant, kb).
        """
        if self.active_backend != "elasticsearch":
            return self._store.kb_generations()
        return {(str(tenant), str(kb)): count for (tenant, kb), count in self.metadata_counts(["tenant", "kb"]).items()}

    def filter_documents(self, filters: dict[str, Any] | None = None) -> list[Document]:
        """Documents that match Haystack filters."""
        return self._store.filter_documents(filters=filters)

    def write_documents(self, documents: list[Document], policy: DuplicatePolicy = DuplicatePolicy.NONE) -> int:
        """Write documents to the backend."""
        return self._store.write_documents(documents, policy=policy)

    def delete_documents(self, document_ids: list[str]) -> None:
        """Delete documents by id."""
        self._store.delete_documents(document_ids)

    def delete_by_filter(self, filters: dict[str, Any]) -> int:
        """Delete the documents that match `filters`; returns how many."""
        return self._store.delete_by_filter(filters)

    def bm25_retrieval(self, query: str, filters: dict[str, Any] | None = None, top_k: int = 10) -> list[Document]:
        """
        BM25 search among the documents that match `filters`.

        :param query: The query text.
        :param filters: Haystack metadata filters.
        :param top_k: Maximum number of documents.
        :returns: Documents with their BM25 score, best first.
        """
        if self.active_backend == "elasticsearch":
            if not query.strip():
                return []
            from haystack_integrations.components.retrievers.elasticsearch import ElasticsearchBM25Retriever

            retriever = ElasticsearchBM25Retriever(document_store=self._store, fuzziness=self.elasticsearch_fuzziness)
            return retriever.run(query=query, filters=filters, top_k=top_k)["documents"]
        return self._store.bm25_retrieval(query, filters=filters, top_k=top_k, analysis=self.analysis)

    def to_dict(self) -> dict[str, Any]:
        """Serialise the store's settings."""
        return default_to_dict(
            self,
            backend=self.backend,
            analysis=self.analysis,
            local=self.local,
            elasticsearch_url=self.elasticsearch_url,
            elasticsearch_index=self.elasticsearch_index,
            elasticsearch_fuzziness=self.elasticsearch_fuzziness,
            postgres=self.postgres,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LexicalDocumentStore":
        """Deserialise the store from `to_dict` output."""
        return default_from_dict(cls, data)
