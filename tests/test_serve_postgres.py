"""
Several `gatehouse serve` processes over one PostgreSQL database (the test cluster's primary and hot standby), on
loopback, with the real pipelines and embedder:

- A and B: ask, retrieve and index over the primary, sharing one data directory (profiles, deployment files), with
  a short job lease, so a job of a killed server is taken over quickly;
- C: `gatehouse serve --processes 2` (two processes on one port), ask and retrieve only, searching the standby
  (`GATEHOUSE_POSTGRES_READ_URL`).

Skipped (with the reason) only when the PostgreSQL server package cannot start a server here.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
import yaml
from server_process import free_port

from gatehouse.settings import bundled_dir

PIPELINES = bundled_dir() / "pipelines"
KEYS = {"PG_TEST_ADMIN": "pg-admin-secret", "PG_TEST_ACME": "pg-acme-secret", "PG_TEST_INITECH": "pg-initech-secret",
        "PG_TEST_METERED": "pg-metered-secret", "PG_TEST_CAPPED": "pg-capped-secret"}
ADMIN, ACME, INITECH, METERED, CAPPED = (f"Bearer {secret}" for secret in KEYS.values())
LEASE_S = 2
TABLE = "gatehouse_chunks"


def _manifest(path: Path, kinds: tuple[str, ...], **extra) -> Path:
    path.write_text(yaml.safe_dump({
        "pipelines": {kind: {"pipeline": str(PIPELINES / f"{kind}.yml"), "kind": kind} for kind in kinds},
        "auth": {"keys": [{"env": "PG_TEST_ADMIN", "tenants": ["public", "acme", "initech"], "admin": True},
                          {"env": "PG_TEST_ACME", "tenants": ["acme"]},
                          {"env": "PG_TEST_INITECH", "tenants": ["initech"]},
                          {"env": "PG_TEST_METERED", "tenants": ["acme"], "requests_per_minute": 3},
                          {"env": "PG_TEST_CAPPED", "tenants": ["acme"], "max_concurrent_requests": 1}]},
        "mcp": False,
        "limits": {"ingest_workers": 1, "max_queued_jobs": 20, "max_queued_jobs_per_tenant": 20,
                   "ingest_job_lease_s": LEASE_S, "requests_per_minute": 0, "max_concurrent_requests": 0},
        **extra,
    }), encoding="utf-8")
    return path


class Server:
    """A started `gatehouse serve` (or its `--processes` parent) and its URL."""

    def __init__(self, name: str, manifest: Path, env: dict[str, str], workdir: Path, args: list[str] = ()) -> None:
        self.name, self.port = name, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / f"{name}.log"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gatehouse.cli", "serve", "--port", str(self.port), "--manifest", str(manifest),
             *args], env=env, stdout=self.log.open("w"), stderr=subprocess.STDOUT, cwd=workdir)
        self.pipelines = len(yaml.safe_load(manifest.read_text())["pipelines"])

    def client(self, key: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": key}, timeout=300)

    def wait_ready(self, seconds: float) -> None:
        """Wait until every pipeline is deployed (the server exiting first fails, with its log)."""
        deadline = time.monotonic() + seconds
        while True:
            assert self.process.poll() is None, self.log.read_text()
            try:
                if len(httpx.get(f"{self.url}/status", timeout=2).json()["pipelines"]) == self.pipelines:
                    return
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, f"{self.name} did not start in {seconds:.0f} s"
            time.sleep(0.5)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, postgres) -> Iterator[dict]:
    tmp = tmp_path_factory.mktemp("serve-postgres")
    primary = postgres.new_database()
    standby = primary.replace(f":{postgres.primary_port}/", f":{postgres.standby_port}/")
    base = {**os.environ, **KEYS, "GATEHOUSE_POSTGRES_URL": primary}
    shared = {**base, "GATEHOUSE_DATA_DIR": str(tmp / "shared-data")}  # A and B share a data directory
    writer_manifest = _manifest(tmp / "writers.yml", ("ask", "retrieve", "index"))
    reader_manifest = _manifest(tmp / "readers.yml", ("ask", "retrieve"))
    servers = {
        "a": Server("a", writer_manifest, shared, tmp),
        "b": Server("b", writer_manifest, shared, tmp),
        "c": Server("c", reader_manifest, {**base, "GATEHOUSE_DATA_DIR": str(tmp / "reader-data"),
                                           "GATEHOUSE_POSTGRES_READ_URL": standby}, tmp, ["--processes", "2"]),
    }
    try:
        for server in servers.values():
            server.wait_ready(seconds=300)
    except BaseException:
        for server in servers.values():
            server.process.terminate()  # a --processes parent stops its processes
        raise
    try:
        yield {"servers": servers, "primary": primary, "standby": standby, "postgres": postgres, "tmp": tmp}
    finally:
        for server in servers.values():
            if server.process.poll() is None:
                server.process.terminate()
        for server in servers.values():
            try:
                server.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.process.kill()


def _md(name: str, text: str) -> tuple[str, tuple[str, bytes, str]]:
    return ("files", (name, text.encode(), "text/markdown"))


def _poll(client: httpx.Client, path: str, until, seconds: float = 300) -> dict:
    deadline = time.monotonic() + seconds
    while True:
        response = client.get(path)
        assert response.status_code == 200, response.text
        if until(response.json()):
            return response.json()
        assert time.monotonic() < deadline, response.json()
        time.sleep(0.2)


def _finished(job: dict) -> bool:
    return job["status"] in ("done", "failed", "cancelled")


def _sources(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text
    return [document["meta"]["source"] for document in response.json()["result"]["documents"]]


def test_an_upload_to_one_server_is_a_job_every_server_reports_and_answers(cluster):
    a, b, c = (cluster["servers"][name] for name in "abc")
    with a.client(ADMIN) as on_a, b.client(ADMIN) as on_b, c.client(ADMIN) as on_c:
        posted = on_a.post("/index/run", data={"kb": "lockers", "tenant": "initech"}, files=[
            _md("lockers.md", "# Lockers\n\nLockers at Initech are on level one, beside the lifts, and open at 7 am."),
            _md("badges.md", "# Badges\n\nA lost badge is replaced at the front desk within one working day.")])
        assert posted.status_code == 202, posted.text
        job_id = posted.json()["job_id"]
        seen_on_b = on_b.get(f"/index/jobs/{job_id}")  # the job, whichever server runs it
        assert seen_on_b.status_code == 200, seen_on_b.text
        assert seen_on_b.json()["files"] == ["lockers.md", "badges.md"]
        job = _poll(on_b, f"/index/jobs/{job_id}", _finished)
        assert job["status"] == "done" and job["error"] is None, job
        assert (job["result"]["written"], job["progress"]) == (2, {"done": 2, "total": 2})
        assert job_id in [listed["job_id"] for listed in on_a.get("/index/jobs").json()["jobs"]]
        assert job == on_a.get(f"/index/jobs/{job_id}").json()

        assert _sources(on_b.post("/retrieve/run", json={"query": "where are the lockers", "kbs": ["lockers"],
                                                          "tenant": "initech", "top_k": 1})) == ["lockers.md"]
        for server in (on_b, on_a, on_c):  # routed, no KB named: each server's profile of the new KB
            answer = server.post("/ask/run", json={"query": "Where are the lockers at Initech?",
                                                   "tenant": "initech"}).json()["result"]
            assert "level one" in answer["answer"], answer
        kbs = on_b.get("/kbs", params={"tenant": "initech"}).json()["knowledge_bases"]
        assert {(kb["kb"], kb["documents"]) for kb in kbs} == {("lockers", 2)}
    profiles = cluster["tmp"] / "shared-data" / "profiles" / "initech"
    assert (profiles / "lockers.json").is_file() and not list(profiles.glob("*.tmp"))


def test_tenants_stay_apart_across_servers(cluster):
    a, b = cluster["servers"]["a"], cluster["servers"]["b"]
    with a.client(ACME) as acme_a, b.client(ACME) as acme_b, b.client(INITECH) as initech_b:
        posted = acme_a.post("/index/run", data={"kb": "quasar", "wait": "true"}, files=[
            _md("quasar.md", "# Project Quasar\n\nProject Quasar ships the acme telescope mirror in March.")])
        assert posted.status_code == 200, posted.text
        assert posted.json()["result"]["tenant"] == "acme" and posted.json()["result"]["written"] == 1
        job_id = acme_b.get("/index/jobs").json()["jobs"][0]["job_id"]
        assert acme_b.get(f"/index/jobs/{job_id}").json()["tenant"] == "acme"

        assert initech_b.get(f"/index/jobs/{job_id}").status_code == 404
        assert initech_b.delete(f"/index/jobs/{job_id}").status_code == 404
        assert job_id not in [job["job_id"] for job in initech_b.get("/index/jobs").json()["jobs"]]
        assert initech_b.post("/retrieve/run", json={"query": "quasar", "tenant": "acme"}).status_code == 403
        leaked = initech_b.post("/retrieve/run", json={"query": "Project Quasar telescope mirror", "top_k": 20})
        assert "quasar.md" not in _sources(leaked)
        assert _sources(acme_b.post("/retrieve/run", json={"query": "Project Quasar telescope mirror",
                                                            "top_k": 1})) == ["quasar.md"]


def test_a_keys_request_rate_is_one_limit_over_every_server(cluster):
    a, b, c = (cluster["servers"][name] for name in "abc")
    with a.client(METERED) as on_a, b.client(METERED) as on_b, c.client(METERED) as on_c:
        statuses = [client.post("/retrieve/run", json={"query": "lockers", "top_k": 1}).status_code
                    for client in (on_a, on_b, on_c, on_a)]
    assert statuses == [200, 200, 200, 429]  # 3 a minute in all, not 3 on each server


def test_stalled_bodies_hold_none_of_their_keys_requests_over_every_process(cluster):
    c = cluster["servers"]["c"]  # two processes, one limit per key in the database
    head = (f"POST /retrieve/run HTTP/1.1\r\nHost: 127.0.0.1:{c.port}\r\nAuthorization: {CAPPED}\r\n"
            "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n").encode()
    stalled = []
    try:
        for _ in range(4):  # spread over both processes; the key may run 1 request at a time
            sock = socket.create_connection(("127.0.0.1", c.port), timeout=60)
            sock.sendall(head + b'{"query": "')  # 11 bytes of the 1,000, and no more
            stalled.append(sock)
        time.sleep(1)  # (before the fix, by now one of them held the key's only running request)
        with c.client(CAPPED) as client:
            statuses = [client.post("/retrieve/run", json={"query": "lockers", "top_k": 1}).status_code
                        for _ in range(3)]
        assert statuses == [200] * 3
    finally:
        for sock in stalled:
            sock.close()


def test_a_job_is_cancelled_through_another_server(cluster):
    a, b = cluster["servers"]["a"], cluster["servers"]["b"]
    files = [_md(f"note-{index:02}.md", f"# Note {index}\n\n" + f"Shelf {index} holds binder {index}. " * 40)
             for index in range(20)]
    with a.client(ADMIN) as on_a, b.client(ADMIN) as on_b:
        posted = on_a.post("/index/run", data={"kb": "notes"}, files=files)
        assert posted.status_code == 202, posted.text
        cancelled = on_b.delete(posted.json()["status_url"])
        assert cancelled.status_code == 200 and cancelled.json()["status"] in ("cancelled", "cancelling")
        job = _poll(on_a, posted.json()["status_url"], _finished)
        assert job["status"] == "cancelled" and job["progress"]["done"] < 20, job


def test_searches_read_the_standby_and_wait_for_what_the_server_has_seen(cluster):
    a, c, postgres = cluster["servers"]["a"], cluster["servers"]["c"], cluster["postgres"]
    database = cluster["primary"].rsplit("/", 1)[1]
    postgres.wait_for_standby()  # the standby has everything the reader processes may have seen
    postgres.sql(postgres.standby_port, "SELECT pg_wal_replay_pause()")
    try:
        with a.client(ADMIN) as on_a, c.client(ADMIN) as on_c:
            posted = on_a.post("/index/run", data={"kb": "parking", "tenant": "public", "wait": "true"}, files=[
                _md("parking.md", "# Parking\n\nVisitors park on level two of the garage behind the office.")])
            assert posted.status_code == 200 and posted.json()["result"]["written"] == 1, posted.text
            query = {"query": "where do visitors park", "kbs": ["parking"], "top_k": 1}
            assert _sources(on_c.post("/retrieve/run", json=query)) == []  # the standby has not replayed it yet
            # an ask reads the write counters (its answer cache) from the primary, so its search waits for the
            # standby to replay that far (max_lag_s), then reads the primary: no answer older than its counters
            answer = on_c.post("/ask/run", json={"query": "Where do visitors park?", "kb": "parking"}).json()
            assert "level two" in answer["result"]["answer"], answer
        readers = postgres.sql(postgres.standby_port, "SELECT count(*) FROM pg_stat_activity WHERE application_name "
                               f"= 'gatehouse-reader' AND datname = '{database}'", database="postgres")
        assert int(readers) >= 1
    finally:
        postgres.sql(postgres.standby_port, "SELECT pg_wal_replay_resume()")
    postgres.wait_for_standby()
    with c.client(ADMIN) as on_c:
        assert _sources(on_c.post("/retrieve/run", json=query)) == ["parking.md"]


def _scrape(server: Server) -> dict[tuple[str, tuple], float]:
    """A `/metrics` scrape: (sample name, sorted labels) to value."""
    from prometheus_client.parser import text_string_to_metric_families

    with server.client(ADMIN) as client:
        response = client.get("/metrics")
    assert response.status_code == 200, response.text
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(response.text) for sample in family.samples}


def test_standby_lag_costs_each_process_one_wait_then_searches_read_the_primary(cluster):
    a, c, postgres = cluster["servers"]["a"], cluster["servers"]["c"], cluster["postgres"]
    waits, episodes = ("gatehouse_postgres_standby_waits_total", ()), ("gatehouse_postgres_standby_lag_episodes_total", ())
    lagged = ("gatehouse_postgres_primary_reads_total", (("reason", "lag"),))
    postgres.wait_for_standby()
    before, logged_before = _scrape(c), len(_log_records(c))
    postgres.sql(postgres.standby_port, "SELECT pg_wal_replay_pause()")
    seconds: dict[str, list[float]] = {"ask": [], "retrieve": []}
    try:
        with a.client(ADMIN) as on_a:
            posted = on_a.post("/index/run", data={"kb": "garden", "tenant": "public", "wait": "true"}, files=[
                _md("garden.md", "# Garden\n\nThe roof garden opens at noon on weekdays for every team.")])
            assert posted.status_code == 200, posted.text
        for kind, path, body in [("ask", "/ask/run", {"query": "When does the roof garden open?", "kb": "garden"}),
                                 ("retrieve", "/retrieve/run", {"query": "roof garden", "kbs": ["garden"]})]:
            for _ in range(10):  # each on a new connection: the kernel hands it to either process
                with c.client(ADMIN) as on_c:
                    started = time.perf_counter()
                    answer = on_c.post(path, json=body)
                    seconds[kind].append(time.perf_counter() - started)
                assert answer.status_code == 200, answer.text
        not_ready = httpx.get(f"{c.url}/ready", timeout=30)
        assert not_ready.status_code == 503, not_ready.text
        assert not_ready.json()["reasons"] == ["the standby lags behind the primary"]
        after = _scrape(c)
    finally:
        postgres.sql(postgres.standby_port, "SELECT pg_wal_replay_resume()")
    postgres.wait_for_standby()
    for kind, measured in seconds.items():
        ordered = sorted(measured)
        print(f"{kind} with the standby paused (max_lag_s 1 s): P50 {ordered[len(ordered) // 2] * 1000:.0f} ms, "
              f"P95 {ordered[int(0.95 * len(ordered)) - 1] * 1000:.0f} ms, slowest {ordered[-1] * 1000:.0f} ms")
    # each process waits at most once (its first search after it has seen the write, unless an episode of the previous
    # test still runs there); every other search of the episode reads the primary at once
    assert after[waits] - before[waits] <= 2 and after[episodes] - before[episodes] == after[waits] - before[waits]
    assert after[lagged] > before[lagged]
    assert 0 <= after[("gatehouse_postgres_standby_lag_seconds", ())] < 3600
    episodes_logged = [record for record in _log_records(c)[logged_before:]
                       if "stayed behind the primary" in record["message"]]
    assert len(episodes_logged) == after[episodes] - before[episodes]  # logged once per episode
    assert len({record["pid"] for record in episodes_logged}) == len(episodes_logged)


def test_readiness_one_metrics_view_of_two_processes_sums_their_requests(cluster):
    c = cluster["servers"]["c"]
    served: set[int] = set()
    for _ in range(10):  # until both processes have answered some (each request on a new connection)
        for _ in range(20):
            assert httpx.get(f"{c.url}/status", timeout=30).status_code == 200
        served = {record["pid"] for record in _log_records(c) if record.get("route") == "/status"}
        if len(served) >= 2:
            break
    assert len(served) >= 2

    def logged() -> dict[int, int]:
        counts: dict[int, int] = {}
        for record in _log_records(c):
            if (record["logger"], record.get("route"), record.get("status")) == ("gatehouse.access", "/status", 200):
                counts[record["pid"]] = counts.get(record["pid"], 0) + 1
        return counts

    sample = ("gatehouse_http_requests_total", (("method", "GET"), ("route", "/status"), ("status", "200")))
    deadline = time.monotonic() + 30
    while True:  # a request is counted, then logged: the scrape meets the log once every line is written
        scrapes = [_scrape(c) for _ in range(4)]  # whichever process answers, the same whole view
        per_process = logged()
        if all(scrape[sample] == sum(per_process.values()) for scrape in scrapes):
            break
        assert time.monotonic() < deadline, (per_process, [scrape[sample] for scrape in scrapes])
        time.sleep(0.5)
    assert len(per_process) >= 2
    assert scrapes[-1][("gatehouse_server_processes", ())] == 2
    assert scrapes[-1][("gatehouse_postgres_pool_size", (("pool", "primary"),))] >= 2 * 8
    assert ("gatehouse_ingest_jobs", (("status", "queued"),)) not in scrapes[-1]  # c serves no index pipeline
    queue = _scrape(cluster["servers"]["a"])  # every server's upload jobs, read from the database at the scrape
    assert queue[("gatehouse_ingest_jobs", (("status", "queued"),))] == 0
    assert queue[("gatehouse_ingest_tenants_waiting", ())] == 0
    print(f"--processes 2: /status requests per process {per_process}, scraped {scrapes[-1][sample]:.0f}")


def test_a_killed_process_of_serve_processes_is_started_again(cluster):
    c = cluster["servers"]["c"]
    children = [int(pid) for pid in Path(f"/proc/{c.process.pid}/task/{c.process.pid}/children").read_text().split()]
    assert len(children) == 2
    counted = ("gatehouse_http_requests_total", (("method", "GET"), ("route", "/status"), ("status", "200")))
    before = _scrape(c)[counted]
    os.kill(children[0], signal.SIGKILL)
    deadline = time.monotonic() + 120
    while "started pid" not in c.log.read_text():
        assert time.monotonic() < deadline and c.process.poll() is None, c.log.read_text()
        time.sleep(0.2)
    with c.client(ADMIN) as on_c:
        for _ in range(4):  # whichever process takes the connection answers
            assert on_c.post("/retrieve/run", json={"query": "lockers", "tenant": "initech"}).status_code == 200
    assert _scrape(c)[counted] == before  # the killed process's requests are still counted


def test_processes_are_refused_with_the_embedded_store(tmp_path):
    manifest = _manifest(tmp_path / "m.yml", ("retrieve",))
    env = {key: value for key, value in os.environ.items() if not key.startswith("GATEHOUSE_POSTGRES")}
    done = subprocess.run([sys.executable, "-m", "gatehouse.cli", "serve", "--processes", "2", "--manifest",
                           str(manifest), "--port", str(free_port())], env={**env, **KEYS}, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "gatehouse: processes is 2, but the store is the embedded one, which only one process may open: set "
        "GATEHOUSE_POSTGRES_URL (or postgres: {url} in the pipelines), or run one process"]


def test_a_database_outage_is_one_line_and_503(cluster):
    a, postgres = cluster["servers"]["a"], cluster["postgres"]
    database = cluster["primary"].rsplit("/", 1)[1]
    postgres.sql(postgres.primary_port, f"ALTER DATABASE {database} ALLOW_CONNECTIONS false", database="postgres")
    postgres.sql(postgres.primary_port, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
                 f"datname = '{database}'", database="postgres")
    try:
        with a.client(ADMIN) as on_a:
            answers = [on_a.post("/retrieve/run", json={"query": "lockers", "tenant": "initech"}),
                       on_a.post("/ask/run", json={"query": "Where are the lockers?", "tenant": "initech"}),
                       on_a.get("/index/jobs"),
                       on_a.post("/index/run", data={"kb": "later"}, files=[_md("later.md", "# Later\n\nText.")])]
        for answer in answers:
            _database_unnamed_503(answer, postgres, database)
    finally:
        postgres.sql(postgres.primary_port, f"ALTER DATABASE {database} ALLOW_CONNECTIONS true", database="postgres")


def _database_unnamed_503(answer: httpx.Response, postgres, database: str) -> None:
    """A 503 in one line with Retry-After, naming no database user, host, port or name."""
    assert answer.status_code == 503, answer.text
    assert int(answer.headers["retry-after"]) >= 1
    detail = answer.json()["detail"]
    assert detail == "the database cannot be reached right now; try again shortly", detail
    for named in ("postgres", "127.0.0.1", str(postgres.primary_port), database, "Traceback"):
        assert named not in answer.text


def _log_records(server: Server) -> list[dict]:
    """The JSON records of a server's log (the --processes parent's own plain lines left out)."""
    records = []
    for line in server.log.read_text().splitlines():
        if line.startswith("{"):
            records.append(json.loads(line))
    return records


def _until_ready(server) -> None:
    """Wait until `server`'s /ready answers 200 (a hang guard of 120 s)."""
    deadline = time.monotonic() + 120
    while httpx.get(f"{server.url}/ready", timeout=30).status_code != 200:
        assert time.monotonic() < deadline, f"{server.url} did not become ready"
        time.sleep(0.5)


