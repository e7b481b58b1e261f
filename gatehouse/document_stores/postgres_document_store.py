"""
The shared store: every chunk in one PostgreSQL table, with its dense vector (pgvector, HNSW), its sentences'
vectors and its BM25 terms, so several `gatehouse serve` processes can work over one database.

A chunk row holds `id`, `pk` (a number the other tables use), `content`, `meta` (JSONB, with expression indexes on
`tenant`, `kb` and `doc_id`), `embedding`, `sentences` (the vectors of its sentences, for the best-sentence score) and
its length under each analysis of the local shard (`words`: stemmed terms without stopwords; `ngrams`: character
trigrams of them, for spelling variants). BM25 is the shard's, kept the shard's way: `<table>_postings` holds one row
per (analysis, term, chunk) with the term frequency and the BM25 document weight `tf·(k1+1) / (tf + k1·(1 − b +
b·len/avg_len))`, encoded with the average length of the last encoding; `<table>_terms` holds each term's document
frequency and `<table>_totals` the number of chunks, their total lengths and the encoding averages, all moved in the
write's transaction. A first write fixes the averages; when the true average drifts more than `DRIFT` from one, that
analysis's weights are re-encoded in the same transaction (as the shard's `rebalance`). A search reads the query
terms' frequencies and postings only: IDF `ln(1 + (N − df + 0.5) / (df + 0.5))` times the stored weight, summed per
chunk, so its cost is the postings of the query's terms, not a scan of the chunks. Each term's row has a version that
every change of its postings (and a re-encoding) moves; a process keeps the postings it read per term with their
version (`_PostingsCache`), reads a term's postings again only when the version it reads with the IDF differs, sums
the weights itself (in float8, as the database would) and sends the best chunks back for the filters (summed by the
database, a query's trigrams, some 100,000 postings over 7,000 chunks, took most of a hybrid search's time). Another
table holds one write counter per (tenant, kb), moved from a sequence in the same transaction as the chunks it
counts, so caches of derived data (answer cache, KB profiles) in any process see every write.

Hybrid search works on ids and scores (`ranked_ids`: the dense, words and ngrams lists, each on its own connection
at once; `similarities`; then `documents_by_point` reads only the chunks kept), as on the local shard.

Every write is one transaction: `replace_documents` deletes a document's earlier chunks, inserts the new ones and
moves the counters and BM25 statistics together (writers wait for each other on the totals row), so a killed process
or server leaves whole documents only. Each call checks a connection out of the process's pool for the database
(`postgres_pool`: bounded, shared by every store object) and gives it back; a database that cannot be reached or
used, or whose pooled connections all stay busy, is a `StoreUnavailableError` naming the server without its password
(`postgres_errors`: also scrubbed from the driver's words), with a line for API callers that names nothing of it.
With a read URL the searches read a hot standby once it has replayed what the process has seen on the primary
(`postgres_standby`: one wait of `max_lag_s` per lag episode, then the primary). The tables carry a schema version,
and older ones are migrated in place when a store opens them (`postgres_schema`). `readiness()` says whether the
databases of the process's stores can serve (`GET /ready`).

Haystack filters are translated by pgvector-haystack's filter module (`meta.<key>` as `meta->>'key'`: `==`, `!=`,
`in`, `not in`, ranges, `AND`, `OR`).

Usage:
```python
from gatehouse.document_stores.postgres_document_store import PostgresDocumentStore

store = PostgresDocumentStore(url="postgresql://gatehouse@db.internal/gatehouse", embedding_dim=384)
store.replace_documents("public/faq/keys.md", chunks, sentence_embeddings={chunk.id: vectors})
store.embedding_retrieval(vector, filters={"field": "meta.tenant", "operator": "in", "value": ["public"]}, top_k=5)
store.bm25_retrieval("rotate api key", filters=filters, top_k=5)               # BM25 on stemmed words
store.bm25_retrieval("rotaton", filters=filters, top_k=5, analysis="ngrams")    # BM25 on trigrams: spelling variants
```
"""

import contextlib
import json
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg
from haystack import Document, default_from_dict, default_to_dict
from haystack.document_stores.errors import DuplicateDocumentError
from haystack.document_stores.types import DuplicatePolicy
from haystack_integrations.document_stores.pgvector.filters import _convert_filters_to_where_clause_and_params
from pgvector.psycopg import register_vector
from psycopg import sql
from psycopg.types.json import Jsonb

from gatehouse import settings
from gatehouse.document_stores.analysis import Analyzer, Bm25Encoder, term_index
from gatehouse.document_stores.edge_document_store import SharedDocument
from gatehouse.document_stores.edge_shard import ANALYSES, DRIFT
from gatehouse.document_stores.errors import StoreUnavailableError
from gatehouse.document_stores.postgres_errors import (
    first_line,
    outage_over,
    report_outage,
    scrub,
    shown,
    unavailable,
)
from gatehouse.document_stores.postgres_metrics import PRIMARY_READS
from gatehouse.document_stores.postgres_pool import ConnectionPool, PoolExhaustedError, connection_pool
from gatehouse.document_stores.postgres_schema import LAYOUTS, SCHEMA_VERSION, migrate, stored_settings
from gatehouse.document_stores.postgres_standby import Standby, lsn, standby

EXTENSIONS = ("vector",)
TABLE_NAME = re.compile(r"[a-z_][a-z0-9_]{0,40}")
FIELD = re.compile(r"content|meta\.[A-Za-z0-9_]+")
#: The BM25 analysis, as the local shard's defaults (`edge_shard.shard_settings`): the same terms, the same formula.
ANALYSIS = {"k1": 1.2, "b": 0.75, "stemmer": "english", "stopwords": "en", "char_ngrams": 3}
MAX_DIM = 2000  # pgvector's HNSW index takes vectors of at most 2,000 dimensions
#: A hit's cosine to the query vector (the first parameter) and its best sentence's (the second), for the hybrid
#: search's best-sentence scores; null without a vector.
SIMILAR = (", 1 - (c.embedding <=> %s), (SELECT max(1 - (sentence <=> %s)) FROM unnest(c.sentences) AS sentence)")
DEFAULT_DIM = 384  # all-MiniLM-L6-v2's, the shipped model
READER_NAME = "gatehouse-reader"  # the application_name of the connections to the read URL (pg_stat_activity)
READY_TIMEOUT_S = 2.0  # how long a readiness check waits for a pooled connection

#: The newest primary WAL position each process has seen per database (its own commits, the counters it read): a
#: search on a standby waits until the standby has replayed that far. Process-wide: the index and the retrieve
#: pipelines hold different store objects of one database.
_SEEN: dict[str, int] = {}
_SEEN_LOCK = threading.Lock()
#: The databases this process's stores were opened on: (primary URL, read URL or "") -> max_lag_s (`readiness`).
_OPENED: dict[tuple[str, str], float] = {}


def _configure(connection: psycopg.Connection) -> None:
    """Set up a new pooled connection: vectors as numpy arrays; HNSW scans on until `top_k` rows pass the filters."""
    register_vector(connection)
    connection.execute("SET hnsw.iterative_scan = relaxed_order")  # a selective tenant filter fills top_k


