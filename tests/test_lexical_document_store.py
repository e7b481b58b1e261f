import os
import urllib.error
import urllib.request
import uuid

import pytest
from haystack import Document
from haystack.document_stores.types import DuplicatePolicy

from gatehouse.document_stores.bm25_document_store import BM25DocumentStore
from gatehouse.document_stores.lexical_document_store import LexicalDocumentStore


def _reachable(url: str | None) -> bool:
    if not url:
        return False
    try:
        urllib.request.urlopen(url, timeout=3)  # noqa: S310 - a URL the tester configured
        return True
    except urllib.error.HTTPError:
        return True  # the server answered (e.g. 401): it is up
    except (OSError, ValueError):
        return False


ES_URL = os.environ.get("GATEHOUSE_ELASTICSEARCH_URL")


@pytest.fixture
def local_store(tmp_path, monkeypatch) -> LexicalDocumentStore:
    monkeypatch.delenv("GATEHOUSE_ELASTICSEARCH_URL", raising=False)
    return LexicalDocumentStore(local={"path": str(tmp_path), "stemmer": "english"})


def test_init(local_store, tmp_path):
    assert local_store.backend == "auto"
    assert local_store.active_backend == "local"
    assert local_store.local == {"path": str(tmp_path), "stemmer": "english"}
    assert local_store.elasticsearch_url is None
    assert local_store.elasticsearch_index == "gatehouse"
    assert isinstance(local_store.store, BM25DocumentStore)
    assert local_store.store.database_path == tmp_path / "gatehouse.sqlite"


def test_init_unknown_backend():
    with pytest.raises(ValueError, match="Unknown lexical backend 'solr'"):
        LexicalDocumentStore(backend="solr")


def test_init_elasticsearch_without_url(monkeypatch):
    monkeypatch.delenv("GATEHOUSE_ELASTICSEARCH_URL", raising=False)
    with pytest.raises(ValueError, match="GATEHOUSE_ELASTICSEARCH_URL"):
        LexicalDocumentStore(backend="elasticsearch")


def test_init_local_backend_ignores_es_env(monkeypatch, tmp_path):
    monkeypatch.setenv("GATEHOUSE_ELASTICSEARCH_URL", "http://127.0.0.1:9")
    store = LexicalDocumentStore(backend="local", local={"path": str(tmp_path)})
    assert store.active_backend == "local"


def test_to_dict(local_store, tmp_path):
    assert local_store.to_dict() == {
        "type": "gatehouse.document_stores.lexical_document_store.LexicalDocumentStore",
        "init_parameters": {
            "backend": "auto",
            "local": {"path": str(tmp_path), "stemmer": "english"},
            "elasticsearch_url": None,
            "elasticsearch_index": "gatehouse",
            "elasticsearch_fuzziness": "0",
        },
    }


def test_from_dict(local_store, tmp_path):
    restored = LexicalDocumentStore.from_dict(local_store.to_dict())
    assert restored.active_backend == "local"
    assert restored.store.database_path == tmp_path / "gatehouse.sqlite"
    assert restored.to_dict() == local_store.to_dict()


def test_run_local_delegation(local_store, tmp_path):
    docs = [
        Document(id="1", content="Rotating API keys is done in Settings.", meta={"kb": "faq", "doc_id": "k"}),
        Document(id="2", content="Invoices arrive monthly.", meta={"kb": "billing", "doc_id": "i"}),
    ]
    assert local_store.write_documents(docs) == 2
    assert local_store.write_documents(docs, policy=DuplicatePolicy.SKIP) == 0
    assert local_store.count_documents() == 2
    assert local_store.store.count_documents() == 2  # really in the local BM25 store
    assert [d.id for d in local_store.filter_documents({"field": "meta.kb", "operator": "==", "value": "faq"})] == ["1"]
    hits = local_store.bm25_retrieval("rotate key", top_k=5)
    assert [d.id for d in hits] == ["1"] and hits[0].score > 0
    assert local_store.bm25_retrieval("rotate", filters={"field": "meta.kb", "operator": "==", "value": "billing"}) == []
    assert local_store.delete_by_filter({"field": "meta.doc_id", "operator": "==", "value": "i"}) == 1
    local_store.delete_documents(["1"])
    assert local_store.count_documents() == 0
    # the data is on disk: a plain BM25 store on the same folder sees the deletes too
    assert BM25DocumentStore(path=str(tmp_path)).count_documents() == 0


@pytest.mark.skipif(
    not _reachable(ES_URL),
    reason="no Elasticsearch server: set GATEHOUSE_ELASTICSEARCH_URL to a reachable server to run this test",
)
def test_run_elasticsearch_roundtrip():
    index = f"gatehouse-test-{uuid.uuid4().hex[:12]}"
    store = LexicalDocumentStore(backend="elasticsearch", elasticsearch_index=index)
    assert store.active_backend == "elasticsearch"
    try:
        docs = [
            Document(id="es1", content="Rotate API keys from the console.", meta={"kb": "faq", "tenant": "public"}),
            Document(id="es2", content="Invoices are emailed monthly.", meta={"kb": "billing", "tenant": "public"}),
        ]
        assert store.write_documents(docs) == 2
        assert store.count_documents() == 2
        hits = store.bm25_retrieval("rotate keys", top_k=5)
        assert hits and hits[0].id == "es1"
        filtered = store.bm25_retrieval("rotate keys", filters={"field": "meta.kb", "operator": "==", "value": "billing"})
        assert all(d.id != "es1" for d in filtered)
        assert store.bm25_retrieval("   ") == []
        store.delete_documents(["es1", "es2"])
        assert store.count_documents() == 0
    finally:
        store.store.client.indices.delete(index=index, ignore_unavailable=True)
