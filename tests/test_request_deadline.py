"""The request's time budget bounds the LLM call: its timeout and retries fit in what is left of it."""

import socket
import threading
import time

import openai
import pytest
from haystack.dataclasses import ChatMessage

from gatehouse.ask import run_ask
from gatehouse.components.generators.openai_compatible_generator import OpenAICompatibleChatGenerator
from gatehouse.ingest import ingest, sample_groups
from gatehouse.pipelines import build_pipeline, component_spec, read_spec


@pytest.fixture
def hanging_server():
    """A loopback HTTP endpoint that accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    stop.set()
    thread.join()
    for connection in held:
        connection.close()
    listener.close()


def test_run_waits_no_longer_than_the_requests_deadline(hanging_server):
    generator = OpenAICompatibleChatGenerator(api_base_url=hanging_server, timeout=60.0, max_retries=1)
    started = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        generator.run(messages=[ChatMessage.from_user("Hello")], deadline=time.monotonic() + 2.0)
    # two tries of about 1 s each (the retry's back-off adds under a second), not 2 x 60 s
    assert time.monotonic() - started < 5.0


def test_run_after_the_deadline_raises_at_once(hanging_server):
    generator = OpenAICompatibleChatGenerator(api_base_url=hanging_server)
    with pytest.raises(TimeoutError, match="time budget"):
        generator.run(messages=[ChatMessage.from_user("Hello")], deadline=time.monotonic() - 1.0)


def test_the_ask_pipeline_hands_the_deadline_to_every_language_model_call(hanging_server):
    assert ingest(sample_groups(), progress=False).failed == []
    spec = read_spec("ask")
    generator = component_spec(spec, "generator")
    generator.clear()
    generator.update({"type": "gatehouse.components.generators.llm_answerer.LLMAnswerer", "init_parameters": {
        "chat_generator": {"type": "gatehouse.components.generators.openai_compatible_generator."
                                   "OpenAICompatibleChatGenerator",
                           "init_parameters": {"api_base_url": hanging_server, "timeout": 60.0}}}})
    component_spec(spec, "cache_lookup")["init_parameters"]["enabled"] = False
    pipeline = build_pipeline(spec)
    assert {"deadline"} <= set(pipeline.inputs()["answer"]) and {"deadline"} <= set(pipeline.inputs()["intent"])
    started = time.monotonic()
    response = run_ask(pipeline, "How do I rotate an API key?", deadline=time.monotonic() - 1.0)
    assert time.monotonic() - started < 30.0  # the spent budget fails the model call at once, not after 60 s
    assert "generate_llm_failed" in response["path"] and response["status"] == "partial"  # answered extractively
