import uuid

import pytest
from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict

from gatehouse.components.embedders.document_embedder import DocumentEmbedder
from gatehouse.components.writers.index_writer import IndexWriter
from gatehouse.document_stores.dense_document_store import DenseDocumentStore
from gatehouse.document_stores.edge_document_store import EdgeDocumentStore
from gatehouse.document_stores.lexical_document_store import LexicalDocumentStore

DOC_ID = "public/faq/api-keys.md"


@pytest.fixture(scope="module")
def embedder() -> DocumentEmbedder:
    e = DocumentEmbedder(cache_dir="off")
    e.warm_up()
    return e


@pytest.fixture(params=["shared", "separate", "postgres"])
def stores(request, tmp_path, monkeypatch):
    """The default layout (both stores in one shard: one write per document), two separate stores (as with a
    Qdrant server and Elasticsearch: each store written in turn) and one PostgreSQL table (one transaction per
    document)."""
    monkeypatch.delenv("GATEHOUSE_QDRANT_URL", raising=False)
    monkeypatch.delenv("GATEHOUSE_ELASTICSEARCH_URL", raising=False)
    if request.param == "postgres":
        postgres = {"url": request.getfixturevalue("postgres").primary_url, "table": f"writer_{uuid.uuid4().hex[:12]}"}
        dense, lexical = DenseDocumentStore(postgres=postgres), LexicalDocumentStore(postgres=postgres)
        assert dense.active_backend == lexical.active_backend == "postgres"
        assert dense.store.shares_shard(lexical.store)
        return dense, lexical
    shared = request.param == "shared"
    dense = DenseDocumentStore(index="writer_test", path=str(tmp_path / ("store" if shared else "dense")))
    lexical = LexicalDocumentStore(local={"path": str(tmp_path / ("store" if shared else "lexical"))})
    assert dense.store.shares_shard(lexical.store) is shared
    return dense, lexical


def chunks(texts: list[str], doc_id: str = DOC_ID) -> list[Document]:
    return [
        Document(id=f"{doc_id}#{i}:{text}"[:200], content=text,
                 meta={"doc_id": doc_id, "kb": "faq", "tenant": "public", "content_hash": "h1", "chunk_index": i})
        for i, text in enumerate(texts)
    ]


def plan(*doc_ids: str) -> dict:
    return {
        "kb": "faq",
        "tenant": "public",
        "planned": [{"source": d.rsplit("/", 1)[-1], "doc_id": d, "changed": False} for d in doc_ids],
        "skipped": [{"source": "old.md", "doc_id": "public/faq/old.md", "reason": "unchanged"}],
        "failed": [{"source": "x.png", "reason": "unsupported file type '.png'"}],
    }


def test_init(stores):
    dense, lexical = stores
    writer = IndexWriter(dense_store=dense, lexical_store=lexical)
    assert writer.dense_store is dense and writer.lexical_store is lexical


def test_to_dict(stores):
    dense, lexical = stores
    data = component_to_dict(IndexWriter(dense_store=dense, lexical_store=lexical), "component")
    assert data["type"] == "gatehouse.components.writers.index_writer.IndexWriter"
    assert data["init_parameters"] == {
        "dense_store": component_to_dict(dense, "component"),
        "lexical_store": component_to_dict(lexical, "component"),
    }


def test_from_dict(stores, monkeypatch):
    monkeypatch.setenv("HAYSTACK_DESERIALIZATION_ALLOWLIST", "gatehouse.components.*,gatehouse.document_stores.*")
    dense, lexical = stores
    restored = component_from_dict(IndexWriter, component_to_dict(IndexWriter(dense_store=dense, lexical_store=lexical), "component"), "component")
    assert isinstance(restored.dense_store, DenseDocumentStore)
    assert isinstance(restored.lexical_store, LexicalDocumentStore)
    assert restored.dense_store.path == dense.path
    assert restored.lexical_store.to_dict() == component_to_dict(lexical, "component")


