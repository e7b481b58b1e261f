"""
The PostgreSQL store's Prometheus series: its connection pools, the standby's lag and the searches it sent to the
primary. `gatehouse serve` shows them at `/metrics` (summed over the processes of `--processes N`: the gauges are
kept as Prometheus' multiprocess mode's `livesum`, the lag as `livemostrecent`). No label names a server, a database
or anything of a caller's: `pool` is `primary` or `standby`.

Usage:
```python
from gatehouse.document_stores.postgres_metrics import PRIMARY_READS

PRIMARY_READS.labels(reason="lag").inc()
```
"""

from prometheus_client import Counter, Gauge

POOLS = ("primary", "standby")
POOL_CONNECTIONS = Gauge("gatehouse_postgres_pool_connections", "Open pooled connections to the database.",
                         ["pool"], multiprocess_mode="livesum")
POOL_IN_USE = Gauge("gatehouse_postgres_pool_connections_in_use", "Pooled connections checked out by a call.",
                    ["pool"], multiprocess_mode="livesum")
POOL_SIZE = Gauge("gatehouse_postgres_pool_size", "The most connections the pools may open.", ["pool"],
                  multiprocess_mode="livesum")
POOL_WAITS = Counter("gatehouse_postgres_pool_waits", "Calls that waited for a connection (all in use).", ["pool"])
POOL_TIMEOUTS = Counter("gatehouse_postgres_pool_timeouts",
                        "Calls that waited pool_timeout_s for a connection in vain (a 503).", ["pool"])
STANDBY_LAG = Gauge("gatehouse_postgres_standby_lag_seconds",
                    "How far the standby's replay is behind what it received (0 when it has replayed everything), "
                    "as last measured.", multiprocess_mode="livemostrecent")
STANDBY_WAITS = Counter("gatehouse_postgres_standby_waits",
                        "Searches that waited (up to max_lag_s) for the standby to replay what the process has seen.")
STANDBY_LAG_EPISODES = Counter("gatehouse_postgres_standby_lag_episodes",
                               "Times the standby stayed behind for max_lag_s, after which searches read the primary "
                               "until it caught up.")
PRIMARY_READS = Counter("gatehouse_postgres_primary_reads",
                        "Searches sent to the primary although a read URL is set, by reason (lag, unreachable).",
                        ["reason"])
for _pool in POOLS:
    for _series in (POOL_CONNECTIONS, POOL_IN_USE, POOL_SIZE, POOL_WAITS, POOL_TIMEOUTS):
        _series.labels(pool=_pool)
for _reason in ("lag", "unreachable"):
    PRIMARY_READS.labels(reason=_reason)
