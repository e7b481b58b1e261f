"""
One bounded pool of PostgreSQL connections per process and database URL, shared by every `PostgresDocumentStore`
object and the database job queue of that process.

A serving process holds many store objects (an ask pipeline's retriever facades, its answer cache, the KB profiles,
the index pipeline's writer) and answers on up to 40 threads; a connection per object and thread would exhaust the
server's `max_connections` under load. Here a call checks a connection out for one transaction and gives it back:

- at most `size` connections per process and URL (`postgres: {pool_size}` in the pipelines' YAML or
  `GATEHOUSE_POSTGRES_POOL_SIZE`, default 8; the largest size asked for wins). N processes need N × size (+ N × size
  on a read URL's server) under the server's `max_connections`;
- a new connection is opened in the calling thread when none is idle and fewer than `size` exist, so a refused or
  unreachable server is that call's error at once, with the server's reason;
- when all are in use, a call waits up to its timeout (`postgres: {pool_timeout_s}` or
  `GATEHOUSE_POSTGRES_POOL_TIMEOUT_S`, default 10 s), then fails with `PoolExhaustedError`, one line (a 503 when
  serving);
- each new connection is set up by the pool's `configure` callback (the vector type, `hnsw.iterative_scan`);
- a connection given back broken (a lost or restarted server) is closed, and so are the idle ones (they are most
  likely dead too): the next call opens a new one. A connection given back inside a transaction is closed;
- its connections open and in use, its size, the calls that waited and those that gave up are Prometheus series
  (`postgres_metrics`, labelled `primary` or `standby`).

`psycopg_pool.ConnectionPool` was tried first and does not fit: it opens connections in background workers, so a
refused or unreachable server leaves every call waiting its full timeout for a `PoolTimeout` that has lost the
server's reason (and a search could not fall back from an unreachable read URL to the primary at once).

Usage:
```python
from gatehouse.document_stores.postgres_pool import connection_pool

pool = connection_pool(url, size=8, configure=set_up_connection)
with pool.connection(timeout=10.0, doing="searching") as connection:
    connection.execute("SELECT 1")
```
"""

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from gatehouse.document_stores.errors import StoreUnavailableError
from gatehouse.document_stores.postgres_metrics import (
    POOL_CONNECTIONS,
    POOL_IN_USE,
    POOL_SIZE,
    POOL_TIMEOUTS,
    POOL_WAITS,
)

DEFAULT_SIZE = 8
DEFAULT_TIMEOUT_S = 10.0


BUSY = "the database is busy: every connection of this server process stayed in use; try again shortly"


class PoolExhaustedError(StoreUnavailableError):
    """Every connection of the process's pool stayed in use for the whole timeout (one line; a 503 when serving)."""


