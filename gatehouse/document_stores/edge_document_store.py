"""
The local store: one embedded Qdrant shard (`qdrant-edge-py`) holding every chunk with its dense vector, its BM25
sparse vectors (words, and character n-grams of words) and the document as payload.

One engine for both sides of hybrid search, so a chunk is written with all it is searched by in one update: a write
either happened or did not, and whatever retrieval can find, listing and deleting see too. Replacing a document's
chunks (a changed file) is two updates, the new version then the removal of the old; the shard's write-ahead log
replays whole updates after a crash, and opening the shard removes the older version of any document a crash left
with two (`repair`). Each (tenant, kb) has a write counter point, bumped in the same update as its chunks, which
caches of derived data (answer cache, KB profiles) compare.

The engine allows one process per folder: every store of one process that uses the folder shares one open shard,
and a second process gets a `DataDirInUseError` saying which. Reads run beside each other and beside writes; writes
of one process run one at a time.

Usage:
```python
from haystack import Document
from gatehouse.document_stores.edge_document_store import EdgeDocumentStore

store = EdgeDocumentStore()                          # <GATEHOUSE_DATA_DIR>/store
store.write_documents([Document(content="Rotate API keys from the console.", embedding=[...], meta={"kb": "faq"})])
store.bm25_retrieval("rotate key", filters={"field": "meta.kb", "operator": "==", "value": "faq"}, top_k=5)
store.embedding_retrieval([...], filters=None, top_k=5)
```
"""

import json
from pathlib import Path
from typing import Any

import numpy as np
from haystack import Document, default_from_dict, default_to_dict
from haystack.document_stores.errors import DuplicateDocumentError
from haystack.document_stores.types import DuplicatePolicy
from qdrant_edge import (
    CountRequest,
    FieldCondition,
    Filter,
    HasIdCondition,
    MatchValue,
    Point,
    Query,
    QueryBatchRequest,
    QueryRequest,
    SearchParams,
    SparseVector,
    UpdateOperation,
)

from gatehouse import settings
from gatehouse.document_stores.analysis import Analyzer, Bm25Encoder
from gatehouse.document_stores.edge_filters import edge_filter
from gatehouse.document_stores.edge_shard import (
    ANALYSES,
    CHUNK,
    DISTANCES,
    Shard,
    all_of,
    counter_id,
    kb_of,
    point_id,
    shard_settings,
)
from gatehouse.document_stores.errors import data_dir_errors
from gatehouse.document_stores.migration import legacy_collections, migrate


class SharedDocument(Document):
    """
    A stored chunk that Haystack hands from component to component without copying it.

    A pipeline deep-copies every component's inputs, which for hundreds of candidate chunks per search costs more than
    the search. Gatehouse's components never change a document in place (they make changed copies with
    `dataclasses.replace`, which keeps this class), so a copy of one of these is the document itself.
    """

    def __deepcopy__(self, memo: dict[int, Any]) -> "SharedDocument":
        return self


