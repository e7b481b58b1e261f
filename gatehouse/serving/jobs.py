"""
Background ingest jobs: `POST /index/run` queues an upload and answers 202; `GET /index/jobs/{job_id}` reports it and
`DELETE /index/jobs/{job_id}` cancels it.

`IngestJobs` runs uploads through the index pipeline on a bounded pool of worker threads (`limits.ingest_workers`),
one file per pipeline run, so a job's progress advances file by file and a file whose conversion, splitting or
embedding raises fails alone. At most `limits.max_queued_jobs` jobs wait for a worker, at most
`limits.max_queued_jobs_per_tenant` of them of one tenant; one more is refused (`QueueFull`, a 429 with
`Retry-After`). A worker takes one file at a time, from the tenants with work in turn (each tenant's jobs in the order
they came), so one tenant's many files or jobs never make another's upload wait for more than the file in progress.
A cancelled job that waits never runs; a running one stops before its next file (the files done stay written). Jobs
live in memory: the last `limits.ingest_job_history` finished jobs are kept, and a restart forgets them all. The
documents written stay written; the workers are daemon threads, so a stop does not wait for a running job: upload its
files again (unchanged files are skipped). A caller sees only the jobs
of the tenants its API key holds; any other job id is unknown to it (404).

Usage:
```python
from gatehouse.serving.jobs import IngestJobs

jobs = IngestJobs(pipeline=index_pipeline, workers=1, max_queued=10, max_queued_per_tenant=5, history=1000,
                  status_path="/index/jobs")
upload = ByteStream(data=b"# Leave", meta={"file_name": "leave.md"})
accepted = jobs.submit(kb="handbook", tenant="public", force=False, files=[upload])
jobs.wait(accepted["job_id"])["result"]["written"]       # 1
jobs.get(accepted["job_id"], tenants=["acme"])            # None: another tenant's job
jobs.cancel(accepted["job_id"], tenants=None)             # the job, "cancelled" (or "cancelling" while it runs)
```
"""

import logging
import math
import statistics
import threading
import time
import uuid
from collections import deque
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Request
from haystack import Pipeline
from haystack.dataclasses import ByteStream
from pydantic import TypeAdapter, WithJsonSchema
from typing_extensions import TypedDict

from gatehouse.document_stores.errors import find_data_dir_error
from gatehouse.ingest import FileOutcome, ingest_file
from gatehouse.serving.auth import MISSING_KEY, AccessDenied, KeyRing, denied, resolve_principal
from gatehouse.serving.data_dir_answers import data_dir_unavailable
from gatehouse.serving.observability import record_ingest
from gatehouse.settings import data_dir

logger = logging.getLogger(__name__)

JobStatus = Literal["queued", "running", "cancelling", "done", "failed", "cancelled"]
UNFINISHED = ("queued", "running", "cancelling")
RETRY_AFTER_UNKNOWN_S = 10  # the Retry-After of a full queue before any job has finished to estimate from
RECENT_JOBS = 20  # how many finished jobs the Retry-After estimate looks at
NOT_DEPLOYED = {503: {"description": "The index pipeline is not deployed, or the database holding the jobs cannot be "
                                     "used"}}


class FileResult(TypedDict):
    """What happened to one uploaded file."""

    file: str
    reason: str | None


class IndexResponse(TypedDict):
    """Counts of an upload, with a reason for each failed file."""

    kb: str
    tenant: str
    written: int
    skipped: int
    failed: int
    chunks_written: int
    files: dict[str, list[FileResult]]


class Progress(TypedDict):
    """Files finished (written, skipped or failed) out of the upload's files."""

    done: int
    total: int


class JobAccepted(TypedDict):
    """An upload queued as an ingest job (the 202 answer of `POST /index/run`)."""

    job_id: str
    status: JobStatus
    kb: str
    tenant: str
    files: list[str]
    status_url: str


class IngestJob(JobAccepted):
    """An ingest job: its state, its progress and the per-file results so far (`result`, as `wait=true` returns)."""

    force: bool
    progress: Progress
    result: IndexResponse
    error: str | None
    submitted_at: str
    started_at: str | None
    finished_at: str | None


class IngestJobList(TypedDict):
    """The caller's ingest jobs, newest first."""

    jobs: list[IngestJob]


