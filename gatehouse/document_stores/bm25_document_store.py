"""
A persistent BM25 document store: documents in SQLite on disk, a BM25 index (bm25s) built in memory.

Usage:
```python
from haystack import Document
from gatehouse.document_stores.bm25_document_store import BM25DocumentStore

store = BM25DocumentStore(path="data/bm25", stemmer="english", stopwords="en")
store.write_documents([Document(content="Rotate API keys from the console.", meta={"kb": "faq"})])
hits = store.bm25_retrieval("rotate key", filters={"field": "meta.kb", "operator": "==", "value": "faq"}, top_k=5)
```
"""

import json
import re
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import bm25s
import numpy as np
from bm25s.stopwords import STOPWORDS_EN
from haystack import Document, default_from_dict, default_to_dict
from haystack.document_stores.errors import DuplicateDocumentError
from haystack.document_stores.types import DuplicatePolicy
from haystack.utils.filters import document_matches_filter

from gatehouse import settings


class Analyzer:
    """
    Lower-cases, splits on a token pattern, drops stopwords and stems (Snowball via PyStemmer); with
    `char_ngrams` each remaining term becomes its character n-grams (padded with a space on both sides, so
    `" gene "` gives `" ge"`, `"gen"`, `"ene"`, `"ne "`), which match spelling and morphological variants.
    """

    def __init__(
        self, token_pattern: str, stopwords: str | list[str] | None, stemmer: str | None, char_ngrams: int | None = None
    ) -> None:
        if char_ngrams is not None and char_ngrams < 2:
            raise ValueError(f"char_ngrams must be at least 2 (or null for whole terms), got {char_ngrams}.")
        self._char_ngrams = char_ngrams
        self._pattern = re.compile(token_pattern)
        if stopwords == "en":
            self._stopwords = frozenset(STOPWORDS_EN)
        elif isinstance(stopwords, str):
            raise ValueError(f"Unknown stopword list '{stopwords}'. Use 'en', a list of words, or null.")
        else:
            self._stopwords = frozenset(word.lower() for word in stopwords or [])
        if stemmer:
            import Stemmer

            if stemmer not in Stemmer.algorithms():
                raise ValueError(f"Unknown stemmer '{stemmer}'. Available: {', '.join(Stemmer.algorithms())}.")
            self._stem = Stemmer.Stemmer(stemmer).stemWords
        else:
            self._stem = None

    def __call__(self, text: str) -> list[str]:
        tokens = [t for t in self._pattern.findall(text.lower()) if t not in self._stopwords]
        if self._stem:
            tokens = self._stem(tokens)
        if self._char_ngrams is None:
            return tokens
        size = self._char_ngrams
        padded = [f" {token} " for token in tokens]
        return [term[i : i + size] for term in padded for i in range(max(1, len(term) - size + 1))]


def _doc_id_lookup(filters: dict[str, Any]) -> list[str] | None:
    """The `meta.doc_id` values of a plain `==`/`in` filter on that field, or None for any other filter."""
    if filters.get("field") != "meta.doc_id":
        return None
    if filters.get("operator") == "==" and isinstance(filters.get("value"), str):
        return [filters["value"]]
    if filters.get("operator") == "in" and isinstance(filters.get("value"), list):
        return [str(value) for value in filters["value"]]
    return None