class EdgeDocumentStore:
    """
    Chunks with their dense and BM25 vectors in one embedded Qdrant shard. Filters use Haystack's syntax; search
    is `embedding_retrieval` (dense) and `bm25_retrieval` (words or n-grams, IDF over the whole shard).
    """

    def __init__(
        self,
        *,
        path: str | None = None,
        embedding_dim: int | None = None,
        similarity: str | None = None,
        k1: float = 1.2,
        b: float = 0.75,
        stemmer: str | None = "english",
        stopwords: str | list[str] | None = "en",
        token_pattern: str = r"(?u)\b\w\w*\b",
        char_ngrams: int = 3,
        indexed_fields: list[str] | None = None,
    ) -> None:
        """
        :param path: Folder of the shard; None uses `<GATEHOUSE_DATA_DIR>/store`.
        :param embedding_dim: Size of the dense vectors (384 for all-MiniLM-L6-v2); None takes the shard's, or the
            size of the first embedding written.
        :param similarity: `cosine`, `dot_product` or `l2`; None takes the shard's (cosine for a new one).
        :param k1: BM25 term-frequency saturation.
        :param b: BM25 length normalisation (against the average length of the stored chunks).
        :param stemmer: Snowball stemmer language (PyStemmer), or None for no stemming.
        :param stopwords: `"en"`, a list of words, or None.
        :param token_pattern: Regular expression that matches one token.
        :param char_ngrams: Size of the character n-grams of the `ngrams` analysis.
        :param indexed_fields: What the BM25 vectors cover: `content` and/or `meta.<key>`; defaults to
            `["meta.title", "meta.section", "content"]`.
        The settings are fixed when the shard is created; opening it with others is an error naming them.
        """
        if similarity is not None and similarity not in DISTANCES:
            raise ValueError(f"Unknown similarity '{similarity}'. Use one of: {', '.join(DISTANCES)}.")
        self.path = path
        self.embedding_dim = embedding_dim
        self.similarity = similarity
        self.k1 = k1
        self.b = b
        self.stemmer = stemmer
        self.stopwords = stopwords
        self.token_pattern = token_pattern
        self.char_ngrams = char_ngrams
        self.indexed_fields = indexed_fields or ["meta.title", "meta.section", "content"]
        wanted = shard_settings(embedding_dim=embedding_dim, similarity=similarity, k1=k1, b=b, stemmer=stemmer,
                           stopwords=stopwords, token_pattern=token_pattern, char_ngrams=char_ngrams,
                           indexed_fields=self.indexed_fields)
        Bm25Encoder(Analyzer(token_pattern=token_pattern, stopwords=stopwords, stemmer=stemmer,
                             char_ngrams=char_ngrams), k1=k1, b=b)  # bad settings fail here, before the shard opens
        folder = self.folder
        if path is None and not (folder / "edge_config.json").is_file() and legacy_collections(folder.parent):
            migrate(folder.parent, folder, lambda staging: EdgeDocumentStore(path=str(staging), **wanted))
        self._shard = Shard.at(folder, wanted)  # opened now: a bad or busy data folder fails the load

    @property
    def folder(self) -> Path:
        """The shard's folder."""
        return Path(self.path).expanduser() if self.path else settings.data_dir() / "store"

    def close(self) -> None:
        """Flush and close the shard, for every store of this process that shares it (done at exit otherwise)."""
        self._shard.close()

    def shares_shard(self, other: Any) -> bool:
        """Whether `other` is a store of the same shard (one write then holds what both hold)."""
        return isinstance(other, EdgeDocumentStore) and other._shard is self._shard

    # -- reading ----------------------------------------------------------------------------------------------
    def count_documents(self) -> int:
        """The number of stored chunks."""
        with data_dir_errors(self._shard.folder):
            return self._shard.engine.count(CountRequest(exact=True, filter=all_of(CHUNK)))

    def filter_documents(self, filters: dict[str, Any] | None = None) -> list[Document]:
        """
        Documents matching Haystack filters (all when None), sorted by id, without embeddings.

        :param filters: Haystack metadata filters.
        """
        records = self._shard.scroll(all_of(CHUNK, edge_filter(filters)))
        return sorted((self._document(record.payload) for record in records), key=lambda document: document.id)

    def metadata_counts(self, fields: list[str]) -> dict[tuple[Any, ...], int]:
        """
        How many chunks hold each combination of values of the metadata `fields` (e.g. `["tenant", "kb"]`), counted
        once per write.

        :param fields: Metadata keys (without `meta.`).
        :returns: Chunk count per tuple of values (None where a chunk lacks the key).
        """
        return self._shard.metadata_counts(fields)

    def kb_generations(self) -> dict[tuple[str, str], int]:
        """
        A write counter per (tenant, kb): every write to or deletion from a knowledge base moves it up (across
        restarts too: the counter lives in the shard and takes the time of the write).

        :returns: Counter per `(tenant, kb)` ever written (`""` for a chunk without that key); absent pairs are 0.
        """
        return self._shard.kb_generations()

    def embedding_retrieval(
        self, query_embedding: list[float], filters: dict[str, Any] | None = None, top_k: int = 10
    ) -> list[Document]:
        """
        The `top_k` chunks nearest to `query_embedding` among those matching `filters`.

        :returns: Documents with `score` (cosine similarity by default), best first.
        """
        if top_k <= 0 or self._shard.settings["embedding_dim"] is None:  # no dense vector written yet
            return []
        request = QueryRequest(limit=top_k, query=Query.Nearest(list(query_embedding), using="dense"),
                               filter=all_of(CHUNK, edge_filter(filters)), with_payload=True)
        with data_dir_errors(self._shard.folder):
            points = self._shard.engine.query(request)
        return [self._document(point.payload, score=point.score) for point in points]

    def nearest_ids(self, query_embedding: list[float], filters: dict[str, Any] | None = None, top_k: int = 10) -> list[str]:
        """The engine's ids of the `top_k` chunks nearest to `query_embedding`: the bare search, without payload."""
        if self._shard.settings["embedding_dim"] is None:
            return []
        request = QueryRequest(limit=top_k, query=Query.Nearest(list(query_embedding), using="dense"),
                               filter=all_of(CHUNK, edge_filter(filters)), with_payload=False)
        with data_dir_errors(self._shard.folder):
            return [str(point.id) for point in self._shard.engine.query(request)]

    def bm25_retrieval(
        self, query: str, filters: dict[str, Any] | None = None, top_k: int = 10, analysis: str = "words"
    ) -> list[Document]:
        """
        The `top_k` chunks by BM25 score among those matching `filters`; chunks scoring 0 are left out.

        :param analysis: `words` (stemmed terms) or `ngrams` (character n-grams of the terms).
        :returns: Documents with `score`, best first.
        """
        if analysis not in ANALYSES:
            raise ValueError(f"Unknown analysis '{analysis}'. Use one of: {', '.join(ANALYSES)}.")
        indices, values = self._shard.encoders[analysis].query(query)
        if top_k <= 0 or not indices:
            return []
        request = QueryRequest(limit=top_k, query=Query.Nearest(SparseVector(indices=indices, values=values),
                                                                 using=analysis),
                               filter=all_of(CHUNK, edge_filter(filters)), with_payload=True)
        with data_dir_errors(self._shard.folder):
            points = self._shard.engine.query(request)
        return [self._document(point.payload, score=point.score) for point in points if point.score > 0.0]

    def ranked_ids(
        self, searches: dict[str, str], query_embedding: list[float], query: str, filters: dict[str, Any] | None,
        top_k: int, group_by: str | None = None,
    ) -> dict[str, list[tuple[Any, Any, float]]]:
        """
        Several searches in one planned batch, without building documents: for hybrid search, which fuses the
        lists and then reads only the chunks it keeps (`documents_by_point`).

        :param searches: List name to what it searches: `dense` (`query_embedding`), `words` or `ngrams` (BM25 of
            `query`).
        :param group_by: A metadata key whose value each hit carries (e.g. `doc_id`).
        :returns: List name to `(point id, group value, score)` triples, best first (BM25 hits scoring 0 left out);
            a point id is the engine's (an int), which `similarities` and `documents_by_point` take.
        """
        requests, names = [], []
        where = all_of(CHUNK, edge_filter(filters))
        for name, using in searches.items():
            if using == "dense":
                if self._shard.settings["embedding_dim"] is None:
                    continue
                vector: Any = list(query_embedding)
            elif using in ANALYSES:
                indices, values = self._shard.encoders[using].query(query)
                if not indices:
                    continue
                vector = SparseVector(indices=indices, values=values)
            else:
                raise ValueError(f"Unknown search '{using}'. Use dense or one of: {', '.join(ANALYSES)}.")
            names.append(name)
            requests.append(QueryRequest(limit=top_k, query=Query.Nearest(vector, using=using), filter=where,
                                         with_payload=False))
        results: dict[str, list[tuple[Any, Any, float]]] = {name: [] for name in searches}
        if not requests or top_k <= 0:
            return results
        with data_dir_errors(self._shard.folder):
            batches = self._shard.engine.query_batch(QueryBatchRequest(requests))
        groups = self._shard.groups(group_by, {point.id for points in batches for point in points}) if group_by else {}
        for name, points in zip(names, batches, strict=True):
            results[name] = [(point.id, groups.get(point.id), point.score)
                             for point in points if point.score > 0.0 or searches[name] == "dense"]
        return results

    def similarities(self, query_embedding: list[float], point_ids: list[Any]) -> dict[Any, tuple[float, float | None]]:
        """
        The query's cosine to each chunk's vector and to its best sentence (None without sentence vectors).

        :param point_ids: Point ids, as `ranked_ids` gives them.
        :returns: Point id to `(chunk similarity, best sentence similarity)`.
        """
        if not point_ids or self._shard.settings["embedding_dim"] is None:
            return {}
        among = all_of(CHUNK, HasIdCondition(set(point_ids)))
        exact = SearchParams(exact=True)
        requests = [QueryRequest(limit=len(point_ids), query=Query.Nearest(list(query_embedding), using="dense"),
                                 filter=among, params=exact, with_payload=False),
                    QueryRequest(limit=len(point_ids), query=Query.Nearest([list(query_embedding)], using="sentences"),
                                 filter=among, params=exact, with_payload=False)]
        with data_dir_errors(self._shard.folder):
            chunks, sentences = self._shard.engine.query_batch(QueryBatchRequest(requests))
        best = {point.id: point.score for point in sentences}
        return {point.id: (point.score, best.get(point.id)) for point in chunks}

    def documents_by_point(self, hits: list[tuple[Any, float, dict[str, Any]]]) -> list[Document]:
        """
        The stored chunks of these engine ids, in this order, each with the given score and metadata added (ids
        deleted since the search are left out).

        :param hits: `(point id, score, metadata to add)` triples.
        """
        if not hits:
            return []
        with data_dir_errors(self._shard.folder):
            records = self._shard.engine.retrieve([hit[0] for hit in hits], with_payload=True,
                                                  with_vector=False)
        payloads = {record.id: record.payload for record in records}
        return [self._document(payload, score, extra)
                for point, score, extra in hits if (payload := payloads.get(point)) is not None]

    # -- writing ----------------------------------------------------------------------------------------------
    def write_documents(
        self, documents: list[Document], policy: DuplicatePolicy = DuplicatePolicy.NONE,
        sentence_embeddings: dict[str, Any] | None = None,
    ) -> int:
        """
        Write documents in one update (all or nothing), with their KBs' write counters.

        :param documents: Documents; those with an `embedding` can be found by `embedding_retrieval`.
        :param policy: `NONE`/`FAIL` raise on an existing id, `SKIP` keeps the stored one, `OVERWRITE` replaces it.
        :param sentence_embeddings: Document id to the vectors of its sentences (rows), for `similarities`.
        :returns: The number of documents written.
        :raises DuplicateDocumentError: On an existing id with policy `NONE` or `FAIL`.
        """
        if not isinstance(documents, list) or any(not isinstance(doc, Document) for doc in documents):
            raise ValueError("write_documents expects a list of Documents.")
        self._ensure_dense(documents)
        with self._shard.write_lock:
            if policy != DuplicatePolicy.OVERWRITE and documents:
                existing = self._existing([doc.id for doc in documents])
                if existing and policy in (DuplicatePolicy.NONE, DuplicatePolicy.FAIL):
                    raise DuplicateDocumentError(f"A document with id '{min(existing)}' already exists.")
                documents = [doc for doc in documents if doc.id not in existing]
            if documents:
                replaced = self._stored([doc.id for doc in documents]) if policy == DuplicatePolicy.OVERWRITE else []
                upsert, totals = self._upsert(documents, None, replaced, sentence_embeddings or {})
                self._shard.update(upsert, totals=totals)
        return len(documents)

    def replace_documents(
        self, doc_id: str, documents: list[Document], sentence_embeddings: dict[str, Any] | None = None
    ) -> int:
        """
        Make `documents` the chunks of `meta.doc_id == doc_id`: written in one update, then the chunks of the
        earlier version removed in a second (a crash between leaves both, and the next opening keeps the newest).

        :param doc_id: The source document's id; every one of `documents` must carry it in `meta["doc_id"]`.
        :param documents: The new chunks.
        :param sentence_embeddings: Chunk id to the vectors of its sentences (rows), for `similarities`.
        :returns: How many chunks of the earlier version were removed.
        """
        if any(doc.meta.get("doc_id") != doc_id for doc in documents):
            raise ValueError(f"replace_documents: every chunk must have meta['doc_id'] == {doc_id!r}.")
        same_doc = FieldCondition(key="meta.doc_id", match=MatchValue(doc_id))
        self._ensure_dense(documents)
        with self._shard.write_lock:
            earlier = list(self._shard.scroll(all_of(CHUNK, same_doc), ["id", "content", "meta"]))
            version = self._shard.next_version()
            upsert, totals = self._upsert(documents, version, earlier, sentence_embeddings or {})
            self._shard.update(
                upsert,
                UpdateOperation.delete_points_by_filter(all_of(
                    CHUNK, same_doc, Filter(must_not=[FieldCondition(key="version", match=MatchValue(version))])
                )),
                totals=totals,
            )
        return len({str(record.payload["id"]) for record in earlier} - {doc.id for doc in documents})

    def delete_documents(self, document_ids: list[str]) -> None:
        """
        Delete documents by id (unknown ids are ignored); their KBs' counters move first.

        :param document_ids: Ids to delete.
        """
        ids = [point_id(document_id) for document_id in dict.fromkeys(document_ids)]
        if not ids:
            return
        with self._shard.write_lock:
            with data_dir_errors(self._shard.folder):
                records = self._shard.engine.retrieve(ids, with_payload=["content", "meta"], with_vector=False)
            self._delete(records)

    def delete_by_filter(self, filters: dict[str, Any]) -> int:
        """
        Delete the chunks matching `filters`; their KBs' counters move first.

        :returns: How many chunks were deleted.
        """
        with self._shard.write_lock:
            records = list(self._shard.scroll(all_of(CHUNK, edge_filter(filters)), ["content", "meta"]))
            self._delete(records)
        return len(records)

    # -- helpers ----------------------------------------------------------------------------------------------
    def _delete(self, records: list[Any]) -> None:
        """Delete these records (with `content`, `meta` payload) after moving their KBs' counters and the totals."""
        if records:
            kbs = {kb_of(record.payload.get("meta") or {}) for record in records}
            totals = self._shard.tally([], [self._shard.indexed_text(record.payload) for record in records])
            deletion = UpdateOperation.delete_points([record.id for record in records])
            self._shard.update(self._bump(kbs, totals), deletion, totals=totals)

    def _existing(self, document_ids: list[str]) -> set[str]:
        return {str(record.payload["id"]) for record in self._stored(document_ids, ("id",))}

    def _stored(self, document_ids: list[str], payload: tuple[str, ...] = ("content", "meta")) -> list[Any]:
        """The stored records of these document ids, with `payload`."""
        with data_dir_errors(self._shard.folder):
            return self._shard.engine.retrieve([point_id(i) for i in dict.fromkeys(document_ids)],
                                               with_payload=list(payload), with_vector=False)

    def _ensure_dense(self, documents: list[Document]) -> None:
        """Give the shard its dense vector, sized by the first embedding written, when no store has yet."""
        sized = next((doc.embedding for doc in documents if doc.embedding is not None), None)
        if sized is not None and self._shard.settings["embedding_dim"] is None:
            self._shard.add_dense(len(sized), self.similarity)

    def _bump(self, kbs: set[tuple[str, str]], totals: dict[str, int]) -> UpdateOperation:
        """An upsert moving the counters of `kbs` to a new value, and the length totals to `totals`."""
        counters = [self._counter(tenant, kb, self._shard.next_version()) for tenant, kb in kbs]
        return UpdateOperation.upsert_points([*counters, self._shard.lengths_point(totals)])

    @staticmethod
    def _counter(tenant: str, kb: str, value: int) -> Point:
        return Point(id=counter_id(tenant, kb), vector={},
                     payload={"record": "kb_generation", "tenant": tenant, "kb": kb, "value": value})

    def _upsert(
        self, documents: list[Document], version: int | None, removed: list[Any], sentence_embeddings: dict[str, Any]
    ) -> tuple[UpdateOperation, dict[str, int]]:
        """
        One upsert of `documents` (dense, sentence and BM25 vectors, payload), of their KBs' counters and of the length
        totals once they replace the `removed` records (with `content`, `meta` payload); with those totals.
        """
        chunks: dict[str, tuple[Document, dict[str, Any]]] = {}  # by the engine's id: a repeated id keeps the last
        for document in documents:
            meta = json.loads(json.dumps(document.meta, default=str))
            payload: dict[str, Any] = {"record": "chunk", "id": document.id, "content": document.content, "meta": meta}
            if version is not None:
                payload["version"] = version
            chunks[point_id(document.id)] = (document, payload)
        texts = {id_: self._shard.indexed_text(payload) for id_, (_, payload) in chunks.items()}
        removed_texts = [self._shard.indexed_text(record.payload) for record in removed]
        totals = self._shard.tally(list(texts.values()), removed_texts)
        points = []
        for id_, (document, payload) in chunks.items():
            vectors: dict[str, Any] = dict(self._shard.vectors(texts[id_]))
            if document.embedding is not None:
                vectors["dense"] = [float(x) for x in document.embedding]
            sentences = sentence_embeddings.get(document.id)
            if sentences is not None and len(sentences):
                vectors["sentences"] = np.asarray(sentences, dtype=np.float32).tolist()
            points.append(Point(id=id_, vector=vectors, payload=payload))
        value = version if version is not None else self._shard.next_version()
        kbs = {kb_of(document.meta) for document in documents}
        points.extend(self._counter(tenant, kb, value) for tenant, kb in kbs)
        points.append(self._shard.lengths_point(totals))
        return UpdateOperation.upsert_points(points), totals

    @staticmethod
    def _document(payload: dict[str, Any], score: float | None = None, extra: dict[str, Any] | None = None) -> Document:
        """A stored chunk as a document, with `score` and `extra` metadata added."""
        return SharedDocument(id=payload["id"], content=payload.get("content"),
                              meta={**(payload.get("meta") or {}), **(extra or {})}, score=score)

    # -- serialisation ----------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Serialise the store's settings (not its contents)."""
        return default_to_dict(
            self,
            path=self.path,
            embedding_dim=self.embedding_dim,
            similarity=self.similarity,
            k1=self.k1,
            b=self.b,
            stemmer=self.stemmer,
            stopwords=self.stopwords,
            token_pattern=self.token_pattern,
            char_ngrams=self.char_ngrams,
            indexed_fields=self.indexed_fields,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "EdgeDocumentStore":
        """Deserialise the store from `to_dict` output."""
        return default_from_dict(cls, data)