def test_readiness_follows_the_primary_and_an_outage_is_one_warning_and_unnamed_503s(cluster):
    a, c, postgres = cluster["servers"]["a"], cluster["servers"]["c"], cluster["postgres"]
    database = cluster["primary"].rsplit("/", 1)[1]
    for server in (a, c):  # a standby lag episode left by an earlier test ends once the standby has caught up
        _until_ready(server)
        assert httpx.get(f"{server.url}/ready", timeout=30).json() == {"status": "ready"}  # no key needed
    before = len(_log_records(a))
    postgres.stop_primary()
    try:
        not_ready = httpx.get(f"{a.url}/ready", timeout=30)
        assert not_ready.status_code == 503 and int(not_ready.headers["retry-after"]) >= 1
        assert not_ready.json() == {"status": "not ready",
                                    "reasons": ["the database cannot be reached right now; try again shortly"]}
        assert httpx.get(f"{c.url}/ready", timeout=30).status_code == 503
        assert httpx.get(f"{a.url}/status", timeout=30).status_code == 200  # liveness: the process answers
        with a.client(ADMIN) as on_a:
            for answer in (on_a.post("/retrieve/run", json={"query": "lockers", "tenant": "initech"}),
                           on_a.post("/ask/run", json={"query": "Where are the lockers?", "tenant": "initech"}),
                           on_a.get("/index/jobs"), on_a.get("/kbs")):
                _database_unnamed_503(answer, postgres, database)
        time.sleep(3 * 1.0)  # the ingest worker looks for jobs every second
    finally:
        postgres.start_primary()
    _until_ready(a)
    records = _log_records(a)[before:]
    outage = [record for record in records if record["logger"] == "gatehouse.document_stores.postgres"]
    assert [record["level"] for record in outage] == ["WARNING", "INFO"], outage  # one warning, then back once
    assert "postgresql://postgres@127.0.0.1:" in outage[0]["message"]  # the log has the full line
    assert outage[1]["message"].endswith("can be used again")


