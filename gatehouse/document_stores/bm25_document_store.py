"""
A persistent BM25 document store: documents in SQLite on disk, a BM25 index (bm25s) built in memory.

Concurrency: reads never wait for a write and see the last committed state. Every store of one process that uses
the same SQLite file shares one `_Database`: its write lock (writes to one file run one at a time; SQLite's own lock
orders writers of different processes), and the documents of the last committed generation as an immutable
`_Corpus`, which a write publishes by swapping one reference. Each store builds its BM25 index (its own analysis)
of a new corpus once, in the first read that needs it; reads arriving meanwhile wait for that build rather than
answer from an older state, and a read already running finishes on the index it took. Readers have their own SQLite
connection per thread, so they never see a write in progress.

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
import weakref
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import bm25s
import numpy as np
from haystack import Document, default_from_dict, default_to_dict
from haystack.document_stores.errors import DuplicateDocumentError
from haystack.document_stores.types import DuplicatePolicy
from haystack.utils.filters import document_matches_filter

from gatehouse import settings
from gatehouse.components.text import DEFAULT_STOPWORDS
from gatehouse.document_stores.errors import data_dir_errors, require_writable


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
            self._stopwords = DEFAULT_STOPWORDS  # Gatehouse's one list, as the gates use it
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


@dataclass(frozen=True)
class _Corpus:
    """The documents of one committed generation. Published once and never modified, so readers need no lock."""

    generation: int
    by_id: dict[str, Document]
    ids_by_doc_id: dict[str, frozenset[str]]

    @classmethod
    def of(cls, generation: int, documents: Iterable[Document]) -> "_Corpus":
        """The corpus holding `documents`."""
        by_id = {document.id: document for document in documents}
        ids_by_doc_id: dict[str, set[str]] = defaultdict(set)
        for document in by_id.values():
            if document.meta.get("doc_id") is not None:
                ids_by_doc_id[str(document.meta["doc_id"])].add(document.id)
        return cls(generation, by_id, {doc_id: frozenset(ids) for doc_id, ids in ids_by_doc_id.items()})

    def changed(self, generation: int, *, written: Iterable[Document] = (), deleted: Iterable[str] = ()) -> "_Corpus":
        """A new corpus: this one with `deleted` removed and `written` added or replaced (this one is left as it is)."""
        by_id = dict(self.by_id)
        ids_by_doc_id = dict(self.ids_by_doc_id)

        def forget(document_id: str) -> None:
            known = by_id.pop(document_id, None)
            if known is None or known.meta.get("doc_id") is None:
                return
            doc_id = str(known.meta["doc_id"])
            remaining = ids_by_doc_id.get(doc_id, frozenset()) - {document_id}
            if remaining:
                ids_by_doc_id[doc_id] = remaining
            else:
                ids_by_doc_id.pop(doc_id, None)

        for document_id in deleted:
            forget(document_id)
        for document in written:
            forget(document.id)
            by_id[document.id] = document
            if document.meta.get("doc_id") is not None:
                doc_id = str(document.meta["doc_id"])
                ids_by_doc_id[doc_id] = ids_by_doc_id.get(doc_id, frozenset()) | {document.id}
        return _Corpus(generation, by_id, ids_by_doc_id)


# Per (tenant, kb) write counter: a row inserted into or deleted from `documents` bumps the pair it belongs to, in
# the same transaction (a missing tenant or kb counts as "").
_KB_GENERATION_TRIGGER = """
CREATE TRIGGER IF NOT EXISTS kb_generation_after_{event} AFTER {event} ON documents BEGIN
  INSERT INTO kb_generations (tenant, kb, value)
  VALUES (COALESCE(json_extract({row}.body, '$.meta.tenant'), ''), COALESCE(json_extract({row}.body, '$.meta.kb'), ''), 1)
  ON CONFLICT (tenant, kb) DO UPDATE SET value = value + 1;