class BM25DocumentStore:
    """
    Documents persisted in SQLite; BM25 scores from an in-memory bm25s index rebuilt when the data changes.

    Every process sees writes made by other processes: a generation counter in the database tells a reader
    that its index is stale. Filters use Haystack's filter syntax.
    """

    def __init__(
        self,
        *,
        path: str | None = None,
        index: str = "gatehouse",
        k1: float = 1.2,
        b: float = 0.75,
        method: str = "lucene",
        stemmer: str | None = "english",
        stopwords: str | list[str] | None = "en",
        token_pattern: str = r"(?u)\b\w\w*\b",
        indexed_fields: list[str] | None = None,
        char_ngrams: int | None = None,
    ) -> None:
        """
        :param path: Folder of the SQLite file; None uses `<GATEHOUSE_DATA_DIR>/bm25`.
        :param index: Name of the index (one SQLite file per index).
        :param k1: BM25 term-frequency saturation.
        :param b: BM25 length normalisation.
        :param method: BM25 variant of bm25s: `lucene`, `robertson`, `atire`, `bm25l` or `bm25+`.
        :param stemmer: Snowball stemmer language (PyStemmer), or None for no stemming.
        :param stopwords: `"en"`, a list of words, or None.
        :param token_pattern: Regular expression that matches one token.
        :param indexed_fields: What is indexed: `content` and/or `meta.<key>` (e.g. `meta.title`).
            Defaults to `["meta.title", "meta.section", "content"]`.
        :param char_ngrams: Index character n-grams of this size of every term instead of the terms (e.g. 3);
            None indexes whole terms. Analysis happens in memory when the index is built, so stores with different
            analysis can read the same SQLite file (one written by `index.yml`).
        """
        self.path = path
        self.index = index
        self.k1 = k1
        self.b = b
        self.method = method
        self.stemmer = stemmer
        self.stopwords = stopwords
        self.token_pattern = token_pattern
        self.indexed_fields = indexed_fields or ["meta.title", "meta.section", "content"]
        self.char_ngrams = char_ngrams
        self._analyzer = Analyzer(token_pattern, stopwords, stemmer, char_ngrams)
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._generation = -1
        self._by_id: dict[str, Document] = {}
        self._ids_by_doc_id: dict[str, set[str]] = {}
        self._index_stale = True
        self._documents: list[Document] = []
        self._bm25: bm25s.BM25 | None = None
        self._mask_cache: dict[str, np.ndarray] = {}
        self._counts_cache: dict[tuple[str, ...], tuple[int, dict[tuple[Any, ...], int]]] = {}

    # -- storage ----------------------------------------------------------------------------------------------
    @property
    def database_path(self) -> Path:
        """The SQLite file that holds the documents."""
        folder = Path(self.path).expanduser() if self.path else settings.data_dir() / "bm25"
        return folder / f"{self.index}.sqlite"

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self.database_path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.database_path, check_same_thread=False, timeout=60)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("CREATE TABLE IF NOT EXISTS documents (id TEXT PRIMARY KEY, body TEXT NOT NULL)")
            conn.execute("CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value INTEGER NOT NULL)")
            conn.execute("INSERT OR IGNORE INTO state (key, value) VALUES ('generation', 0)")
            conn.commit()
            self._conn = conn
        return self._conn

    def _stored_generation(self) -> int:
        row = self._connection().execute("SELECT value FROM state WHERE key = 'generation'").fetchone()
        return int(row[0])

    def _refresh(self) -> None:
        """Reload the documents when another process (or store instance) wrote since the last load."""
        generation = self._stored_generation()
        if generation == self._generation:
            return
        rows = self._connection().execute("SELECT body FROM documents").fetchall()
        self._by_id = {}
        self._ids_by_doc_id = {}
        for (body,) in rows:
            self._remember(Document.from_dict(json.loads(body)))
        self._index_stale = True
        self._generation = generation

    def _remember(self, document: Document) -> None:
        self._forget(document.id)
        self._by_id[document.id] = document
        doc_id = document.meta.get("doc_id")
        if doc_id is not None:
            self._ids_by_doc_id.setdefault(str(doc_id), set()).add(document.id)

    def _forget(self, document_id: str) -> None:
        known = self._by_id.pop(document_id, None)
        doc_id = known.meta.get("doc_id") if known else None
        if doc_id is not None:
            ids = self._ids_by_doc_id.get(str(doc_id), set())
            ids.discard(document_id)
            if not ids:
                self._ids_by_doc_id.pop(str(doc_id), None)

    def _build_index(self) -> None:
        """(Re)build the BM25 index over the loaded documents, in id order, when they changed since the last build."""
        self._refresh()
        if not self._index_stale:
            return
        self._documents = [self._by_id[key] for key in sorted(self._by_id)]
        self._bm25 = None
        if self._documents:
            corpus = [self._analyzer(self._indexed_text(doc)) or [""] for doc in self._documents]
            self._bm25 = bm25s.BM25(k1=self.k1, b=self.b, method=self.method)
            self._bm25.index(corpus, show_progress=False)
        self._mask_cache = {}
        self._index_stale = False

    def _indexed_text(self, document: Document) -> str:
        parts = []
        for field in self.indexed_fields:
            value = document.content if field == "content" else document.meta.get(field.removeprefix("meta."))
            if value:
                parts.append(str(value))
        return "\n".join(parts)

    def _write_transaction(self, apply: Callable[[sqlite3.Connection], bool], remember: Callable[[], None]) -> None:
        """
        Run `apply` in one write transaction; when it changed something, bump the generation.

        When no other writer changed the database since this store last loaded it, `remember` mirrors the change
        in memory (so a long ingest never reloads the whole table); otherwise the next read reloads it.
        """
        conn = self._connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            in_sync = self._stored_generation() == self._generation
            changed = apply(conn)
            if changed:
                conn.execute("UPDATE state SET value = value + 1 WHERE key = 'generation'")
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
        if changed and in_sync:
            remember()
            self._generation += 1
            self._index_stale = True

    # -- DocumentStore protocol -------------------------------------------------------------------------------
    def count_documents(self) -> int:
        """The number of stored documents."""
        with self._lock:
            return int(self._connection().execute("SELECT COUNT(*) FROM documents").fetchone()[0])

    def metadata_counts(self, fields: list[str]) -> dict[tuple[Any, ...], int]:
        """
        How many documents hold each combination of values of the metadata `fields` (e.g. `["tenant", "kb"]`).

        Counted by SQLite and cached until the data changes (a write by any process bumps the generation), so a
        repeated call costs one read of the generation counter.

        :param fields: Metadata keys (without `meta.`).
        :returns: Document count per tuple of values (None where a document lacks the key).
        """
        key = tuple(fields)
        with self._lock:
            generation = self._stored_generation()
            cached = self._counts_cache.get(key)
            if cached is not None and cached[0] == generation:
                return dict(cached[1])
            columns = ", ".join("json_extract(body, ?)" for _ in key)
            groups = ", ".join(str(position) for position in range(1, len(key) + 1))
            rows = self._connection().execute(
                f"SELECT {columns}, COUNT(*) FROM documents GROUP BY {groups}",  # noqa: S608 - only placeholders
                [f'$.meta."{field}"' for field in key],
            ).fetchall()
            counts = {tuple(row[:-1]): int(row[-1]) for row in rows}
            self._counts_cache[key] = (generation, counts)
            return dict(counts)

    def filter_documents(self, filters: dict[str, Any] | None = None) -> list[Document]:
        """
        Documents matching Haystack filters (all documents when `filters` is None).

        :param filters: Haystack metadata filters.
        :returns: The matching documents.
        """
        with self._lock:
            self._refresh()
            if not filters:
                return [self._by_id[key] for key in sorted(self._by_id)]
            doc_ids = _doc_id_lookup(filters)
            if doc_ids is not None:  # what ingestion asks, once per file: answered from an index
                return [self._by_id[key] for key in sorted(set().union(*(self._ids_by_doc_id.get(i, ()) for i in doc_ids)))]
            return [self._by_id[key] for key in sorted(self._by_id) if document_matches_filter(filters, self._by_id[key])]

    def write_documents(self, documents: list[Document], policy: DuplicatePolicy = DuplicatePolicy.NONE) -> int:
        """
        Write documents in one transaction (all or nothing).

        :param documents: Documents to write; embeddings are not stored here.
        :param policy: `NONE`/`FAIL` raise on an existing id, `SKIP` keeps the stored one, `OVERWRITE` replaces it.
        :returns: The number of documents written.
        :raises DuplicateDocumentError: On an existing id with policy `NONE` or `FAIL`.
        """
        if not isinstance(documents, list) or any(not isinstance(doc, Document) for doc in documents):
            raise ValueError("write_documents expects a list of Documents.")
        with self._lock:
            self._refresh()
            stored: list[Document] = []

            def apply(conn: sqlite3.Connection) -> bool:
                for doc in documents:
                    exists = conn.execute("SELECT 1 FROM documents WHERE id = ?", (doc.id,)).fetchone()
                    if exists and policy in (DuplicatePolicy.NONE, DuplicatePolicy.FAIL):
                        raise DuplicateDocumentError(f"A document with id '{doc.id}' already exists.")
                    if exists and policy == DuplicatePolicy.SKIP:
                        continue
                    kept = replace(doc, embedding=None, sparse_embedding=None)
                    body = json.dumps(kept.to_dict(flatten=False))
                    conn.execute("INSERT OR REPLACE INTO documents (id, body) VALUES (?, ?)", (doc.id, body))
                    stored.append(Document.from_dict(json.loads(body)))
                return bool(stored)

            def remember() -> None:
                for doc in stored:
                    self._remember(doc)

            self._write_transaction(apply, remember)
            return len(stored)

    def delete_documents(self, document_ids: list[str]) -> None:
        """
        Delete documents by id (unknown ids are ignored).

        :param document_ids: Ids to delete.
        """
        with self._lock:
            self._refresh()
            ids = list(dict.fromkeys(document_ids))

            def apply(conn: sqlite3.Connection) -> bool:
                before = conn.total_changes
                conn.executemany("DELETE FROM documents WHERE id = ?", [(i,) for i in ids])
                return conn.total_changes > before

            def remember() -> None:
                for document_id in ids:
                    self._forget(document_id)

            self._write_transaction(apply, remember)

    def delete_by_filter(self, filters: dict[str, Any]) -> int:
        """
        Delete the documents that match `filters`.

        :param filters: Haystack metadata filters.
        :returns: The number of deleted documents.
        """
        ids = [doc.id for doc in self.filter_documents(filters)]
        if ids:
            self.delete_documents(ids)
        return len(ids)

    # -- retrieval --------------------------------------------------------------------------------------------
    def bm25_retrieval(
        self, query: str, filters: dict[str, Any] | None = None, top_k: int = 10, scale_score: bool = False
    ) -> list[Document]:
        """
        The `top_k` documents by BM25 score among those matching `filters`; documents scoring 0 are left out.

        :param query: The query text.
        :param filters: Haystack metadata filters applied before ranking.
        :param top_k: Maximum number of documents.
        :param scale_score: Map scores to (0, 1) with `s / (s + 1)`.
        :returns: Documents with `score` set, best first.
        """
        with self._lock:
            self._build_index()
            if self._bm25 is None or top_k <= 0:
                return []
            tokens = [t for t in self._analyzer(query) if t in self._bm25.vocab_dict]
            if not tokens:
                return []
            scores = self._bm25.get_scores(tokens)
            if filters:
                scores = np.where(self._mask(filters), scores, 0.0)
            order = np.argsort(-scores, kind="stable")[:top_k]
            results = []
            for position in order:
                score = float(scores[position])
                if score <= 0.0:
                    break
                results.append(replace(self._documents[position], score=score / (score + 1) if scale_score else score))
            return results

    def _mask(self, filters: dict[str, Any]) -> np.ndarray:
        key = json.dumps(filters, sort_keys=True, default=str)
        if key not in self._mask_cache:
            self._mask_cache[key] = np.array([document_matches_filter(filters, doc) for doc in self._documents])
            if len(self._mask_cache) > 256:
                self._mask_cache.pop(next(iter(self._mask_cache)))
        return self._mask_cache[key]

    # -- serialisation ----------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Serialise the store's settings (not its contents)."""
        return default_to_dict(
            self,
            path=self.path,
            index=self.index,
            k1=self.k1,
            b=self.b,
            method=self.method,
            stemmer=self.stemmer,
            stopwords=self.stopwords,
            token_pattern=self.token_pattern,
            indexed_fields=self.indexed_fields,
            char_ngrams=self.char_ngrams,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "BM25DocumentStore":
        """Deserialise a store from `to_dict` output."""
        return default_from_dict(cls, data)
