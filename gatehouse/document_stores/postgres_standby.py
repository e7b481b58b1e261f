"""
A hot standby that the searches read (`read_url`), as this process knows it: reachable or not, caught up or lagging.

A search reads the standby once it has replayed what this process has seen on the primary (its commits, the write
counters it read). When it has not, the first search waits for it, up to `max_lag_s`, polling its replay position;
searches arriving meanwhile wait for that one's verdict instead of waiting on their own. If the standby catches up in
time, they read it. If not, a lag episode starts: logged once, and for `LAG_RECHECK_S` every search reads the primary
at once; then the next search looks at the standby again without waiting: still behind, the episode goes on; caught
up, it ends (logged). So no search waits longer than `max_lag_s` for the standby, and a process waits once per
episode. A standby that cannot be reached is left for `READ_RETRY_S` (searches read the primary; logged once).

Readiness (`GET /ready`) asks the same state: a standby in a lag episode, unreachable, or whose replay stays behind
what it has received for `max_lag_s`, is not ready.

Usage:
```python
from gatehouse.document_stores.postgres_standby import standby

state = standby(read_url, shown_url)   # one per read URL and process
if state.skipped() is None and state.caught_up(connection, seen=wal_position, max_lag_s=1.0):
    ...   # read the standby
```
"""

import logging
import threading
import time
from collections.abc import Callable

import psycopg

from gatehouse.document_stores.postgres_errors import first_line
from gatehouse.document_stores.postgres_metrics import STANDBY_LAG, STANDBY_LAG_EPISODES, STANDBY_WAITS

logger = logging.getLogger("gatehouse.document_stores.postgres")

LAG_POLL_S = 0.01
LAG_RECHECK_S = 5.0  # in a lag episode, how long searches read the primary before the standby is looked at again
READ_RETRY_S = 30.0  # after a read URL could not be reached, how long searches read the primary before trying again
#: The standby's replay position and its lag: 0 when it has replayed all it received, else the time since the last
#: transaction it replayed was committed on the primary.
REPLAY = ("SELECT pg_last_wal_replay_lsn()::text, pg_last_wal_receive_lsn()::text, CASE WHEN "
          "pg_last_wal_receive_lsn() IS NULL OR pg_last_wal_replay_lsn() >= pg_last_wal_receive_lsn() THEN 0 "
          "ELSE coalesce(extract(epoch FROM clock_timestamp() - pg_last_xact_replay_timestamp()), 0) END::float8")


def lsn(text: str | None) -> int:
    """A WAL position (`16/B374D848`) as a number (0 for none)."""
    if not text:
        return 0
    high, _, low = str(text).partition("/")
    return (int(high, 16) << 32) + int(low, 16)