END"""


class _Database:
    """
    One SQLite file of documents, shared by every store of this process that uses it: the write lock, a writer
    connection, one reader connection per thread, the corpus of the last committed generation and the count cache.

    A generation counter in the file, bumped by every write that changes something, tells a reader of any process
    that its corpus is stale. Reads in WAL mode never wait for a writer and see only committed transactions.
    """

    _open: ClassVar["weakref.WeakValueDictionary[Path, _Database]"] = weakref.WeakValueDictionary()
    _open_lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def at(cls, path: Path) -> "_Database":
        """The database of this process for the SQLite file `path` (opened, with its tables, on first use)."""
        path = path.resolve()
        with cls._open_lock:
            database = cls._open.get(path)
            if database is None:
                database = cls(path)
                cls._open[path] = database
            return database

    def __init__(self, path: Path) -> None:
        self.path = path
        self.folder = path.parent
        self._write_lock = threading.Lock()
        self._load_lock = threading.Lock()
        self._publish_lock = threading.Lock()
        self._readers = threading.local()
        self._corpus = _Corpus.of(-1, [])
        self._counts: dict[tuple[str, ...], tuple[int, dict[tuple[Any, ...], int]]] = {}
        self._kb_generations: tuple[int, dict[tuple[str, str], int]] = (-1, {})
        require_writable(self.folder)
        with data_dir_errors(self.folder):
            self._writer = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
            self._writer.execute("PRAGMA journal_mode=WAL")
            self._writer.execute("CREATE TABLE IF NOT EXISTS documents (id TEXT PRIMARY KEY, body TEXT NOT NULL)")
            self._writer.execute("CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value INTEGER NOT NULL)")
            self._writer.execute("INSERT OR IGNORE INTO state (key, value) VALUES ('generation', 0)")
            self._writer.execute(
                "CREATE TABLE IF NOT EXISTS kb_generations "
                "(tenant TEXT NOT NULL, kb TEXT NOT NULL, value INTEGER NOT NULL, PRIMARY KEY (tenant, kb))"
            )
            for event, row in (("INSERT", "NEW"), ("DELETE", "OLD")):  # every row written or deleted bumps its KB
                self._writer.execute(_KB_GENERATION_TRIGGER.format(event=event, row=row))

    def _reader(self) -> sqlite3.Connection:
        connection = getattr(self._readers, "connection", None)
        if connection is None:
            connection = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            self._readers.connection = connection
        return connection

    @staticmethod
    def _generation(connection: sqlite3.Connection) -> int:
        # fetchall() finishes the statement, so no read transaction stays open (and pinned to an old snapshot)
        return int(connection.execute("SELECT value FROM state WHERE key = 'generation'").fetchall()[0][0])

    def _read(self, query: Callable[[sqlite3.Connection], Any]) -> tuple[int, Any]:
        """Run `query` in one read transaction: the generation and what it read come from the same commit."""
        with data_dir_errors(self.folder):
            connection = self._reader()
            connection.execute("BEGIN")
            try:
                return self._generation(connection), query(connection)
            finally:
                connection.execute("COMMIT")

    def generation(self) -> int:
        """The generation of the last committed write, of any process."""
        with data_dir_errors(self.folder):
            return self._generation(self._reader())

    def count(self) -> int:
        """The number of committed documents."""
        with data_dir_errors(self.folder):
            return int(self._reader().execute("SELECT COUNT(*) FROM documents").fetchall()[0][0])

    def corpus(self) -> _Corpus:
        """The documents of the last committed generation; loaded again only when some process wrote since."""
        generation = self.generation()
        corpus = self._corpus
        if corpus.generation >= generation:
            return corpus
        with self._load_lock:  # one load at a time; readers arriving meanwhile take its result
            if self._corpus.generation < generation:
                loaded, rows = self._read(lambda c: c.execute("SELECT body FROM documents").fetchall())
                self._publish(_Corpus.of(loaded, (Document.from_dict(json.loads(body)) for (body,) in rows)))
            return self._corpus

    def _publish(self, corpus: _Corpus) -> None:
        with self._publish_lock:
            if corpus.generation > self._corpus.generation:
                self._corpus = corpus

    def metadata_counts(self, fields: tuple[str, ...]) -> dict[tuple[Any, ...], int]:
        """Document count per combination of values of the metadata `fields`, cached per generation."""
        cached = self._counts.get(fields)
        if cached is not None and cached[0] == self.generation():
            return dict(cached[1])
        columns = ", ".join("json_extract(body, ?)" for _ in fields)
        groups = ", ".join(str(position) for position in range(1, len(fields) + 1))
        generation, rows = self._read(lambda c: c.execute(
            f"SELECT {columns}, COUNT(*) FROM documents GROUP BY {groups}",  # noqa: S608 - only placeholders
            [f'$.meta."{field}"' for field in fields],
        ).fetchall())
        counts = {tuple(row[:-1]): int(row[-1]) for row in rows}
        self._counts[fields] = (generation, counts)
        return dict(counts)

    def kb_generations(self) -> dict[tuple[str, str], int]:
        """The write counter of every (tenant, kb) ever written, read again only when some process wrote since."""
        cached = self._kb_generations
        if cached[0] == self.generation():
            return dict(cached[1])
        generation, rows = self._read(lambda c: c.execute("SELECT tenant, kb, value FROM kb_generations").fetchall())
        counters = {(tenant, kb): int(value) for tenant, kb, value in rows}
        self._kb_generations = (generation, counters)
        return dict(counters)

    def write(
        self, apply: Callable[[sqlite3.Connection], tuple[list[Document], list[str]]]
    ) -> tuple[list[Document], list[str]]:
        """
        Run `apply` in one write transaction (all or nothing); when it changed something, bump the generation.

        `apply` returns the documents it wrote and the ids it deleted. When the published corpus was the last
        committed state, the new one is published as that corpus with the change applied (so a long ingest never
        reloads the whole table); otherwise the next read loads it.

        :returns: What `apply` returned.
        """
        with self._write_lock, data_dir_errors(self.folder):
            base = self._corpus
            connection = self._writer
            connection.execute("BEGIN IMMEDIATE")
            try:
                generation = self._generation(connection)
                written, deleted = apply(connection)
                if written or deleted:
                    connection.execute("UPDATE state SET value = value + 1 WHERE key = 'generation'")
                connection.execute("COMMIT")
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise
            if (written or deleted) and base.generation == generation:
                self._publish(base.changed(generation + 1, written=written, deleted=deleted))
            return written, deleted


class _Index:
    """A BM25 index over one corpus with one store's analysis. Read-only once built, except for its mask cache."""

    def __init__(self, generation: int, documents: list[Document], bm25: bm25s.BM25 | None) -> None:
        self.generation = generation
        self.documents = documents
        self.bm25 = bm25
        self._masks: dict[str, np.ndarray] = {}
        self._masks_lock = threading.Lock()

    def mask(self, filters: dict[str, Any]) -> np.ndarray:
        """Which documents match `filters` (cached for the 256 most recent filters)."""
        key = json.dumps(filters, sort_keys=True, default=str)
        mask = self._masks.get(key)
        if mask is None:
            mask = np.array([document_matches_filter(filters, doc) for doc in self.documents])
            with self._masks_lock:
                self._masks[key] = mask
                if len(self._masks) > 256:
                    del self._masks[next(iter(self._masks))]
        return mask