def test_run_writes_both_stores(stores, embedder):
    dense, lexical = stores
    writer = IndexWriter(dense_store=dense, lexical_store=lexical)
    embedded = embedder.run(documents=chunks(["Rotate API keys every 90 days.", "Old keys work for 24 hours."]))["documents"]
    report = writer.run(report=plan(DOC_ID), documents=embedded)["report"]
    assert report["written"] == [
        {"source": "api-keys.md", "doc_id": DOC_ID, "changed": False, "chunks": 2, "replaced_chunks": 0}
    ]
    assert report["totals"] == {"documents_written": 1, "chunks_written": 2, "skipped": 1, "failed": 1}
    assert dense.count_documents() == 2 and lexical.count_documents() == 2
    assert [d.id for d in lexical.bm25_retrieval("rotate", top_k=1)] == [embedded[0].id]
    hits = dense.embedding_retrieval(embedded[1].embedding, top_k=1)
    assert hits[0].id == embedded[1].id
    assert hits[0].meta["doc_id"] == DOC_ID and hits[0].content == "Old keys work for 24 hours."


def test_run_rewrite_removes_stale_chunks(stores, embedder):
    dense, lexical = stores
    writer = IndexWriter(dense_store=dense, lexical_store=lexical)
    other = embedder.run(documents=chunks(["Invoices are monthly."], doc_id="public/faq/billing.md"))["documents"]
    v1 = embedder.run(documents=chunks(["Keep this chunk.", "Drop this chunk.", "And drop this one."]))["documents"]
    writer.run(report=plan(DOC_ID, "public/faq/billing.md"), documents=v1 + other)
    assert dense.count_documents() == 4 and lexical.count_documents() == 4

    v2 = embedder.run(documents=chunks(["Keep this chunk.", "A brand new chunk."]))["documents"]
    report = writer.run(report=plan(DOC_ID), documents=v2)["report"]
    assert report["written"][0]["chunks"] == 2 and report["written"][0]["replaced_chunks"] == 2
    expected = {d.id for d in v2} | {other[0].id}
    doc_filter = {"field": "meta.doc_id", "operator": "==", "value": DOC_ID}
    assert {d.id for d in lexical.filter_documents()} == expected
    assert {d.id for d in dense.filter_documents()} == expected
    assert {d.content for d in dense.filter_documents(doc_filter)} == {"Keep this chunk.", "A brand new chunk."}
    assert lexical.bm25_retrieval("drop") == []
    dropped = v1[1].embedding
    assert dropped not in [d.embedding for d in v2]
    assert all(hit.id in expected for hit in dense.embedding_retrieval(dropped, top_k=10))  # gone from both sides
    assert dense.count_documents() == 3 and lexical.count_documents() == 3

    again = writer.run(report=plan(DOC_ID), documents=v2)["report"]  # the same chunks again: nothing to remove
    assert again["written"][0]["replaced_chunks"] == 0
    assert {d.id for d in lexical.filter_documents()} == expected


def test_run_planned_without_chunks_fails(stores):
    dense, lexical = stores
    report = IndexWriter(dense_store=dense, lexical_store=lexical).run(report=plan("public/faq/scan.pdf"))["report"]
    assert report["written"] == []
    assert {"source": "scan.pdf", "reason": "no text could be extracted"} in report["failed"]
    assert report["totals"]["failed"] == 2  # the planner's failure is kept
    assert dense.count_documents() == 0 and lexical.count_documents() == 0


def test_run_unplanned_chunks_still_written(stores, embedder):
    dense, lexical = stores
    embedded = embedder.run(documents=chunks(["Extra chunk text."], doc_id="public/faq/extra.md"))["documents"]
    report = IndexWriter(dense_store=dense, lexical_store=lexical).run(report={}, documents=embedded)["report"]
    assert report["written"][0]["doc_id"] == "public/faq/extra.md"
    assert lexical.count_documents() == 1 and dense.count_documents() == 1