class Standby:
    """What this process knows of one read URL (shared by every store object reading it); thread-safe."""

    def __init__(self, shown_url: str) -> None:
        """:param shown_url: The read URL without its password, as the log names it."""
        self.shown_url = shown_url
        self.down_until = 0.0  # monotonic: searches read the primary until then (unreachable)
        self.behind_until = 0.0  # monotonic: searches read the primary until then (a lag episode)
        self.lagging = False  # in a lag episode (logged when it starts and when it ends)
        self.waiting = False  # a search is waiting for the standby; others wait for its verdict
        self._condition = threading.Condition()

    def skipped(self) -> str | None:
        """Why a search must read the primary now without looking at the standby (`unreachable`, `lag`), or None."""
        now = time.monotonic()
        return "unreachable" if now < self.down_until else "lag" if now < self.behind_until else None

    def replay(self, connection: psycopg.Connection) -> tuple[int, int, float]:
        """The standby's replay and receive positions and its lag in seconds (also the lag metric)."""
        replayed, received, lag_s = connection.execute(REPLAY).fetchone()
        STANDBY_LAG.set(lag_s)
        return lsn(replayed), lsn(received), lag_s

    def caught_up(self, connection: psycopg.Connection, *, seen: int, max_lag_s: float) -> bool:
        """
        Whether the standby has replayed up to `seen` (a primary WAL position), waiting up to `max_lag_s` once per
        lag episode; False starts or continues an episode (the search then reads the primary).

        :raises psycopg.OperationalError: When the standby is lost meanwhile.
        """
        if not seen or self.replay(connection)[0] >= seen:
            self._ended()
            return True
        return self._wait(lambda: self.replay(connection)[0] >= seen, max_lag_s)

    def ready(self, connection: psycopg.Connection, max_lag_s: float) -> str | None:
        """
        Why the standby cannot serve now (a caller-safe reason for `GET /ready`), or None: in a lag episode, or its
        replay stays behind what it has received for `max_lag_s` (which starts an episode).
        """
        if time.monotonic() < self.behind_until:
            return "the standby lags behind the primary"
        replayed, received, lag_s = self.replay(connection)
        if lag_s <= max_lag_s or self._wait(lambda: self.replay(connection)[0] >= received, max_lag_s):
            return None
        return "the standby lags behind the primary"

    def retry_after_s(self) -> float:
        """How long the standby is left alone (a lag episode's or an outage's rest), 0 when it is not."""
        return max(0.0, max(self.behind_until, self.down_until) - time.monotonic())

    def down(self, error: BaseException, detail: str) -> None:
        """The standby could not be reached: searches read the primary for `READ_RETRY_S` (logged once then)."""
        with self._condition:
            logged = time.monotonic() < self.down_until
            self.down_until = time.monotonic() + READ_RETRY_S
        if not logged:
            logger.warning("the PostgreSQL read URL %s cannot be used (%s): searches read the primary for %.0f s",
                           self.shown_url, detail or first_line(error), READ_RETRY_S)

    def _wait(self, replayed: Callable[[], bool], max_lag_s: float) -> bool:
        """Wait up to `max_lag_s` for `replayed()`, or for the verdict of the search already waiting; once per
        episode (in an episode, no wait: the episode goes on)."""
        with self._condition:
            if self.lagging:  # looked at again, still behind: the episode goes on, nobody waits
                self.behind_until = time.monotonic() + LAG_RECHECK_S
                return False
            if self.waiting:  # another search waits: its verdict is ours (then one look of our own)
                self._condition.wait_for(lambda: not self.waiting, timeout=max_lag_s)
                return not self.lagging and replayed()
            self.waiting = True
        STANDBY_WAITS.inc()
        deadline = time.monotonic() + max_lag_s
        caught_up = False
        try:
            while not (caught_up := replayed()) and time.monotonic() < deadline:
                time.sleep(LAG_POLL_S)
        finally:
            with self._condition:
                self.waiting = False
                if not caught_up:
                    self.lagging = True
                    self.behind_until = time.monotonic() + LAG_RECHECK_S
                self._condition.notify_all()
        if not caught_up:
            STANDBY_LAG_EPISODES.inc()
            logger.warning("the PostgreSQL read URL %s stayed behind the primary for max_lag_s (%g s): searches "
                           "read the primary until it has caught up", self.shown_url, max_lag_s)
        return caught_up

    def _ended(self) -> None:
        """The standby was found caught up: a lag episode is over (logged once)."""
        if not self.lagging:
            return
        with self._condition:
            ended, self.lagging = self.lagging, False
        if ended:
            logger.info("the PostgreSQL read URL %s has caught up: searches read it again", self.shown_url)


_STANDBYS: dict[str, Standby] = {}
_STANDBYS_LOCK = threading.Lock()


def standby(url: str, shown_url: str) -> Standby:
    """This process's state of the read URL `url` (shown as `shown_url`), made on first use."""
    with _STANDBYS_LOCK:
        if url not in _STANDBYS:
            _STANDBYS[url] = Standby(shown_url)
        return _STANDBYS[url]
