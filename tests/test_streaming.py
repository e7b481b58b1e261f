"""
Verified streaming of `/v1/chat/completions`: a real `gatehouse serve` on loopback whose LLM generators point at an
OpenAI-compatible server on loopback that streams a scripted reply over real HTTP server-sent events (so the sentence
decisions are deterministic), one deployment with the real SmolLM2 through xllamacpp, and the Open WebUI source
events read the way Open WebUI's code reads them. Chat markers read `[n]` (the n-th source); REST keeps `[S#]`.
"""

import json
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
from openai import OpenAI
from scripted_llm import ScriptedLLM, llm_pipeline
from server_process import free_port, running_server, serving

from gatehouse.components.builders.response_builder import DEFAULT_PARTIAL_NOTICE
from gatehouse.settings import bundled_dir

PROJECT_ROOT = bundled_dir()
GATEHOUSE = str(Path(sys.executable).with_name("gatehouse"))
QUESTION = "How do I revoke an API key?"
SUPPORTED = "Revoking an API key is immediate and permanent <<Revoking is immediate>>."
INVENTED = " Quarterly audit reports are mailed to every shareholder by courier <<Revoking is immediate>>."
CONTRADICTED = " The key stops working across all Corvio regions within 45 seconds <<Revoking is immediate>>."
SECOND = " Requests that use a revoked key fail with HTTP 401 and invalid_api_key <<Revoking is immediate>>."
PAUSE_S = 2.0  # the scripted model stops after the first sentence and the next word: the sentence must arrive first
SCRIPTS = {
    # supported, invented, contradicted, supported: 2 of 4 claims hold, the answer keeps the first and the last
    "kept": [SUPPORTED, " Quarterly", PAUSE_S, INVENTED.removeprefix(" Quarterly"), CONTRADICTED, SECOND],
    # supported, invented, contradicted: 1 of 3 claims holds, below support.min_ratio, so the answer falls back
    "fallback": [SUPPORTED, " Quarterly", PAUSE_S, INVENTED.removeprefix(" Quarterly"), CONTRADICTED],
    # a first sentence, then a model that hangs past the time budget
    "hangs": [SUPPORTED, " Quarterly", 30.0, INVENTED.removeprefix(" Quarterly")],
}
BUDGET_S = 6.0


#: An admin key: the tests deploy more pipelines while the server runs, which a keyless server does not allow.
ADMIN_KEY = "streaming-admin-key"
AUTH = {"Authorization": f"Bearer {ADMIN_KEY}"}


def _manifest(folder: Path, name: str, pipelines: dict[str, Path], **options) -> Path:
    kinds = {"index": "index"}
    manifest = {"pipelines": {n: {"pipeline": str(p), "kind": kinds.get(n, "ask")} for n, p in pipelines.items()},
                "auth": {"keys": [{"env": "GATEHOUSE_STREAMING_KEY", "tenants": ["public"], "admin": True}]},
                "mcp": False, "limits": {"request_timeout_s": options.pop("budget", 120)}, **options}
    path = folder / name
    path.write_text(yaml.safe_dump(manifest), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def llm():
    server = ScriptedLLM(SCRIPTS)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


@pytest.fixture(scope="module")
def server(tmp_path_factory, llm):
    """A server with the extractive `ask` and two scripted LLM deployments, the faq KB uploaded over HTTP."""
    tmp = tmp_path_factory.mktemp("stream")
    pipelines = {"ask": PROJECT_ROOT / "pipelines" / "ask.yml", "index": PROJECT_ROOT / "pipelines" / "index.yml",
                 **{name: llm_pipeline(tmp, name, f"{llm.url}/{name}/v1") for name in ("kept", "fallback")}}
    manifest = _manifest(tmp, "hayhooks.yml", pipelines)
    env = {**os.environ, "GATEHOUSE_DATA_DIR": str(tmp / "data"), "GATEHOUSE_STREAMING_KEY": ADMIN_KEY}
    with running_server(manifest, env=env, workdir=tmp, pipelines=len(pipelines)) as url:
        paths = sorted((PROJECT_ROOT / "kb" / "faq").glob("*.md"))
        upload = httpx.post(f"{url}/index/run", files=[("files", (p.name, p.read_bytes(), "text/markdown"))
                                                        for p in paths], data={"kb": "faq"}, headers=AUTH,
                            timeout=600)
        assert upload.status_code in (200, 202), upload.text
        job = upload.json()
        while job.get("status") in ("queued", "running"):  # the upload is indexed by a background job
            time.sleep(1)
            job = httpx.get(f"{url}{job['status_url']}", headers=AUTH, timeout=30).json()
        assert job.get("status", "done") == "done", job
        yield {"url": url, "tmp": tmp}


def _deploy(server, name: str, pipeline: Path, **options) -> None:
    """Deploy one more ask pipeline with a manifest of its own (Open WebUI sources, a shorter budget)."""
    manifest = _manifest(server["tmp"], f"{name}-manifest.yml", {name: pipeline}, **options)
    files = {"pipeline_wrapper.py": (server["tmp"] / "data" / "serve" / "pipelines" / "ask" /
                                     "pipeline_wrapper.py").read_text(encoding="utf-8"),
             "gatehouse.yml": yaml.safe_dump({"kind": "ask", "pipeline": str(pipeline), "manifest": str(manifest)})}
    deployed = httpx.post(f"{server['url']}/deploy_files", json={"name": name, "files": files, "overwrite": True},
                          headers=AUTH, timeout=300)
    assert deployed.status_code == 200, deployed.text


def _sse(url: str, model: str, question: str = QUESTION) -> tuple[list[tuple[float, dict]], float]:
    """Stream a chat completion; returns each `data:` payload with its arrival time (s after the request)."""
    started = time.perf_counter()
    body = {"model": model, "stream": True, "messages": [{"role": "user", "content": question}]}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, headers=AUTH, timeout=300) as response:
        assert response.status_code == 200, response.read()
        lines = [(time.perf_counter() - started, line) for line in response.iter_lines() if line]
    events = [(at, json.loads(line[len("data: "):])) for at, line in lines[:-1]]
    assert lines[-1][1] == "data: [DONE]"  # every stream ends as OpenAI's do
    return events, started