class QueueFull(Exception):
    """Every worker is busy and `max_queued` jobs already wait; `retry_after` estimates when to try again (s)."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass
class _Job:
    """A job's mutable state; read and written under `IngestJobs._lock`."""

    job_id: str
    kb: str
    tenant: str
    force: bool
    status_url: str
    streams: list[ByteStream]
    names: list[str]
    status: JobStatus = "queued"
    taken: int = 0  # files a worker has taken
    busy: bool = False  # a worker is on one of its files
    results: dict[str, list[FileResult]] = field(default_factory=lambda: {"written": [], "skipped": [], "failed": []})
    chunks_written: int = 0
    error: str | None = None
    submitted_at: str = field(default_factory=_now)
    started_at: str | None = None
    finished_at: str | None = None
    run_seconds: float | None = None  # the time its files took, once finished
    worked: float = 0.0  # the time its files took so far
    finished: threading.Event = field(default_factory=threading.Event)

    def add(self, outcome: FileOutcome) -> None:
        """Record one file's outcome."""
        reason = None if outcome.status == "written" else outcome.reason
        self.results[outcome.status].append({"file": outcome.source, "reason": reason})
        self.chunks_written += outcome.chunks

    def accepted(self) -> JobAccepted:
        """What `POST /index/run` answers about the job."""
        return {"job_id": self.job_id, "status": self.status, "kb": self.kb, "tenant": self.tenant,
                "files": list(self.names), "status_url": self.status_url}

    def view(self) -> IngestJob:
        """A snapshot of the job (copies: it changes while a worker runs it)."""
        return {
            **self.accepted(),
            "force": self.force,
            "progress": {"done": sum(len(items) for items in self.results.values()), "total": len(self.names)},
            "result": {
                "kb": self.kb,
                "tenant": self.tenant,
                "written": len(self.results["written"]),
                "skipped": len(self.results["skipped"]),
                "failed": len(self.results["failed"]),
                "chunks_written": self.chunks_written,
                "files": {status: list(items) for status, items in self.results.items()},
            },
            "error": self.error,
            "submitted_at": self.submitted_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
        }


