import os
import subprocess
import sys
import uuid

import pytest
from haystack import Document
from haystack.document_stores.types import DuplicatePolicy

from gatehouse.document_stores.edge_document_store import EdgeDocumentStore
from gatehouse.document_stores.lexical_document_store import LexicalDocumentStore
from server_process import reachable


ES_URL = os.environ.get("GATEHOUSE_ELASTICSEARCH_URL")


@pytest.fixture
def local_store(tmp_path, monkeypatch) -> LexicalDocumentStore:
    monkeypatch.delenv("GATEHOUSE_ELASTICSEARCH_URL", raising=False)
    monkeypatch.delenv("GATEHOUSE_POSTGRES_URL", raising=False)
    return LexicalDocumentStore(local={"path": str(tmp_path), "stemmer": "english"})


def test_init(local_store, tmp_path):
    assert local_store.backend == "auto"
    assert local_store.active_backend == "local"
    assert local_store.local == {"path": str(tmp_path), "stemmer": "english"}
    assert local_store.elasticsearch_url is None
    assert local_store.elasticsearch_index == "gatehouse"
    assert local_store.analysis == "words"
    assert isinstance(local_store.store, EdgeDocumentStore)
    assert local_store.store.folder == tmp_path
    assert local_store.store.stemmer == "english"  # `local` is passed to the EdgeDocumentStore


def test_init_default_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("GATEHOUSE_ELASTICSEARCH_URL", raising=False)
    monkeypatch.setenv("GATEHOUSE_DATA_DIR", str(tmp_path))
    store = LexicalDocumentStore()
    assert store.local == {}
    assert store.store.folder == tmp_path / "store"  # the shard of the data directory
    assert (tmp_path / "store").is_dir()


def test_init_unknown_backend():
    with pytest.raises(ValueError, match="Unknown lexical backend 'solr'"):
        LexicalDocumentStore(backend="solr")


def test_init_unknown_analysis():
    with pytest.raises(ValueError, match="Unknown analysis 'trigrams'"):
        LexicalDocumentStore(analysis="trigrams")


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
            "analysis": "words",
            "local": {"path": str(tmp_path), "stemmer": "english"},
            "elasticsearch_url": None,
            "elasticsearch_index": "gatehouse",
            "elasticsearch_fuzziness": "0",
            "postgres": {},
        },
    }


def test_from_dict(local_store, tmp_path):
    restored = LexicalDocumentStore.from_dict(local_store.to_dict())
    assert restored.active_backend == "local"
    assert restored.store.folder == tmp_path
    assert restored.store.shares_shard(local_store.store)  # one open shard per folder in a process
    assert restored.to_dict() == local_store.to_dict()
    grams = LexicalDocumentStore(analysis="ngrams", local={"path": str(tmp_path)})
    assert LexicalDocumentStore.from_dict(grams.to_dict()).analysis == "ngrams"


def test_run_local_delegation(local_store, tmp_path):
    docs = [
        Document(id="1", content="Rotating API keys is done in Settings.", meta={"kb": "faq", "doc_id": "k"}),
        Document(id="2", content="Invoices arrive monthly.", meta={"kb": "billing", "doc_id": "i"}),
    ]
    assert local_store.write_documents(docs) == 2
    assert local_store.write_documents(docs, policy=DuplicatePolicy.SKIP) == 0
    assert local_store.count_documents() == 2
    assert local_store.store.count_documents() == 2  # really in the local shard
    assert [d.id for d in local_store.filter_documents({"field": "meta.kb", "operator": "==", "value": "faq"})] == ["1"]
    hits = local_store.bm25_retrieval("rotate key", top_k=5)
    assert [d.id for d in hits] == ["1"] and hits[0].score > 0
    assert local_store.bm25_retrieval("rotate", filters={"field": "meta.kb", "operator": "==", "value": "billing"}) == []
    assert local_store.delete_by_filter({"field": "meta.doc_id", "operator": "==", "value": "i"}) == 1
    local_store.delete_documents(["1"])
    assert local_store.count_documents() == 0
    # a plain edge store on the same folder (the same shard) sees the deletes too
    assert EdgeDocumentStore(path=str(tmp_path)).count_documents() == 0


def test_run_ngrams_match_variants_and_share_the_shard(local_store, tmp_path):
    local_store.write_documents([Document(id="t", content="TNFalpha signalling in macrophages."),
                                 Document(id="o", content="Unrelated billing text.")])
    assert local_store.bm25_retrieval("TNF-alpha") == []  # whole terms: 'tnf' and 'alpha' never occur
    grams = LexicalDocumentStore(analysis="ngrams", local={"path": str(tmp_path)})  # same shard, its n-gram vectors
    assert grams.store.shares_shard(local_store.store)
    assert grams.count_documents() == 2
    assert [d.id for d in grams.bm25_retrieval("TNF-alpha")] == ["t"]


