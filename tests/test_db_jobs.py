"""
Ingest jobs kept in PostgreSQL (the test cluster's primary), run here by a worker the test drives file by file, with a
stand-in for the index pipeline that records the order files come in.
"""

import psycopg
import pytest
from haystack.dataclasses import ByteStream

from gatehouse.serving import db_jobs
from gatehouse.serving.db_jobs import DatabaseIngestJobs


@pytest.fixture
def jobs(postgres, monkeypatch) -> tuple[DatabaseIngestJobs, list[str]]:
    """Jobs over a new database, no worker of their own, and the files indexed so far."""
    url = postgres.new_database()
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("CREATE EXTENSION vector")  # as the store leaves it: the process's pool expects it
    indexed: list[str] = []

    def recorded(pipeline, stream, *, kb, tenant, force):
        indexed.append(stream.meta["file_name"])
        return {"written": [{"source": stream.meta["file_name"], "chunks": 1}], "skipped": [], "failed": []}

    monkeypatch.setattr(db_jobs, "ingest_file", recorded)
    monkeypatch.setattr(db_jobs, "record_ingest", lambda report: None)
    return DatabaseIngestJobs(url=url, table="gatehouse_chunks", pipeline=None, workers=0, max_queued=10,
                              max_queued_per_tenant=3, history=10, status_path="/index/jobs"), indexed


def _upload(name: str) -> ByteStream:
    return ByteStream(data=b"# Note\n\nText.\n", meta={"file_name": name})


def _work(jobs: DatabaseIngestJobs, files: int | None = None) -> None:
    """Do what a worker does, one file at a time, until no file waits (or `files` are done)."""
    while files is None or files > 0:
        claimed = jobs._claim()
        if claimed is None:
            return
        jobs._run(*claimed)
        files = None if files is None else files - 1


def test_a_worker_takes_one_file_of_each_tenant_in_turn(jobs):
    """One tenant's job of three files and its second job wait while another tenant's upload goes in after one file."""
    jobs, indexed = jobs
    first = jobs.submit(kb="kb", tenant="flood", force=False, files=[_upload(f"a{n}.docx") for n in (1, 2, 3)])
    second = jobs.submit(kb="kb", tenant="flood", force=False, files=[_upload("b1.docx")])
    quiet = jobs.submit(kb="kb", tenant="quiet", force=False, files=[_upload("q1.md")])
    _work(jobs)
    assert indexed == ["a1.docx", "q1.md", "a2.docx", "a3.docx", "b1.docx"]
    finished = [jobs.get(job["job_id"], tenants=None) for job in (first, second, quiet)]
    assert [(job["status"], job["progress"]["done"]) for job in finished] == [("done", 3), ("done", 1), ("done", 1)]


def test_a_job_between_two_files_is_cancelled_at_once(jobs):
    jobs, indexed = jobs
    accepted = jobs.submit(kb="kb", tenant="acme", force=False, files=[_upload("one.md"), _upload("two.md")])
    _work(jobs, files=1)
    assert jobs.get(accepted["job_id"], tenants=None)["status"] == "running"  # no worker on it between its files
    cancelled = jobs.cancel(accepted["job_id"], tenants=["acme"])
    assert (cancelled["status"], cancelled["error"]) == ("cancelled", "cancelled after 1 of 2 file(s)")
    _work(jobs)
    assert indexed == ["one.md"]
