"""
Metrics, logs and tracing of `gatehouse serve`: a real keyed server process (console span exporter on its stdout,
JSON logs on its stderr) answers real asks, then `/metrics` counts them, the logs carry the request ids and never the
question; in process, the ask pipeline traced to an in-memory exporter gives a span per component.
"""

import json
import os
import re
import subprocess
import sys
import time
from collections import Counter

import httpx
import pytest
import yaml
from haystack import tracing as haystack_tracing
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families
from server_process import free_port, serving

from gatehouse.serving.observability import gate_decisions
from gatehouse.settings import bundled_dir

PROJECT_ROOT = bundled_dir()
KEY = "obs-secret-for-tests"
MARKER = "zqxobsmarker7731"
QUESTION = f"How do I rotate an API key? {MARKER}"
REFUSED = f"Send an email to my manager for me about the outage {MARKER}"  # an action: the input guard refuses it
REQUEST_ID = "obs-test-42"


def _auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A keyed server with one FAQ page uploaded, its stdout (spans) and stderr (logs) in separate files."""
    tmp = tmp_path_factory.mktemp("observability")
    manifest = {
        "pipelines": {
            "ask": {"pipeline": str(PROJECT_ROOT / "pipelines" / "ask.yml"), "kind": "ask"},
            "index": {"pipeline": str(PROJECT_ROOT / "pipelines" / "index.yml"), "kind": "index"},
        },
        "auth": {"keys": [{"env": "GATEHOUSE_TEST_OBS_KEY", "tenants": ["public"], "admin": True}]},
        "mcp": False,
    }
    (tmp / "hayhooks.yml").write_text(yaml.safe_dump(manifest), encoding="utf-8")
    env = {**os.environ, "GATEHOUSE_DATA_DIR": str(tmp / "data"), "GATEHOUSE_TEST_OBS_KEY": KEY,
           "OTEL_TRACES_EXPORTER": "console", "OTEL_BSP_SCHEDULE_DELAY": "100"}
    env.pop("HAYSTACK_CONTENT_TRACING_ENABLED", None)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    stdout, stderr = tmp / "stdout.log", tmp / "stderr.log"
    with stdout.open("w") as out, stderr.open("w") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "gatehouse.cli", "serve", "--port", str(port), "--manifest",
             str(tmp / "hayhooks.yml")], env=env, stdout=out, stderr=err, cwd=tmp)
        with serving(process, lambda: len(httpx.get(f"{url}/status", timeout=2).json()["pipelines"]) == 2,
                     seconds=180, log=stderr):
            page = PROJECT_ROOT / "kb" / "faq" / "api-keys.md"
            upload = httpx.post(f"{url}/index/run", headers=_auth(), data={"kb": "faq", "wait": "true"},
                                files=[("files", (page.name, page.read_bytes(), "text/markdown"))], timeout=600)
            assert upload.status_code == 200, upload.text
            yield {"url": url, "stdout": stdout, "stderr": stderr}


@pytest.fixture(scope="module")
def asked(server):
    """Two asks (one refused) with the marker in the question, one unauthenticated ask; the responses."""
    with httpx.Client(base_url=server["url"], headers=_auth(), timeout=300) as client:
        answered = client.post("/ask/run", json={"query": QUESTION}, headers={"X-Request-ID": REQUEST_ID})
        refused = client.post("/ask/run", json={"query": REFUSED}, headers={"X-Request-ID": "not a token!"})
    anonymous = httpx.post(f"{server['url']}/ask/run", json={"query": QUESTION})
    assert answered.status_code == refused.status_code == 200, (answered.text, refused.text)
    assert anonymous.status_code == 401
    return {"answered": answered, "refused": refused, "anonymous": anonymous}


def _metrics(url: str) -> dict[tuple[str, frozenset], float]:
    response = httpx.get(f"{url}/metrics", headers=_auth())
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(response.text) for sample in family.samples}


def _value(metrics: dict, name: str, **labels: str) -> float:
    return metrics.get((name, frozenset(labels.items())), 0.0)


def test_metrics_needs_a_key(server):
    assert httpx.get(f"{server['url']}/metrics").status_code == 401


def test_readiness_of_the_embedded_store_needs_no_key(server):
    ready = httpx.get(f"{server['url']}/ready")  # every pipeline deployed; no database to ask
    assert ready.status_code == 200 and ready.json() == {"status": "ready"}
    assert httpx.head(f"{server['url']}/ready").status_code == 200


def test_metrics_count_the_asks_by_status_route_and_gate(server, asked):
    answered, refused = asked["answered"].json()["result"], asked["refused"].json()["result"]
    assert refused["status"] == "refused"
    metrics = _metrics(server["url"])
    assert _value(metrics, "gatehouse_ask_answers_total", status="refused") == 1
    assert _value(metrics, "gatehouse_ask_answers_total", status=answered["status"]) == 1
    assert sum(_value(metrics, "gatehouse_ask_answers_total", status=s)
               for s in ("success", "partial", "fallback", "refused", "error")) == 2
    assert _value(metrics, "gatehouse_http_requests_total", method="POST", route="/ask/run", status="200") == 2
    assert _value(metrics, "gatehouse_http_requests_total", method="POST", route="/ask/run", status="401") == 1
    assert _value(metrics, "gatehouse_http_requests_total", method="POST", route="/index/run", status="200") == 1
    assert _value(metrics, "gatehouse_http_requests_total", method="GET", route="/status", status="200") >= 1
    assert _value(metrics, "gatehouse_http_request_duration_seconds_count", method="POST", route="/ask/run",
                  status="200") == 2
    blocked = next(step for step in refused["path"] if step.startswith("input_guardrails_blocked:"))
    assert _value(metrics, "gatehouse_ask_gate_decisions_total", step=blocked) == 1
    expected = Counter(gate_decisions(answered["path"]) + gate_decisions(refused["path"]))
    counted = {dict(labels)["step"]: value for (name, labels), value in metrics.items()
               if name == "gatehouse_ask_gate_decisions_total"}
    assert counted == expected and expected["start"] == 2
    assert not [step for step in counted if re.search(r"_\d", step)]  # attempt_0_score_0.41 is attempt_score
    assert _value(metrics, "gatehouse_ask_retrieval_attempts_count") == 2
    assert _value(metrics, "gatehouse_ask_retrieval_attempts_sum") == answered["metadata"]["attempts"]
    assert _value(metrics, "gatehouse_server_processes") == 1
    for series, labels in (("gatehouse_ingest_jobs", {"status": "queued"}),  # the upload finished: none waits
                           ("gatehouse_ingest_jobs", {"status": "running"}), ("gatehouse_ingest_tenants_waiting", {})):
        assert (series, frozenset(labels.items())) in metrics and _value(metrics, series, **labels) == 0


def test_request_ids_are_echoed_and_logged_as_json(server, asked):
    assert asked["answered"].headers["x-request-id"] == REQUEST_ID
    generated = asked["refused"].headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", generated)  # "not a token!" is not taken
    assert re.fullmatch(r"[0-9a-f]{32}", asked["anonymous"].headers["x-request-id"])
    assert len(asked["answered"].headers.get_list("x-request-id")) == 1
    time.sleep(0.5)
    lines = [line for line in server["stderr"].read_text().splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    assert all({"timestamp", "level", "logger", "message", "request_id"} <= set(record) for record in records)
    assert not [record for record in records if record["level"] in {"ERROR", "CRITICAL"}]
    mine = [record for record in records if record["request_id"] == REQUEST_ID]
    assert {"gatehouse.access", "gatehouse.ask"} <= {record["logger"] for record in mine}
    ask = next(record for record in mine if record["logger"] == "gatehouse.ask")
    assert ask["status"] == asked["answered"].json()["result"]["status"] and "query" not in ask
    access = next(record for record in mine if record["logger"] == "gatehouse.access")
    assert (access["route"], access["status"]) == ("/ask/run", 200)
    assert any(record["request_id"] == generated and record["logger"] == "gatehouse.ask" for record in records)
    assert any(record["logger"].startswith("uvicorn") for record in records)  # uvicorn's own records are JSON too


def test_the_question_is_never_logged_nor_traced(server, asked):
    time.sleep(0.5)
    assert MARKER not in server["stderr"].read_text()
    assert MARKER not in server["stdout"].read_text()
    assert MARKER not in httpx.get(f"{server['url']}/metrics", headers=_auth()).text


def test_the_server_traces_one_span_per_component(server, asked):
    deadline = time.monotonic() + 10
    while True:
        spans = server["stdout"].read_text()
        components = set(re.findall(r'"haystack\.component\.name": "([^"]+)"', spans))
        if {"intake", "input_guard", "intent", "output_guard", "response"} <= components:
            break
        assert time.monotonic() < deadline, sorted(components)
        time.sleep(0.5)
    assert '"name": "haystack.pipeline.run"' in spans
    assert "haystack.pipeline.input_data" not in spans


@pytest.fixture
def memory_spans():
    """Haystack traced to an in-memory OpenTelemetry exporter, as `gatehouse serve` sets it up."""
    from gatehouse.serving.observability import enable_haystack_tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    enable_haystack_tracing(provider)
    yield exporter
    haystack_tracing.disable_tracing()


def test_the_ask_pipeline_gives_a_span_per_gate_without_content(memory_spans, tmp_path, monkeypatch):
    from gatehouse.ask import run_ask
    from gatehouse.pipelines import load_pipeline

    monkeypatch.setenv("GATEHOUSE_DATA_DIR", str(tmp_path / "data"))
    pipeline = load_pipeline(PROJECT_ROOT / "pipelines" / "ask.yml")
    response = run_ask(pipeline, REFUSED)
    assert response["status"] == "refused"
    spans = memory_spans.get_finished_spans()
    ran = [span.attributes["haystack.component.name"] for span in spans if span.name == "haystack.component.run"]
    assert {"intake", "input_guard", "output_guard", "response"} <= set(ran)
    assert "router" not in ran  # a refused question ends before routing: spans follow the path taken
    run = next(span for span in spans if span.name == "haystack.pipeline.run")
    assert all(span.parent is not None and span.parent.span_id == run.context.span_id
               for span in spans if span.name == "haystack.component.run")
    assert "haystack.pipeline.input_data" not in run.attributes
    assert not [span for span in spans for value in span.attributes.values() if MARKER in str(value)]


def test_record_ingest_counts_a_real_upload_report(tmp_path, monkeypatch):
    from gatehouse.ingest import ingest_file
    from gatehouse.pipelines import load_pipeline
    from gatehouse.serving.observability import record_ingest, render_metrics

    def counts() -> dict[tuple[str, frozenset], float]:
        return {(s.name, frozenset(s.labels.items())): s.value
                for family in text_string_to_metric_families(render_metrics().decode()) for s in family.samples}

    monkeypatch.setenv("GATEHOUSE_DATA_DIR", str(tmp_path / "data"))
    pipeline = load_pipeline(PROJECT_ROOT / "pipelines" / "index.yml")
    pipeline.warm_up()
    page = PROJECT_ROOT / "kb" / "faq" / "api-keys.md"
    before = counts()
    report = ingest_file(pipeline, page, kb="faq")
    record_ingest(report)
    record_ingest(ingest_file(pipeline, page, kb="faq"))  # unchanged: skipped
    after = counts()
    delta = {key: after.get(key, 0.0) - before.get(key, 0.0) for key in after}
    assert delta[("gatehouse_ingest_files_total", frozenset({("outcome", "written")}))] == 1
    assert delta[("gatehouse_ingest_files_total", frozenset({("outcome", "skipped")}))] == 1
    assert delta[("gatehouse_ingest_chunks_written_total", frozenset())] == report["totals"]["chunks_written"] > 0


def test_a_record_with_markup_or_format_characters_stays_one_json_line():
    import logging

    from gatehouse.serving.observability import JsonFormatter, request_id

    token = request_id.set("req-1")
    try:
        question = "what is </context> {} %s %d ?"
        records = [logging.LogRecord("gatehouse.test", logging.INFO, __file__, 1, "asked %s", (question,), None),
                   logging.LogRecord("gatehouse.test", logging.INFO, __file__, 1, question, ("one",), None)]
        formatter = JsonFormatter()
        for record in records:
            record.request_id = request_id.get()
            line = formatter.format(record)
            assert "\n" not in line
            entry = json.loads(line)
            assert entry["request_id"] == "req-1" and "</context> {} %s" in entry["message"]
    finally:
        request_id.reset(token)


def test_logged_questions_are_redacted():
    from gatehouse.serving.observability import redact_query

    redacted = redact_query("my card is 4111 1111 1111 1111 and my mail jane.doe@example.com")
    assert "4111" not in redacted and "jane.doe" not in redacted
    assert "[CARD]" in redacted and "[EMAIL]" in redacted


def test_gate_decisions_label_a_route_by_its_kind_never_by_kb_names():
    path = ["start", "intent_procedural_retrieve", "route_to_merger-plans", "attempt_0_score_0.41",
            "plan_2_subqueries", "part_0_route_to_hr+merger-plans", "part_1_route_to_all", "part_1_attempt_0_score_0.9",
            "answerable_0.66", "unknown_kb"]
    assert gate_decisions(path) == [
        "start", "intent_procedural_retrieve", "route_to_one_kb", "attempt_score", "plan_subqueries",
        "part_route_to_several_kbs", "part_route_to_all_kbs", "part_attempt_score", "answerable", "unknown_kb"]
    assert gate_decisions(["route_to_merger-plans", "part_0_route_to_hr"], requested_kb=True) == [
        "route_to_requested_kb", "part_route_to_requested_kb"]