def primary_pool(url: str, size: int | None = None) -> ConnectionPool:
    """
    This process's pool of connections to the database at `url` (made on first use with `size`, default
    `GATEHOUSE_POSTGRES_POOL_SIZE`; a larger size grows it): every store object and the job queue share it.
    """
    return connection_pool(url, size=size or settings.postgres_pool_size(), name="PostgreSQL store",
                           shown_url=shown(url), configure=_configure)


def reader_pool(read_url: str, size: int | None = None) -> ConnectionPool:
    """This process's pool of connections to the read URL (as `primary_pool`), named `READER_NAME` there."""
    return connection_pool(read_url, size=size or settings.postgres_pool_size(), name="PostgreSQL read URL",
                           shown_url=shown(read_url), application_name=READER_NAME, connect_timeout=5,
                           configure=_configure, role="standby")


def readiness(timeout_s: float = READY_TIMEOUT_S) -> list[tuple[str, float]]:
    """
    Why the databases of this process's stores cannot serve now, each a caller-safe reason (no user, host, port or
    database name) with the seconds after which to ask again; empty when they can: each primary answers a query,
    each read URL can be reached and is not lagging (`Standby.ready`: behind what it received for `max_lag_s`, or
    in a lag episode). An outage found is logged as the searches' are (once, `report_outage`).

    :param timeout_s: How long a check waits for a pooled connection.
    """
    with _SEEN_LOCK:
        opened = sorted(_OPENED.items())
    problems: list[tuple[str, float]] = []
    for url in sorted({url for (url, _), _ in opened}):
        for attempt in (1, 2):  # an idle connection the server dropped fails once (and its idle peers are closed)
            try:
                with pooled_transaction(url, primary_pool(url), timeout_s, "checking readiness") as cursor:
                    cursor.execute("SELECT 1")
                break
            except StoreUnavailableError as error:
                if attempt == 2 or isinstance(error, PoolExhaustedError):
                    report_outage(error)
                    problems.append((error.public, error.retry_after_s))
                    break
    for (_, read_url), max_lag_s in opened:
        if not read_url:
            continue
        state = standby(read_url, shown(read_url))
        reason = "the standby cannot be reached" if state.skipped() == "unreachable" else None
        for attempt in (1, 2) if reason is None else ():
            try:
                with reader_pool(read_url).connection(timeout_s, "checking readiness") as connection:
                    reason = state.ready(connection, max_lag_s)
                break
            except psycopg.Error as error:
                if attempt == 2:
                    state.down(error, scrub(first_line(error), read_url))
                    reason = "the standby cannot be reached"
            except StoreUnavailableError as error:  # its pool stayed busy
                reason = error.public
                break
        if reason is not None:
            problems.append((reason, max(state.retry_after_s(), StoreUnavailableError.retry_after_s)))
    return problems


#: The query's terms (ids, counts, the version of their postings the caller holds, or null) with their IDF over the
#: whole table (every tenant's chunks, as in the local shard) and their version; a term's postings (chunk `pk`s and
#: weights) only where the caller's version is not the stored one. One statement: one snapshot of terms and postings.
TERMS = """
SELECT q.term, q.count * ln(1.0::float8 + (t.chunks - d.df + 0.5::float8) / (d.df + 0.5::float8)), d.version,
       p.chunks, p.weights
FROM unnest(%s::integer[], %s::float8[], %s::bigint[]) WITH ORDINALITY AS q(term, count, cached, position)
JOIN {terms} AS d ON d.analysis = %s AND d.term = q.term AND d.df > 0
CROSS JOIN {totals} AS t
CROSS JOIN LATERAL (SELECT array_agg(chunk) AS chunks, array_agg(weight) AS weights FROM {postings}
                    WHERE analysis = %s AND term = q.term AND d.version IS DISTINCT FROM q.cached) AS p
ORDER BY q.position
"""

#: The best of the scored chunks (`pk`s and scores) that pass the filters ({where}), ties by id in byte order (as
#: Python orders them), with their group value ({group}) and {similar}: each hit's `SIMILAR` columns. Sorted by score
#: first, the chunks are read only until `top_k` pass (and the ties of the last).
HITS = """
SELECT c.id, c.grp, c.score{similar} FROM (
    SELECT h.id, h.grp, s.score, h.embedding, h.sentences
    FROM (SELECT chunk, score FROM unnest(%b::bigint[], %b::real[]) AS s(chunk, score) ORDER BY score DESC) AS s
    CROSS JOIN LATERAL (SELECT id, {group} AS grp, embedding, sentences FROM {table} WHERE pk = s.chunk{where}
                        OFFSET 0) AS h
    ORDER BY s.score DESC, h.id COLLATE "C" LIMIT %s) AS c
ORDER BY c.score DESC, c.id COLLATE "C"
"""
#: The most postings a process keeps per database table (12 bytes each: ~48 MB); the oldest terms go first.
CACHED_POSTINGS = 4_000_000
#: Scored chunks sent to the database per filter round (times `top_k`; doubled until `top_k` pass or none are left).
CANDIDATES_PER_HIT = 2


class _PostingsCache:
    """
    The postings (chunk `pk`s, weights) of the terms a process searched, per (analysis, term), with the version of
    the term's row they were read at: a search reads every query term's version in the statement that reads the
    postings it lacks, so a cached list is used only while it is still the stored one (exact, across processes).
    """

    def __init__(self, limit: int = CACHED_POSTINGS) -> None:
        self.limit = limit
        self._lists: dict[tuple[int, int], tuple[int, np.ndarray, np.ndarray]] = {}
        self._size = 0
        self._lock = threading.Lock()

    def held(self, analysis: int, terms: list[int]) -> dict[int, tuple[int, np.ndarray, np.ndarray]]:
        """The postings held of these terms: term to (version, chunks, weights), taken at once (a search uses these
        even if another search replaces or drops them meanwhile)."""
        with self._lock:
            return {term: self._lists[(analysis, term)] for term in terms if (analysis, term) in self._lists}

    def put(self, analysis: int, term: int, version: int, chunks: np.ndarray, weights: np.ndarray) -> None:
        with self._lock:
            earlier = self._lists.pop((analysis, term), None)
            self._size -= 0 if earlier is None else earlier[1].size
            if chunks.size > self.limit:
                return
            self._lists[(analysis, term)] = (version, chunks, weights)
            self._size += chunks.size
            while self._size > self.limit:
                self._size -= self._lists.pop(next(iter(self._lists)))[1].size


#: One postings cache per (database URL, table) in the process: every store object of a table shares it.
_POSTINGS: dict[tuple[str, str], _PostingsCache] = {}
_POSTINGS_LOCK = threading.Lock()