class IngestJobs:
    """
    A bounded pool of ingest workers (daemon threads) with an in-memory, bounded job history.

    The PostgreSQL store keeps its jobs in its database instead (`gatehouse.serving.db_jobs`), with this interface.

    The document stores let searches run beside a job's writes and serialise writes per store, so nothing here locks
    the stores; the pool only bounds how many files index at once (the pipelines are CPU-bound).
    """

    def __init__(self, *, pipeline: Pipeline, workers: int, max_queued: int, max_queued_per_tenant: int,
                 history: int, status_path: str) -> None:
        """
        :param pipeline: The index pipeline (`planner` in, `writer.report` out), warmed up.
        :param workers: How many jobs run at once (`limits.ingest_workers`).
        :param max_queued: How many more may wait for a worker (`limits.max_queued_jobs`); beyond, `QueueFull`.
        :param max_queued_per_tenant: How many of those one tenant may hold (`limits.max_queued_jobs_per_tenant`;
            0: no share of its own); beyond, `QueueFull`.
        :param history: How many finished jobs are kept (`limits.ingest_job_history`); older ones are forgotten.
        :param status_path: Where a job is reported, without its id (`/index/jobs`).
        """
        self.pipeline = pipeline
        self.workers = workers
        self.max_queued = max_queued
        self.max_queued_per_tenant = max_queued_per_tenant
        self.history = history
        self.status_path = status_path
        self.forgotten = "jobs are kept in memory: a restart forgets them"
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._jobs: dict[str, _Job] = {}  # in submission order
        self._turns: dict[str, deque[_Job]] = {}  # per tenant, its unfinished jobs in order; tenants in turn order
        for index in range(workers):
            threading.Thread(target=self._work, name=f"gatehouse-ingest-{index}", daemon=True).start()

    def submit(self, *, kb: str, tenant: str, force: bool, files: list[ByteStream]) -> JobAccepted:
        """
        Queue an upload (already validated: names, tenant, file types).

        :param kb: The knowledge base.
        :param tenant: The owning tenant.
        :param force: Rewrite unchanged files too.
        :param files: The uploaded files, each with `meta["file_name"]`.
        :returns: The queued job.
        :raises QueueFull: When every worker is busy and `max_queued` jobs already wait, or `max_queued_per_tenant`
            of this tenant.
        """
        job_id = uuid.uuid4().hex
        job = _Job(job_id=job_id, kb=kb, tenant=tenant, force=force, status_url=f"{self.status_path}/{job_id}",
                   streams=list(files), names=[str(stream.meta["file_name"]) for stream in files])
        with self._lock:
            unfinished = sum(1 for other in self._jobs.values() if other.status in UNFINISHED)
            if unfinished >= self.workers + self.max_queued:
                raise QueueFull(f"the ingest queue is full: {self.workers} job(s) running and {self.max_queued} "
                                "waiting (limits.ingest_workers, limits.max_queued_jobs); try again later",
                                self._retry_after())
            own = sum(1 for other in self._turns.get(tenant, ()) if other.status == "queued")
            if self.max_queued_per_tenant and own >= self.max_queued_per_tenant:
                raise QueueFull(f"tenant {tenant!r} already has {own} upload(s) waiting, its share of the ingest "
                                "queue (limits.max_queued_jobs_per_tenant); try again when one has started",
                                self._retry_after())
            self._jobs[job_id] = job
            self._forget_old_jobs()
            self._turns.setdefault(tenant, deque()).append(job)
            self._ready.notify()
            return job.accepted()

    def get(self, job_id: str, tenants: Collection[str] | None) -> IngestJob | None:
        """
        A job, if the caller may see it.

        :param job_id: The job.
        :param tenants: The caller's tenants; None for every tenant (a server without keys).
        :returns: The job, or None when there is no such job or it belongs to another tenant.
        """
        with self._lock:
            job = self._visible(job_id, tenants)
            return None if job is None else job.view()

    def cancel(self, job_id: str, tenants: Collection[str] | None) -> IngestJob | None:
        """
        Cancel a job: a waiting one never runs (`cancelled`), a running one stops before its next file (`cancelling`,
        then `cancelled`; the files done stay written). A finished job is left as it is.

        :param job_id: The job.
        :param tenants: The caller's tenants; None for every tenant.
        :returns: The job after the request, or None when there is no such job or it belongs to another tenant.
        """
        with self._lock:
            job = self._visible(job_id, tenants)
            if job is None:
                return None
            if job.status == "queued":
                self._finish(job, "cancelled", "cancelled before it started")
            elif job.status == "running" and job.busy:
                job.status = "cancelling"  # its worker finishes it after the file in progress
            elif job.status == "running":
                self._finish(job, "cancelled", f"cancelled after {job.taken} of {len(job.names)} file(s)")
            return job.view()

    def _visible(self, job_id: str, tenants: Collection[str] | None) -> "_Job | None":
        """The job, when the caller may see it (call with the lock held)."""
        job = self._jobs.get(job_id)
        return job if job is not None and (tenants is None or job.tenant in tenants) else None

    def latest(self, tenants: Collection[str] | None, limit: int) -> list[IngestJob]:
        """
        The caller's jobs, newest first.

        :param tenants: The caller's tenants; None for every tenant.
        :param limit: At most this many.
        """
        with self._lock:
            jobs = [job for job in reversed(self._jobs.values()) if tenants is None or job.tenant in tenants]
            return [job.view() for job in jobs[:limit]]

    def queue(self) -> dict[str, int]:
        """How many jobs wait and run, and how many tenants have one waiting (no names: for `/metrics`)."""
        with self._lock:
            unfinished = [job.status for job in self._jobs.values() if job.status in UNFINISHED]
            waiting = sum(any(job.status == "queued" for job in jobs) for jobs in self._turns.values())
            return {"queued": unfinished.count("queued"), "running": len(unfinished) - unfinished.count("queued"),
                    "tenants_waiting": waiting}

    def wait(self, job_id: str) -> IngestJob:
        """
        Block until a job is finished (done, failed or cancelled).

        :param job_id: A job this process submitted (finished jobs are kept while they are among the last
            `history`, so wait right after `submit`).
        :returns: The finished job.
        """
        with self._lock:
            job = self._jobs[job_id]
        job.finished.wait()
        with self._lock:
            return job.view()

    def _next_file(self) -> tuple[_Job, ByteStream]:
        """
        The next file to index: of the first tenant in turn with a job that no worker is on, its first such job's next
        file. The job is then busy and the tenant goes to the back of the turns.
        """
        with self._ready:
            while True:
                for tenant, jobs in self._turns.items():
                    job = next((job for job in jobs if not job.busy), None)
                    if job is not None:
                        del self._turns[tenant]
                        self._turns[tenant] = jobs  # re-inserted: last in turn
                        if job.status == "queued":
                            job.status, job.started_at = "running", _now()
                        job.busy, job.taken = True, job.taken + 1
                        return job, job.streams[job.taken - 1]
                self._ready.wait()

    def _work(self) -> None:
        while True:
            self._run_file(*self._next_file())

    def _run_file(self, job: _Job, stream: ByteStream) -> None:
        """Index one file of a job, record its outcome, and finish the job after its last file or when cancelled."""
        started = time.perf_counter()
        try:
            report = ingest_file(self.pipeline, stream, kb=job.kb, tenant=job.tenant, force=job.force)
            record_ingest(report)
        except Exception as error:  # a job's failure is reported in the job; the traceback goes to the log
            logger.exception("ingest job %s (%s/%s) failed", job.job_id, job.tenant, job.kb)
            cause = find_data_dir_error(error, data_dir())
            with self._lock:
                job.busy, job.worked = False, job.worked + time.perf_counter() - started
                self._finish(job, "failed", str(cause) if cause else "indexing stopped on an unexpected "
                             f"{type(error.__cause__ or error).__name__}; see the server log")
            return
        with self._lock:
            job.add(FileOutcome.of(report))
            job.busy, job.worked = False, job.worked + time.perf_counter() - started
            if job.status == "cancelling":  # also when cancelled during its last file
                self._finish(job, "cancelled", f"cancelled after {job.taken} of {len(job.names)} file(s)")
            elif job.taken == len(job.streams):
                self._finish(job, "done", None)
            else:
                self._ready.notify()

    def _finish(self, job: _Job, status: JobStatus, error: str | None) -> None:
        """Mark a job finished, out of its tenant's turn, and drop its uploaded bytes (call with the lock held)."""
        job.status, job.error, job.finished_at = status, error, _now()
        job.run_seconds = job.worked
        jobs = self._turns.get(job.tenant)
        if jobs is not None and job in jobs:
            jobs.remove(job)
            if not jobs:
                del self._turns[job.tenant]
        job.streams = []
        job.finished.set()
        self._forget_old_jobs()

    def _forget_old_jobs(self) -> None:
        """Keep at most `history` finished jobs, dropping the oldest (call with the lock held)."""
        finished = [job_id for job_id, job in self._jobs.items() if job.finished.is_set()]
        for job_id in finished[: max(0, len(finished) - self.history)]:
            del self._jobs[job_id]

    def _retry_after(self) -> int:
        """Seconds until a worker is likely free: the median run time of recent jobs (call with the lock held)."""
        recent = [job.run_seconds for job in self._jobs.values() if job.run_seconds is not None][-RECENT_JOBS:]
        return max(1, math.ceil(statistics.median(recent))) if recent else RETRY_AFTER_UNKNOWN_S