def _text(events: list[tuple[float, dict]]) -> str:
    return "".join(e["choices"][0]["delta"].get("content") or "" for _, e in events if "choices" in e)


def _rest(server, model: str) -> dict:
    response = httpx.post(f"{server['url']}/{model}/run", json={"query": QUESTION}, headers=AUTH, timeout=300)
    assert response.status_code == 200, response.text
    return response.json()["result"]


def _numbered(answer: str, numbers: dict[str, int]) -> str:
    """A REST answer with its `[S#]` markers written as chat writes them (`gatehouse.source_numbers`)."""
    return re.sub(r"\[(S\d+)\]", lambda m: f"[{numbers[m.group(1)]}]", answer)


def test_sentences_are_sent_as_they_pass_and_equal_the_verified_answer(server):
    client = OpenAI(base_url=f"{server['url']}/v1", api_key=ADMIN_KEY)
    started = time.perf_counter()
    arrivals = []
    for chunk in client.chat.completions.create(model="kept", stream=True,
                                                messages=[{"role": "user", "content": QUESTION}]):
        arrivals.append((time.perf_counter() - started, chunk))
        if len(arrivals) == 1:
            received_at = time.time()
    text = "".join(c.choices[0].delta.content or "" for _, c in arrivals)
    first_at, first = next((t, c) for t, c in arrivals if c.choices[0].delta.content)
    final = arrivals[-1][1]
    gatehouse = final.model_extra["gatehouse"]
    marker = re.search(r"\[\d+\]", first.choices[0].delta.content).group(0)

    # The first chunk is the first sentence, sent while the model paused after it: not after the whole reply.
    assert first.choices[0].delta.content == SUPPORTED.replace(" <<Revoking is immediate>>", f" {marker}")
    assert first_at < arrivals[-1][0] - PAUSE_S * 0.75
    # The invented and the contradicted sentence were never sent; what was sent is the verified answer.
    assert "Quarterly" not in text and "45 seconds" not in text
    # The answer is partial, and the words say so: the notice follows the verified sentences, as in REST.
    assert text == (f"{SUPPORTED} {SECOND.strip()}".replace(" <<Revoking is immediate>>", f" {marker}")
                    + f"\n\n{DEFAULT_PARTIAL_NOTICE}")
    assert gatehouse["stream"]["sentences_sent"] == 2 and gatehouse["stream"]["sentences_dropped"] == 2
    assert gatehouse["stream"]["answer_differs"] is False and gatehouse["status"] == "partial"
    assert gatehouse["metadata"]["usage"]["completion_tokens"] == 40  # the streamed request asked for its usage
    removed = gatehouse["validation"]["guardrail_actions"]
    assert any(a.startswith("removed_unsupported_sentence:Quarterly") for a in removed)
    assert any(a.startswith("removed_contradicted_sentence:The key stops") for a in removed)
    assert marker == "[1]" and gatehouse["source_numbers"] == {final.model_extra["citations"][0]["id"]: 1}
    assert len(final.model_extra["citations"]) == 1
    # Non-streaming chat and REST answer exactly what was streamed.
    whole = client.chat.completions.create(model="kept", messages=[{"role": "user", "content": QUESTION}])
    assert whole.choices[0].message.content == text == _numbered(_rest(server, "kept")["answer"],
                                                                 gatehouse["source_numbers"])
    delay_ms = (received_at - gatehouse["stream"]["first_sentence_at"]) * 1000
    print(f"\nscripted LLM: client TTFT {first_at * 1000:.0f} ms; first verified sentence available "
          f"{gatehouse['stream']['first_sentence_ms']:.0f} ms into the stream, received {delay_ms:.0f} ms later; whole "
          f"answer {gatehouse['stream']['answer_ms']:.0f} ms")  # its 100 ms target: python -m gatehouse.eval.serving_bench