def _sum_per_chunk(chunks: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """
    Each chunk's sum of its weights, added in the order given (in float8, as PostgreSQL's `sum` does), as real.

    :returns: The chunks scoring more than 0 (ascending) and their scores.
    """
    low = int(chunks.min())
    span = int(chunks.max()) - low + 1
    if span <= 4 * chunks.size + 65_536:  # dense enough: one slot per pk of the range
        sums = np.bincount(chunks - low, weights=weights, minlength=span).astype(np.float32)
        keys = np.flatnonzero(sums > 0.0)
        return keys + low, sums[keys]
    keys, slots = np.unique(chunks, return_inverse=True)
    sums = np.bincount(slots, weights=weights, minlength=keys.size).astype(np.float32)
    return keys[sums > 0.0], sums[sums > 0.0]


@dataclass
class _Row:
    """A chunk to insert: its columns and its BM25 term counts per analysis (term id to count)."""

    id: str
    content: str | None
    meta: Any
    embedding: Any
    sentences: Any
    terms: dict[str, Counter[int]]


def _where(filters: dict[str, Any] | None, extra: sql.Composable = sql.SQL("TRUE")
           ) -> tuple[sql.Composable, tuple[Any, ...]]:
    """A WHERE clause of `extra` (its parameters come first) and the Haystack `filters`, with their parameters."""
    if not filters:
        return sql.SQL(" WHERE ") + extra, ()
    clause, params = _convert_filters_to_where_clause_and_params(filters, operator="AND")
    return sql.SQL(" WHERE ") + extra + clause, params


@contextlib.contextmanager
def pooled_transaction(url: str, pool: ConnectionPool, timeout: float, doing: str,
                       after_commit: Callable[[psycopg.Connection], None] | None = None) -> Iterator[psycopg.Cursor]:
    """
    A cursor in one transaction on a connection checked out of `pool` and given back after it; a refused, lost or
    busy database becomes a `StoreUnavailableError` (`unavailable`).

    :param after_commit: Called with the connection once the transaction has committed, before it goes back.
    """
    try:
        connection = pool.get(timeout, doing)
    except psycopg.Error as error:  # the driver's own error is not chained: it may quote the password
        raise unavailable(url, error, "connecting") from None
    try:
        with connection.transaction(), connection.cursor() as cursor:
            yield cursor
        if after_commit is not None:
            after_commit(connection)
    except psycopg.OperationalError as error:
        raise unavailable(url, error, doing) from None
    finally:
        pool.put(connection)
    outage_over(url)


class PostgresDocumentStore:
    """
    Chunks with their dense, sentence and BM25 (words, trigrams) search in one PostgreSQL table; write counters per
    (tenant, kb); one transaction per write. Filters use Haystack's syntax.
    """

    def __init__(
        self,
        *,
        url: str | None = None,
        table: str = "gatehouse_chunks",
        embedding_dim: int | None = None,
        indexed_fields: list[str] | None = None,
        read_url: str | None = None,
        max_lag_s: float | None = None,
        pool_size: int | None = None,
        pool_timeout_s: float | None = None,
    ) -> None:
        """
        :param url: The database URL (`postgresql://user:password@host:port/database`); None reads
            `GATEHOUSE_POSTGRES_URL`.
        :param table: The chunk table (lower-case letters, digits and `_`); the counters are `<table>_generations`.
        :param embedding_dim: Size of the dense and sentence vectors (384 for all-MiniLM-L6-v2); None takes the
            table's, or 384 for a new table.
        :param indexed_fields: What the BM25 search covers: `content` and/or `meta.<key>`; defaults to
            `["meta.title", "meta.section", "content"]`.
        :param read_url: A hot standby of that database for the searches (dense, BM25, sentence scores); None reads
            `GATEHOUSE_POSTGRES_READ_URL`, unset: the primary. Writes, counters and listings stay on the primary.
        :param max_lag_s: How long a search waits for the standby to replay what this process has seen on the
            primary (its own writes, the counters it read) before it reads the primary instead.
        :param pool_size: How many connections this process may open to the database (and as many to the read
            URL), shared by every store object and the job queue of the process; None reads
            `GATEHOUSE_POSTGRES_POOL_SIZE` (default 8). The largest size asked for in a process wins.
        :param pool_timeout_s: How long a call waits for a free connection before a `StoreUnavailableError`; None
            reads `GATEHOUSE_POSTGRES_POOL_TIMEOUT_S` (default 10 s).
        The table is created on first use; opening it with another vector size or other indexed fields is an error.
        :raises ValueError: On a bad table name, vector size or indexed field.
        :raises StoreUnavailableError: When the database cannot be reached or lacks the vector extension.
        """
        if not TABLE_NAME.fullmatch(table):
            raise ValueError(f"Bad table name {table!r}: use lower-case letters, digits and _ (at most 41).")
        if embedding_dim is not None and (isinstance(embedding_dim, bool) or not isinstance(embedding_dim, int)
                                          or not 0 < embedding_dim <= MAX_DIM):
            raise ValueError(f"embedding_dim must be a whole number from 1 to {MAX_DIM} (pgvector's HNSW index), "
                             f"got {embedding_dim!r}.")
        self.indexed_fields = indexed_fields or ["meta.title", "meta.section", "content"]
        bad = [field for field in self.indexed_fields if not isinstance(field, str) or not FIELD.fullmatch(field)]
        if bad:
            raise ValueError(f"Bad indexed_fields {bad}: use content or meta.<key> (letters, digits, _).")
        self.url = url
        self.table = table
        self.embedding_dim = embedding_dim
        self._encoders = {name: Bm25Encoder(Analyzer(stopwords=ANALYSIS["stopwords"], stemmer=ANALYSIS["stemmer"],
                                                     char_ngrams=ANALYSIS["char_ngrams"] if name == "ngrams" else None),
                                            k1=ANALYSIS["k1"], b=ANALYSIS["b"])
                          for name in ANALYSES}
        self._executor: ThreadPoolExecutor | None = None  # the hybrid lists at once, each on a pooled connection
        self._lock = threading.Lock()
        self._dim = embedding_dim or DEFAULT_DIM  # the table's when None and it exists (`_check`)
        self._url = url or settings.postgres_url() or ""
        if not self._url:
            raise ValueError("The PostgreSQL store needs GATEHOUSE_POSTGRES_URL or url.")
        if max_lag_s is not None and (isinstance(max_lag_s, bool) or not isinstance(max_lag_s, int | float)
                                      or not 0 <= max_lag_s < float("inf")):
            raise ValueError(f"max_lag_s must be a number of seconds of at least 0, got {max_lag_s!r}.")
        self.read_url, self.max_lag_s = read_url, max_lag_s
        self._max_lag_s = float(settings.postgres_max_lag_s() if max_lag_s is None else max_lag_s)
        self._read_url = read_url or settings.postgres_read_url() or ""
        if pool_size is not None and (isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1):
            raise ValueError(f"pool_size must be a whole number of at least 1, got {pool_size!r}.")
        if pool_timeout_s is not None and (isinstance(pool_timeout_s, bool)
                                           or not isinstance(pool_timeout_s, int | float) or pool_timeout_s <= 0):
            raise ValueError(f"pool_timeout_s must be a positive number of seconds, got {pool_timeout_s!r}.")
        self.pool_size, self.pool_timeout_s = pool_size, pool_timeout_s
        self._pool_size = pool_size or settings.postgres_pool_size()
        self._pool_timeout_s = float(pool_timeout_s or settings.postgres_pool_timeout_s())
        self._names = {"table": sql.Identifier(table), "generations": sql.Identifier(f"{table}_generations"),
                       "sequence": sql.Identifier(f"{table}_generation"),
                       "postings": sql.Identifier(f"{table}_postings"), "terms": sql.Identifier(f"{table}_terms"),
                       "totals": sql.Identifier(f"{table}_totals")}
        self._set_up()
        with _SEEN_LOCK:
            key = (self._url, self._read_url)
            _OPENED[key] = max(_OPENED.get(key, 0.0), self._max_lag_s)

    # -- connections ------------------------------------------------------------------------------------------
    @property
    def pool(self) -> ConnectionPool:
        """This process's pool of connections to the primary, shared by every store object and the job queue."""
        return primary_pool(self._url, self._pool_size)

    @contextlib.contextmanager
    def _transaction(self, doing: str, *, writes: bool = False) -> Iterator[psycopg.Cursor]:
        """
        A cursor in one transaction on a connection checked out of the process's pool for it; a refused, lost or
        busy database becomes a `StoreUnavailableError`. With `writes` and a read URL, the primary's WAL position
        after the commit is noted (`_SEEN`) for the standby reads.
        """
        after_commit = self._saw_commit if writes and self._read_url else None
        with pooled_transaction(self._url, self.pool, self._pool_timeout_s, doing, after_commit) as cursor:
            yield cursor

    def _saw_commit(self, connection: psycopg.Connection) -> None:
        self._saw(connection.execute("SELECT pg_current_wal_lsn()").fetchone()[0])

    def _saw(self, position: str) -> None:
        with _SEEN_LOCK:
            _SEEN[self._url] = max(_SEEN.get(self._url, 0), lsn(position))

    @contextlib.contextmanager
    def _read(self, doing: str) -> Iterator[psycopg.Cursor]:
        """
        A cursor for a search: on the read URL once it has replayed what this process has seen on the primary
        (waiting up to `max_lag_s`), else (no read URL, too far behind, unreachable) on the primary.
        """
        connection = self._standby_connection(doing) if self._read_url else None
        if connection is None:
            with self._transaction(doing) as cursor:
                yield cursor
            return
        try:
            with connection.transaction(), connection.cursor() as cursor:
                yield cursor
        except psycopg.OperationalError as error:  # lost mid-search: this search fails, the next reads the primary
            self._reader_down(error)
            raise StoreUnavailableError(
                f"the PostgreSQL read URL {shown(self._read_url)} was lost ({doing}: "
                f"{scrub(first_line(error), self._read_url)}); the next searches read the primary") from None
        finally:
            self._reader_pool().put(connection)

    def _standby(self) -> Standby:
        return standby(self._read_url, shown(self._read_url))

    def _reader_pool(self) -> ConnectionPool:
        return reader_pool(self._read_url, self._pool_size)

    def _standby_connection(self, doing: str) -> psycopg.Connection | None:
        """
        A connection to the read URL once it has replayed what this process has seen on the primary (waiting up to
        `max_lag_s` once per lag episode: `postgres_standby`), or None: the search reads the primary (counted, by
        reason: `lag`, `unreachable`).
        """
        state = self._standby()
        reason = state.skipped()
        if reason is None:
            try:
                connection = self._reader_pool().get(self._pool_timeout_s, doing)
            except psycopg.Error as error:
                self._reader_down(error)
                reason = "unreachable"
        if reason is None:
            with _SEEN_LOCK:
                seen = _SEEN.get(self._url, 0)
            try:
                if state.caught_up(connection, seen=seen, max_lag_s=self._max_lag_s):
                    return connection
                reason = "lag"
            except psycopg.OperationalError as error:
                self._reader_down(error)
                reason = "unreachable"
            self._reader_pool().put(connection)
        PRIMARY_READS.labels(reason=reason).inc()
        return None

    def _reader_down(self, error: BaseException) -> None:
        self._standby().down(error, scrub(first_line(error), self._read_url))

    def close(self) -> None:
        """
        Close the idle connections of this process's pools to the store's database (shared with its other store
        objects, which open new ones when they next need them; the checked-out ones go back to the pool).
        """
        self.pool.close_idle()
        if self._read_url:
            self._reader_pool().close_idle()
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)

    # -- schema -----------------------------------------------------------------------------------------------
    def _indexed_text(self, document: Document) -> str:
        """The text a chunk's BM25 terms come from (its `indexed_fields`), as the local shard takes it."""
        values = [document.content if field == "content" else document.meta.get(field.removeprefix("meta."))
                  for field in self.indexed_fields]
        return "\n".join(str(value) for value in values if value)

    def _terms(self, analysis: str, text: str) -> Counter[int]:
        """The BM25 terms of `text` under `analysis`, as term ids (the shard's: CRC-32, 31 bits) and their counts."""
        return Counter(term_index(term) for term in self._encoders[analysis].analyzer(text))

    def _set_up(self) -> None:
        """Create the extensions, tables, sequence and indexes that are missing (once, under a lock)."""
        try:
            connection = psycopg.connect(self._url, autocommit=True, connect_timeout=10)
        except psycopg.Error as error:
            raise unavailable(self._url, error, "connecting") from None
        with connection:
            try:
                self._set_up_in(connection)
            except psycopg.Error as error:  # refused, lost, read-only (a standby before the table exists)
                raise unavailable(self._url, error, "setting up its tables") from None

    def _set_up_in(self, connection: psycopg.Connection) -> None:
        installed = {row[0] for row in connection.execute("SELECT extname FROM pg_extension")}
        for extension in EXTENSIONS:
            if extension not in installed:
                try:
                    with connection.transaction():  # servers starting together over a new database: one creates it
                        connection.execute("SELECT pg_advisory_xact_lock(hashtext('gatehouse extensions'))")
                        connection.execute(sql.SQL("CREATE EXTENSION IF NOT EXISTS {}").format(
                            sql.Identifier(extension)))
                except psycopg.Error as error:
                    raise StoreUnavailableError(
                        f"the PostgreSQL database at {shown(self._url)} lacks the {extension} extension and this "
                        f"user cannot create it ({scrub(first_line(error), self._url)}): run CREATE EXTENSION "
                        f"{extension}; as a superuser in that database") from None
        if connection.execute("SELECT to_regclass(%s)", (self.table,)).fetchone()[0] is None:
            with connection.transaction():
                connection.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self.table,))
                self._create(connection)
        migrate(connection, self.table)
        self._check(connection)

    def _create(self, connection: psycopg.Connection) -> None:
        names = {**self._names, "dim": sql.Literal(self._dim), "settings": sql.Literal(json.dumps(self._settings()))}
        statements = [
            "CREATE TABLE IF NOT EXISTS {table} (id text PRIMARY KEY, "
            "pk bigint GENERATED ALWAYS AS IDENTITY UNIQUE, content text, meta jsonb NOT NULL, "
            "embedding vector({dim}), sentences vector({dim})[], words_length integer NOT NULL, "
            "ngrams_length integer NOT NULL)",
            "CREATE INDEX IF NOT EXISTS {table_embedding} ON {table} USING hnsw (embedding vector_cosine_ops)",
            "CREATE INDEX IF NOT EXISTS {table_tenant_kb} ON {table} ((meta->>'tenant'), (meta->>'kb'))",
            "CREATE INDEX IF NOT EXISTS {table_doc_id} ON {table} ((meta->>'doc_id'))",
            # BM25: a posting per (analysis, term, chunk) with its encoded weight, read by term (index-only scans)
            "CREATE TABLE IF NOT EXISTS {postings} (analysis smallint NOT NULL, term integer NOT NULL, "
            "chunk bigint NOT NULL, tf real NOT NULL, weight real NOT NULL)",
            "CREATE INDEX IF NOT EXISTS {postings_term} ON {postings} (analysis, term, chunk) INCLUDE (weight)",
            "CREATE INDEX IF NOT EXISTS {postings_chunk} ON {postings} (chunk)",
            "CREATE TABLE IF NOT EXISTS {terms} (analysis smallint, term integer, df integer NOT NULL, "
            "version bigint NOT NULL DEFAULT 0, PRIMARY KEY (analysis, term))",
            "CREATE TABLE IF NOT EXISTS {totals} (singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton), "
            "chunks bigint NOT NULL, words bigint NOT NULL, ngrams bigint NOT NULL, words_avg float8, "
            "ngrams_avg float8)",
            "INSERT INTO {totals} (chunks, words, ngrams) VALUES (0, 0, 0) ON CONFLICT DO NOTHING",
            "CREATE TABLE IF NOT EXISTS {generations} (tenant text, kb text, value bigint NOT NULL, "
            "PRIMARY KEY (tenant, kb))",
            "CREATE SEQUENCE IF NOT EXISTS {sequence}",
            "COMMENT ON TABLE {table} IS {settings}",
        ]
        indexes = {f"table_{name}": sql.Identifier(f"{self.table}_{name}")
                   for name in ("embedding", "tenant_kb", "doc_id")}
        indexes |= {f"postings_{name}": sql.Identifier(f"{self.table}_postings_{name}") for name in ("term", "chunk")}
        for statement in statements:
            connection.execute(sql.SQL(statement).format(**names, **indexes))

    def _settings(self) -> dict[str, Any]:
        """What the table is created with and must be opened with (kept as the table's comment)."""
        return {"embedding_dim": self._dim, "indexed_fields": self.indexed_fields, **ANALYSIS,
                "bm25": LAYOUTS[SCHEMA_VERSION], "schema": SCHEMA_VERSION}

    def _check(self, connection: psycopg.Connection) -> None:
        """Refuse a table created with other settings, naming them."""
        stored = stored_settings(connection, self.table)
        if stored is None:
            raise ValueError(f"The PostgreSQL table {self.table} was not created by Gatehouse: name another table.")
        if self.embedding_dim is None:
            self._dim = stored.get("embedding_dim", self._dim)
        wanted = self._settings()
        other = {key: stored.get(key) for key in {*stored, *wanted}
                 if key != "embedding_dim" and stored.get(key) != wanted.get(key)}
        if self.embedding_dim is not None and stored.get("embedding_dim") != self.embedding_dim:
            other["embedding_dim"] = stored.get("embedding_dim")
        if other:
            named = ", ".join(f"{key} {value}" for key, value in sorted(other.items()))
            raise ValueError(f"The PostgreSQL table {self.table} was created with other settings ({named}): use "
                             "them, or another table.")

    @property
    def connection_url(self) -> str:
        """The primary's URL this store connects to (from `url` or `GATEHOUSE_POSTGRES_URL`)."""
        return self._url

    def shares_shard(self, other: Any) -> bool:
        """Whether `other` is a store of the same table of the same database (one write then holds what both hold)."""
        return isinstance(other, PostgresDocumentStore) and (other._url, other.table) == (self._url, self.table)

    # -- reading ----------------------------------------------------------------------------------------------
    def _documents(self, rows: list[tuple[Any, ...]]) -> list[Document]:
        return [SharedDocument(id=row[0], content=row[1], meta=row[2] or {}, score=row[3] if len(row) > 3 else None)
                for row in rows]

    def count_documents(self) -> int:
        """The number of stored chunks."""
        with self._transaction("counting") as cursor:
            return cursor.execute(sql.SQL("SELECT count(*) FROM {table}").format(**self._names)).fetchone()[0]

    def filter_documents(self, filters: dict[str, Any] | None = None) -> list[Document]:
        """Chunks matching Haystack filters (all when None), sorted by id, without embeddings."""
        where, params = _where(filters)
        query = sql.SQL("SELECT id, content, meta FROM {table}").format(**self._names) + where + sql.SQL(" ORDER BY id")
        with self._transaction("reading") as cursor:
            return self._documents(cursor.execute(query, params).fetchall())

    def metadata_counts(self, fields: list[str]) -> dict[tuple[Any, ...], int]:
        """
        How many chunks hold each combination of values of the metadata `fields` (e.g. `["tenant", "kb"]`).

        :param fields: Metadata keys (without `meta.`).
        :returns: Chunk count per tuple of values (None where a chunk lacks the key).
        """
        columns = sql.SQL(", ").join(sql.SQL("meta->>{}").format(sql.Literal(field)) for field in fields)
        groups = sql.SQL(", ").join(sql.Literal(position) for position in range(1, len(fields) + 1))
        query = sql.SQL("SELECT {columns}, count(*) FROM {table} GROUP BY {groups}").format(
            columns=columns, groups=groups, **self._names)
        with self._transaction("counting") as cursor:
            return {tuple(row[:-1]): row[-1] for row in cursor.execute(query).fetchall()}

    def kb_generations(self) -> dict[tuple[str, str], int]:
        """A write counter per (tenant, kb) that every write to or deletion from the KB moves, in any process."""
        query = sql.SQL("SELECT tenant, kb, value FROM {generations}").format(**self._names)
        with self._transaction("reading the write counters") as cursor:
            counters = {(tenant, kb): value for tenant, kb, value in cursor.execute(query).fetchall()}
            if self._read_url:  # what derives from these counters (cached answers) must not be read from older data
                self._saw(cursor.execute("SELECT pg_current_wal_lsn()").fetchone()[0])
        return counters

    def embedding_retrieval(
        self, query_embedding: list[float], filters: dict[str, Any] | None = None, top_k: int = 10
    ) -> list[Document]:
        """
        The `top_k` chunks nearest to `query_embedding` among those matching `filters`.

        :returns: Documents with `score` (cosine similarity), best first.
        :raises ValueError: If the vector's size is not the store's.
        """
        if top_k <= 0:
            return []
        vector = self._vector(query_embedding)
        where, params = _where(filters, sql.SQL("embedding IS NOT NULL"))
        query = (sql.SQL("SELECT id, content, meta, 1 - (embedding <=> %s) FROM {table}").format(**self._names)
                 + where + sql.SQL(" ORDER BY embedding <=> %s LIMIT %s"))
        with self._read("searching") as cursor:
            return self._documents(cursor.execute(query, (vector, *params, vector, top_k)).fetchall())

    def bm25_retrieval(
        self, query: str, filters: dict[str, Any] | None = None, top_k: int = 10, analysis: str = "words"
    ) -> list[Document]:
        """
        The `top_k` chunks by BM25 score among those matching `filters`; chunks scoring 0 are left out.

        The terms are the local shard's (`words`: stemmed terms without stopwords; `ngrams`: character trigrams of
        them) and so is the formula: IDF `ln(1 + (N - df + 0.5) / (df + 0.5))` over every chunk of the table, times
        each chunk's stored weight (term frequency saturated by `k1`, length normalised by `b` against the average
        length the weights were encoded with).

        :param analysis: `words` or `ngrams`.
        :returns: Documents with `score`, best first.
        """
        if analysis not in ANALYSES:
            raise ValueError(f"Unknown analysis '{analysis}'. Use one of: {', '.join(ANALYSES)}.")
        hits = self.ranked_ids({analysis: analysis}, [], query, filters, top_k)[analysis]
        return self.documents_by_point([(chunk, score, {}) for chunk, _, score in hits])

    def _bm25_ids(self, analysis: str, query: str, filters: dict[str, Any] | None, top_k: int,
                  group_by: str | None = None, similar_to: np.ndarray | None = None) -> list[tuple[Any, ...]]:
        """
        One BM25 list as `(chunk id, group value, score)`, best first, chunks scoring 0 left out.

        The query terms' IDF and versions are read with the postings this process does not hold at that version
        (`_PostingsCache`), the weights summed per chunk here, as the database would (in float8, term by term in the
        query's order, then to real); then the best chunks go back to the database, which keeps those passing the
        filters (more are sent until `top_k` pass or none are left).

        :param similar_to: A query vector: each hit also carries its cosine to it and its best sentence's.
        """
        if analysis not in ANALYSES:
            raise ValueError(f"Unknown analysis '{analysis}'. Use one of: {', '.join(ANALYSES)}.")
        counts = self._terms(analysis, query)
        if top_k <= 0 or not counts:
            return []
        number = ANALYSES.index(analysis)
        cache = self._postings_cache()
        terms = list(counts)
        held = cache.held(number, terms)
        with self._read("searching") as cursor:
            rows = cursor.execute(sql.SQL(TERMS).format(**self._names), (
                terms, [float(counts[term]) for term in terms],
                [held[term][0] if term in held else None for term in terms], number, number)).fetchall()
            chunks, weights = [], []
            for term, idf, version, read_chunks, read_weights in rows:
                if read_chunks is None and term in held:  # the held version is the stored one
                    postings = held[term][1:]
                else:
                    postings = (np.asarray(read_chunks or [], dtype=np.int64),
                                np.asarray(read_weights or [], dtype=np.float32))
                    cache.put(number, term, version, *postings)
                chunks.append(postings[0])
                weights.append(postings[1].astype(np.float64) * idf)
            if not sum(part.size for part in chunks):
                return []
            scored, scores = _sum_per_chunk(np.concatenate(chunks), np.concatenate(weights))
            if not scores.size:
                return []
            order = np.argsort(-scores, kind="stable")
            scored, scores = scored[order], scores[order]
            where: sql.Composable = sql.SQL("")
            values: tuple[Any, ...] = ()
            if filters:
                clause, values = _convert_filters_to_where_clause_and_params(filters, operator="AND")
                where = clause  # " AND ..."
            statement = sql.SQL(HITS).format(
                where=where, similar=sql.SQL(SIMILAR) if similar_to is not None else sql.SQL(""),
                group=sql.SQL("meta->>{}").format(sql.Literal(group_by)) if group_by else sql.SQL("NULL"),
                **self._names)
            similar = (similar_to, similar_to) if similar_to is not None else ()
            sent = min(scores.size, CANDIDATES_PER_HIT * top_k)
            while True:
                sent += int(np.count_nonzero(scores[sent:] == scores[sent - 1]))  # ties at the edge go together
                found = cursor.execute(statement, (*similar, scored[:sent].tolist(), scores[:sent].tolist(), *values,
                                                    top_k)).fetchall()
                if len(found) >= top_k or sent >= scores.size:
                    return [tuple(row) for row in found]
                sent = min(scores.size, 2 * sent)

    def _dense_ids(self, query_embedding: list[float], filters: dict[str, Any] | None, top_k: int,
                   group_by: str | None = None, similar: bool = False) -> list[tuple[Any, ...]]:
        """The dense list as `(chunk id, group value, cosine)`, nearest first (with `similar`, the `SIMILAR` too)."""
        if top_k <= 0:
            return []
        vector = self._vector(query_embedding)
        where, params = _where(filters, sql.SQL("embedding IS NOT NULL"))
        group = sql.SQL("meta->>{}").format(sql.Literal(group_by)) if group_by else sql.SQL("NULL")
        extra = sql.SQL(SIMILAR) if similar else sql.SQL("")
        query = (sql.SQL("SELECT id, {group}, 1 - (embedding <=> %s){extra} FROM {table} AS c").format(
            group=group, extra=extra, **self._names) + where + sql.SQL(" ORDER BY embedding <=> %s LIMIT %s"))
        with self._read("searching") as cursor:
            rows = cursor.execute(query, (vector, *((vector, vector) if similar else ()), *params, vector,
                                          top_k)).fetchall()
        return [tuple(row) for row in rows]

    def nearest_ids(self, query_embedding: list[float], filters: dict[str, Any] | None = None, top_k: int = 10
                    ) -> list[str]:
        """The ids of the `top_k` chunks nearest to `query_embedding`: the bare search, without documents."""
        return [chunk for chunk, _, _ in self._dense_ids(query_embedding, filters, top_k)]

    def ranked_ids(
        self, searches: dict[str, str], query_embedding: list[float], query: str, filters: dict[str, Any] | None,
        top_k: int, group_by: str | None = None,
    ) -> dict[str, list[tuple[Any, Any, float]]]:
        """
        Several searches at once, without reading documents: for hybrid search, which fuses the lists and then reads
        only the chunks it keeps (`documents_by_point`). Each list runs on its own connection, so the database works
        on them in parallel.

        :param searches: List name to what it searches: `dense` (`query_embedding`), `words` or `ngrams` (BM25 of
            `query`).
        :param group_by: A metadata key whose value each hit carries (e.g. `doc_id`).
        :returns: List name to `(chunk id, group value, score)` triples, best first (BM25 hits scoring 0 left out).
        """
        return self._ranked(searches, query_embedding, query, filters, top_k, group_by, similar=False)[0]

    def ranked_ids_and_similarities(
        self, searches: dict[str, str], query_embedding: list[float], query: str, filters: dict[str, Any] | None,
        top_k: int, group_by: str | None = None,
    ) -> tuple[dict[str, list[tuple[Any, Any, float]]], dict[str, tuple[float, float | None]]]:
        """
        `ranked_ids`, and `similarities` of every hit computed by the searches themselves (one round trip less, and
        the work shared among their connections).

        :returns: The lists, and chunk id to `(chunk similarity, best sentence similarity)` for every hit.
        """
        return self._ranked(searches, query_embedding, query, filters, top_k, group_by, similar=True)

    def _ranked(
        self, searches: dict[str, str], query_embedding: list[float], query: str, filters: dict[str, Any] | None,
        top_k: int, group_by: str | None, similar: bool,
    ) -> tuple[dict[str, list[tuple[Any, Any, float]]], dict[str, tuple[float, float | None]]]:
        unknown = sorted(using for using in searches.values() if using != "dense" and using not in ANALYSES)
        if unknown:
            raise ValueError(f"Unknown search '{unknown[0]}'. Use dense or one of: {', '.join(ANALYSES)}.")
        similar_to = self._vector(query_embedding) if similar else None
        tasks = list(searches.items())

        def search(task: tuple[str, str]) -> list[tuple[Any, ...]]:
            using = task[1]
            if using == "dense":
                return self._dense_ids(query_embedding, filters, top_k, group_by, similar)
            return self._bm25_ids(using, query, filters, top_k, group_by, similar_to)

        found = [search(task) for task in tasks] if len(tasks) == 1 else list(self._parallel(search, tasks))
        results = {name: hits for (name, _), hits in zip(tasks, found, strict=True)}
        similarities = {hit[0]: (hit[3], hit[4]) for hits in results.values() for hit in hits
                        if similar and hit[3] is not None}
        return {name: [hit[:3] for hit in hits] for name, hits in results.items()}, similarities

    def _parallel(self, work: Any, items: list[Any]) -> Iterator[Any]:
        """`work(item)` for every item at once, each on a thread of this store (with its own connection), in order."""
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1 + len(ANALYSES), thread_name_prefix="gatehouse-pg")
            executor = self._executor
        return executor.map(work, items)

    def _postings_cache(self) -> _PostingsCache:
        """The process's cache of this table's postings (`_PostingsCache`), shared by its store objects."""
        with _POSTINGS_LOCK:
            return _POSTINGS.setdefault((self._url, self.table), _PostingsCache())

    def documents_by_point(self, hits: list[tuple[Any, float, dict[str, Any]]]) -> list[Document]:
        """
        The stored chunks of these ids, in this order, each with the given score and metadata added (ids deleted
        since the search are left out).

        :param hits: `(chunk id, score, metadata to add)` triples.
        """
        if not hits:
            return []
        query = sql.SQL("SELECT id, content, meta FROM {table} WHERE id = ANY(%s)").format(**self._names)
        with self._read("reading") as cursor:
            stored = {row[0]: row for row in cursor.execute(query, ([hit[0] for hit in hits],)).fetchall()}
        return [SharedDocument(id=chunk, content=stored[chunk][1], meta={**(stored[chunk][2] or {}), **extra},
                               score=score)
                for chunk, score, extra in hits if chunk in stored]

    def similarities(self, query_embedding: list[float], ids: list[str]) -> dict[str, tuple[float, float | None]]:
        """
        The query's cosine to each chunk's vector and to its best sentence (None without sentence vectors).

        :param ids: Chunk ids.
        :returns: Chunk id to `(chunk similarity, best sentence similarity)`.
        """
        if not ids:
            return {}
        vector = self._vector(query_embedding)
        query = sql.SQL("SELECT id, 1 - (embedding <=> %s), (SELECT max(1 - (sentence <=> %s)) "
                        "FROM unnest(sentences) AS sentence) FROM {table} WHERE id = ANY(%s) "
                        "AND embedding IS NOT NULL").format(**self._names)
        with self._read("searching") as cursor:
            rows = cursor.execute(query, (vector, vector, list(ids))).fetchall()
        return {chunk: (cosine, best) for chunk, cosine, best in rows}

    # -- writing ----------------------------------------------------------------------------------------------
    def write_documents(
        self, documents: list[Document], policy: DuplicatePolicy = DuplicatePolicy.NONE,
        sentence_embeddings: dict[str, Any] | None = None,
    ) -> int:
        """
        Write documents in one transaction (all or nothing), with their KBs' write counters.

        :param policy: `NONE`/`FAIL` raise on an existing id, `SKIP` keeps the stored one, `OVERWRITE` replaces it.
        :param sentence_embeddings: Document id to the vectors of its sentences (rows), for `similarities`.
        :returns: The number of documents written.
        :raises DuplicateDocumentError: On an existing id with policy `NONE` or `FAIL`.
        """
        rows = self._rows(documents, sentence_embeddings or {})
        if not rows:
            return 0
        with self._transaction("writing", writes=True) as cursor:
            totals = self._lock_totals(cursor)
            ids = [row.id for row in rows]
            existing = {row[0] for row in cursor.execute(
                sql.SQL("SELECT id FROM {table} WHERE id = ANY(%s) FOR UPDATE").format(**self._names), (ids,))}
            if existing and policy in (DuplicatePolicy.NONE, DuplicatePolicy.FAIL):
                raise DuplicateDocumentError(f"A document with id '{min(existing)}' already exists.")
            if policy == DuplicatePolicy.SKIP:
                rows = [row for row in rows if row.id not in existing]
            written = {row.id for row in rows}
            kbs = self._replace(cursor, totals, sql.SQL(" WHERE id = ANY(%s)"), (list(written),), rows)
            self._bump(cursor, kbs | self._kbs([doc for doc in documents if doc.id in written]))
        return len(rows)

    def replace_documents(
        self, doc_id: str, documents: list[Document], sentence_embeddings: dict[str, Any] | None = None
    ) -> int:
        """
        Make `documents` the chunks of `meta.doc_id == doc_id` in one transaction: the earlier chunks go, the new
        ones come and the counters and BM25 statistics move together (writers wait for each other).

        :param doc_id: The source document's id; every one of `documents` must carry it in `meta["doc_id"]`.
        :returns: How many chunks of the earlier version were removed.
        """
        if any(doc.meta.get("doc_id") != doc_id for doc in documents):
            raise ValueError(f"replace_documents: every chunk must have meta['doc_id'] == {doc_id!r}.")
        rows = self._rows(documents, sentence_embeddings or {})
        with self._transaction("writing", writes=True) as cursor:
            totals = self._lock_totals(cursor)
            removed: list[str] = []
            kbs = self._replace(cursor, totals, sql.SQL(" WHERE meta->>'doc_id' = %s OR id = ANY(%s)"),
                                (doc_id, [row.id for row in rows]), rows, removed)
            self._bump(cursor, kbs | self._kbs(documents))
        return len(set(removed) - {row.id for row in rows})

    def delete_documents(self, document_ids: list[str]) -> None:
        """Delete documents by id (unknown ids are ignored), moving their KBs' counters in the same transaction."""
        if document_ids:
            with self._transaction("deleting", writes=True) as cursor:
                totals = self._lock_totals(cursor)
                self._bump(cursor, self._replace(cursor, totals, sql.SQL(" WHERE id = ANY(%s)"),
                                                 (list(document_ids),), []))

    def delete_by_filter(self, filters: dict[str, Any]) -> int:
        """Delete the chunks matching `filters`, moving their KBs' counters; returns how many."""
        where, params = _where(filters)
        removed: list[str] = []
        with self._transaction("deleting", writes=True) as cursor:
            totals = self._lock_totals(cursor)
            self._bump(cursor, self._replace(cursor, totals, where, params, [], removed))
        return len(removed)

    # -- helpers ----------------------------------------------------------------------------------------------
    def _vector(self, embedding: Any) -> np.ndarray:
        vector = np.asarray(embedding, dtype=np.float32)
        if vector.shape != (self._dim,):
            raise ValueError(f"The vector has {vector.size} values; the store holds vectors of {self._dim}.")
        return vector

    def _rows(self, documents: list[Document], sentence_embeddings: dict[str, Any]) -> list["_Row"]:
        """The rows of `documents` (a repeated id keeps the last), with their BM25 term counts."""
        if not isinstance(documents, list) or any(not isinstance(doc, Document) for doc in documents):
            raise ValueError("write_documents expects a list of Documents.")
        rows: dict[str, _Row] = {}
        for document in documents:
            embedding = None if document.embedding is None else self._vector(document.embedding)
            sentences = sentence_embeddings.get(document.id)
            vectors = None if sentences is None or not len(sentences) else [self._vector(row) for row in sentences]
            text = self._indexed_text(document)
            rows[document.id] = _Row(document.id, document.content, Jsonb(document.meta), embedding, vectors,
                                     {name: self._terms(name, text) for name in ANALYSES})
        return list(rows.values())

    def _lock_totals(self, cursor: psycopg.Cursor) -> dict[str, Any]:
        """
        The BM25 totals row, locked for this transaction: writers take it first, so they run one after another
        (and never deadlock on the rows they touch after it).
        """
        row = cursor.execute(sql.SQL("SELECT chunks, words, ngrams, words_avg, ngrams_avg FROM {totals} "
                                     "FOR UPDATE").format(**self._names)).fetchone()
        return {"count": row[0], "words": row[1], "ngrams": row[2], "avg": {"words": row[3], "ngrams": row[4]}}

    def _replace(self, cursor: psycopg.Cursor, totals: dict[str, Any], where: sql.Composable,
                 params: tuple[Any, ...], rows: list["_Row"], removed: list[str] | None = None
                 ) -> set[tuple[str, str]]:
        """
        Delete the chunks matching `where` and insert `rows`, with their postings, the terms' document frequencies
        and the totals (the caller holds the totals row, `_lock_totals`), re-encoding an analysis whose average
        length drifted; as the local shard does (`Shard.tally`, `Shard.rebalance`).

        :param removed: Receives the ids of the deleted chunks.
        :returns: The (tenant, kb) pairs of the deleted chunks.
        """
        query = (sql.SQL("DELETE FROM {table}").format(**self._names) + where
                 + sql.SQL(" RETURNING id, pk, coalesce(meta->>'tenant', ''), coalesce(meta->>'kb', ''), "
                           "words_length, ngrams_length"))
        gone = cursor.execute(query, params).fetchall()
        if removed is not None:
            removed.extend(row[0] for row in gone)
        count = totals["count"] + len(rows) - len(gone)
        lengths = {name: totals[name] + sum(sum(row.terms[name].values()) for row in rows)
                   - sum(row[4 + number] for row in gone) for number, name in enumerate(ANALYSES)}
        means = {name: max(1.0, lengths[name] / count) if count else 1.0 for name in ANALYSES}
        averages = dict(totals["avg"])
        for name in ANALYSES:  # a store's first write fixes the averages its weights are encoded with
            if averages[name] is None and count:
                averages[name] = means[name]
        if gone:
            cursor.execute(sql.SQL(
                "WITH gone AS (DELETE FROM {postings} WHERE chunk = ANY(%s) RETURNING analysis, term) "
                "UPDATE {terms} AS d SET df = d.df - g.n, version = d.version + 1 FROM (SELECT analysis, term, "
                "count(*) AS n FROM gone GROUP BY analysis, term) AS g "
                "WHERE d.analysis = g.analysis AND d.term = g.term").format(**self._names), ([row[1] for row in gone],))
        if rows:
            self._insert(cursor, rows, averages)
        drifted = [name for name in ANALYSES if count and averages[name] is not None
                   and abs(means[name] - averages[name]) > DRIFT * averages[name]]
        for name in drifted:  # re-encode every weight of the analysis against the new average
            averages[name] = means[name]
            k1, b = ANALYSIS["k1"], ANALYSIS["b"]
            cursor.execute(sql.SQL(  # in float8, in the order of `Bm25Encoder.document`: the same weights
                "UPDATE {postings} AS p SET weight = (p.tf::float8 * %s::float8 / (p.tf::float8 + %s::float8 * "
                "(1.0::float8 - %s::float8 + %s::float8 * c.{length} / greatest(%s::float8, 1.0::float8))))::real "
                "FROM {table} AS c WHERE p.analysis = %s AND c.pk = p.chunk").format(
                    length=sql.Identifier(f"{name}_length"), **self._names),
                (k1 + 1.0, k1, b, b, averages[name], ANALYSES.index(name)))
            cursor.execute(sql.SQL("UPDATE {terms} SET version = version + 1 WHERE analysis = %s").format(
                **self._names), (ANALYSES.index(name),))  # every cached list of the analysis is stale
        cursor.execute(sql.SQL("UPDATE {totals} SET chunks = %s, words = %s, ngrams = %s, words_avg = %s, "
                               "ngrams_avg = %s").format(**self._names),
                       (count, lengths["words"], lengths["ngrams"], averages["words"], averages["ngrams"]))
        return {(row[2], row[3]) for row in gone}

    def _insert(self, cursor: psycopg.Cursor, rows: list["_Row"], averages: dict[str, float | None]) -> None:
        """Insert chunk rows, their postings (weights encoded against `averages`) and their terms' frequencies."""
        cursor.executemany(sql.SQL(
            "INSERT INTO {table} (id, content, meta, embedding, sentences, words_length, ngrams_length) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING pk").format(**self._names),
            [(row.id, row.content, row.meta, row.embedding, row.sentences,
              *[sum(row.terms[name].values()) for name in ANALYSES]) for row in rows], returning=True)
        keys = []
        while True:
            keys.append(cursor.fetchone()[0])
            if not cursor.nextset():
                break
        columns: tuple[list[Any], ...] = ([], [], [], [], [])
        for row, key in zip(rows, keys, strict=True):
            for number, name in enumerate(ANALYSES):
                counts = row.terms[name]
                if not counts:
                    continue
                encoder = self._encoders[name]
                norm = encoder.k1 * (1.0 - encoder.b + encoder.b * sum(counts.values()) / max(averages[name], 1.0))
                for term, tf in counts.items():  # the shard's `Bm25Encoder.document`, term by term
                    for column, value in zip(columns, (number, term, key, tf, tf * (encoder.k1 + 1.0) / (tf + norm)),
                                             strict=True):
                        column.append(value)
        if columns[0]:
            cursor.execute(sql.SQL(
                "WITH added AS (INSERT INTO {postings} (analysis, term, chunk, tf, weight) "
                "SELECT * FROM unnest(%s::smallint[], %s::integer[], %s::bigint[], %s::real[], %s::real[]) "
                "RETURNING analysis, term) "
                "INSERT INTO {terms} AS d (analysis, term, df) SELECT analysis, term, count(*) FROM added "
                "GROUP BY analysis, term ORDER BY analysis, term "
                "ON CONFLICT (analysis, term) DO UPDATE SET df = d.df + EXCLUDED.df, version = d.version + 1").format(
                    **self._names), columns)

    @staticmethod
    def _kbs(documents: list[Document]) -> set[tuple[str, str]]:
        return {(str(doc.meta.get("tenant") or ""), str(doc.meta.get("kb") or "")) for doc in documents}

    def _bump(self, cursor: psycopg.Cursor, kbs: set[tuple[str, str]]) -> None:
        """Move the counters of `kbs` to new values of the sequence (in a fixed order: no deadlock between writers)."""
        if kbs:
            tenants, names = zip(*sorted(kbs), strict=True)
            cursor.execute(sql.SQL(
                "INSERT INTO {generations} (tenant, kb, value) SELECT tenant, kb, nextval({sequence_name}) "
                "FROM unnest(%s::text[], %s::text[]) AS kbs(tenant, kb) "
                "ON CONFLICT (tenant, kb) DO UPDATE SET value = EXCLUDED.value").format(
                    sequence_name=sql.Literal(f"{self.table}_generation"), **self._names),
                (list(tenants), list(names)))

    # -- serialisation ----------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Serialise the store's settings as configured (not the URL read from the environment)."""
        return default_to_dict(self, url=self.url, table=self.table, embedding_dim=self.embedding_dim,
                               indexed_fields=self.indexed_fields, read_url=self.read_url, max_lag_s=self.max_lag_s,
                               pool_size=self.pool_size, pool_timeout_s=self.pool_timeout_s)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PostgresDocumentStore":
        """Deserialise the store from `to_dict` output."""
        return default_from_dict(cls, data)
