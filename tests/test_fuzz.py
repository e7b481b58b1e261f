"""
Schema fuzzing (`gatehouse.eval.fuzz`, schemathesis with all its checks) of a real `gatehouse serve` on loopback, and
of a small FastAPI app with known faults, which shows the fuzzer reports what it must.
"""

import contextlib
import json
import math
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn
import yaml
from fastapi import FastAPI, HTTPException
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from server_process import free_port, running_server

from gatehouse.eval.fuzz import FUZZED_OPERATIONS, MCP, MUTATIONS, fuzz, fuzz_manifest, mutated, report
from gatehouse.serving.edge import EdgeMiddleware
from gatehouse.settings import bundled_dir

PROJECT_ROOT = bundled_dir()
KEY = "fuzz-secret-for-tests"
CASES = 100


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[str]:
    """A keyed server (one key, tenant `public`) holding two FAQ articles."""
    tmp = tmp_path_factory.mktemp("fuzz")
    manifest = tmp / "hayhooks.yml"
    manifest.write_text(yaml.safe_dump(fuzz_manifest("GATEHOUSE_TEST_FUZZ_KEY")), encoding="utf-8")
    env = {**os.environ, "GATEHOUSE_DATA_DIR": str(tmp / "data"), "GATEHOUSE_TEST_FUZZ_KEY": KEY}
    with running_server(manifest, env=env, workdir=tmp, pipelines=3) as url:
        articles = sorted((PROJECT_ROOT / "kb" / "faq").glob("*.md"))[:2]
        files = [("files", (path.name, path.read_bytes(), "text/markdown")) for path in articles]
        response = httpx.post(f"{url}/index/run", files=files, data={"kb": "faq", "wait": "true"},
                              headers={"Authorization": f"Bearer {KEY}"}, timeout=300)
        assert response.status_code == 200, response.text
        yield url


def test_fuzzing_the_server_finds_no_server_error_and_no_undocumented_status(server):
    started = time.monotonic()
    results = fuzz(server, cases=CASES, key=KEY, seed=0)  # the same cases each run: CI does not fail at random
    lines = report(results, time.monotonic() - started)
    assert set(results) == set(FUZZED_OPERATIONS)
    assert sum(result.cases for result in results.values()) >= CASES, "\n".join(lines)
    assert all(result.cases > 0 for result in results.values()), "\n".join(lines)
    assert [label for label, result in results.items() if result.failed] == [], "\n".join(lines)
    assert sum(result.statuses[200] for result in results.values()) > 0  # the fuzzer got past the checks too
    json_routes = ("POST /ask/run", "POST /retrieve/run", "POST /v1/chat/completions", MCP)
    in_json = sum((results[route].mutated.get(kind, Counter()) for route in json_routes
                   for kind in MUTATIONS[:4]), Counter())
    assert set(in_json) == {422}, "\n".join(lines)  # NaN, 1e400, "\ud800" in a body, under two types: refused
    headers = sum((result.mutated.get("duplicate_header", Counter()) for result in results.values()), Counter())
    assert set(headers) == {400}, "\n".join(lines)
    assert set(results[MCP].mutated) == set(MUTATIONS) and "header Authorization" in results[MCP].mutated_fields


