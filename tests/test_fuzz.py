"""
Schema fuzzing (`gatehouse.serving.fuzz`, schemathesis with all its checks) of a real `gatehouse serve` on loopback, and
of a small FastAPI app with known faults, which shows the fuzzer reports what it must.
"""

import contextlib
import math
import os
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

from gatehouse.serving.fuzz import FUZZED_OPERATIONS, fuzz, report
from gatehouse.settings import bundled_dir

PROJECT_ROOT = bundled_dir()
KEY = "fuzz-secret-for-tests"
CASES = 100


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[str]:
    """A keyed server (one key, tenant `public`) holding two FAQ articles."""
    tmp = tmp_path_factory.mktemp("fuzz")
    manifest = tmp / "hayhooks.yml"
    manifest.write_text(yaml.safe_dump({
        "pipelines": {kind: {"pipeline": str(PROJECT_ROOT / "pipelines" / f"{kind}.yml"), "kind": kind}
                      for kind in ("ask", "retrieve", "index")},
        "auth": {"keys": [{"env": "GATEHOUSE_TEST_FUZZ_KEY", "tenants": ["public"]}]},
        "mcp": False,
    }), encoding="utf-8")
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
    non_finite = sum((result.non_finite for result in results.values()), Counter())
    assert set(non_finite) == {422}, "\n".join(lines)  # NaN, Infinity, 1e400 in a body: refused, naming the field


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
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
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


def test_the_fuzzer_sends_non_finite_numbers_and_reports_a_server_that_takes_them():
    with serving_in_a_thread(faulty_app()) as url:
        results = fuzz(url, cases=24, key=None, operations=["POST /echo", "POST /reading"], seed=0)
    echo, reading = results["POST /echo"], results["POST /reading"]
    assert sum(echo.non_finite.values()) >= 1 and echo.non_finite[500] >= 1 and echo.failed
    assert reading.non_finite_accepted >= 1 and reading.failed
    lines = "\n".join(report(results))
    assert "non-finite number accepted: 200" in lines and "server error 500 for a non-finite number" in lines


def test_naming_the_manifest_file_is_no_leak_but_naming_hayhooks_is():
    from gatehouse.serving.fuzz import INTERNAL_NAMES

    assert not INTERNAL_NAMES.search("limits.requests_per_minute in hayhooks.yml")
    assert INTERNAL_NAMES.search("hayhooks.server.routers failed")
    assert INTERNAL_NAMES.search("see the Hayhooks log")