def _visible_tenants(keyring: KeyRing, request: Request) -> tuple[str, ...] | None:
    """The tenants whose jobs the caller sees: its key's tenants, every tenant without keys."""
    if not keyring.enabled:
        return None
    principal = resolve_principal(keyring, request.headers)
    if principal is None:
        raise denied(AccessDenied(401, MISSING_KEY))
    return principal.tenants


def _job_router(name: str, keyring: KeyRing) -> APIRouter:
    """`GET /{name}/jobs`, `GET` and `DELETE /{name}/jobs/{job_id}` over the jobs of the deployed index pipeline `name`."""
    from hayhooks.server.pipelines.registry import registry

    router = APIRouter(prefix=f"/{name}/jobs", tags=["ingest jobs"])

    def jobs() -> IngestJobs:
        wrapper = registry.get(name)
        if wrapper is None:
            raise HTTPException(status_code=503, detail=f"the index pipeline {name!r} is not deployed")
        return wrapper.jobs

    @router.get("", name=f"{name}_jobs", responses=NOT_DEPLOYED)
    def list_jobs(request: Request,
                  limit: Annotated[int, WithJsonSchema({"type": "integer", "minimum": 1, "maximum": 1000})] = 100,
                  ) -> IngestJobList:
        """
        List the caller's ingest jobs (of the tenants its API key holds), newest first.

        :param limit: At most this many jobs (1-1000).
        :returns: The jobs, each with its status, progress and per-file results.
        """
        if not 1 <= limit <= 1000:
            raise HTTPException(status_code=422, detail=f"limit is {limit}; use 1 to 1000")
        with data_dir_unavailable():
            return {"jobs": jobs().latest(_visible_tenants(keyring, request), limit)}

    @router.get("/{job_id}", name=f"{name}_job", responses={
        404: {"description": "No such job, or a job of a tenant the API key does not hold"}, **NOT_DEPLOYED})
    def get_job(request: Request, job_id: str) -> IngestJob:
        """
        An ingest job: status (queued, running, done, failed), progress, per-file results and times.

        :param job_id: The id `POST /{name}/run` answered with.
        :returns: The job; 404 for an unknown job and for a job of a tenant the API key does not hold.
        """
        with data_dir_unavailable():
            found = jobs().get(job_id, _visible_tenants(keyring, request))
        return _found(found, job_id, jobs())

    @router.delete("/{job_id}", name=f"{name}_cancel_job", responses={
        404: {"description": "No such job, or a job of a tenant the API key does not hold"}, **NOT_DEPLOYED})
    def cancel_job(request: Request, job_id: str) -> IngestJob:
        """
        Cancel an ingest job: a queued one never runs (`cancelled`); a running one stops before its next file
        (`cancelling`, then `cancelled`; the files it finished stay written); a finished one is left as it is.

        :param job_id: The id `POST /{name}/run` answered with.
        :returns: The job after the request; 404 for an unknown job and for a job of a tenant the API key does not
            hold.
        """
        with data_dir_unavailable():
            found = jobs().cancel(job_id, _visible_tenants(keyring, request))
        return _found(found, job_id, jobs())

    return router


