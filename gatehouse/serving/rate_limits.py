"""
Per-caller request limits: a request rate (token bucket) and a cap on requests running at once.

A caller is an API key (its environment variable's name) or, on a server without keys, the client's address. While
other callers are busy (a request running, or finished within `ACTIVE_S`), a caller's cap is its share:
`max_concurrent` divided by the busy callers, at least 1. A request over the rate or over the cap is refused at once (429 with `Retry-After`) instead of queueing for
a share of the CPU, so one caller flooding the server cannot hold up the others. These limits are this process's;
`db_rate_limits.DatabaseRateLimiter` applies the same rule (`decide`) for every server over a PostgreSQL database.

Usage:
```python
from gatehouse.serving.rate_limits import CallerLimits, RateLimiter

limiter = RateLimiter(CallerLimits(requests_per_minute=120, max_concurrent=2))
admitted = limiter.admit("GATEHOUSE_KEY_ACME")   # None when refused: see `limiter.refusal(...)`
...
limiter.release("GATEHOUSE_KEY_ACME")            # when the request finished
```
"""

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

ACTIVE_S = 1.0  # a caller whose request finished this recently still counts as busy (its next one is on its way)
MAX_TRACKED_CALLERS = 10_000  # beyond, callers idle for a minute (their buckets full again) are forgotten


@dataclass(frozen=True)
class CallerLimits:
    """One caller's limits: requests per minute (0 = no rate limit) and requests at once (0 = no cap)."""

    requests_per_minute: int = 0
    max_concurrent: int = 0


@dataclass(frozen=True)
class Refusal:
    """Why a request was refused and in how many seconds to try again."""

    message: str
    retry_after: int


@dataclass
class _Caller:
    tokens: float
    updated: float
    running: int = 0
    finished: float = float("-inf")  # when its last request finished


def decide(limits: CallerLimits, *, running: int, busy_others: int, tokens: float,
           elapsed: float) -> tuple[Refusal | None, float]:
    """
    The rule of both limiters (this module's and `db_rate_limits`'): whether a caller's next request is admitted.

    :param limits: The caller's limits.
    :param running: The caller's requests running now.
    :param busy_others: Other callers busy now (a request running, or one finished within `ACTIVE_S`).
    :param tokens: The caller's bucket when last updated (a full one is `requests_per_minute`).
    :param elapsed: Seconds since the bucket was last updated.
    :returns: The refusal (None when admitted) and the bucket now (refilled; the admitted request's token
        taken).
    """
    rate = limits.requests_per_minute / 60
    tokens = min(float(limits.requests_per_minute), tokens + elapsed * rate)
    if limits.max_concurrent:
        share = max(1, limits.max_concurrent // (busy_others + 1))
        if running >= share:
            return Refusal(f"too many requests at once: this caller may run {limits.max_concurrent} at a "
                           f"time, {share} while {busy_others} other caller(s) are busy "
                           "(limits.max_concurrent_requests in hayhooks.yml)", 1), tokens
    if not limits.requests_per_minute:
        return None, tokens
    if tokens < 1:
        return Refusal(f"rate limit reached: this caller may make {limits.requests_per_minute} requests "
                       "a minute (limits.requests_per_minute in hayhooks.yml)",
                       max(1, math.ceil((1 - tokens) / rate))), tokens
    return None, tokens - 1


class RateLimiter:
    """
    The limits of every caller, thread-safe. Each caller's bucket holds up to a minute's requests and refills at
    `requests_per_minute / 60` per second.

    :param default: The limits of a caller without its own.
    :param per_caller: Limits of named callers (API keys' environment variable names).
    :param clock: Seconds, monotonic (tests pass their own).
    """

    def __init__(self, default: CallerLimits, per_caller: dict[str, CallerLimits] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.default = default
        self.per_caller = dict(per_caller or {})
        self.clock = clock
        self._callers: dict[str, _Caller] = {}
        self._lock = threading.Lock()

    def limits(self, caller: str) -> CallerLimits:
        """The limits that apply to `caller`."""
        return self.per_caller.get(caller, self.default)

    def admit(self, caller: str) -> Refusal | None:
        """
        Count a request of `caller` in, or refuse it.

        :returns: None when admitted (call `release` when it finishes), else the refusal.
        """
        limits = self.limits(caller)
        now = self.clock()
        with self._lock:
            if len(self._callers) >= MAX_TRACKED_CALLERS:
                self._forget_idle(now)
            state = self._callers.get(caller)
            if state is None:
                state = self._callers[caller] = _Caller(tokens=float(limits.requests_per_minute), updated=now)
            busy = sum(1 for name, other in self._callers.items()
                       if name != caller and (other.running or now - other.finished < ACTIVE_S))
            refusal, state.tokens = decide(limits, running=state.running, busy_others=busy, tokens=state.tokens,
                                           elapsed=now - state.updated)
            state.updated = now
            if refusal is None:
                state.running += 1
            return refusal

    def _forget_idle(self, now: float) -> None:
        """Drop the callers with nothing running whose bucket has refilled (call with the lock held)."""
        for name, state in list(self._callers.items()):
            if not state.running and now - state.updated >= 60:
                del self._callers[name]

    def release(self, caller: str) -> None:
        """Count a finished request of `caller` out."""
        now = self.clock()
        with self._lock:
            state = self._callers.get(caller)
            if state is not None:
                state.running = max(0, state.running - 1)
                state.finished = now
