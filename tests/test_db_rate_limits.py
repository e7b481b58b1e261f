"""
Per-caller limits kept in PostgreSQL (the test cluster's primary): two limiter objects stand for two servers over one
database; a killed server is a real process killed with SIGKILL.
"""

import logging
import subprocess
import sys
import textwrap
import time

import psycopg
import pytest
from server_process import free_port

from gatehouse.serving.db_rate_limits import DatabaseRateLimiter
from gatehouse.serving.rate_limits import CallerLimits


@pytest.fixture
def database(postgres) -> str:
    """A new database as the store leaves it (the process's pooled connections expect its `vector` extension)."""
    url = postgres.new_database()
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("CREATE EXTENSION vector")
    return url


def test_init(database):
    limiter = DatabaseRateLimiter(CallerLimits(requests_per_minute=60, max_concurrent=2),
                                  {"KEY_BULK": CallerLimits(600, 8)}, url=database, lease_s=9)
    assert (limiter.default, limiter.url, limiter.lease_s) == (CallerLimits(60, 2), database, 9.0)
    assert limiter.limits("KEY_BULK") == CallerLimits(600, 8) and limiter.limits("other") == CallerLimits(60, 2)


def test_run_requests_at_once_are_counted_over_every_server(database):
    one, two = (DatabaseRateLimiter(CallerLimits(max_concurrent=2), url=database) for _ in range(2))
    assert one.admit("acme") is None and two.admit("acme") is None
    refused = [one.admit("acme"), two.admit("acme")]
    assert all(refusal is not None and "2 at a time" in refusal.message for refusal in refused)
    one.release("acme")
    assert two.admit("acme") is None
    two.release("acme")
    two.release("acme")


def test_run_the_request_rate_is_counted_over_every_server(database):
    one, two = (DatabaseRateLimiter(CallerLimits(requests_per_minute=3), url=database) for _ in range(2))
    for limiter in (one, two, one):
        assert limiter.admit("acme") is None
        limiter.release("acme")
    refused = two.admit("acme")
    assert refused is not None and "3 requests a minute" in refused.message and refused.retry_after >= 1
    assert one.admit("initech") is None  # another caller has its own bucket
    one.release("initech")


def test_run_a_caller_busy_on_another_server_takes_its_share(database):
    one, two = (DatabaseRateLimiter(CallerLimits(max_concurrent=2), url=database) for _ in range(2))
    assert one.admit("flood") is None
    assert two.admit("quiet") is None  # its share: 2 divided by 2 busy callers
    refused = one.admit("flood")
    assert refused is not None and "1 while 1 other caller(s) are busy" in refused.message
    one.release("flood")
    two.release("quiet")


def test_run_a_killed_servers_requests_stop_counting_when_their_lease_runs_out(database):
    killed = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from gatehouse.serving.db_rate_limits import DatabaseRateLimiter
        from gatehouse.serving.rate_limits import CallerLimits
        limiter = DatabaseRateLimiter(CallerLimits(max_concurrent=1), url={database!r}, lease_s=1)
        assert limiter.admit("acme") is None
        print("admitted", flush=True)
        time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert killed.stdout.readline().strip() == "admitted"
        survivor = DatabaseRateLimiter(CallerLimits(max_concurrent=1), url=database)
        assert survivor.admit("acme") is not None  # the other server's request is running
    finally:
        killed.kill()
        killed.wait()
    deadline = time.monotonic() + 60
    while (refusal := survivor.admit("acme")) is not None:
        assert time.monotonic() < deadline, refusal
        time.sleep(0.2)
    survivor.release("acme")


def test_run_without_the_database_each_server_keeps_its_own_limits(caplog):
    limiter = DatabaseRateLimiter(CallerLimits(max_concurrent=1),
                                  url=f"postgresql://postgres@127.0.0.1:{free_port()}/gatehouse", pool_timeout_s=2)
    with caplog.at_level(logging.WARNING, logger="gatehouse.serving.db_rate_limits"):
        assert limiter.admit("acme") is None
        assert limiter.admit("acme") is not None
        limiter.release("acme")
        assert limiter.admit("acme") is None
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 1 and "fall back to this process's own" in warnings[0], warnings
