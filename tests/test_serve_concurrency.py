"""
A real server whose ask pipeline's LLM endpoint hangs (a loopback socket that accepts and never answers): other
requests go on meanwhile, the ask answers `partial` when its time budget runs out, asks waiting on it hold their
caller's running requests whatever `X-Forwarded-For` says, and the command line says at once that the server holds
the data directory.
"""

import os
import re
import socket
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import yaml
from openai import OpenAI
from server_process import running_server

from gatehouse.eval.serving_bench import hanging_ask_pipeline
from gatehouse.settings import bundled_dir

PROJECT_ROOT = bundled_dir()  # the shipped pipelines and sample KBs
QUESTION = "How do I rotate an API key?"
BUDGET_S = 30  # comfortably longer than the retrievals that must finish while the ask waits on the LLM
LLM_TIMEOUT_S = 120  # the LLM client's own timeout: without the budget an ask would wait this long (twice)


@pytest.fixture(scope="module")
def hanging_llm():
    """A loopback port that accepts connections (the kernel's backlog) and never answers."""
    with socket.create_server(("127.0.0.1", 0), backlog=64) as listener:
        listener.settimeout(300)
        accepted: list[socket.socket] = []
        yield {"listener": listener, "port": listener.getsockname()[1], "accepted": accepted}
        for connection in accepted:
            connection.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory, hanging_llm):
    tmp = tmp_path_factory.mktemp("serve_concurrency")
    manifest = {
        "pipelines": {
            "ask": {"pipeline": str(hanging_ask_pipeline(tmp, hanging_llm["port"], timeout=LLM_TIMEOUT_S, max_retries=1)), "kind": "ask"},
            "retrieve": {"pipeline": str(PROJECT_ROOT / "pipelines" / "retrieve.yml"), "kind": "retrieve"},
            "index": {"pipeline": str(PROJECT_ROOT / "pipelines" / "index.yml"), "kind": "index"},
        },
        "mcp": False,
        "limits": {"request_timeout_s": BUDGET_S},
    }
    (tmp / "hayhooks.yml").write_text(yaml.safe_dump(manifest), encoding="utf-8")
    env = {**os.environ, "GATEHOUSE_DATA_DIR": str(tmp / "data")}
    with running_server(tmp / "hayhooks.yml", env=env, workdir=tmp, pipelines=3) as url:
        paths = sorted((PROJECT_ROOT / "kb" / "faq").glob("*.md"))
        upload = httpx.post(f"{url}/index/run", data={"kb": "faq", "wait": "true"}, timeout=600,
                            files=[("files", (p.name, p.read_bytes(), "text/markdown")) for p in paths])
        assert upload.status_code == 200, upload.text
        yield {"url": url, "env": env, "data": tmp / "data"}


def _retrieve(client: httpx.Client) -> float:
    started = time.perf_counter()
    response = client.post("/retrieve/run", json={"query": "rotate an API key", "kbs": ["faq"], "top_k": 3})
    assert response.status_code == 200
    assert response.json()["result"]["documents"][0]["meta"]["source"] == "api-keys.md"
    return time.perf_counter() - started


def _assert_clean_partial(result: dict) -> None:
    assert result["status"] == "partial"
    assert result["answer"] and result["citations"] == []
    warnings = result["validation"]["confidence_warnings"]
    assert warnings == [f"No answer was ready within the time budget of {BUDGET_S} s (limits.request_timeout_s)."]
    assert not re.search(r"Error|Exception|Timeout\w|LLMAnswerer|Generator|generator", " ".join(warnings))


def test_a_hanging_llm_does_not_hold_up_another_request(server, hanging_llm):
    with httpx.Client(base_url=server["url"], timeout=600) as client, ThreadPoolExecutor(1) as pool:
        _retrieve(client)  # warm
        unloaded = [_retrieve(client) for _ in range(6)]
        started = time.monotonic()
        asking = pool.submit(httpx.post, f"{server['url']}/ask/run", json={"query": QUESTION}, timeout=600)
        connection, _ = hanging_llm["listener"].accept()  # the ask now waits on the LLM endpoint
        hanging_llm["accepted"].append(connection)
        during = [_retrieve(client) for _ in range(6)]
        assert not asking.done()  # every retrieval finished while the ask still waited on the LLM
        response = asking.result()
        elapsed = time.monotonic() - started
    assert response.status_code == 200
    _assert_clean_partial(response.json()["result"])
    assert BUDGET_S <= elapsed < LLM_TIMEOUT_S  # answered when the budget ran out, not when the LLM client gave up
    assert statistics.median(during) <= 3 * statistics.median(unloaded)


def test_the_budget_bounds_chat_too_and_x_forwarded_for_does_not_choose_the_rate_limit_bucket(server, hanging_llm):
    """A chat and an ask that wait on the LLM hold the two running requests of their caller (this loopback address,
    whatever `X-Forwarded-For` says): a request naming other addresses is refused meanwhile. Both answer `partial`
    when the budget runs out."""
    client = OpenAI(base_url=f"{server['url']}/v1", api_key="none", timeout=600, max_retries=0)
    with ThreadPoolExecutor(2) as pool:
        started = time.monotonic()
        chatting = pool.submit(client.chat.completions.create, model="ask",
                               messages=[{"role": "user", "content": QUESTION}],
                               extra_headers={"X-Forwarded-For": "203.0.113.1"})
        hanging_llm["accepted"].append(hanging_llm["listener"].accept()[0])  # the chat waits on the LLM now
        asking = pool.submit(httpx.post, f"{server['url']}/ask/run", json={"query": QUESTION}, timeout=600,
                             headers={"X-Forwarded-For": "203.0.113.2"})
        hanging_llm["accepted"].append(hanging_llm["listener"].accept()[0])  # and so does the ask
        others = [httpx.post(f"{server['url']}/retrieve/run", json={"query": "rotate an API key"}, timeout=60,
                             headers={"X-Forwarded-For": f"198.51.100.{n}"}) for n in range(3)]
        assert not asking.done() and not chatting.done()  # refused while both still held their caller's slots
        assert [response.status_code for response in others] == [429] * 3, [r.text for r in others]
        assert "limits.max_concurrent_requests" in others[0].json()["detail"]
        completion, response = chatting.result(), asking.result()
    assert time.monotonic() - started < LLM_TIMEOUT_S
    gatehouse = completion.model_extra["gatehouse"]
    _assert_clean_partial({**gatehouse, "answer": completion.choices[0].message.content,
                           "citations": completion.model_extra["citations"]})
    assert gatehouse["path"] == ["start", "time_budget_exhausted"]
    assert response.status_code == 200, response.text
    _assert_clean_partial(response.json()["result"])


def test_the_cli_says_the_server_holds_the_data_dir(server):
    done = subprocess.run([sys.executable, "-m", "gatehouse.cli", "ask", QUESTION], env=server["env"],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert f"the data directory {server['data'] / 'store'} is in use by another process" in done.stderr
    assert "gatehouse serve" in done.stderr and "REST API" in done.stderr


def test_kb_commands_say_so_too(server):
    done = subprocess.run([sys.executable, "-m", "gatehouse.cli", "kb", "list"], env=server["env"],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 2
    assert "is in use by another process" in done.stderr and "Traceback" not in done.stderr
