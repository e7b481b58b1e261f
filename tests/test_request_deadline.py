"""The request's time budget bounds the LLM call: its timeout and retries fit in what is left of it."""

import socket
import threading
import time

import openai
import pytest
from haystack.dataclasses import ChatMessage

from gatehouse.components.generators.openai_compatible_generator import REQUEST_DEADLINE, OpenAICompatibleChatGenerator


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
    token = REQUEST_DEADLINE.set(time.monotonic() + 2.0)
    started = time.monotonic()
    try:
        with pytest.raises(openai.APITimeoutError):
            generator.run(messages=[ChatMessage.from_user("Hello")])
    finally:
        REQUEST_DEADLINE.reset(token)
    # two tries of about 1 s each (the retry's back-off adds under a second), not 2 x 60 s
    assert time.monotonic() - started < 5.0


def test_run_after_the_deadline_raises_at_once(hanging_server):
    generator = OpenAICompatibleChatGenerator(api_base_url=hanging_server)
    token = REQUEST_DEADLINE.set(time.monotonic() - 1.0)
    try:
        with pytest.raises(TimeoutError, match="time budget"):
            generator.run(messages=[ChatMessage.from_user("Hello")])
    finally:
        REQUEST_DEADLINE.reset(token)
