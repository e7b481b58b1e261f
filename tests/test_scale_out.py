"""The scale-out recipe: two `gatehouse serve` processes on one Qdrant server and one Elasticsearch (skipped without)."""

import os
import uuid

import httpx
import pytest

from gatehouse.settings import project_path
from server_process import reachable, running_server

QDRANT_URL = os.environ.get("GATEHOUSE_QDRANT_URL")
ES_URL = os.environ.get("GATEHOUSE_ELASTICSEARCH_URL")


@pytest.mark.skipif(
    not (reachable(QDRANT_URL) and reachable(ES_URL)),
    reason="no Qdrant server and Elasticsearch: set GATEHOUSE_QDRANT_URL and GATEHOUSE_ELASTICSEARCH_URL to reachable "
           "servers to run the scale-out test",
)
def test_two_server_processes_share_one_qdrant_server_and_one_elasticsearch(tmp_path):
    kb = f"scale-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "GATEHOUSE_DATA_DIR": str(tmp_path / "data")}
    manifest = project_path("hayhooks.yml")
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    with running_server(manifest, env=env, workdir=tmp_path / "one", pipelines=3) as one, \
            running_server(manifest, env=env, workdir=tmp_path / "two", pipelines=3) as two:
        upload = httpx.post(f"{one}/index/run", timeout=300, data={"kb": kb, "wait": "true"}, files=[
            ("files", ("rotation.md", b"# Key rotation\n\nRotate the signing key every 90 days from Settings.",
                       "text/markdown")),
        ])
        assert upload.status_code == 200, upload.text
        answer = httpx.post(f"{two}/ask/run", timeout=300,
                            json={"query": "How often is the signing key rotated?", "kb": kb}).json()["result"]
        assert "90 days" in answer["answer"]
        deleted = httpx.delete(f"{two}/kbs/{kb}", timeout=60)
        assert deleted.status_code == 200, deleted.text
        listed = httpx.get(f"{one}/kbs", timeout=60).json()
        assert kb not in {entry["kb"] for entry in listed["knowledge_bases"]}
