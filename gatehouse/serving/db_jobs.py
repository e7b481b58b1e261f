"""
Ingest jobs kept in the PostgreSQL database of the store, so that every `gatehouse serve` over that database sees
and runs them: an upload posted to one server is reported, listed and cancelled through any of them, and whichever
server's worker is free takes it.

`DatabaseIngestJobs` has the interface and the statuses of the in-memory `IngestJobs` (`submit`, `get`, `cancel`,
`latest`, `wait`) over two tables next to the chunk table: `<table>_jobs` (one row per job: status, per-file results,
times, the owning worker and its lease) and `<table>_job_files` (the uploaded bytes, one row per file, dropped when
the file is done and when the job ends). What differs from the in-memory jobs:

- the queue is the database's: `max_queued` bounds the jobs *waiting* in the database (every server's), and
  `max_queued_per_tenant` a tenant's waiting ones; each server indexes `workers` files at once;
- a worker takes one file at a time, with `SELECT ... FOR UPDATE SKIP LOCKED`: the next file of the first unfinished
  job no worker is on, of the tenant served longest ago (`turn_at`; tenants in turn, as in memory), so one tenant's
  many files or jobs never make another's upload wait for more than the files in progress;
- a worker on a job holds a lease (`lease_s`) that its server renews every third of it; a job whose lease ran out
  (its server was killed, lost its database, or hung) is left to the next free worker of any server, which goes on
  with the files not done yet (a file written just before the crash is then reported `skipped`, unchanged). After
  `MAX_ATTEMPTS` such crashes the job is `failed` with that reason instead (a file that kills its server every time).
  A `cancelling` job whose lease ran out is `cancelled`;
- the last `history` finished jobs are kept, for every server; a restart forgets nothing.

Documents are written by the store one transaction each, so a killed server leaves whole documents only.

Usage:
```python
from gatehouse.serving.db_jobs import DatabaseIngestJobs

jobs = DatabaseIngestJobs(url="postgresql://gatehouse@db/gatehouse", table="gatehouse_chunks", pipeline=index_pipeline,
                          workers=1, max_queued=10, max_queued_per_tenant=5, history=1000, status_path="/index/jobs")
accepted = jobs.submit(kb="handbook", tenant="public", force=False, files=[upload])
jobs.wait(accepted["job_id"])["status"]      # "done", wherever it ran
```
"""

import contextlib
import logging
import math
import os
import socket
import statistics
import threading
import time
import uuid
from collections.abc import Collection, Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
from haystack import Pipeline
from haystack.dataclasses import ByteStream
from psycopg import sql
from psycopg.types.json import Jsonb

from gatehouse.document_stores.errors import StoreUnavailableError, find_data_dir_error
from gatehouse import settings
from gatehouse.document_stores.postgres_document_store import pooled_transaction, primary_pool
from gatehouse.document_stores.postgres_errors import report_outage
from gatehouse.ingest import FileOutcome, ingest_file
from gatehouse.serving.jobs import RECENT_JOBS, RETRY_AFTER_UNKNOWN_S, UNFINISHED, IngestJob, JobAccepted, QueueFull
from gatehouse.serving.observability import record_ingest
from gatehouse.settings import data_dir

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 3  # leases of one job that run out (its server stopped on it) before it is failed
IDLE_POLL_S = 1.0  # how often an idle worker looks for a job another server queued
WAIT_POLL_S = 0.2  # how often `wait` reads the job
FINISHED = ("done", "failed", "cancelled")
COLUMNS = ("job_id, kb, tenant, force, status_url, names, status, results, chunks_written, error, submitted_at, "
           "started_at, finished_at")


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(UTC).isoformat(timespec="seconds")


def _view(row: tuple[Any, ...]) -> IngestJob:
    """A job row (`COLUMNS`) as the API reports it (the in-memory jobs' shape)."""
    (job_id, kb, tenant, force, status_url, names, status, results, chunks, error, submitted, started,
     finished) = row
    return {
        "job_id": job_id, "status": status, "kb": kb, "tenant": tenant, "files": list(names),
        "status_url": status_url, "force": force,
        "progress": {"done": sum(len(items) for items in results.values()), "total": len(names)},
        "result": {"kb": kb, "tenant": tenant, "written": len(results["written"]),
                   "skipped": len(results["skipped"]), "failed": len(results["failed"]), "chunks_written": chunks,
                   "files": {status: list(results[status]) for status in ("written", "skipped", "failed")}},
        "error": error, "submitted_at": _iso(submitted), "started_at": _iso(started), "finished_at": _iso(finished),
    }


