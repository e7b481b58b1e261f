"""
Bounds of `gatehouse serve`, end to end on one real server over loopback: a history or context over a bound of the ask
pipeline's intake is a 422 naming the setting, over REST and chat, refused before the pipeline runs, while a long
conversation such as a chat client sends is answered; an upload of text without spaces is stored in chunks of at most
`splitter.max_chunk_chars`.
"""

import os
import shutil

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from server_process import running_server

from gatehouse.eval.serving_bench import long_history
from gatehouse.settings import bundled_dir

PROJECT_ROOT = bundled_dir()
KEY = "bounds-secret-for-tests"
QUESTION = "How do I rotate an API key?"
WHERE = "of the ask pipeline's intake"


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    """A keyed server deploying the shipped ask, retrieve and index pipelines."""
    tmp = tmp_path_factory.mktemp("serve-bounds")
    shutil.copytree(PROJECT_ROOT / "pipelines", tmp / "pipelines")
    manifest = tmp / "hayhooks.yml"
    manifest.write_text(yaml.safe_dump({
        "pipelines": {name: {"pipeline": f"pipelines/{name}.yml", "kind": name}
                      for name in ("ask", "retrieve", "index")},
        "auth": {"keys": [{"env": "BOUNDS_TEST_KEY", "tenants": ["public"], "admin": True}]},
        "mcp": False,
    }), encoding="utf-8")
    env = {**os.environ, "GATEHOUSE_DATA_DIR": str(tmp / "data"), "BOUNDS_TEST_KEY": KEY}
    with running_server(manifest, env=env, workdir=tmp, pipelines=3) as url:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=300) as client:
            yield client


def _turns(count: int, size: int, user_size: int | None = None) -> list[dict[str, str]]:
    return [{"role": "user", "content": "u" * (user_size or size)} if index % 2 == 0
            else {"role": "assistant", "content": "a" * size} for index in range(count)]


def _asks_run(client: httpx.Client) -> float:
    """How many asks the server has run through the pipeline (any status), from its metrics."""
    families = text_string_to_metric_families(client.get("/metrics").text)
    return sum(sample.value for family in families for sample in family.samples
               if sample.name == "gatehouse_ask_answers_total")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"history": _turns(1001, 10)},
         f"The history holds 1001 turns; the limit is 1000 (max_request_history_turns {WHERE})"),
        ({"history": _turns(20, 10_000, user_size=10_001)},
         f"The last 20 turns of the history hold 200010 characters; the limit is 200000 (max_history_chars {WHERE})"),
        ({"context": "x" * 200_001, "mode": "constrained-context"},
         f"The context is 200001 characters long; the limit is 200000 (max_context_chars {WHERE})"),
        ({"context": "x" * 200_001}, "(max_context_chars"),  # full-corpus too: the input guardrails read it
    ],
)
def test_rest_history_or_context_over_a_bound_is_422_before_the_pipeline_runs(client, body, message):
    before = _asks_run(client)
    response = client.post("/ask/run", json={"query": QUESTION, **body})
    assert response.status_code == 422, response.text[:500]
    assert message in response.json()["detail"]
    assert _asks_run(client) == before


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        (_turns(1001, 10), f"messages holds 1001 turns before the question; the limit is 1000 "
                           f"(max_request_history_turns {WHERE})"),
        ([{"role": "user", "content": "x" * 200_001}, {"role": "assistant", "content": "Noted."}],
         f"The last 2 turns of the history hold 200007 characters; the limit is 200000 (max_history_chars {WHERE})"),
    ],
)
def test_chat_history_over_a_bound_is_422_before_the_pipeline_runs(client, messages, message):
    before = _asks_run(client)
    for stream in (False, True):
        response = client.post("/v1/chat/completions", json={
            "model": "ask", "stream": stream, "messages": [*messages, {"role": "user", "content": QUESTION}]})
        assert response.status_code == 422, response.text[:500]
        assert message in response.json()["detail"]
    assert _asks_run(client) == before


def test_a_long_conversation_as_a_chat_client_sends_it_is_answered(client):
    """Open WebUI sends the whole conversation with each question: 200 questions and answers, 330,000 characters."""
    conversation = _turns(400, 1500, user_size=150)
    chat = client.post("/v1/chat/completions", json={
        "model": "ask", "messages": [*conversation, {"role": "user", "content": QUESTION}]})
    assert chat.status_code == 200, chat.text[:500]
    assert chat.json()["gatehouse"]["status"] != "error"
    rest = client.post("/ask/run", json={"query": QUESTION, "history": conversation,
                                         "context": "x" * 200_000})  # at the bounds: answered
    assert rest.status_code == 200, rest.text[:500]


def test_text_without_spaces_is_stored_in_chunks_of_at_most_max_chunk_chars(client):
    word = "lorem" * 20_000  # 100,000 characters and not one space: one chunk of them all before the bound
    upload = client.post("/index/run", data={"kb": "oneword", "wait": "true"},
                         files=[("files", ("one-word.txt", word.encode(), "text/plain"))])
    assert upload.status_code == 200, upload.text[:500]
    assert upload.json()["result"]["chunks_written"] == 13
    found = client.post("/retrieve/run", json={"query": "lorem", "kbs": ["oneword"], "top_k": 20})
    assert found.status_code == 200
    contents = [document["content"] for document in found.json()["result"]["documents"]]
    assert contents and all(len(content) <= 8000 for content in contents)  # was one of 100,000 characters
    kbs = client.get("/kbs").json()["knowledge_bases"]
    assert {"tenant": "public", "kb": "oneword", "documents": 1, "chunks": 13} in kbs


def test_the_flood_benchmark_sends_histories_of_the_size_asked():
    history = long_history(1_000_000)
    assert [turn["role"] for turn in history] == ["user", "assistant"]  # both among the turns the pipeline reads
    assert sum(len(turn["content"]) for turn in history) == 1_000_000 and " " in history[0]["content"]
