"""
A persistent BM25 document store: documents in SQLite on disk, a BM25 index (bm25s) built in memory.

Usage:
```python
from haystack import Document
from components.stores.bm25_document_store import BM25DocumentStore

store = BM25DocumentStore(path="data/bm25", stemmer="english", stopwords="en")
store.write_documents([Document(content="Rotate API keys from the console.", meta={"kb": "faq"})])
hits = store.bm25_retrieval("rotate key", filters={"field": "meta.kb", "operator": "==", "value": "faq"}, top_k=5)
```
"""

import json
import re
import sqlite3
import threading
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

from components import settings


class Analyzer:
    """Lower-cases, splits on a token pattern, drops stopwords and stems (Snowball via PyStemmer)."""

    def __init__(self, token_pattern: str, stopwords: str | list[str] | None, stemmer: str | None) -> None:
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
        return self._stem(tokens) if self._stem else tokens


class BM25DocumentStore:
    """
    Documents persisted in SQLite; BM25 scores from an in-memory bm25s index rebuilt when the data changes.

    Every process sees writes made by other processes: a generation counter in the database tells a reader
    that its index is stale. Filters use Haystack's filter syntax.
    """

    def __init__(  # noqa: PLR0913
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
        self._analyzer = Analyzer(token_pattern, stopwords, stemmer)
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._generation = -1
        self._documents: list[Document] = []
        self._bm25: bm25s.BM25 | None = None
        self._mask_cache: dict[str, np.ndarray] = {}

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
        """Reload documents and rebuild the BM25 index when another write happened since the last load."""
        generation = self._stored_generation()
        if generation == self._generation:
            return
        rows = self._connection().execute("SELECT body FROM documents ORDER BY id").fetchall()
        self._documents = [Document.from_dict(json.loads(body)) for (body,) in rows]
        self._bm25 = None
        if self._documents:
            corpus = [self._analyzer(self._indexed_text(doc)) or [""] for doc in self._documents]
            self._bm25 = bm25s.BM25(k1=self.k1, b=self.b, method=self.method)
            self._bm25.index(corpus, show_progress=False)
        self._mask_cache = {}
        self._generation = generation

    def _indexed_text(self, document: Document) -> str:
        parts = []
        for field in self.indexed_fields:
            value = document.content if field == "content" else document.meta.get(field.removeprefix("meta."))
            if value:
                parts.append(str(value))
        return "\n".join(parts)

    def _bump(self, conn: sqlite3.Connection) -> None:
        conn.execute("UPDATE state SET value = value + 1 WHERE key = 'generation'")

    # -- DocumentStore protocol -------------------------------------------------------------------------------
    def count_documents(self) -> int:
        """The number of stored documents."""
        with self._lock:
            return int(self._connection().execute("SELECT COUNT(*) FROM documents").fetchone()[0])

    def filter_documents(self, filters: dict[str, Any] | None = None) -> list[Document]:
        """
        Documents matching Haystack filters (all documents when `filters` is None).

        :param filters: Haystack metadata filters.
        :returns: The matching documents.
        """
        with self._lock:
            self._refresh()
            if not filters:
                return list(self._documents)
            return [doc for doc in self._documents if document_matches_filter(filters, doc)]

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
            conn = self._connection()
            written = 0
            with conn:
                for doc in documents:
                    exists = conn.execute("SELECT 1 FROM documents WHERE id = ?", (doc.id,)).fetchone()
                    if exists and policy in (DuplicatePolicy.NONE, DuplicatePolicy.FAIL):
                        raise DuplicateDocumentError(f"A document with id '{doc.id}' already exists.")
                    if exists and policy == DuplicatePolicy.SKIP:
                        continue
                    body = json.dumps(replace(doc, embedding=None, sparse_embedding=None).to_dict(flatten=False))
                    conn.execute("INSERT OR REPLACE INTO documents (id, body) VALUES (?, ?)", (doc.id, body))
                    written += 1
                if written:
                    self._bump(conn)
            return written

    def delete_documents(self, document_ids: list[str]) -> None:
        """
        Delete documents by id (unknown ids are ignored).

        :param document_ids: Ids to delete.
        """
        with self._lock:
            conn = self._connection()
            with conn:
                conn.executemany("DELETE FROM documents WHERE id = ?", [(i,) for i in document_ids])
                self._bump(conn)

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
            self._refresh()
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
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "BM25DocumentStore":
        """Deserialise a store from `to_dict` output."""
        return default_from_dict(cls, data)
