import pytest
from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict

from gatehouse.components.retrievers.bm25_retriever import BM25Retriever
from gatehouse.document_stores.lexical_document_store import LexicalDocumentStore

KB = {"field": "meta.kb", "operator": "==", "value": "faq"}


@pytest.fixture
def store(tmp_path) -> LexicalDocumentStore:
    store = LexicalDocumentStore(backend="local", local={"path": str(tmp_path)})
    store.write_documents([
        Document(id="a", content="Rotate API keys every ninety days.", meta={"kb": "faq"}),
        Document(id="b", content="Invoices are emailed monthly.", meta={"kb": "faq"}),
        Document(id="c", content="Rotate the signing keys of webhooks.", meta={"kb": "other"}),
    ])
    return store


def test_init(store):
    retriever = BM25Retriever(document_store=store, top_k=5, score_field="ngram_score")
    assert (retriever.document_store, retriever.top_k, retriever.score_field) == (store, 5, "ngram_score")
    assert BM25Retriever(document_store=store).score_field == "bm25_score"
    with pytest.raises(ValueError, match="must be a LexicalDocumentStore"):
        BM25Retriever(document_store=object())


def test_to_dict(store):
    data = component_to_dict(BM25Retriever(document_store=store, top_k=7), "component")
    assert data["type"] == "gatehouse.components.retrievers.bm25_retriever.BM25Retriever"
    assert data["init_parameters"]["top_k"] == 7 and data["init_parameters"]["score_field"] == "bm25_score"
    assert data["init_parameters"]["document_store"] == store.to_dict()


def test_from_dict(store, monkeypatch):
    monkeypatch.setenv("HAYSTACK_DESERIALIZATION_ALLOWLIST", "gatehouse.components.*,gatehouse.document_stores.*")
    original = BM25Retriever(document_store=store, top_k=3, score_field="ngram_score")
    restored = component_from_dict(BM25Retriever, component_to_dict(original, "component"), "component")
    assert component_to_dict(restored, "component") == component_to_dict(original, "component")


def test_run_filters_and_score_field(store):
    words = BM25Retriever(document_store=store).run(query="rotating keys", filters=KB)["documents"]
    assert [d.id for d in words] == ["a"] and words[0].meta["bm25_score"] == words[0].score > 0
    trigrams = BM25Retriever(
        document_store=LexicalDocumentStore(backend="local", local={**store.local, "char_ngrams": 3}),
        score_field="ngram_score",
    )
    hits = trigrams.run(query="invoice", filters=KB, top_k=1)["documents"]
    assert [d.id for d in hits] == ["b"] and "bm25_score" not in hits[0].meta and hits[0].meta["ngram_score"] > 0
    assert BM25Retriever(document_store=store).run(query="rotating keys", filters=KB, top_k=0)["documents"] == []
