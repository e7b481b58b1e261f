"""
Per-caller request limits kept in the PostgreSQL database of the store, so that every `gatehouse serve` over that
database (the processes of `--processes N`, and separate servers) enforces one limit per caller: with limits kept in
each process, a caller could run N times its `max_concurrent_requests` and make N times its `requests_per_minute`.

`DatabaseRateLimiter` has the interface and the rule of the in-memory `RateLimiter` (`rate_limits.decide`) over two
unlogged tables (lost on a database crash, not replicated to standbys: counters of the last minute, not data):
`gatehouse_rate_callers` (one row per caller: its bucket and when its last request finished; forgotten after a
minute idle) and
`gatehouse_rate_requests` (one row per running request: the caller, the server process and a lease). Admissions are
serialised by one advisory lock (a short transaction each); the database's clock is the clock of every server. A server
renews its requests' leases every `lease_s / 3`; the requests of a server killed mid-request stop counting when their
lease runs out. When the database cannot be reached, the server falls back to its own in-memory limits (logged once,
and once when it is back) rather than refusing every caller; the request then meets the store's own 503.

Usage:
```python
from gatehouse.serving.db_rate_limits import DatabaseRateLimiter
from gatehouse.serving.rate_limits import CallerLimits

limiter = DatabaseRateLimiter(CallerLimits(requests_per_minute=120, max_concurrent=2),
                              url="postgresql://gatehouse@db/gatehouse")
refusal = limiter.admit("GATEHOUSE_KEY_ACME")   # None when admitted, counted for every server over the database
...
limiter.release("GATEHOUSE_KEY_ACME")
```
"""

import logging
import os
import socket
import threading
import time
import uuid
from collections import Counter

from gatehouse import settings
from gatehouse.document_stores.errors import StoreUnavailableError
from gatehouse.document_stores.postgres_document_store import pooled_transaction, primary_pool
from gatehouse.serving.rate_limits import ACTIVE_S, CallerLimits, RateLimiter, Refusal, decide

logger = logging.getLogger(__name__)

LEASE_S = 15.0  # a running request counts this long after its server's last renewal
FORGET_AFTER_S = 60.0  # a caller idle this long (its bucket full again, nothing running) is forgotten
CALLERS, REQUESTS = "gatehouse_rate_callers", "gatehouse_rate_requests"
SET_UP = f"""
SELECT pg_advisory_xact_lock(hashtext('{REQUESTS}'));
CREATE UNLOGGED TABLE IF NOT EXISTS {CALLERS} (
    caller text PRIMARY KEY, tokens double precision NOT NULL, updated double precision NOT NULL,
    finished double precision);
CREATE UNLOGGED TABLE IF NOT EXISTS {REQUESTS} (
    id bigserial PRIMARY KEY, caller text NOT NULL, owner text NOT NULL, expires double precision NOT NULL);
CREATE INDEX IF NOT EXISTS {REQUESTS}_owner ON {REQUESTS} (owner);
"""
NOW = "extract(epoch FROM clock_timestamp())::double precision"