def test_a_job_of_a_killed_server_leaves_whole_documents_and_is_taken_over(cluster):
    servers = cluster["servers"]
    files = [_md(f"manual-{index:02}.md", "".join(f"## Part {part}\n\n" + f"Step {part} of manual {index} turns "
                                                    f"valve {part}. " * 30 + "\n\n" for part in range(4)))
             for index in range(12)]
    with servers["a"].client(ADMIN) as on_a, psycopg.connect(cluster["primary"], autocommit=True) as database:
        posted = on_a.post("/index/run", data={"kb": "manuals", "tenant": "initech"}, files=files)
        assert posted.status_code == 202, posted.text
        job_id = posted.json()["job_id"]
        deadline = time.monotonic() + 300
        while True:  # one file written, the job still running: kill its server
            owner, done, status = database.execute(
                f"SELECT owner, jsonb_array_length(results->'written'), status FROM {TABLE}_jobs WHERE job_id = %s",
                (job_id,)).fetchone()
            if owner and done >= 1:
                break
            assert status in ("queued", "running") and time.monotonic() < deadline, (owner, done, status)
            time.sleep(0.05)
        pid = int(owner.split(":")[1])
        victim = next(server for server in (servers["a"], servers["b"]) if server.process.pid == pid)
        survivor = servers["b"] if victim is servers["a"] else servers["a"]
        victim.process.send_signal(signal.SIGKILL)
        victim.process.wait(timeout=30)
        chunks = "SELECT meta->>'doc_id', array_agg(id ORDER BY id) FROM gatehouse_chunks WHERE meta->>'kb' = " \
                 "'manuals' GROUP BY 1"
        at_kill = dict(database.execute(chunks).fetchall())
        assert 1 <= len(at_kill) < 12

    with survivor.client(ADMIN) as on_survivor:
        job = _poll(on_survivor, f"/index/jobs/{job_id}", _finished)
    assert job["status"] == "done", job
    assert job["progress"] == {"done": 12, "total": 12} and job["result"]["failed"] == 0
    with psycopg.connect(cluster["primary"], autocommit=True) as database:
        final = dict(database.execute(chunks).fetchall())
    assert len(final) == 12
    for doc_id, chunk_ids in at_kill.items():  # each document written before the kill was whole
        assert final[doc_id] == chunk_ids
