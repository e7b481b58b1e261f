"""Per-caller request limits: the token bucket and the cap on requests at once, on a clock the test moves."""

from gatehouse.serving.rate_limits import CallerLimits, RateLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_caller_over_its_rate_is_refused_until_its_bucket_refills():
    clock = Clock()
    limiter = RateLimiter(CallerLimits(requests_per_minute=2), clock=clock)
    assert limiter.admit("a") is None and limiter.admit("a") is None
    refused = limiter.admit("a")
    assert refused.retry_after == 30 and "2 requests a minute" in refused.message
    assert "limits.requests_per_minute" in refused.message
    assert limiter.admit("b") is None  # another caller has its own bucket
    clock.now += 30
    assert limiter.admit("a") is None
    assert limiter.admit("a") is not None


def test_a_caller_at_its_concurrency_cap_is_refused_until_one_finishes():
    limiter = RateLimiter(CallerLimits(max_concurrent=2), clock=Clock())
    assert limiter.admit("a") is None and limiter.admit("a") is None
    refused = limiter.admit("a")
    assert refused.retry_after == 1 and "2 at a time" in refused.message
    limiter.release("a")
    assert limiter.admit("a") is None


def test_while_others_are_busy_a_caller_gets_its_share_of_the_cap():
    clock = Clock()
    limiter = RateLimiter(CallerLimits(max_concurrent=2), clock=clock)
    assert limiter.admit("flood") is None
    assert limiter.admit("quiet") is None  # its share: 2 divided by 2 busy callers
    refused = limiter.admit("flood")
    assert refused is not None and "1 while 1 other caller(s) are busy" in refused.message
    limiter.release("quiet")
    assert limiter.admit("flood") is not None  # the quiet caller's next request is on its way
    clock.now += 1.5
    assert limiter.admit("flood") is None  # alone again: the whole cap


def test_a_caller_with_its_own_limits_and_zero_meaning_none():
    limiter = RateLimiter(CallerLimits(requests_per_minute=1, max_concurrent=1),
                          {"BULK": CallerLimits(requests_per_minute=0, max_concurrent=0)}, clock=Clock())
    assert all(limiter.admit("BULK") is None for _ in range(100))
    assert limiter.limits("other") == CallerLimits(1, 1)


def test_idle_callers_are_forgotten_when_many_are_tracked(monkeypatch):
    monkeypatch.setattr("gatehouse.serving.rate_limits.MAX_TRACKED_CALLERS", 3)
    clock = Clock()
    limiter = RateLimiter(CallerLimits(requests_per_minute=1), clock=clock)
    for name in "abc":
        limiter.admit(name)
    limiter.release("a")
    limiter.release("b")
    clock.now += 61
    assert limiter.admit("d") is None
    assert sorted(limiter._callers) == ["c", "d"]  # c still has a request running
