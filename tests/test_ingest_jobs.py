"""
Uploads as background ingest jobs: a real keyed `gatehouse serve` on loopback (202, polling, per-file results, tenant
scoping, a full queue, retrieval beside a large upload), `IngestJobs` over real index pipelines (a component that
raises fails one file; a broken pipeline fails the job cleanly) and `gatehouse ingest`'s progress lines.
"""

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml
from haystack.dataclasses import ByteStream
from server_process import running_server
from test_pdf_to_document import bomb

from gatehouse.eval.serving_bench import _markdown
from gatehouse.pipelines import component_spec, load_pipeline
from gatehouse.serving import jobs as jobs_module
from gatehouse.serving.jobs import IngestJobs, QueueFull
from gatehouse.settings import bundled_dir

PROJECT_ROOT = bundled_dir()
ADMIN_KEY = "jobs-admin-secret"
ACME_KEY = "jobs-acme-secret"
LEAVE = b"# Leave policy\n\nEmployees of Initech get 30 days of paid leave per year.\n"
PARKING = b"# Parking\n\nVisitors park on level two of the garage behind the office.\n"
LARGE_MB = 0.2  # still indexing while the test looks (uploads index at ~10 s per MB on two idle cores, slower loaded)


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _md(name: str, data: bytes) -> tuple[str, tuple[str, bytes, str]]:
    return ("files", (name, data, "text/markdown"))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A keyed server with retrieve and index, one ingest worker and room for one queued job."""
    tmp = tmp_path_factory.mktemp("ingest-jobs")
    manifest = tmp / "hayhooks.yml"
    manifest.write_text(yaml.safe_dump({
        "pipelines": {"retrieve": {"pipeline": str(PROJECT_ROOT / "pipelines" / "retrieve.yml"), "kind": "retrieve"},
                      "index": {"pipeline": str(PROJECT_ROOT / "pipelines" / "index.yml"), "kind": "index"}},
        "auth": {"keys": [{"env": "JOBS_TEST_ADMIN", "tenants": ["public", "initech"], "admin": True},
                          {"env": "JOBS_TEST_ACME", "tenants": ["acme"]}]},
        "mcp": False,
        "limits": {"max_body_bytes": 4_000_000, "ingest_workers": 1, "max_queued_jobs": 1},
    }), encoding="utf-8")
    env = {**os.environ, "GATEHOUSE_DATA_DIR": str(tmp / "data"), "JOBS_TEST_ADMIN": ADMIN_KEY,
           "JOBS_TEST_ACME": ACME_KEY}
    with running_server(manifest, env=env, workdir=tmp, pipelines=2) as url:
        yield url


@pytest.fixture
def admin(server):
    with httpx.Client(base_url=server, headers=_auth(ADMIN_KEY), timeout=120) as client:
        yield client


@pytest.fixture
def acme(server):
    with httpx.Client(base_url=server, headers=_auth(ACME_KEY), timeout=120) as client:
        yield client


def _poll(client: httpx.Client, status_url: str, until, seconds: float = 900) -> dict:
    """GET the job until `until(job)` holds."""
    deadline = time.monotonic() + seconds
    while True:
        response = client.get(status_url)
        assert response.status_code == 200, response.text
        job = response.json()
        if until(job):
            return job
        assert not _finished(job) and time.monotonic() < deadline, job
        time.sleep(0.2)


def _finished(job: dict) -> bool:
    return job["status"] in ("done", "failed", "cancelled")


def test_an_upload_is_a_job_polled_to_done_with_per_file_results(admin):
    response = admin.post("/index/run", files=[_md("leave.md", LEAVE), _md("parking.md", PARKING)],
                          data={"kb": "handbook", "tenant": "initech"})
    assert response.status_code == 202, response.text
    accepted = response.json()
    assert set(accepted) == {"job_id", "status", "kb", "tenant", "files", "status_url"}
    assert (accepted["status"], accepted["kb"], accepted["tenant"]) == ("queued", "handbook", "initech")
    assert accepted["files"] == ["leave.md", "parking.md"]
    assert accepted["status_url"] == f"/index/jobs/{accepted['job_id']}" == response.headers["location"]

    job = _poll(admin, accepted["status_url"], _finished)
    assert job["status"] == "done" and job["error"] is None
    assert job["progress"] == {"done": 2, "total": 2}
    assert job["submitted_at"] <= job["started_at"] <= job["finished_at"]
    result = job["result"]
    assert (result["written"], result["skipped"], result["failed"]) == (2, 0, 0)
    assert result["chunks_written"] >= 2
    assert sorted(item["file"] for item in result["files"]["written"]) == ["leave.md", "parking.md"]
    assert job in admin.get("/index/jobs").json()["jobs"]

    found = admin.post("/retrieve/run", json={"query": "paid leave", "kbs": ["handbook"], "tenant": "initech"})
    assert found.json()["result"]["documents"][0]["meta"]["source"] == "leave.md"
    kbs = admin.get("/kbs", params={"tenant": "initech"}).json()["knowledge_bases"]
    assert {"tenant": "initech", "kb": "handbook", "documents": 2, "chunks": result["chunks_written"]} in kbs


def test_a_bad_file_fails_alone_inside_a_done_job(admin):
    files = [_md("visitors.md", PARKING), ("files", ("broken.pdf", b"not a pdf at all", "application/pdf")),
             ("files", ("tool.exe", b"MZ\x00\x01", "application/octet-stream")),
             ("files", ("bomb.pdf", bomb(25_000), "application/pdf"))]  # 2.25 M characters from 20 kB
    response = admin.post("/index/run", files=files, data={"kb": "visitors"})
    assert response.status_code == 202, response.text
    job = _poll(admin, response.json()["status_url"], _finished)
    assert job["status"] == "done" and job["progress"] == {"done": 4, "total": 4}
    result = job["result"]
    assert (result["written"], result["failed"]) == (1, 3)
    reasons = {item["file"]: item["reason"] for item in result["files"]["failed"]}
    assert reasons["broken.pdf"] == "no text could be extracted"
    # whichever bound it reaches first (its characters, or its time on a busy machine), named in one line
    assert re.fullmatch(r"pdf_converter failed: bomb\.pdf: (the PDF expands to over 2000000 characters of text|"
                        r"text extraction took over [0-9.]+ s) \(pdf_converter\.\w+ .*in index\.yml\)",
                        reasons["bomb.pdf"]), reasons["bomb.pdf"]
    assert "unsupported file type '.exe'" in reasons["tool.exe"]
    assert result["files"]["written"] == [{"file": "visitors.md", "reason": None}]


def test_wait_true_answers_with_the_report(admin):
    response = admin.post("/index/run", files=[_md("leave.md", LEAVE)],
                          data={"kb": "handbook", "tenant": "initech", "wait": "true"})
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert (result["written"], result["skipped"]) == (0, 1)
    assert result["files"]["skipped"] == [{"file": "leave.md", "reason": "unchanged"}]


def test_jobs_are_visible_only_to_keys_holding_their_tenant(server, admin, acme):
    theirs = admin.post("/index/run", files=[_md("leave.md", LEAVE)], data={"kb": "secret", "tenant": "initech"})
    ours = acme.post("/index/run", files=[_md("parking.md", PARKING)], data={"kb": "office"})
    assert theirs.status_code == ours.status_code == 202
    theirs, ours = theirs.json(), ours.json()
    assert ours["tenant"] == "acme"

    foreign = acme.get(theirs["status_url"])
    unknown = acme.get("/index/jobs/0123456789abcdef")
    assert foreign.status_code == unknown.status_code == 404
    assert foreign.json()["detail"].replace(theirs["job_id"], "X") == unknown.json()["detail"].replace(
        "0123456789abcdef", "X")  # the same answer: nothing tells that the job exists
    assert admin.get(ours["status_url"]).status_code == 404  # an admin key holding public and initech only
    assert {job["tenant"] for job in acme.get("/index/jobs").json()["jobs"]} == {"acme"}
    assert theirs["job_id"] not in {job["job_id"] for job in acme.get("/index/jobs").json()["jobs"]}
    assert httpx.get(f"{server}{theirs['status_url']}").status_code == 401
    assert _poll(acme, ours["status_url"], _finished)["status"] == "done"
    _poll(admin, theirs["status_url"], _finished)


@pytest.mark.parametrize(
    ("files", "data", "status", "message"),
    [
        ([_md("a.md", LEAVE), _md("a.md", PARKING)], {"kb": "dup"}, 422, "duplicate file names in one upload: a.md"),
        ([("files", ("x.exe", b"MZ", "application/octet-stream"))], {"kb": "dup"}, 415, "x.exe"),
        ([_md("a.md", LEAVE)], {"kb": "Bad Name"}, 422, "kb 'Bad Name' is not a valid knowledge base name"),
        ([_md("a.md", LEAVE)], {"kb": "dup", "tenant": "initech"}, 403, "may not act for tenant 'initech'"),
    ],
)
def test_bad_uploads_are_refused_at_once_and_queue_nothing(acme, files, data, status, message):
    before = acme.get("/index/jobs").json()["jobs"]
    response = acme.post("/index/run", files=files, data=data)
    assert response.status_code == status
    assert message in response.json()["detail"] and "Traceback" not in response.text
    assert acme.get("/index/jobs").json()["jobs"] == before


def test_a_large_upload_runs_in_the_background_and_a_full_queue_is_429(admin):
    large = admin.post("/index/run", data={"kb": "bench", "tenant": "initech"},
                       files=[_md("intro.md", LEAVE), _md("large.md", _markdown(LARGE_MB))])
    assert large.status_code == 202, large.text
    status_url = large.json()["status_url"]
    running = _poll(admin, status_url, lambda job: job["progress"]["done"] == 1 or _finished(job))
    assert running["status"] == "running" and running["progress"] == {"done": 1, "total": 2}

    found = admin.post("/retrieve/run", json={"query": "paid leave", "kbs": ["handbook"], "tenant": "initech"})
    assert found.status_code == 200 and found.json()["result"]["documents"]
    queued = admin.post("/index/run", files=[_md("later.md", PARKING)], data={"kb": "later"})
    refused = admin.post("/index/run", files=[_md("refused.md", PARKING)], data={"kb": "later"})
    assert admin.get(status_url).json()["status"] == "running"  # all three answered while the large job ran
    assert queued.status_code == 202 and queued.json()["status"] == "queued"
    assert refused.status_code == 429
    assert "limits.max_queued_jobs" in refused.json()["detail"]
    assert int(refused.headers["retry-after"]) >= 1

    done = _poll(admin, status_url, _finished)
    assert done["status"] == "done" and done["result"]["written"] == 2 and done["result"]["chunks_written"] > 100
    assert done["progress"] == {"done": 2, "total": 2}
    assert _poll(admin, queued.json()["status_url"], _finished)["status"] == "done"


def test_a_running_job_cancelled_stops_before_its_next_file(admin, acme):
    job = admin.post("/index/run", data={"kb": "cancelled", "tenant": "initech"},
                     files=[_md("intro.md", LEAVE), _md("large.md", _markdown(0.1).replace(b"gate", b"door")),
                            _md("never.md", PARKING)])  # large.md: words of its own, none in the embedding cache
    assert job.status_code == 202, job.text
    status_url = job.json()["status_url"]
    _poll(admin, status_url, lambda job: job["progress"]["done"] == 1)
    assert acme.delete(status_url).status_code == 404  # another tenant's job: unknown to this key
    cancelling = admin.delete(status_url)
    assert cancelling.status_code == 200 and cancelling.json()["status"] == "cancelling"
    cancelled = _poll(admin, status_url, _finished)
    assert cancelled["status"] == "cancelled" and cancelled["error"] == "cancelled after 2 of 3 file(s)"
    assert cancelled["progress"] == {"done": 2, "total": 3}
    assert admin.delete(status_url).json()["status"] == "cancelled"  # a finished job is left as it is
    kbs = admin.get("/kbs", params={"tenant": "initech"}).json()["knowledge_bases"]
    assert [kb["documents"] for kb in kbs if kb["kb"] == "cancelled"] == [2]  # the files done stay written


def test_openapi_documents_the_202_and_the_job_routes(admin):
    spec = admin.get("/openapi.json").json()
    responses = spec["paths"]["/index/run"]["post"]["responses"]
    assert responses["202"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/JobAccepted"}
    assert set(spec["components"]["schemas"]["JobAccepted"]["properties"]) == {
        "job_id", "status", "kb", "tenant", "files", "status_url"}
    assert "429" in responses
    assert "wait" in str(spec["components"]["schemas"])
    assert {"/index/jobs", "/index/jobs/{job_id}"} <= set(spec["paths"])
    assert {"get", "delete"} <= set(spec["paths"]["/index/jobs/{job_id}"])


# -- IngestJobs over real index pipelines -----------------------------------------------------------------------------
def _variant(tmp: Path, edit) -> Path:
    spec = yaml.safe_load((PROJECT_ROOT / "pipelines" / "index.yml").read_text(encoding="utf-8"))
    edit(spec)
    path = tmp / "index_variant.yml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


def _upload(name: str, data: bytes) -> ByteStream:
    return ByteStream(data=data, meta={"file_name": name})


def test_a_file_whose_component_raises_fails_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("GATEHOUSE_DATA_DIR", str(tmp_path / "data"))

    def break_the_embedder(spec):  # a zero batch size makes the embedder raise on any text it has not cached
        spec["components"]["embedder"]["init_parameters"].update(batch_size=0, cache_dir="off")

    pipeline = load_pipeline(_variant(tmp_path, break_the_embedder))
    jobs = IngestJobs(pipeline=pipeline, workers=1, max_queued=0, max_queued_per_tenant=0, history=1,
                      status_path="/index/jobs")
    accepted = jobs.submit(kb="notes", tenant="public", force=False,
                           files=[_upload("leave.md", LEAVE), _upload("tool.exe", b"MZ")])
    job = jobs.wait(accepted["job_id"])
    assert job["status"] == "done" and job["progress"] == {"done": 2, "total": 2}
    reasons = {item["file"]: item["reason"] for item in job["result"]["files"]["failed"]}
    assert reasons["leave.md"].startswith("embedder failed: ") and "\n" not in reasons["leave.md"]
    assert "unsupported file type" in reasons["tool.exe"]
    second = jobs.submit(kb="notes", tenant="public", force=False, files=[_upload("tool.exe", b"MZ")])
    jobs.wait(second["job_id"])
    assert jobs.get(accepted["job_id"], tenants=None) is None  # history: 1 finished job is kept
    assert [job["job_id"] for job in jobs.latest(tenants=None, limit=10)] == [second["job_id"]]


def test_tenants_take_turns_and_each_has_a_share_of_the_queue():
    jobs = IngestJobs(pipeline=None, workers=0, max_queued=10, max_queued_per_tenant=3, history=10,
                      status_path="/index/jobs")  # no worker: the test takes the files in the order a worker would
    submitted = [jobs.submit(kb="kb", tenant=tenant, force=False, files=[_upload(f"{tenant}{n}.md", LEAVE)])
                 for tenant, n in (("flood", 1), ("flood", 2), ("flood", 3), ("quiet", 1))]
    with pytest.raises(QueueFull, match="tenant 'flood' already has 3 upload"):
        jobs.submit(kb="kb", tenant="flood", force=False, files=[_upload("flood4.md", LEAVE)])
    assert jobs.cancel(submitted[1]["job_id"], tenants=["quiet"]) is None  # not this caller's job
    assert jobs.cancel(submitted[1]["job_id"], tenants=["flood"])["status"] == "cancelled"
    order = [jobs._next_file()[1].meta["file_name"] for _ in range(3)]
    assert order == ["flood1.md", "quiet1.md", "flood3.md"]  # the quiet tenant's upload waits for one file, not three


def test_a_worker_takes_one_file_of_each_tenant_in_turn(monkeypatch):
    """One tenant's job of three files and its second job wait while another tenant's upload goes in after one file."""
    indexed = []

    def recorded(pipeline, stream, *, kb, tenant, force):
        indexed.append(stream.meta["file_name"])
        return {"written": [{"source": stream.meta["file_name"], "chunks": 1}], "skipped": [], "failed": []}

    monkeypatch.setattr(jobs_module, "ingest_file", recorded)
    monkeypatch.setattr(jobs_module, "record_ingest", lambda report: None)
    jobs = IngestJobs(pipeline=None, workers=0, max_queued=10, max_queued_per_tenant=3, history=10,
                      status_path="/index/jobs")
    first = jobs.submit(kb="kb", tenant="flood", force=False,
                        files=[_upload(f"a{n}.docx", b"PK") for n in (1, 2, 3)])
    second = jobs.submit(kb="kb", tenant="flood", force=False, files=[_upload("b1.docx", b"PK")])
    quiet = jobs.submit(kb="kb", tenant="quiet", force=False, files=[_upload("q1.md", LEAVE)])
    threading.Thread(target=jobs._work, daemon=True).start()  # one worker, started once everything waits
    assert [jobs.wait(job["job_id"])["status"] for job in (first, second, quiet)] == ["done"] * 3
    assert indexed == ["a1.docx", "q1.md", "a2.docx", "a3.docx", "b1.docx"]
    assert jobs.get(first["job_id"], tenants=None)["progress"] == {"done": 3, "total": 3}


def test_a_job_cancelled_during_its_last_file_stays_cancelled(tmp_path, monkeypatch):
    monkeypatch.setenv("GATEHOUSE_DATA_DIR", str(tmp_path / "data"))
    jobs = IngestJobs(pipeline=load_pipeline("index"), workers=1, max_queued=1, max_queued_per_tenant=1, history=10,
                      status_path="/index/jobs")
    index_file, answers = jobs_module.ingest_file, []

    def cancelled_while_indexing(pipeline, stream, **options):
        report = index_file(pipeline, stream, **options)
        if stream.meta["file_name"] == "parking.md":  # the last file: the cancel arrives while it is indexed
            answers.append(jobs.cancel(jobs.latest(tenants=None, limit=1)[0]["job_id"], tenants=None))
        return report

    monkeypatch.setattr(jobs_module, "ingest_file", cancelled_while_indexing)
    accepted = jobs.submit(kb="notes", tenant="public", force=False,
                           files=[_upload("leave.md", LEAVE), _upload("parking.md", PARKING)])
    job = jobs.wait(accepted["job_id"])
    assert [answer["status"] for answer in answers] == ["cancelling"]
    assert job["status"] == "cancelled" and job["error"] == "cancelled after 2 of 2 file(s)"
    assert job["result"]["written"] == 2  # the files done stay written
    assert jobs.cancel(accepted["job_id"], tenants=None)["status"] == "cancelled"


def test_a_job_that_breaks_is_failed_with_a_clean_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("GATEHOUSE_DATA_DIR", str(tmp_path / "data"))

    def drop_the_writer(spec):  # a pipeline that reports nothing: every run ends without `writer.report`
        del spec["components"]["writer"]
        spec["connections"] = [c for c in spec["connections"] if not c["receiver"].startswith("writer.")]

    jobs = IngestJobs(pipeline=load_pipeline(_variant(tmp_path, drop_the_writer)), workers=1, max_queued=1,
                      max_queued_per_tenant=1, history=10, status_path="/index/jobs")
    job = jobs.wait(jobs.submit(kb="notes", tenant="public", force=False, files=[_upload("a.md", LEAVE)])["job_id"])
    assert job["status"] == "failed" and job["finished_at"]
    assert job["error"] == "indexing stopped on an unexpected KeyError; see the server log"


# -- gatehouse ingest --------------------------------------------------------------------------------------------------
def test_cli_ingest_prints_a_progress_line_per_file(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "leave.md").write_bytes(LEAVE)
    (docs / "parking.md").write_bytes(PARKING)
    (docs / "scan.png").write_bytes(b"\x89PNG\r\n\x1a\n not read")
    env = {**os.environ, "GATEHOUSE_DATA_DIR": str(tmp_path / "data")}
    done = subprocess.run([sys.executable, "-m", "gatehouse.cli", "ingest", "docs", "--kb", "handbook"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("[")]
    assert lines[0].startswith("[1/3] docs/leave.md written (") and lines[0].endswith(" chunk)")
    assert lines[1].startswith("[2/3] docs/parking.md written (")
    assert lines[2].startswith("[3/3] docs/scan.png failed: unsupported file type '.png'")
    assert "written: 2 documents" in done.stdout and "failed: 1" in done.stdout


def test_cli_ingest_of_a_file_over_max_chunks_is_one_line(tmp_path):
    spec = yaml.safe_load((PROJECT_ROOT / "pipelines" / "index.yml").read_text(encoding="utf-8"))
    component_spec(spec, "splitter")["init_parameters"]["max_chunks"] = 2
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "index.yml").write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    (tmp_path / "parts.md").write_text("\n\n".join(f"## Part {n}\n\nThe text of part {n}." for n in range(3)))
    env = {**os.environ, "GATEHOUSE_DATA_DIR": str(tmp_path / "data"),
           "GATEHOUSE_PIPELINES_DIR": str(tmp_path / "pipelines")}
    done = subprocess.run([sys.executable, "-m", "gatehouse.cli", "ingest", "parts.md", "--kb", "notes"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stderr == ("[1/1] parts.md failed: splitter failed: public/notes/parts.md gives 3 chunks or more, over "
                           "the limit of 2 per file (splitter.max_chunks in index.yml)\n")
    assert "failed parts.md: splitter failed" in done.stdout
