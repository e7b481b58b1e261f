import re
import uuid

import numpy as np
import pytest
import yaml
from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict

from gatehouse.components.retrievers.hybrid_retriever import HybridRetriever
from gatehouse.document_stores.dense_document_store import DenseDocumentStore
from gatehouse.document_stores.lexical_document_store import LexicalDocumentStore
from gatehouse.pipelines import PipelineYAMLError, load_pipeline, pipelines_dir

PUBLIC = {"field": "meta.tenant", "operator": "==", "value": "public"}
QUERY = [1.0, 0.0, 0.0]


def chunk(id_: str, content: str, embedding: list[float], doc_id: str, tenant: str = "public") -> Document:
    return Document(
        id=id_, content=content, embedding=embedding, meta={"tenant": tenant, "kb": "faq", "doc_id": doc_id}
    )


CHUNKS = [  # "a" is far from the query as a whole (0.6) but its first sentence is the query's direction
    chunk("a", "Keys rotate every month. Billing runs yearly.", [0.6, 0.8, 0.0], "keys"),
    chunk("b", "Invoices are sent by mail. Refunds take days.", [0.8, 0.6, 0.0], "billing"),
    chunk("b2", "Invoices list each seat.", [0.7, 0.7, 0.1], "billing"),
    chunk("c", "Acme keys rotate hourly.", [1.0, 0.0, 0.0], "secret", tenant="acme"),
]
SENTENCES = {"a": np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]), "b": np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]),
             "c": np.array([[1.0, 0.0, 0.0]])}


def stores(folder, lexical_folder=None):
    dense = DenseDocumentStore(path=str(folder), index="test", embedding_dim=3)
    lexical = LexicalDocumentStore(local={"path": str(lexical_folder or folder)})
    ngrams = LexicalDocumentStore(analysis="ngrams", local={"path": str(lexical_folder or folder)})
    return dense, lexical, ngrams


@pytest.fixture
def shared(tmp_path):
    dense, lexical, ngrams = stores(tmp_path / "store")
    dense.store.write_documents(CHUNKS, sentence_embeddings=SENTENCES)
    return dense, lexical, ngrams


@pytest.fixture(params=["local", "postgres"])
def searched(request, tmp_path):
    """The chunks in the local shard, and in one PostgreSQL table: both keep sentence vectors."""
    if request.param == "local":
        dense, lexical, ngrams = stores(tmp_path / "store")
    else:
        postgres = {"url": request.getfixturevalue("postgres").primary_url, "table": f"hybrid_{uuid.uuid4().hex[:12]}"}
        dense = DenseDocumentStore(embedding_dim=3, postgres=postgres)
        lexical = LexicalDocumentStore(postgres=postgres)
        ngrams = LexicalDocumentStore(analysis="ngrams", postgres=postgres)
    dense.store.write_documents(CHUNKS, sentence_embeddings=SENTENCES)
    return dense, lexical, ngrams


def test_init(shared):
    dense, lexical, ngrams = shared
    retriever = HybridRetriever(dense_store=dense, lexical_store=lexical, ngrams_store=ngrams, candidates=50, top_k=5)
    assert (retriever.dense_store, retriever.lexical_store, retriever.ngrams_store) == (dense, lexical, ngrams)
    assert (retriever.candidates, retriever.top_k, retriever.sentences) == (50, 5, True)
    assert retriever.fusion["weights"] == {"dense": 0.6, "lexical": 0.2, "ngrams": 0.2}
    assert HybridRetriever(dense_store=dense, lexical_store=lexical).fusion["weights"] == {"dense": 0.6, "lexical": 0.4}
    with pytest.raises(ValueError, match="ngrams"):
        HybridRetriever(dense_store=dense, lexical_store=lexical, fusion={"weights": {"dense": 1.0, "ngrams": 1.0}})
    with pytest.raises(ValueError, match="sparse"):
        HybridRetriever(dense_store=dense, lexical_store=lexical, fusion={"weights": {"sparse": 1.0}})
    with pytest.raises(ValueError, match="fusion method"):
        HybridRetriever(dense_store=dense, lexical_store=lexical, fusion={"method": "sum"})


def test_to_dict(shared):
    dense, lexical, ngrams = shared
    retriever = HybridRetriever(dense_store=dense, lexical_store=lexical, ngrams_store=ngrams, fusion={"method": "rrf"})
    data = component_to_dict(retriever, "component")
    assert data["type"] == "gatehouse.components.retrievers.hybrid_retriever.HybridRetriever"
    params = data["init_parameters"]
    assert params["fusion"]["method"] == "rrf" and params["group_by"] == "doc_id" and params["chunks_per_group"] == 3
    assert params["ngrams_store"]["init_parameters"]["analysis"] == "ngrams"
    assert params["dense_store"]["type"].endswith("DenseDocumentStore")