def test_the_openapi_document_states_the_error_answers(server):
    spec = httpx.get(f"{server}/openapi.json", headers={"Authorization": f"Bearer {KEY}"}).json()
    ask = spec["paths"]["/ask/run"]["post"]["responses"]
    assert {"200", "400", "401", "403", "413", "422", "502"} <= set(ask)
    assert ask["401"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ErrorDetail"}
    assert {"202", "415", "429"} <= set(spec["paths"]["/index/run"]["post"]["responses"])
    assert "404" in spec["paths"]["/index/jobs/{job_id}"]["get"]["responses"]
    assert {"403", "404"} <= set(spec["paths"]["/kbs/{kb}"]["delete"]["responses"])
    assert spec["components"]["schemas"]["ChatRequest"]["properties"]["model"]["enum"] == ["ask"]
    status = spec["paths"]["/status"]["get"]["responses"]
    assert "401" not in status  # the guard lets /status through


def test_chat_with_an_unknown_model_names_the_models_route_not_hayhooks_internals(server):
    response = httpx.post(f"{server}/v1/chat/completions", headers={"Authorization": f"Bearer {KEY}"},
                          json={"model": "nope", "messages": [{"role": "user", "content": "hi"}]})
    assert response.status_code == 404
    assert response.json() == {"detail": "no such model: GET /v1/models lists the models"}


class Reading(BaseModel):
    value: float


def faulty_app() -> FastAPI:
    """A server with one fault per kind the fuzzer must report, and one route without any."""
    app = FastAPI()

    @app.post("/echo")
    def echo(item: dict[str, Any]) -> dict:
        return item  # a NaN in the body cannot be written back as JSON: 500

    @app.post("/reading")
    def reading(item: Reading) -> dict:
        return {"finite": math.isfinite(item.value)}  # a NaN is taken as a reading: 200

    @app.get("/crash")
    def crash() -> dict:
        raise HTTPException(status_code=500, detail="boom")

    @app.get("/teapot", responses={404: {"description": "documented"}})
    def teapot() -> JSONResponse:
        return JSONResponse(status_code=418, content={"detail": "undocumented"})

    @app.get("/leak", responses={404: {"description": "documented"}})
    def leak() -> JSONResponse:
        return JSONResponse(status_code=404, content={"detail": "KeyError in QdrantClient.search"})

    @app.get("/fine")
    def fine(count: int = 1) -> dict:
        return {"count": count}

    return app


@contextlib.contextmanager
def serving_in_a_thread(app: FastAPI) -> Iterator[str]:
    """The app behind Gatehouse's edge (a second `Authorization` or `Host` is refused), on a free loopback port."""
    port = free_port()
    edge = EdgeMiddleware(app, keyed=True, allowed_hosts=(), remote=False, allowed_origins=())
    server = uvicorn.Server(uvicorn.Config(edge, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_the_fuzzer_reports_server_errors_undocumented_statuses_and_leaks():
    with serving_in_a_thread(faulty_app()) as url:
        results = fuzz(url, cases=20, key=None, operations=["GET /crash", "GET /teapot", "GET /leak", "GET /fine",
                                                            "GET /missing"])
    assert results["GET /crash"].server_errors >= 1 and results["GET /crash"].failed
    assert results["GET /teapot"].undocumented[418] >= 1 and results["GET /teapot"].failed
    assert results["GET /leak"].leaks >= 1 and results["GET /leak"].failed
    assert results["GET /fine"].cases >= 5 and not results["GET /fine"].failed
    assert results["GET /missing"].not_generated == "not in the OpenAPI document"
    assert results["GET /missing"].cases == 0
    lines = "\n".join(report(results))
    assert "undocumented status 418" in lines and "curl -X GET" in lines


def test_the_fuzzer_sends_mutations_and_reports_a_server_that_takes_them():
    with serving_in_a_thread(faulty_app()) as url:
        results = fuzz(url, cases=40, key=None, operations=["POST /echo", "POST /reading"], seed=0)
    echo, reading = results["POST /echo"], results["POST /reading"]
    assert set(echo.mutated) == set(MUTATIONS) and echo.mutated["non_finite"][500] >= 1 and echo.failed
    assert reading.mutated_accepted >= 1 and reading.failed
    assert "body.value" in reading.mutated_fields  # a field of the route's other cases, added to this one
    lines = "\n".join(report(results))
    assert "accepted for non_finite in body.value: 200" in lines
    assert "server error 500 for surrogate_escape in body" in lines  # echoed, it cannot be written as UTF-8


def test_a_mutation_goes_into_each_field_in_turn_and_into_fields_other_cases_had():
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "ask", "arguments": {"query": "x"}}}
    request = {"method": "POST", "url": "http://127.0.0.1:1/mcp", "headers": {"Authorization": "Bearer k"},
               "json_body": True, "json": call, "data": None, "files": None, "params": None}
    known = ["body.params.arguments.query", "body.params.arguments.top_k"]
    fields = [mutated(dict(request), "surrogate_escape", turn, random.Random(0), known=known).where
              for turn in range(9)]
    assert set(fields) == {"body.jsonrpc", "body.id", "body.method", "body.params", "body.params.name",
                           "body.params.arguments", "body.params.arguments.query", "body.params.arguments.top_k"}
    top_k = mutated(dict(request), "non_finite", 7, random.Random(0), known=known)  # (7 + 0) % 8: a field added
    assert top_k.where == "body.params.arguments.top_k" and top_k.must_refuse
    assert json_number(top_k.body, ("params", "arguments", "top_k")) in ("NaN", "Infinity", "-Infinity", "1e400")
    two = mutated(dict(request), "two_content_types", 0, random.Random(0), known=known)
    assert [value for name, value in two.headers if name == "Content-Type"] == ["application/json", "text/plain"]
    host = mutated(dict(request), "duplicate_header", 1, random.Random(0))
    assert [value for name, value in host.headers if name == "Host"] == ["127.0.0.1:1", "other.example:1"]
    form = {"method": "POST", "url": "http://127.0.0.1:1/kbs/hr?tenant=acme", "headers": {}, "json_body": False,
            "json": None, "data": None, "files": [("kb", (None, "hr")), ("files", ("a.md", b"# A"))],
            "params": {"tenant": "acme"}}
    raw = [mutated(dict(form, files=list(form["files"]), params=dict(form["params"])), "surrogate_bytes", turn,
                   random.Random(0)) for turn in range(3)]
    assert {m.where for m in raw} == {"form.kb", "query.tenant", "path.kbs"}
    assert not any(m.must_refuse for m in raw)  # outside a JSON body a surrogate's bytes are no text: no 5xx is enough
    assert any(b"\xed" in m.body for m in raw) and any("%ED" in m.target for m in raw)


def json_number(body: bytes, path: tuple[str, ...]) -> str:
    """The text of the number at `path` in a JSON body that Python's reader takes (NaN and all)."""
    value = json.loads(body, parse_constant=str, parse_float=lambda text: text)
    for key in path:
        value = value[key]
    return value


def test_naming_the_manifest_file_is_no_leak_but_naming_hayhooks_is():
    from gatehouse.eval.fuzz import INTERNAL_NAMES

    assert not INTERNAL_NAMES.search("limits.requests_per_minute in hayhooks.yml")
    assert INTERNAL_NAMES.search("hayhooks.server.routers failed")
    assert INTERNAL_NAMES.search("see the Hayhooks log")
