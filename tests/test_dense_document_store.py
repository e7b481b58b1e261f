import os
import uuid

import numpy as np
import pytest
from haystack import Document
from haystack.document_stores.types import DuplicatePolicy
from gatehouse.document_stores.dense_document_store import DEFAULT_PAYLOAD_INDEXES, DenseDocumentStore
from gatehouse.document_stores.edge_document_store import EdgeDocumentStore
from gatehouse.document_stores.errors import DataDirError
from gatehouse.document_stores.lexical_document_store import LexicalDocumentStore
from server_process import reachable
from store_contract import check_write_search_and_delete

DIM = 8


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
    monkeypatch.delenv("GATEHOUSE_POSTGRES_URL", raising=False)


def test_init(local_env, tmp_path):
    store = DenseDocumentStore(index="t_init", embedding_dim=DIM, path=str(tmp_path))
    assert store.path == str(tmp_path)
    assert store.url is None
    assert store.active_backend == "local"
    assert isinstance(store.store, EdgeDocumentStore)
    assert store.store.folder == tmp_path
    assert store.store.embedding_dim == DIM
    assert store.payload_fields_to_index is None  # local store: its payload indexes are fixed
    assert store.embedding_dim == DIM and store.index == "t_init"
    assert store.count_documents() == 0


def test_init_bad_similarity_raises(local_env, tmp_path):
    with pytest.raises(ValueError, match="Unknown similarity 'manhattan'"):
        DenseDocumentStore(embedding_dim=DIM, path=str(tmp_path), similarity="manhattan")


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
            "postgres": {},
        },
    }


def test_to_dict_keeps_configured_none_path(local_env, tmp_path, monkeypatch):
    monkeypatch.setenv("GATEHOUSE_DATA_DIR", str(tmp_path))
    store = DenseDocumentStore(index="t_none", embedding_dim=DIM)
    assert store.store.folder == tmp_path / "store"  # resolved from the environment
    assert (tmp_path / "store").is_dir()
    params = store.to_dict()["init_parameters"]
    assert params["path"] is None and params["url"] is None  # ...but serialised as configured


def test_from_dict(local_env, tmp_path):
    original = DenseDocumentStore(index="t_from", embedding_dim=DIM, path=str(tmp_path), similarity="dot_product")
    restored = DenseDocumentStore.from_dict(original.to_dict())
    assert isinstance(restored, DenseDocumentStore)
    assert restored.similarity == "dot_product"
    assert restored.path == original.path
    assert restored.store.shares_shard(original.store)  # one open shard per folder in a process
    assert restored.to_dict() == original.to_dict()


def test_run_shared_local_shard(local_env, tmp_path):
    first = DenseDocumentStore(index="shared", embedding_dim=DIM, path=str(tmp_path))
    second = DenseDocumentStore(index="shared", embedding_dim=DIM, path=str(tmp_path))
    assert first.store.shares_shard(second.store)  # one open shard per local folder
    assert first.write_documents([doc(1, kb="faq"), doc(2, kb="billing")], policy=DuplicatePolicy.OVERWRITE) == 2
    assert second.count_documents() == 2  # the second instance sees the first one's writes
    second.write_documents([doc(3, kb="faq")], policy=DuplicatePolicy.OVERWRITE)
    assert first.count_documents() == 3
    hits = first.embedding_retrieval(vec(3), top_k=2)
    assert [h.id for h in hits] == [doc(3).id, doc(2).id]
    assert hits[0].score == pytest.approx(1.0) and hits[0].score > hits[1].score
    assert hits[0].embedding is None  # documents come back without their vectors
    faq = second.filter_documents({"field": "meta.kb", "operator": "==", "value": "faq"})
    assert {d.id for d in faq} == {doc(1).id, doc(3).id}
    first.delete_documents([doc(1).id])
    assert second.count_documents() == 2
    assert second.delete_by_filter({"field": "meta.kb", "operator": "==", "value": "billing"}) == 1
    assert [d.id for d in first.filter_documents()] == [doc(3).id]


def test_run_embedding_retrieval_filters_and_top_k(local_env, tmp_path):
    store = DenseDocumentStore(embedding_dim=DIM, path=str(tmp_path))
    store.write_documents([doc(1, kb="faq"), doc(2, kb="faq"), doc(3, tenant="acme", kb="faq")])
    acme = {"field": "meta.tenant", "operator": "==", "value": "acme"}
    assert [d.id for d in store.embedding_retrieval(vec(3), filters=acme, top_k=5)] == [doc(3).id]
    public = {"field": "meta.tenant", "operator": "==", "value": "public"}
    assert [d.id for d in store.embedding_retrieval(vec(3), filters=public, top_k=5)] == [doc(2).id, doc(1).id]
    assert len(store.embedding_retrieval(vec(3), top_k=1)) == 1
    assert store.embedding_retrieval(vec(3), top_k=0) == []


def test_run_other_folder_is_separate(local_env, tmp_path):
    # Locally `index` names nothing (it is the collection on a server): a folder is one store.
    a = DenseDocumentStore(index="col_a", embedding_dim=DIM, path=str(tmp_path / "a"))
    b = DenseDocumentStore(index="col_b", embedding_dim=DIM, path=str(tmp_path / "b"))
    a.write_documents([doc(5)])
    assert a.count_documents() == 1
    assert b.count_documents() == 0
    assert not a.store.shares_shard(b.store)


