import pytest
from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict

from gatehouse.components.embedders.vector import Vector
from gatehouse.components.retrievers.dense_retriever import DenseRetriever
from gatehouse.document_stores.dense_document_store import DenseDocumentStore

PUBLIC = {"field": "meta.tenant", "operator": "==", "value": "public"}


@pytest.fixture
def store(tmp_path):
    store = DenseDocumentStore(path=str(tmp_path / "store"), index="test", embedding_dim=3)
    store.write_documents([
        Document(id="a", content="rotate keys", embedding=[1.0, 0.0, 0.0], meta={"tenant": "public", "kb": "faq"}),
        Document(id="b", content="invoices", embedding=[0.6, 0.8, 0.0], meta={"tenant": "public", "kb": "faq"}),
        Document(id="c", content="secret", embedding=[1.0, 0.0, 0.0], meta={"tenant": "acme", "kb": "faq"}),
    ])
    return store


def test_init(store):
    retriever = DenseRetriever(document_store=store, top_k=7)
    assert (retriever.document_store, retriever.top_k) == (store, 7)


def test_to_dict(store):
    data = component_to_dict(DenseRetriever(document_store=store, top_k=7), "component")
    assert data["type"] == "gatehouse.components.retrievers.dense_retriever.DenseRetriever"
    assert data["init_parameters"]["top_k"] == 7
    assert data["init_parameters"]["document_store"]["type"].endswith("DenseDocumentStore")


def test_from_dict(store, monkeypatch):
    monkeypatch.setenv("HAYSTACK_DESERIALIZATION_ALLOWLIST", "gatehouse.components.*,gatehouse.document_stores.*")
    original = DenseRetriever(document_store=store, top_k=3)
    assert component_to_dict(
        component_from_dict(DenseRetriever, component_to_dict(original, "component"), "component"), "component"
    ) == component_to_dict(original, "component")


def test_run_filters_top_k_and_score_field(store):
    retriever = DenseRetriever(document_store=store, top_k=5)
    found = retriever.run(query_embedding=[1.0, 0.0, 0.0], filters=PUBLIC)["documents"]
    assert [d.id for d in found] == ["a", "b"]  # acme's document is filtered out
    assert found[0].meta["dense_score"] == found[0].score > found[1].score
    assert [d.id for d in retriever.run(query_embedding=[1.0, 0.0, 0.0], filters=PUBLIC, top_k=1)["documents"]] == ["a"]
    assert retriever.run(query_embedding=[1.0, 0.0, 0.0], filters=PUBLIC, top_k=0)["documents"] == []  # not the default
    assert [d.id for d in retriever.run(query_embedding=Vector([1.0, 0.0, 0.0]), filters=PUBLIC)["documents"]] == ["a", "b"]