class DatabaseRateLimiter:
    """
    The limits of every caller, shared by the servers over one PostgreSQL database; thread-safe.

    :param default: The limits of a caller without its own.
    :param per_caller: Limits of named callers (API keys' environment variable names).
    :param url: The database (the store's primary).
    :param lease_s: How long a running request counts without a renewal by its server.
    :param pool_timeout_s: How long a call waits for a connection of the process's pool (shared with the stores);
        None reads `GATEHOUSE_POSTGRES_POOL_TIMEOUT_S`.
    """

    def __init__(self, default: CallerLimits, per_caller: dict[str, CallerLimits] | None = None, *, url: str,
                 lease_s: float = LEASE_S, pool_timeout_s: float | None = None) -> None:
        self.default = default
        self.per_caller = dict(per_caller or {})
        self.url = url
        self.lease_s = float(lease_s)
        self.pool_timeout_s = float(pool_timeout_s or settings.postgres_pool_timeout_s())
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._fallback = RateLimiter(default, per_caller)
        self._local = Counter()  # caller -> requests admitted by the fallback, released there
        self._running = 0  # requests admitted through the database and not released: their leases are renewed
        self._lock = threading.Lock()
        self._set_up = False
        self._fallen_back = False  # the database could not be reached: this process counts on its own (warned once)
        self._pruned = float("-inf")  # when this server last forgot idle callers (the database's clock)
        threading.Thread(target=self._renew_leases, name="gatehouse-rate-lease", daemon=True).start()

    def limits(self, caller: str) -> CallerLimits:
        """The limits that apply to `caller`."""
        return self.per_caller.get(caller, self.default)

    def admit(self, caller: str) -> Refusal | None:
        """
        Count a request of `caller` in for every server over the database, or refuse it.

        :returns: None when admitted (call `release` when it finishes), else the refusal.
        """
        try:
            refusal = self._admit(caller)
        except StoreUnavailableError as error:
            self._warn(error)
            refusal = self._fallback.admit(caller)
            if refusal is None:
                with self._lock:
                    self._local[caller] += 1
            return refusal
        if refusal is None:
            with self._lock:
                self._running += 1
        if self._fallen_back:
            with self._lock:
                back, self._fallen_back = self._fallen_back, False
            if back:
                logger.info("Per-caller limits are counted in the database again")
        return refusal

    def _admit(self, caller: str) -> Refusal | None:
        limits = self.limits(caller)
        with self._cursor("admitting a request") as cursor:
            cursor.execute(f"SELECT pg_advisory_xact_lock(hashtext('{REQUESTS}')), {NOW}")
            now = cursor.fetchone()[1]
            cursor.execute(f"DELETE FROM {REQUESTS} WHERE expires < %s", (now,))
            if now - self._pruned >= FORGET_AFTER_S:  # callers idle for a minute: their buckets are full again
                cursor.execute(f"DELETE FROM {CALLERS} WHERE updated < %s AND caller NOT IN "
                               f"(SELECT caller FROM {REQUESTS})", (now - FORGET_AFTER_S,))
                self._pruned = now
            cursor.execute(f"SELECT (SELECT count(*) FROM {REQUESTS} WHERE caller = %(caller)s), "
                           f"(SELECT count(*) FROM (SELECT caller FROM {REQUESTS} UNION SELECT caller FROM {CALLERS} "
                           "WHERE finished > %(active)s) AS busy WHERE caller <> %(caller)s), "
                           f"(SELECT tokens FROM {CALLERS} WHERE caller = %(caller)s), "
                           f"(SELECT updated FROM {CALLERS} WHERE caller = %(caller)s)",
                           {"caller": caller, "active": now - ACTIVE_S})
            running, busy, tokens, updated = cursor.fetchone()
            if tokens is None:  # a caller not seen for a minute: a full bucket
                tokens, updated = float(limits.requests_per_minute), now
            refusal, tokens = decide(limits, running=running, busy_others=busy, tokens=tokens,
                                     elapsed=max(0.0, now - updated))
            cursor.execute(f"INSERT INTO {CALLERS} (caller, tokens, updated) VALUES (%s, %s, %s) ON CONFLICT (caller) "
                           "DO UPDATE SET tokens = excluded.tokens, updated = excluded.updated", (caller, tokens, now))
            if refusal is None:
                cursor.execute(f"INSERT INTO {REQUESTS} (caller, owner, expires) VALUES (%s, %s, %s)",
                               (caller, self.owner, now + self.lease_s))
            return refusal

    def release(self, caller: str) -> None:
        """Count a finished request of `caller` out."""
        with self._lock:
            if self._local[caller]:
                self._local[caller] -= 1
                self._fallback.release(caller)
                return
            self._running -= 1
        try:
            with self._cursor("releasing a request") as cursor:
                cursor.execute(f"DELETE FROM {REQUESTS} WHERE id = (SELECT id FROM {REQUESTS} "
                               "WHERE caller = %s AND owner = %s LIMIT 1)", (caller, self.owner))
                cursor.execute(f"UPDATE {CALLERS} SET finished = {NOW} WHERE caller = %s", (caller,))
        except StoreUnavailableError as error:  # its row stops counting when its lease runs out
            self._warn(error)

    def _renew_leases(self) -> None:
        """Keep this server's running requests counted while it lives (a daemon thread)."""
        while True:
            time.sleep(self.lease_s / 3)
            if not self._running:
                continue
            try:
                with self._cursor("renewing the running requests' leases") as cursor:
                    cursor.execute(f"UPDATE {REQUESTS} SET expires = {NOW} + %s WHERE owner = %s",
                                   (self.lease_s, self.owner))
            except StoreUnavailableError as error:
                self._warn(error)

    def _cursor(self, doing: str):
        """A cursor in one transaction on the process's pooled connections; the tables made on first use."""
        if not self._set_up:
            with pooled_transaction(self.url, primary_pool(self.url), self.pool_timeout_s,
                                    "setting up the rate-limit tables") as cursor:
                cursor.execute(SET_UP)
            self._set_up = True
        return pooled_transaction(self.url, primary_pool(self.url), self.pool_timeout_s, doing)

    def _warn(self, error: StoreUnavailableError) -> None:
        """Warn once that the limits fall back to this process's own, until the database admits again."""
        with self._lock:
            if self._fallen_back:
                return
            self._fallen_back = True
        logger.warning("Per-caller limits fall back to this process's own: %s", error)