class BM25DocumentStore:
    """
    Documents persisted in SQLite; BM25 scores from an in-memory bm25s index rebuilt when the data changes.

    Every process sees writes made by other processes: a generation counter in the database tells a reader that its
    documents are stale. Safe to share between threads: reads run concurrently with each other and with writes, and
    see the last committed state; writes to one file are serialised. Filters use Haystack's filter syntax.
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
        self._database = _Database.at(self.database_path)  # opened now: a bad data directory fails the load
        self._bm25_index: _Index | None = None
        self._index_lock = threading.Lock()

    # -- storage ----------------------------------------------------------------------------------------------
    @property
    def database_path(self) -> Path:
        """The SQLite file that holds the documents."""
        folder = Path(self.path).expanduser() if self.path else settings.data_dir() / "bm25"
        return folder / f"{self.index}.sqlite"

    def _index(self) -> _Index:
        """The BM25 index of the last committed generation, built by the first read that needs it."""
        corpus = self._database.corpus()
        index = self._bm25_index
        if index is not None and index.generation >= corpus.generation:
            return index
        with self._index_lock:  # one build at a time; readers arriving meanwhile take its result
            if self._bm25_index is None or self._bm25_index.generation < corpus.generation:
                self._bm25_index = self._build_index(corpus)
            return self._bm25_index

    def _build_index(self, corpus: _Corpus) -> _Index:
        documents = [corpus.by_id[key] for key in sorted(corpus.by_id)]
        bm25 = None
        if documents:
            bm25 = bm25s.BM25(k1=self.k1, b=self.b, method=self.method)
            bm25.index([self._analyzer(self._indexed_text(doc)) or [""] for doc in documents], show_progress=False)
        return _Index(corpus.generation, documents, bm25)

    def _indexed_text(self, document: Document) -> str:
        parts = []
        for field in self.indexed_fields:
            value = document.content if field == "content" else document.meta.get(field.removeprefix("meta."))
            if value:
                parts.append(str(value))
        return "\n".join(parts)

    # -- DocumentStore protocol -------------------------------------------------------------------------------
    def count_documents(self) -> int:
        """The number of stored documents."""
        return self._database.count()

    def metadata_counts(self, fields: list[str]) -> dict[tuple[Any, ...], int]:
        """
        How many documents hold each combination of values of the metadata `fields` (e.g. `["tenant", "kb"]`).

        Counted by SQLite and cached until the data changes (a write by any process bumps the generation), so a
        repeated call costs one read of the generation counter.

        :param fields: Metadata keys (without `meta.`).
        :returns: Document count per tuple of values (None where a document lacks the key).
        """
        return self._database.metadata_counts(tuple(fields))

    def kb_generations(self) -> dict[tuple[str, str], int]:
        """
        A write counter per (tenant, kb): every document written to or deleted from a knowledge base of a tenant, by any
        process, bumps it (ingest, `kb delete`, pruning). Whoever keeps something derived from a KB's documents (the
        answer cache) compares the counters of the KBs it used instead of the store-wide generation.

        :returns: Counter per `(tenant, kb)` ever written (`""` for a document without that key); absent pairs are 0.
        """
        return self._database.kb_generations()

    def filter_documents(self, filters: dict[str, Any] | None = None) -> list[Document]:
        """
        Documents matching Haystack filters (all documents when `filters` is None).

        :param filters: Haystack metadata filters.
        :returns: The matching documents.
        """
        corpus = self._database.corpus()
        if not filters:
            return [corpus.by_id[key] for key in sorted(corpus.by_id)]
        doc_ids = _doc_id_lookup(filters)
        if doc_ids is not None:  # what ingestion asks, once per file: answered from an index
            ids = set().union(*(corpus.ids_by_doc_id.get(doc_id, ()) for doc_id in doc_ids))
            return [corpus.by_id[key] for key in sorted(ids)]
        return [document for _, document in sorted(corpus.by_id.items()) if document_matches_filter(filters, document)]

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

        def apply(conn: sqlite3.Connection) -> tuple[list[Document], list[str]]:
            stored: list[Document] = []
            for doc in documents:
                exists = conn.execute("SELECT 1 FROM documents WHERE id = ?", (doc.id,)).fetchall()
                if exists and policy in (DuplicatePolicy.NONE, DuplicatePolicy.FAIL):
                    raise DuplicateDocumentError(f"A document with id '{doc.id}' already exists.")
                if exists and policy == DuplicatePolicy.SKIP:
                    continue
                kept = replace(doc, embedding=None, sparse_embedding=None)
                body = json.dumps(kept.to_dict(flatten=False))
                conn.execute("INSERT OR REPLACE INTO documents (id, body) VALUES (?, ?)", (doc.id, body))
                stored.append(Document.from_dict(json.loads(body)))
            return stored, []

        written, _ = self._database.write(apply)
        return len(written)

    def delete_documents(self, document_ids: list[str]) -> None:
        """
        Delete documents by id (unknown ids are ignored).

        :param document_ids: Ids to delete.
        """
        ids = list(dict.fromkeys(document_ids))

        def apply(conn: sqlite3.Connection) -> tuple[list[Document], list[str]]:
            before = conn.total_changes
            conn.executemany("DELETE FROM documents WHERE id = ?", [(i,) for i in ids])
            return [], ids if conn.total_changes > before else []

        self._database.write(apply)

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
        if top_k <= 0:
            return []
        index = self._index()
        if index.bm25 is None:
            return []
        tokens = [t for t in self._analyzer(query) if t in index.bm25.vocab_dict]
        if not tokens:
            return []
        scores = index.bm25.get_scores(tokens)
        if filters:
            scores = np.where(index.mask(filters), scores, 0.0)
        order = np.argsort(-scores, kind="stable")[:top_k]
        results = []
        for position in order:
            score = float(scores[position])
            if score <= 0.0:
                break
            results.append(replace(index.documents[position], score=score / (score + 1) if scale_score else score))
        return results

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