def test_an_answer_replaced_at_the_end_says_so_in_the_final_chunk(server):
    events, _ = _sse(server["url"], "fallback")
    final = events[-1][1]
    gatehouse = final["gatehouse"]
    text = _text(events)
    rest = _rest(server, "fallback")
    # 1 of 3 claims holds: the output guardrails replace the answer with the fallback once the reply is complete.
    assert rest["status"] == "fallback" and gatehouse["status"] == "fallback"
    streamed_first = next(e["choices"][0]["delta"]["content"] for _, e in events if e["choices"][0]["delta"]["content"])
    assert streamed_first.startswith("Revoking an API key is immediate") and "Quarterly" not in text
    assert gatehouse["stream"]["answer_differs"] is True
    assert text == f"{streamed_first}\n\n{rest['answer']}"
    assert any(w.startswith("streamed_answer_replaced:") for w in gatehouse["validation"]["confidence_warnings"])
    assert final["citations"] == []


def test_the_extractive_answer_streams_when_complete(server):
    events, _ = _sse(server["url"], "ask")
    final = events[-1][1]
    stream = final["gatehouse"]["stream"]
    first_at = next(t for t, e in events if e["choices"][0]["delta"].get("content"))
    assert stream["mode"] == "answer" and stream["first_sentence_ms"] is None
    assert _text(events) == _numbered(_rest(server, "ask")["answer"], final["gatehouse"]["source_numbers"])
    assert first_at * 1000 >= stream["answer_ms"]  # TTFT is the whole pipeline's latency
    print(f"\nextractive: TTFT {first_at * 1000:.0f} ms, pipeline {stream['answer_ms']:.0f} ms")


def test_the_time_budget_still_bounds_a_stream(server, llm):
    _deploy(server, "hangs", llm_pipeline(server["tmp"], "hangs", f"{llm.url}/hangs/v1"), budget=BUDGET_S)
    events, _ = _sse(server["url"], "hangs")
    final = events[-1][1]
    assert events[-1][0] < BUDGET_S + 5  # the model still hangs; the request is answered when the budget runs out
    assert final["gatehouse"]["status"] == "partial" and "time_budget_exhausted" in final["gatehouse"]["path"]
    text = _text(events)
    assert text.startswith("Revoking an API key is immediate") and "Quarterly" not in text
    assert text.endswith("I could not finish an answer in time. Please try again in a moment.")