def test_run_filters_tenants_and_delete_by_filter(local_store):
    local_store.write_documents([
        Document(id="a", content="Rotate API keys from the console.", meta={"kb": "faq", "tenant": "public"}),
        Document(id="b", content="Rotate the SAML signing keys yearly.", meta={"kb": "faq", "tenant": "acme"}),
        Document(id="c", content="Rotate invoices? No: invoices are monthly.", meta={"kb": "billing", "tenant": "acme"}),
    ])
    acme = {"field": "meta.tenant", "operator": "==", "value": "acme"}
    visible = {"field": "meta.tenant", "operator": "in", "value": ["public", "other"]}
    assert {d.id for d in local_store.bm25_retrieval("rotate keys", filters=acme)} == {"b", "c"}
    assert [d.id for d in local_store.bm25_retrieval("rotate keys", filters=visible)] == ["a"]
    faq_of_acme = {"operator": "AND", "conditions": [acme, {"field": "meta.kb", "operator": "==", "value": "faq"}]}
    assert [d.id for d in local_store.filter_documents(faq_of_acme)] == ["b"]
    assert local_store.metadata_counts(["tenant", "kb"]) == {("public", "faq"): 1, ("acme", "faq"): 1,
                                                             ("acme", "billing"): 1}
    before = local_store.kb_generations()
    assert local_store.delete_by_filter(acme) == 2
    assert local_store.delete_by_filter(acme) == 0
    assert [d.id for d in local_store.filter_documents()] == ["a"]
    assert local_store.bm25_retrieval("saml") == []
    after = local_store.kb_generations()
    assert after[("acme", "faq")] > before[("acme", "faq")] and after[("acme", "billing")] > before[("acme", "billing")]
    assert after[("public", "faq")] == before[("public", "faq")]  # a KB not touched keeps its counter


def test_run_reopened_after_close_by_another_process_and_this_one(local_store, tmp_path):
    local_store.write_documents([
        Document(id="a", content="Rotate API keys from the console.", meta={"kb": "faq", "tenant": "public"}),
        Document(id="c", content="Single sign-on uses SAML.", meta={"kb": "faq", "tenant": "acme"}),
    ])
    local_store.store.close()  # flushed and released: another process may open the folder now
    script = (
        "import sys\n"
        "from gatehouse.document_stores.lexical_document_store import LexicalDocumentStore\n"
        "store = LexicalDocumentStore(local={'path': sys.argv[1]})\n"
        "print(store.count_documents(), *[d.id for d in store.bm25_retrieval('saml')])\n"
        "store.delete_documents(['a'])\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=dict(os.environ), capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2", "c"]
    reopened = LexicalDocumentStore(local={"path": str(tmp_path)})  # the other process has exited: open it again
    assert not reopened.store.shares_shard(local_store.store)
    assert [d.id for d in reopened.filter_documents()] == ["c"]  # the other process's delete was kept
    assert [d.id for d in reopened.bm25_retrieval("saml")] == ["c"]


@pytest.mark.skipif(
    not reachable(ES_URL),
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


def test_init_postgres_needs_a_url_and_is_exclusive_with_elasticsearch(monkeypatch):
    monkeypatch.delenv("GATEHOUSE_POSTGRES_URL", raising=False)
    with pytest.raises(ValueError, match="The postgres backend needs GATEHOUSE_POSTGRES_URL or postgres.url"):
        LexicalDocumentStore(backend="postgres")
    monkeypatch.setenv("GATEHOUSE_POSTGRES_URL", "postgresql://127.0.0.1:1/x")
    monkeypatch.setenv("GATEHOUSE_ELASTICSEARCH_URL", "http://127.0.0.1:9200")
    with pytest.raises(ValueError, match="Both Elasticsearch and PostgreSQL are configured"):
        LexicalDocumentStore()


def test_run_postgres_words_and_ngrams_with_tenant_filters(postgres, monkeypatch):
    monkeypatch.delenv("GATEHOUSE_ELASTICSEARCH_URL", raising=False)
    table = {"url": postgres.primary_url, "table": f"lexical_{uuid.uuid4().hex[:12]}"}
    words = LexicalDocumentStore(postgres=table)
    grams = LexicalDocumentStore(analysis="ngrams", postgres=table)
    words.write_documents([
        Document(id="a", content="Rotate API keys from the console.", meta={"kb": "faq", "tenant": "public"}),
        Document(id="b", content="Rotate the SAML signing keys yearly.", meta={"kb": "faq", "tenant": "acme"}),
        Document(id="c", content="Rotate invoices? No: invoices are monthly.", meta={"kb": "billing", "tenant": "acme"}),
    ])
    acme = {"field": "meta.tenant", "operator": "==", "value": "acme"}
    visible = {"field": "meta.tenant", "operator": "in", "value": ["public", "other"]}
    assert {d.id for d in words.bm25_retrieval("rotate keys", filters=acme)} == {"b", "c"}
    assert [d.id for d in words.bm25_retrieval("rotate keys", filters=visible)] == ["a"]
    assert [d.id for d in grams.bm25_retrieval("signign", filters=acme)] == ["b"]  # a misspelling
    assert words.metadata_counts(["tenant", "kb"]) == {("public", "faq"): 1, ("acme", "faq"): 1,
                                                       ("acme", "billing"): 1}
    before = words.kb_generations()
    assert words.delete_by_filter(acme) == 2 and words.delete_by_filter(acme) == 0
    after = grams.kb_generations()  # one table: the other facade sees the counters move
    assert after[("acme", "faq")] > before[("acme", "faq")] and after[("public", "faq")] == before[("public", "faq")]
    assert LexicalDocumentStore.from_dict(grams.to_dict()).analysis == "ngrams"
