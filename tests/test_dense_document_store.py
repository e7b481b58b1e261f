import os
import urllib.error
import urllib.request
import uuid

import numpy as np
import pytest
from haystack import Document
from haystack.document_stores.types import DuplicatePolicy
from haystack_integrations.components.retrievers.qdrant import QdrantEmbeddingRetriever

from gatehouse.document_stores.dense_document_store import DEFAULT_PAYLOAD_INDEXES, DenseDocumentStore

DIM = 8


def _reachable(url: str | None) -> bool:
    if not url:
        return False
    try:
        urllib.request.urlopen(url.rstrip("/") + "/readyz", timeout=3)  # noqa: S310 - a URL the tester configured
        return True
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False


QDRANT_URL = os.environ.get("GATEHOUSE_QDRANT_URL")


def vec(i: int) -> list[float]:
    v = np.zeros(DIM, dtype=np.float32)
    v[i % DIM] = 1.0
    v[(i + 1) % DIM] = 0.2
    return (v / np.linalg.norm(v)).tolist()


def doc(i: int, **meta) -> Document:
    return Document(id=f"{i:032x}", content=f"chunk {i}", embedding=vec(i), meta={"tenant": "public", **meta})


@pytest.fixture
def local_env(monkeypatch):
    monkeypatch.delenv("GATEHOUSE_QDRANT_URL", raising=False)


def test_init(local_env, tmp_path):
    store = DenseDocumentStore(index="t_init", embedding_dim=DIM, path=str(tmp_path))
    assert store.configured_path == str(tmp_path)
    assert store.configured_url is None
    assert store.path == str(tmp_path.resolve())
    assert store.url is None
    assert store.payload_fields_to_index is None  # local store: no payload indexes
    assert store.embedding_dim == DIM and store.index == "t_init"
    assert store.count_documents() == 0


def test_to_dict(local_env, tmp_path):
    store = DenseDocumentStore(index="t_dict", embedding_dim=DIM, path=str(tmp_path))
    assert store.to_dict() == {
        "type": "gatehouse.document_stores.dense_document_store.DenseDocumentStore",
        "init_parameters": {
            "index": "t_dict",
            "embedding_dim": DIM,
            "path": str(tmp_path),
            "url": None,
            "similarity": "cosine",
            "payload_fields_to_index": None,
            "return_embedding": False,
        },
    }


def test_to_dict_keeps_configured_none_path(local_env, tmp_path, monkeypatch):
    monkeypatch.setenv("GATEHOUSE_DATA_DIR", str(tmp_path))
    store = DenseDocumentStore(index="t_none", embedding_dim=DIM)
    assert store.path == str(tmp_path.resolve() / "qdrant")  # resolved from the environment
    params = store.to_dict()["init_parameters"]
    assert params["path"] is None and params["url"] is None  # ...but serialised as configured


def test_from_dict(local_env, tmp_path):
    original = DenseDocumentStore(index="t_from", embedding_dim=DIM, path=str(tmp_path), return_embedding=True)
    restored = DenseDocumentStore.from_dict(original.to_dict())
    assert isinstance(restored, DenseDocumentStore)
    assert restored.return_embedding is True
    assert restored.path == original.path
    assert restored.to_dict() == original.to_dict()


def test_run_shared_local_client(local_env, tmp_path):
    first = DenseDocumentStore(index="shared", embedding_dim=DIM, path=str(tmp_path))
    second = DenseDocumentStore(index="shared", embedding_dim=DIM, path=str(tmp_path))
    assert first.write_documents([doc(1, kb="faq"), doc(2, kb="billing")], policy=DuplicatePolicy.OVERWRITE) == 2
    assert second.count_documents() == 2  # the second instance sees the first one's writes
    assert first._client is second._client  # noqa: SLF001 - one client per local folder
    second.write_documents([doc(3, kb="faq")], policy=DuplicatePolicy.OVERWRITE)
    assert first.count_documents() == 3
    hits = QdrantEmbeddingRetriever(document_store=first).run(query_embedding=vec(3), top_k=2)["documents"]
    assert hits[0].id == doc(3).id
    faq = second.filter_documents({"field": "meta.kb", "operator": "==", "value": "faq"})
    assert {d.id for d in faq} == {doc(1).id, doc(3).id}
    first.delete_documents([doc(1).id])
    assert second.count_documents() == 2
    first.close()  # the shared local client stays open
    assert second.count_documents() == 2


def test_run_other_index_is_separate(local_env, tmp_path):
    a = DenseDocumentStore(index="col_a", embedding_dim=DIM, path=str(tmp_path))
    b = DenseDocumentStore(index="col_b", embedding_dim=DIM, path=str(tmp_path))
    a.write_documents([doc(5)])
    assert a.count_documents() == 1
    assert b.count_documents() == 0


@pytest.mark.skipif(
    not _reachable(QDRANT_URL),
    reason="no Qdrant server: set GATEHOUSE_QDRANT_URL to a reachable Qdrant server to run this test",
)
def test_run_qdrant_server_roundtrip():
    index = f"gatehouse_test_{uuid.uuid4().hex[:12]}"
    store = DenseDocumentStore(index=index, embedding_dim=DIM)
    try:
        assert store.path is None and store.url == QDRANT_URL
        assert store.payload_fields_to_index == DEFAULT_PAYLOAD_INDEXES
        store.write_documents([doc(1, kb="faq"), doc(2, kb="billing")])
        assert store.count_documents() == 2
        hits = QdrantEmbeddingRetriever(document_store=store).run(query_embedding=vec(2), top_k=1)["documents"]
        assert hits[0].id == doc(2).id
        store.delete_documents([doc(1).id, doc(2).id])
        assert store.count_documents() == 0
    finally:
        store._client.delete_collection(index)  # noqa: SLF001
        store.close()