def test_run_lexical_store_of_the_same_folder_shares_the_shard(local_env, tmp_path, monkeypatch):
    monkeypatch.delenv("GATEHOUSE_ELASTICSEARCH_URL", raising=False)
    dense = DenseDocumentStore(embedding_dim=DIM, path=str(tmp_path))
    lexical = LexicalDocumentStore(local={"path": str(tmp_path)})  # the vector size is the shard's
    assert dense.store.shares_shard(lexical.store)
    dense.write_documents([Document(id="k", content="Rotate API keys from the console.", embedding=vec(1))])
    assert [d.id for d in lexical.bm25_retrieval("rotate keys")] == ["k"]  # one write holds both sides
    lexical.delete_documents(["k"])
    assert dense.count_documents() == 0 and dense.embedding_retrieval(vec(1)) == []


def test_run_other_vector_size_on_an_existing_folder_raises(local_env, tmp_path):
    DenseDocumentStore(embedding_dim=DIM, path=str(tmp_path)).write_documents([doc(1)])
    with pytest.raises(DataDirError, match="created with other settings .*embedding_dim 8"):
        DenseDocumentStore(embedding_dim=16, path=str(tmp_path))


@pytest.mark.skipif(
    not reachable(QDRANT_URL and QDRANT_URL.rstrip("/") + "/readyz"),
    reason="no Qdrant server: set GATEHOUSE_QDRANT_URL to a reachable Qdrant server to run this test",
)
def test_run_qdrant_server_roundtrip():
    index = f"gatehouse_test_{uuid.uuid4().hex[:12]}"
    store = DenseDocumentStore(index=index, embedding_dim=DIM)
    try:
        assert store.path is None and store.url is None  # from GATEHOUSE_QDRANT_URL
        assert store.active_backend == "qdrant"
        assert store.store.payload_fields_to_index == DEFAULT_PAYLOAD_INDEXES
        store.write_documents([doc(1, kb="faq"), doc(2, kb="billing")])
        assert store.count_documents() == 2
        hits = store.embedding_retrieval(vec(2), top_k=1)
        assert hits[0].id == doc(2).id
        faq = {"field": "meta.kb", "operator": "==", "value": "faq"}
        assert [d.id for d in store.embedding_retrieval(vec(2), filters=faq, top_k=5)] == [doc(1).id]
        assert store.embedding_retrieval(vec(2), top_k=0) == []
        store.delete_documents([doc(1).id, doc(2).id])
        assert store.count_documents() == 0
    finally:
        store.store._client.delete_collection(index)  # noqa: SLF001
        store.store.close()


def test_run_qdrant_path_passes_the_store_contract_in_qdrant_clients_local_mode(monkeypatch):
    """`GATEHOUSE_QDRANT_URL` builds qdrant-haystack's `QdrantDocumentStore` with the settings a server gets; `:memory:`
    runs that class in qdrant-client's in-process mode, through the facade the writer and the retriever use."""
    monkeypatch.setenv("GATEHOUSE_QDRANT_URL", ":memory:")
    monkeypatch.delenv("GATEHOUSE_POSTGRES_URL", raising=False)
    store = DenseDocumentStore(index="contract", embedding_dim=3)
    assert store.active_backend == "qdrant" and type(store.store).__name__ == "QdrantDocumentStore"
    assert store.store.payload_fields_to_index == DEFAULT_PAYLOAD_INDEXES and store.store.similarity == "cosine"
    check_write_search_and_delete(store)
    assert store.embedding_retrieval([1.0, 0.0, 0.0], top_k=0) == []
    assert DenseDocumentStore.from_dict(store.to_dict()).active_backend == "qdrant"
    store.store.close()


def test_run_postgres_from_the_environment_shares_one_table_with_the_lexical_store(postgres, monkeypatch):
    monkeypatch.delenv("GATEHOUSE_QDRANT_URL", raising=False)
    monkeypatch.delenv("GATEHOUSE_ELASTICSEARCH_URL", raising=False)
    monkeypatch.setenv("GATEHOUSE_POSTGRES_URL", postgres.primary_url)
    table = {"table": f"dense_{uuid.uuid4().hex[:12]}"}
    store = DenseDocumentStore(embedding_dim=DIM, postgres=table)
    lexical = LexicalDocumentStore(postgres=table)
    assert store.active_backend == lexical.active_backend == "postgres"
    assert store.store.shares_shard(lexical.store) and lexical.store.embedding_dim is None  # the table's size
    store.write_documents([doc(1, kb="faq"), doc(2, kb="billing")])
    faq = {"field": "meta.kb", "operator": "==", "value": "faq"}
    assert [d.id for d in store.embedding_retrieval(vec(2), filters=faq, top_k=5)] == [doc(1).id]
    assert lexical.count_documents() == 2 and lexical.metadata_counts(["kb"]) == {("faq",): 1, ("billing",): 1}
    assert set(lexical.kb_generations()) == {("public", "faq"), ("public", "billing")}
    assert DenseDocumentStore.from_dict(store.to_dict()).count_documents() == 2
    with pytest.raises(ValueError, match="scores by cosine only, not 'l2'"):
        DenseDocumentStore(embedding_dim=DIM, similarity="l2", postgres=table)
    monkeypatch.setenv("GATEHOUSE_QDRANT_URL", "http://127.0.0.1:6333")
    with pytest.raises(ValueError, match="Both a Qdrant server and PostgreSQL are configured"):
        DenseDocumentStore(embedding_dim=DIM, postgres=table)