def test_open_webui_sources_are_events_it_reads_and_markers_it_links(server):
    events, _ = _sse(server["url"], "kept")
    final = events[-1][1]
    sources = _open_webui_sources(events)
    content = _text(events)
    # As Open WebUI reads a message: `[n]` is the n-th source of its citation list (Citations.svelte's reducer,
    # keyed by metadata.source) and of its inline markers (ContentRenderer's sourceIds, keyed by metadata.name).
    citation_list = list(dict.fromkeys(m["source"] for s in sources for m in s["metadata"]))
    inline_ids = list(dict.fromkeys(m["name"] for s in sources for m in s["metadata"]))
    assert len(citation_list) == len(inline_ids) == len(sources) == len(final["citations"]) == 1
    numbers = final["gatehouse"]["source_numbers"]
    cited = final["citations"][0]
    assert numbers == {cited["id"]: 1}
    # The chip is the section, whole; the popup shows the document's title and section, then the whole passage.
    assert sources[0]["metadata"][0]["name"] == cited["section"] == "Revoke an API key"
    assert sources[0]["document"] == [f"{cited['text']}\n\n{cited['quote']}"]
    # the units the two sentences stand on, whole, and nothing else of the section
    assert cited["quote"].startswith("Revoking is immediate and permanent.") and "HTTP 401" in cited["quote"]
    assert "Corvio Gateway" not in cited["quote"]
    assert sources[0]["metadata"][0]["source_url"] == cited["url"] == "https://docs.corvio.example/faq/api-keys#revoke-an-api-key"
    # The source event comes once the answer is complete, before the final chunk, in an ordinary chunk (every line
    # has a choice); the text carries `[1]`, never `[S#]`.
    assert all(e["choices"][0]["delta"]["content"] is not None for _, e in events)
    last_text = max(i for i, (_, e) in enumerate(events) if e["choices"][0]["delta"]["content"])
    source_at = [i for i, (_, e) in enumerate(events) if "event" in e]
    assert source_at == [len(events) - 2] and last_text < source_at[0]
    assert events[source_at[0]][1]["choices"][0]["delta"]["content"] == ""
    assert re.findall(r"\[[^\]]*\]", content) == ["[1]", "[1]"] and "[S" not in content
    assert content == _rest(server, "kept")["answer"].replace(f"[{cited['id']}]", "[1]")
    # Not streamed: the same text and the same sources, in the top-level `sources` Open WebUI reads then.
    whole = httpx.post(f"{server['url']}/v1/chat/completions", timeout=300, headers=AUTH,
                       json={"model": "kept", "messages": [{"role": "user", "content": QUESTION}]}).json()
    assert whole["choices"][0]["message"]["content"] == content and whole["citations"] == final["citations"]
    assert whole["sources"] == sources and whole["gatehouse"]["source_numbers"] == numbers


def _open_webui_sources(events: list[tuple[float, dict]]) -> list[dict]:
    """
    What Open WebUI keeps of a streamed reply's events: its middleware passes `data["event"]` of every `data:` line to
    the event emitter, which stores `event["data"]` as a message source when `event["type"]` is `source` or
    `citation` and `data` has no `type` of its own (`code_execution`).
    """
    sources = []
    for _, data in events:
        event = data.get("event")
        if event and event.get("type") in ("source", "citation") and event["data"].get("type") is None:
            source = event["data"]
            assert isinstance(source["document"], list) and len(source["document"]) == len(source["metadata"])
            sources.append(source)
    return sources


def test_a_real_model_streams_only_verified_text(server, tmp_path):
    """SmolLM2-135M behind xllamacpp's server: whatever it writes, only text the checks passed is sent."""
    pytest.importorskip("xllamacpp", reason='xllamacpp is not installed (pip install "gatehouse[llm]")')
    env = {**os.environ, "GATEHOUSE_DATA_DIR": str(tmp_path / "data")}
    installed = subprocess.run([GATEHOUSE, "llm", "install", "--model", "smollm2"], env=env, capture_output=True,
                               text=True, timeout=600, check=False)
    if installed.returncode != 0:
        pytest.skip(f"SmolLM2 could not be obtained: {installed.stderr.strip()}")
    port = free_port()
    log = tmp_path / "llm.log"
    with log.open("w") as output:
        process = subprocess.Popen([GATEHOUSE, "llm", "serve", "--model", "smollm2", "--port", str(port)],
                                   env=env, stdout=output, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}/v1"
        with serving(process, lambda: httpx.get(f"{url}/models", timeout=2).status_code == 200, seconds=120, log=log):
            _deploy(server, "smollm2", llm_pipeline(server["tmp"], "smollm2", url, timeout=240), budget=280)
            events, _ = _sse(server["url"], "smollm2")
    final = events[-1][1]
    gatehouse = final["gatehouse"]
    stream = gatehouse["stream"]
    text = _text(events)
    assert "generate_llm" in gatehouse["path"] and gatehouse["metadata"]["usage"]["completion_tokens"] > 0
    assert stream["sentences_sent"] + stream["sentences_dropped"] > 0  # the gate followed the model's stream
    for removed in gatehouse["validation"]["unsupported_sentences"]:  # what the verifier removed was never sent
        assert removed not in text
    if not stream["answer_differs"]:
        numbers = gatehouse["source_numbers"]
        assert not re.search(r"\[S\d", text) and set(numbers) == {c["id"] for c in final["citations"]}
        assert {int(n) for group in re.findall(r"\[(\d+(?:, \d+)*)\]", text) for n in group.split(", ")} <= set(
            numbers.values())
    print(f"\nSmolLM2: {stream}, status {gatehouse['status']}, text {text!r}")