def test_run_chunk_without_embedding_raises(stores):
    dense, lexical = stores
    writer = IndexWriter(dense_store=dense, lexical_store=lexical)
    with pytest.raises(ValueError, match="no doc_id or no embedding"):
        writer.run(report=plan(DOC_ID), documents=chunks(["Not embedded."]))
    with pytest.raises(ValueError, match="no doc_id or no embedding"):
        writer.run(report=plan(DOC_ID), documents=[Document(content="no doc id", embedding=[0.0] * 384)])
    assert lexical.count_documents() == 0 and dense.count_documents() == 0


def test_run_stores_sentence_vectors_with_the_chunks(stores, embedder):
    dense, lexical = stores
    docs = embedder.run(documents=chunks(["Rotate keys monthly. Billing is yearly."]))["documents"]
    sentences = embedder._backend.embed(["Rotate keys monthly.", "Billing is yearly."])
    IndexWriter(dense_store=dense, lexical_store=lexical).run(
        documents=docs, report=plan(DOC_ID), sentence_embeddings={docs[0].id: sentences})
    query = sentences[0].tolist()  # the first sentence itself
    if isinstance(dense.store, EdgeDocumentStore):  # the shard scores by its own ids
        (hit,) = dense.store.ranked_ids({"dense": "dense"}, query, "", None, 5)["dense"]
        chunk_score, sentence_score = dense.store.similarities(query, [hit[0]])[hit[0]]
    else:
        chunk_score, sentence_score = dense.store.similarities(query, [docs[0].id])[docs[0].id]
    if dense.store.shares_shard(lexical.store):
        assert sentence_score == pytest.approx(1.0, abs=1e-5) and chunk_score < sentence_score
    else:  # kept only by the local store that holds a chunk's every vector
        assert sentence_score is None


def test_run_the_qdrant_path_answers_a_hybrid_search_after_a_rewrite(embedder, tmp_path, monkeypatch):
    """The Qdrant path (`GATEHOUSE_QDRANT_URL`: qdrant-haystack's store, here in qdrant-client's in-process mode)
    beside the local lexical store, in one process: a document written and replaced by the writer (each store in
    turn), searched by the hybrid retriever, which fuses the dense and BM25 lists without sentence scores."""
    from gatehouse.components.retrievers.hybrid_retriever import HybridRetriever

    monkeypatch.setenv("GATEHOUSE_QDRANT_URL", ":memory:")
    monkeypatch.delenv("GATEHOUSE_ELASTICSEARCH_URL", raising=False)
    dense = DenseDocumentStore(index=f"hybrid_{uuid.uuid4().hex[:12]}")
    lexical = LexicalDocumentStore(local={"path": str(tmp_path / "lexical")})
    writer = IndexWriter(dense_store=dense, lexical_store=lexical)
    writer.run(report=plan(DOC_ID), documents=embedder.run(documents=chunks(["Rotate API keys every 90 days.",
                                                                             "Invoices are sent monthly."]))["documents"])
    replaced = writer.run(report=plan(DOC_ID), documents=embedder.run(documents=chunks([
        "Rotate API keys every 30 days.", "Invoices are sent monthly."]))["documents"])["report"]
    assert replaced["written"][0]["replaced_chunks"] == 1
    assert dense.count_documents() == lexical.count_documents() == 2
    retriever = HybridRetriever(dense_store=dense, lexical_store=lexical, top_k=5, chunks_per_group=5)
    query = "how often do I rotate API keys"
    found = retriever.run(query=query, query_embedding=embedder._backend.embed([query])[0].tolist(),
                          filters={"field": "meta.tenant", "operator": "in", "value": ["public"]})["documents"]
    assert [d.content for d in found][:1] == ["Rotate API keys every 30 days."]
    assert "Rotate API keys every 90 days." not in [d.content for d in found]
    assert found[0].meta.get("sentence_score") is None and found[0].meta["dense_score"] > 0