def test_from_dict(shared, monkeypatch):
    monkeypatch.setenv("HAYSTACK_DESERIALIZATION_ALLOWLIST", "gatehouse.components.*,gatehouse.document_stores.*")
    dense, lexical, ngrams = shared
    original = HybridRetriever(
        dense_store=dense,
        lexical_store=lexical,
        ngrams_store=ngrams,
        candidates=9,
        fusion={"weights": {"dense": 0.5, "lexical": 0.5}},
        group_by=None,
    )
    assert component_to_dict(component_from_dict(HybridRetriever, component_to_dict(original, "component"), "component"), "component") == component_to_dict(original, "component")


def test_from_dict_names_where_a_moved_setting_went(shared, tmp_path, monkeypatch):
    monkeypatch.setenv("HAYSTACK_DESERIALIZATION_ALLOWLIST", "gatehouse.components.*,gatehouse.document_stores.*")
    dense, lexical, _ = shared
    data = component_to_dict(HybridRetriever(dense_store=dense, lexical_store=lexical), "component")
    data["init_parameters"] = {**data["init_parameters"], "method": "rrf", "rrf_k": 30}
    del data["init_parameters"]["fusion"]
    with pytest.raises(ValueError) as raised:
        component_from_dict(HybridRetriever, data, "component")
    for old, new in [("method", "fusion.method"), ("rrf_k", "fusion.rrf_k")]:
        assert re.search(rf"\W{old}\W.*\W{re.escape(new)}\W", str(raised.value)), (old, str(raised.value))
    with pytest.raises(ValueError, match=r"'fusion'.*'k'"):
        HybridRetriever(dense_store=dense, lexical_store=lexical, fusion={"k": 60})
    # A user's retrieve.yml written before the settings moved: loading it names the new place.
    spec = yaml.safe_load((pipelines_dir() / "retrieve.yml").read_text())
    search = spec["components"]["search"]["init_parameters"]
    search.update(search.pop("fusion"))
    path = tmp_path / "retrieve.yml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(PipelineYAMLError) as raised:  # a ValueError naming the file, the old and the new place
        load_pipeline(path)
    assert str(path) in str(raised.value)
    assert re.search(r"\Wweights\W.*\Wfusion\.weights\W", str(raised.value)), str(raised.value)


def test_run_scores_a_chunk_by_its_best_sentence(searched):
    dense, lexical, _ = searched
    only_dense = {"weights": {"dense": 1.0, "lexical": 0.0}}
    with_sentences = HybridRetriever(dense_store=dense, lexical_store=lexical, fusion=only_dense, group_by=None)
    found = with_sentences.run(query="rotate keys", query_embedding=QUERY, filters=PUBLIC)["documents"]
    assert [d.id for d in found] == ["a", "b", "b2"]  # acme's chunk is filtered out
    assert found[0].meta["sentence_score"] == pytest.approx(1.0) and found[0].meta["dense_score"] == pytest.approx(0.6)
    assert "sentence_score" not in found[2].meta  # written without sentence vectors: its chunk vector scores it
    chunks_only = HybridRetriever(dense_store=dense, lexical_store=lexical, fusion=only_dense, group_by=None,
                                  sentences=False)
    assert next(d.id for d in chunks_only.run(query="x", query_embedding=QUERY, filters=PUBLIC)["documents"]) == "b"


def test_run_fuses_per_document(searched):
    dense, lexical, ngrams = searched
    retriever = HybridRetriever(dense_store=dense, lexical_store=lexical, ngrams_store=ngrams, chunks_per_group=1,
                                fusion={"method": "rrf", "weights": {"dense": 0.2, "lexical": 0.4, "ngrams": 0.4}})
    found = retriever.run(query="invoices refunds", query_embedding=QUERY, filters=PUBLIC)["documents"]
    assert [d.meta["doc_id"] for d in found] == ["billing", "keys"]  # one chunk per document
    assert found[0].id == "b" and found[0].meta["lexical_score"] > 0 and found[0].meta["lexical_rank"] == 1
    assert found[0].score > found[1].score and "lexical_score" not in found[1].meta
    assert [d.meta["doc_id"] for d in retriever.run(query="invoices", query_embedding=QUERY, filters=PUBLIC,
                                                   top_k=1)["documents"]] == ["billing"]


def test_run_on_separate_stores_fuses_their_lists(tmp_path):
    dense, lexical, ngrams = stores(tmp_path / "dense", tmp_path / "lexical")
    dense.write_documents(CHUNKS)
    lexical.write_documents(CHUNKS)
    retriever = HybridRetriever(dense_store=dense, lexical_store=lexical, ngrams_store=ngrams, group_by=None,
                                fusion={"weights": {"dense": 1.0, "lexical": 0.5}})
    found = retriever.run(query="invoices by mail", query_embedding=QUERY, filters=PUBLIC)["documents"]
    assert found[0].id == "b" and found[0].meta["dense_rank"] == 1 and found[0].meta["lexical_rank"] == 1
    assert {d.id for d in found} == {"a", "b", "b2"} and "sentence_score" not in found[0].meta