class ConnectionPool:
    """At most `size` connections to one URL, each checked out by one caller at a time."""

    def __init__(self, url: str, *, size: int, name: str, connect: Callable[[], psycopg.Connection],
                 configure: Callable[[psycopg.Connection], None] | None = None, role: str = "primary") -> None:
        """
        :param url: The server's URL, as it is named in errors (already without its password).
        :param size: The most connections open at once.
        :param name: What the pool is for, in errors (`PostgreSQL store at <url>`).
        :param connect: Opens a new connection (autocommit).
        :param configure: Sets up each new connection; an error there closes it and fails the call.
        :param role: `primary` or `standby`: the `pool` label of its metrics (`postgres_metrics`).
        """
        self.url, self.size, self.name, self.role = url, size, name, role
        POOL_SIZE.labels(pool=role).inc(size)
        self._connect, self._configure = connect, configure
        self._idle: list[psycopg.Connection] = []  # the most recently used last: it is taken first
        self._open = 0  # idle + checked out + being opened
        self.peak = 0  # the most connections that were open at once
        self._condition = threading.Condition()

    def grow(self, size: int) -> None:
        """Allow up to `size` connections (a smaller size is ignored: the largest asked for wins)."""
        with self._condition:
            if size > self.size:
                POOL_SIZE.labels(pool=self.role).inc(size - self.size)
                self.size = size
                self._condition.notify_all()

    def get(self, timeout: float, doing: str) -> psycopg.Connection:
        """
        An idle connection, or a new one while fewer than `size` are open, or the first one given back within
        `timeout` seconds.

        :raises PoolExhaustedError: When all `size` stayed in use for `timeout` seconds.
        :raises psycopg.Error: When a new connection cannot be opened or set up.
        """
        deadline = time.monotonic() + timeout
        with self._condition:
            if not self._idle and self._open >= self.size:
                POOL_WAITS.labels(pool=self.role).inc()
            while not self._idle and self._open >= self.size:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    POOL_TIMEOUTS.labels(pool=self.role).inc()
                    raise PoolExhaustedError(
                        f"the {self.name} at {self.url} is busy ({doing}): this process's {self.size} pooled "
                        f"connection(s) stayed in use for {timeout:g} s; raise postgres.pool_size or "
                        "GATEHOUSE_POSTGRES_POOL_SIZE (processes × pool size must stay under the server's "
                        "max_connections) or postgres.pool_timeout_s", public=BUSY, outage=self.url)
                self._condition.wait(remaining)
            if self._idle:
                POOL_IN_USE.labels(pool=self.role).inc()
                return self._idle.pop()
            self._open += 1
            self.peak = max(self.peak, self._open)
        POOL_CONNECTIONS.labels(pool=self.role).inc()
        try:
            connection = self._connect()
        except BaseException:
            self._forget(1)
            raise
        try:
            if self._configure is not None:
                self._configure(connection)
        except BaseException:
            connection.close()
            self._forget(1)
            raise
        POOL_IN_USE.labels(pool=self.role).inc()
        return connection

    def put(self, connection: psycopg.Connection) -> None:
        """
        Give a connection back: kept for the next call if it is usable and outside a transaction, else closed; a
        broken one closes the idle ones too (a lost or restarted server broke them as well).
        """
        POOL_IN_USE.labels(pool=self.role).dec()
        broken = connection.closed or connection.broken
        usable = not broken and connection.info.transaction_status == TransactionStatus.IDLE
        if usable:
            with self._condition:
                self._idle.append(connection)
                self._condition.notify()
            return
        stale: list[psycopg.Connection] = []
        if broken:
            with self._condition:
                stale, self._idle = self._idle, []
        for other in (connection, *stale):
            with contextlib.suppress(Exception):
                other.close()
        self._forget(1 + len(stale))

    @contextlib.contextmanager
    def connection(self, timeout: float, doing: str) -> Iterator[psycopg.Connection]:
        """A connection checked out for the block and given back after it (see `get` and `put`)."""
        connection = self.get(timeout, doing)
        try:
            yield connection
        finally:
            self.put(connection)

    def close_idle(self) -> None:
        """Close the idle connections (the checked-out ones are kept when given back)."""
        with self._condition:
            idle, self._idle = self._idle, []
        for connection in idle:
            with contextlib.suppress(Exception):
                connection.close()
        self._forget(len(idle))

    def _forget(self, count: int) -> None:
        if count:
            POOL_CONNECTIONS.labels(pool=self.role).dec(count)
            with self._condition:
                self._open -= count
                self._condition.notify(count)


#: The pools of this process, by (process id, URL, application name): a child process never uses its parent's.
_POOLS: dict[tuple[int, str, str], ConnectionPool] = {}
_POOLS_LOCK = threading.Lock()


def connection_pool(url: str, *, size: int, name: str, shown_url: str, application_name: str = "",
                    connect_timeout: int = 10, configure: Callable[[psycopg.Connection], None] | None = None,
                    role: str = "primary") -> ConnectionPool:
    """
    This process's pool for `url` (and `application_name`), made on first use; a larger `size` than its current one
    grows it.

    :param shown_url: The URL as errors name it (without its password).
    :param configure: Sets up each new connection (taken from the call that makes the pool).
    :param role: `primary` or `standby` (its metrics' label).
    """
    key = (os.getpid(), url, application_name)
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            options: dict[str, Any] = {"autocommit": True, "connect_timeout": connect_timeout}
            if application_name:
                options["application_name"] = application_name
            pool = _POOLS[key] = ConnectionPool(shown_url, size=size, name=name, configure=configure, role=role,
                                                connect=lambda: psycopg.connect(url, **options))
            return pool
    pool.grow(size)
    return pool