class DatabaseIngestJobs:
    """Ingest jobs in PostgreSQL tables, run by `workers` daemon threads of this server (and those of the others)."""

    forgotten = "finished jobs beyond limits.ingest_job_history are forgotten"

    def __init__(self, *, url: str, table: str, pipeline: Pipeline, workers: int, max_queued: int,
                 max_queued_per_tenant: int, history: int, status_path: str, lease_s: float = 30.0,
                 pool_timeout_s: float | None = None) -> None:
        """
        :param url: The database (the store's primary).
        :param table: The store's chunk table; the jobs are `<table>_jobs` and `<table>_job_files`.
        :param pipeline: The index pipeline, warmed up.
        :param workers: How many jobs this server runs at once (`limits.ingest_workers`).
        :param max_queued: How many jobs may wait in the database (`limits.max_queued_jobs`); beyond, `QueueFull`.
        :param max_queued_per_tenant: How many of those one tenant may hold (0: no share of its own).
        :param history: How many finished jobs are kept (`limits.ingest_job_history`).
        :param status_path: Where a job is reported, without its id (`/index/jobs`).
        :param lease_s: How long a running job is its worker's without a renewal (`limits.ingest_job_lease_s`).
        :param pool_timeout_s: How long a call waits for a connection of the process's pool (shared with the
            stores); None reads `GATEHOUSE_POSTGRES_POOL_TIMEOUT_S`.
        :raises StoreUnavailableError: When the database cannot be reached to set up the tables.
        """
        self.url, self.pipeline, self.workers = url, pipeline, workers
        self.max_queued, self.max_queued_per_tenant, self.history = max_queued, max_queued_per_tenant, history
        self.status_path, self.lease_s = status_path, float(lease_s)
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._names = {"jobs": sql.Identifier(f"{table}_jobs"), "files": sql.Identifier(f"{table}_job_files"),
                       "lock": sql.Literal(f"{table}_jobs"), "jobs_status": sql.Identifier(f"{table}_jobs_status")}
        self.pool_timeout_s = float(pool_timeout_s or settings.postgres_pool_timeout_s())
        self._wake = threading.Event()
        self._running: set[str] = set()  # the jobs this server's workers are on (a file each)
        self._running_lock = threading.Lock()
        self._set_up()
        for index in range(workers):
            threading.Thread(target=self._work, name=f"gatehouse-ingest-{index}", daemon=True).start()
        threading.Thread(target=self._renew_leases, name="gatehouse-ingest-lease", daemon=True).start()

    # -- connections ------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _cursor(self, doing: str) -> Iterator[psycopg.Cursor]:
        """A cursor in one transaction on a connection of the process's pool for the database (the stores' pool)."""
        with pooled_transaction(self.url, primary_pool(self.url), self.pool_timeout_s, doing) as cursor:
            yield cursor

    def _sql(self, statement: str) -> sql.Composed:
        return sql.SQL(statement).format(**self._names)

    def _set_up(self) -> None:
        with self._cursor("setting up the job tables") as cursor:
            cursor.execute(self._sql("SELECT pg_advisory_xact_lock(hashtext({lock}))"))
            cursor.execute(self._sql(
                "CREATE TABLE IF NOT EXISTS {jobs} (seq bigserial UNIQUE, job_id text PRIMARY KEY, kb text NOT NULL, "
                "tenant text NOT NULL, force boolean NOT NULL, status_url text NOT NULL, names jsonb NOT NULL, "
                "status text NOT NULL, results jsonb NOT NULL, chunks_written integer NOT NULL DEFAULT 0, error text, "
                "submitted_at timestamptz NOT NULL DEFAULT now(), started_at timestamptz, finished_at timestamptz, "
                "run_seconds float8, owner text, lease_until timestamptz, attempts integer NOT NULL DEFAULT 0)"))
            cursor.execute(self._sql("ALTER TABLE {jobs} ADD COLUMN IF NOT EXISTS turn_at timestamptz"))  # older tables
            cursor.execute(self._sql("CREATE INDEX IF NOT EXISTS {jobs_status} ON {jobs} (status, tenant)"))
            cursor.execute(self._sql(
                "CREATE TABLE IF NOT EXISTS {files} (job_id text NOT NULL REFERENCES {jobs} ON DELETE CASCADE, "
                "position integer NOT NULL, data bytea, done boolean NOT NULL DEFAULT false, "
                "PRIMARY KEY (job_id, position))"))

    # -- the API ----------------------------------------------------------------------------------------------
    def submit(self, *, kb: str, tenant: str, force: bool, files: list[ByteStream]) -> JobAccepted:
        """
        Queue an upload (already validated) in the database, its files' bytes with it.

        :raises QueueFull: When `max_queued` jobs already wait in the database, or `max_queued_per_tenant` of this
            tenant's.
        :raises StoreUnavailableError: When the database cannot be used.
        """
        job_id = uuid.uuid4().hex
        names = [str(stream.meta["file_name"]) for stream in files]
        status_url = f"{self.status_path}/{job_id}"
        with self._cursor("queueing an upload") as cursor:
            cursor.execute(self._sql("SELECT pg_advisory_xact_lock(hashtext({lock}))"))  # one bound check at a time
            waiting, own = cursor.execute(self._sql(
                "SELECT count(*), count(*) FILTER (WHERE tenant = %s) FROM {jobs} WHERE status = 'queued'"),
                (tenant,)).fetchone()
            if waiting >= self.max_queued:
                raise QueueFull(f"the ingest queue is full: {waiting} job(s) waiting for a worker of any server "
                                "(limits.max_queued_jobs); try again later", self._retry_after(cursor))
            if self.max_queued_per_tenant and own >= self.max_queued_per_tenant:
                raise QueueFull(f"tenant {tenant!r} already has {own} upload(s) waiting, its share of the ingest "
                                "queue (limits.max_queued_jobs_per_tenant); try again when one has started",
                                self._retry_after(cursor))
            cursor.execute(self._sql(
                "INSERT INTO {jobs} (job_id, kb, tenant, force, status_url, names, status, results) "
                "VALUES (%s, %s, %s, %s, %s, %s, 'queued', %s)"),
                (job_id, kb, tenant, force, status_url, Jsonb(names),
                 Jsonb({"written": [], "skipped": [], "failed": []})))
            cursor.executemany(self._sql("INSERT INTO {files} (job_id, position, data) VALUES (%s, %s, %s)"),
                               [(job_id, position, stream.data) for position, stream in enumerate(files)])
        self._wake.set()
        return {"job_id": job_id, "status": "queued", "kb": kb, "tenant": tenant, "files": names,
                "status_url": status_url}

    def get(self, job_id: str, tenants: Collection[str] | None) -> IngestJob | None:
        """A job, if the caller may see it (None for an unknown job or another tenant's)."""
        with self._cursor("reading a job") as cursor:
            row = cursor.execute(self._sql(f"SELECT {COLUMNS} FROM {{jobs}} WHERE job_id = %s "
                                           "AND (%s::text[] IS NULL OR tenant = ANY(%s))"),
                                 (job_id, self._tenants(tenants), self._tenants(tenants))).fetchone()
        return None if row is None else _view(row)

    def cancel(self, job_id: str, tenants: Collection[str] | None) -> IngestJob | None:
        """Cancel a job: a waiting one never runs, a running one (on any server) stops before its next file."""
        with self._cursor("cancelling a job") as cursor:
            row = cursor.execute(self._sql(  # a running job no worker is on (between two files) is cancelled at once
                f"UPDATE {{jobs}} SET status = CASE WHEN status = 'queued' OR status = 'running' AND owner IS NULL "
                "THEN 'cancelled' WHEN status = 'running' THEN 'cancelling' ELSE status END, "
                "error = CASE WHEN status = 'queued' THEN 'cancelled before it started' "
                "WHEN status = 'running' AND owner IS NULL THEN format('cancelled after %%s of %%s file(s)', "
                "(SELECT count(*) FROM {files} WHERE job_id = %s AND done), jsonb_array_length(names)) ELSE error END, "
                "finished_at = CASE WHEN status = 'queued' OR status = 'running' AND owner IS NULL THEN now() "
                "ELSE finished_at END "
                f"WHERE job_id = %s AND (%s::text[] IS NULL OR tenant = ANY(%s)) RETURNING {COLUMNS}"),
                (job_id, job_id, self._tenants(tenants), self._tenants(tenants))).fetchone()
            if row is not None and row[6] == "cancelled":
                cursor.execute(self._sql("DELETE FROM {files} WHERE job_id = %s"), (job_id,))
        return None if row is None else _view(row)

    def latest(self, tenants: Collection[str] | None, limit: int) -> list[IngestJob]:
        """The caller's jobs, newest first (every server's)."""
        with self._cursor("listing jobs") as cursor:
            rows = cursor.execute(self._sql(f"SELECT {COLUMNS} FROM {{jobs}} WHERE %s::text[] IS NULL "
                                            "OR tenant = ANY(%s) ORDER BY seq DESC LIMIT %s"),
                                  (self._tenants(tenants), self._tenants(tenants), limit)).fetchall()
        return [_view(row) for row in rows]

    def queue(self) -> dict[str, int]:
        """How many jobs wait and run on every server, and how many tenants have one waiting (for `/metrics`)."""
        with self._cursor("counting the jobs") as cursor:
            queued, running, tenants = cursor.execute(self._sql(
                "SELECT count(*) FILTER (WHERE status = 'queued'), count(*) FILTER (WHERE status <> 'queued'), "
                "count(DISTINCT tenant) FILTER (WHERE status = 'queued') FROM {jobs} "
                "WHERE status IN ('queued', 'running', 'cancelling')")).fetchone()
        return {"queued": queued, "running": running, "tenants_waiting": tenants}

    def wait(self, job_id: str) -> IngestJob:
        """Block until a job is finished (by whichever server runs it); the finished job."""
        while True:
            job = self.get(job_id, None)
            if job is None:
                raise KeyError(job_id)
            if job["status"] in FINISHED:
                return job
            time.sleep(WAIT_POLL_S)

    @staticmethod
    def _tenants(tenants: Collection[str] | None) -> list[str] | None:
        return None if tenants is None else list(tenants)

    def _retry_after(self, cursor: psycopg.Cursor) -> int:
        recent = [row[0] for row in cursor.execute(self._sql(
            "SELECT run_seconds FROM {jobs} WHERE run_seconds IS NOT NULL AND finished_at IS NOT NULL "
            "ORDER BY seq DESC LIMIT %s"),
            (RECENT_JOBS,))]
        return max(1, math.ceil(statistics.median(recent))) if recent else RETRY_AFTER_UNKNOWN_S

    # -- the workers ------------------------------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            try:
                claimed = self._claim()
            except StoreUnavailableError as error:  # the database went away: try again later, the jobs wait there
                report_outage(error)  # one warning per outage, not one per poll
                claimed = None
            except Exception:
                logger.exception("ingest worker: could not take a job")
                claimed = None
            if claimed is None:
                self._wake.wait(IDLE_POLL_S)
                self._wake.clear()
                continue
            self._run(*claimed)

    def _claim(self) -> tuple[str, str, str, bool, float] | None:
        """
        Free the jobs whose lease ran out, then take a job for its next file: the first unfinished job no worker is
        on, of the tenant served longest ago. Its (id, kb, tenant, force, when taken), or None.
        """
        with self._cursor("taking a job") as cursor:
            expired = cursor.execute(self._sql(
                "UPDATE {jobs} SET owner = NULL, lease_until = NULL, attempts = attempts + 1, "
                "status = CASE WHEN status = 'cancelling' THEN 'cancelled' WHEN attempts + 1 >= %s THEN 'failed' "
                "ELSE status END, "
                "error = CASE WHEN status = 'cancelling' THEN 'cancelled; its server stopped while it ran' "
                "WHEN attempts + 1 >= %s THEN format('its server stopped while it ran, %%s times (the lease of %%s s "
                "ran out); the files it finished stay written', attempts + 1, %s) ELSE error END, "
                "finished_at = CASE WHEN status = 'cancelling' OR attempts + 1 >= %s THEN now() END "
                "WHERE status IN ('running', 'cancelling') AND lease_until < now() RETURNING job_id, status"),
                (MAX_ATTEMPTS, MAX_ATTEMPTS, round(self.lease_s, 1), MAX_ATTEMPTS)).fetchall()
            for job_id, status in expired:
                logger.warning("ingest job %s: its server's lease ran out; %s", job_id,
                               "the next free worker goes on with it" if status == "running" else status)
                if status != "running":
                    cursor.execute(self._sql("DELETE FROM {files} WHERE job_id = %s"), (job_id,))
            row = cursor.execute(self._sql(
                "UPDATE {jobs} SET status = 'running', started_at = coalesce(started_at, now()), owner = %s, "
                "lease_until = now() + %s * interval '1 second', turn_at = clock_timestamp() "
                "WHERE job_id = (SELECT job_id FROM {jobs} AS waiting WHERE status IN ('queued', 'running') "
                "AND owner IS NULL "
                "ORDER BY (SELECT max(turn_at) FROM {jobs} AS turn WHERE turn.tenant = waiting.tenant) "
                "NULLS FIRST, seq LIMIT 1 FOR UPDATE SKIP LOCKED) "
                "RETURNING job_id, kb, tenant, force"), (self.owner, self.lease_s)).fetchone()
        return None if row is None else (*row, time.perf_counter())

    def _renew_leases(self) -> None:
        """Renew the leases of the jobs this server's workers are on, every third of the lease."""
        while True:
            time.sleep(self.lease_s / 3)
            with self._running_lock:
                running = set(self._running)
            if not running:
                continue
            try:
                with self._cursor("renewing job leases") as cursor:
                    cursor.execute(self._sql(  # a job whose lease ran out meanwhile is another worker's: its file's
                        # result is not recorded here (`_record`)
                        "UPDATE {jobs} SET lease_until = now() + %s * interval '1 second' WHERE owner = %s "
                        "AND job_id = ANY(%s) AND status IN ('running', 'cancelling')"),
                        (self.lease_s, self.owner, list(running)))
            except StoreUnavailableError as error:
                logger.warning("ingest jobs: %s", error)

    def _run(self, job_id: str, kb: str, tenant: str, force: bool, started: float) -> None:
        """Index the next file of a job this worker took, record it, and give the job back (or finish it)."""
        with self._running_lock:
            self._running.add(job_id)
        try:
            with self._cursor("reading an upload") as cursor:
                upload = cursor.execute(self._sql(
                    "SELECT files.position, files.data, jobs.names FROM {files} AS files JOIN {jobs} AS jobs "
                    "USING (job_id) WHERE job_id = %s AND jobs.owner = %s AND jobs.status = 'running' AND NOT "
                    "files.done ORDER BY files.position LIMIT 1"), (job_id, self.owner)).fetchone()
            if upload is None:  # cancelled, or every file done before a crash: finished as it stands
                self._finish(job_id, "done", None, 0.0)
                return
            position, data, names = upload
            stream = ByteStream(data=bytes(data), meta={"file_name": names[position]})
            try:
                report = ingest_file(self.pipeline, stream, kb=kb, tenant=tenant, force=force)
            except Exception as error:
                if not _database_lost(error):
                    raise
                # a connection the database dropped (a restart, a fail-over) is replaced on the next call
                report = ingest_file(self.pipeline, stream, kb=kb, tenant=tenant, force=force)
            record_ingest(report)
            self._record(job_id, position, FileOutcome.of(report), time.perf_counter() - started)
        except Exception as error:  # a job's failure is reported in the job; the traceback goes to the log
            if _database_lost(error):  # not the job's fault: it waits for the database, for any server
                logger.warning("ingest job %s: %s; given back", job_id, _database_lost(error))
                self._release(job_id)
                return
            logger.exception("ingest job %s (%s/%s) failed", job_id, tenant, kb)
            cause = find_data_dir_error(error, data_dir())
            try:
                self._finish(job_id, "failed", str(cause) if cause else "indexing stopped on an unexpected "
                             f"{type(error.__cause__ or error).__name__}; see the server log",
                             time.perf_counter() - started)
            except StoreUnavailableError as lost_database:  # the lease runs out and another worker finishes the job
                logger.warning("ingest job %s: %s", job_id, lost_database)
        finally:
            with self._running_lock:
                self._running.discard(job_id)

    def _record(self, job_id: str, position: int, outcome: FileOutcome, seconds: float) -> None:
        """Record a file's outcome; then finish the job after its last file or when it is cancelling, else give it
        back for any worker to take its next file."""
        reason = None if outcome.status == "written" else outcome.reason
        with self._cursor("recording a file's result") as cursor:
            recorded = cursor.execute(self._sql(
                "UPDATE {jobs} SET results = jsonb_set(results, ARRAY[%s::text], results->(%s::text) || %s::jsonb), "
                "chunks_written = chunks_written + %s, run_seconds = coalesce(run_seconds, 0) + %s "
                "WHERE job_id = %s AND owner = %s RETURNING status"),
                (outcome.status, outcome.status, Jsonb([{"file": outcome.source, "reason": reason}]),
                 outcome.chunks, seconds, job_id, self.owner)).fetchone()
            if recorded is None:
                return  # taken over by another worker (this lease ran out)
            cursor.execute(self._sql("UPDATE {files} SET done = true, data = NULL WHERE job_id = %s "
                                     "AND position = %s"), (job_id, position))
            left = cursor.execute(self._sql("SELECT count(*) FROM {files} WHERE job_id = %s AND NOT done"),
                                  (job_id,)).fetchone()[0]
            if recorded[0] == "cancelling" or not left:
                self._finish_in(cursor, job_id, "done", None, 0.0)
            else:
                cursor.execute(self._sql("UPDATE {jobs} SET owner = NULL, lease_until = NULL WHERE job_id = %s "
                                         "AND owner = %s"), (job_id, self.owner))
        self._wake.set()  # this server's other workers may take its next file

    def _release(self, job_id: str) -> None:
        """Give a job back to any worker (not counted as a crash); if the database is still gone, its lease runs out."""
        with self._running_lock:
            self._running.discard(job_id)  # no more renewals
        try:
            with self._cursor("giving a job back") as cursor:
                cursor.execute(self._sql(
                    "UPDATE {jobs} SET status = CASE WHEN status = 'cancelling' THEN 'cancelled' ELSE status END, "
                    "finished_at = CASE WHEN status = 'cancelling' THEN now() END, owner = NULL, lease_until = NULL "
                    "WHERE job_id = %s AND owner = %s"), (job_id, self.owner))
        except StoreUnavailableError as error:
            logger.warning("ingest job %s: %s", job_id, error)
        time.sleep(IDLE_POLL_S)

    def _finish(self, job_id: str, status: str, error: str | None, seconds: float) -> None:
        """Mark this worker's job finished (a cancelling one cancelled), drop its bytes and old jobs."""
        with self._cursor("finishing a job") as cursor:
            self._finish_in(cursor, job_id, status, error, seconds)

    def _finish_in(self, cursor: psycopg.Cursor, job_id: str, status: str, error: str | None, seconds: float) -> None:
        """`_finish` in a transaction already open."""
        row = cursor.execute(self._sql(
            "UPDATE {jobs} SET status = CASE WHEN status = 'cancelling' AND %s = 'done' THEN 'cancelled' "
            "ELSE %s END, error = CASE WHEN status = 'cancelling' AND %s = 'done' THEN format('cancelled after "
            "%%s of %%s file(s)', (SELECT count(*) FROM {files} WHERE job_id = %s AND done), jsonb_array_length("
            "names)) ELSE %s END, finished_at = now(), run_seconds = coalesce(run_seconds, 0) + %s, owner = NULL, "
            "lease_until = NULL WHERE job_id = %s AND owner = %s AND status IN ('running', 'cancelling') "
            "RETURNING job_id"),
            (status, status, status, job_id, error, seconds, job_id, self.owner)).fetchone()
        if row is None:
            return  # taken over by another worker: it finishes the job
        cursor.execute(self._sql("DELETE FROM {files} WHERE job_id = %s"), (job_id,))
        cursor.execute(self._sql(
            "DELETE FROM {jobs} WHERE status = ANY(%s) AND seq <= (SELECT seq FROM {jobs} WHERE status = ANY(%s) "
            "ORDER BY seq DESC OFFSET %s LIMIT 1)"), (list(FINISHED), list(FINISHED), self.history))


def _database_lost(error: BaseException) -> StoreUnavailableError | None:
    """The `StoreUnavailableError` in an exception's chain (a pipeline wraps what its store raised), if any."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, StoreUnavailableError):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None