def _found(job: IngestJob | None, job_id: str, jobs: Any) -> IngestJob:
    if job is None:
        raise HTTPException(status_code=404, detail=f"no ingest job {job_id!r} ({jobs.forgotten})")
    return job


def ingest_job_routes(app: Any, *, keyring: KeyRing, index_pipelines: list[str]) -> None:
    """
    Add `GET /{name}/jobs`, `GET /{name}/jobs/{job_id}` and `DELETE /{name}/jobs/{job_id}` for each deployed index pipeline and document the 202
    and 429 answers of its `POST /{name}/run` in the OpenAPI document.

    :param app: The Hayhooks FastAPI app.
    :param keyring: The server's keys.
    :param index_pipelines: The Hayhooks names of the deployed index pipelines.
    """
    for name in index_pipelines:
        app.router.routes.extend(_job_router(name, keyring).routes)  # plain routes, matched like Hayhooks' own
    _document_job_answers(app, index_pipelines)


def _document_job_answers(app: Any, index_pipelines: list[str]) -> None:
    """Add the 202 (queued job) and 429 (queue full) answers of `POST /{name}/run` to the OpenAPI document."""
    previous_openapi = app.openapi
    accepted = TypeAdapter(JobAccepted).json_schema(ref_template="#/components/schemas/{model}")

    def openapi() -> dict[str, Any]:
        schema = previous_openapi()
        schemas = schema.setdefault("components", {}).setdefault("schemas", {})
        schemas.update(accepted.get("$defs", {}))
        schemas["JobAccepted"] = {key: value for key, value in accepted.items() if key != "$defs"}
        for name in index_pipelines:
            operation = schema["paths"].get(f"/{name}/run", {}).get("post")
            if operation is None:
                continue
            operation["responses"]["200"]["description"] = "With `wait=true`: the finished upload's report"
            operation["responses"]["202"] = {
                "description": f"The upload is queued as an ingest job; poll `GET /{name}/jobs/{{job_id}}`",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/JobAccepted"}}},
            }
            operation["responses"]["429"] = {
                "description": "The ingest queue is full (limits.max_queued_jobs), or the tenant's share of it "
                               "(limits.max_queued_jobs_per_tenant); the Retry-After header says when to try again",
                "headers": {"Retry-After": {"schema": {"type": "integer"}, "description": "seconds"}},
            }
        return schema

    app.openapi = openapi
