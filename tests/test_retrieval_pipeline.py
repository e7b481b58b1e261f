import pytest
from haystack import Document, Pipeline
from haystack.core.serialization import component_from_dict, component_to_dict

from gatehouse.components.retrievers.retrieval_pipeline import RetrievalPipeline, retrieval_input_mapping
from gatehouse.components.retrievers.retrieval_request import RetrievalRequest
from gatehouse.components.retrievers.retrieval_result import RetrievalResult
from gatehouse.components.state import new_state
from gatehouse.ingest import ingest, sample_groups
from gatehouse.pipelines import ALLOWED_MODULES, load_pipeline


def test_init_maps_every_query_socket_and_the_filters():
    retrieval = RetrievalPipeline(pipeline_file="retrieve")
    assert retrieval.pipeline_file == "retrieve"
    assert set(retrieval.input_mapping["query"]) == {"query_embedder.text", "search.query", "ranker.query"}
    assert retrieval.input_mapping["tenant"] == ["tenant_filter.tenant"]
    assert retrieval.input_mapping["top_k"] == ["ranker.top_k"]
    assert retrieval.output_mapping == {"ranker.documents": "documents"}


def test_to_dict_is_a_reference_to_the_file():
    assert component_to_dict(RetrievalPipeline(pipeline_file="retrieve"), "component") == {
        "type": "gatehouse.components.retrievers.retrieval_pipeline.RetrievalPipeline",
        "init_parameters": {"pipeline_file": "retrieve"},
    }


def test_from_dict():
    retrieval = component_from_dict(
        RetrievalPipeline,
        {
            "type": "gatehouse.components.retrievers.retrieval_pipeline.RetrievalPipeline",
            "init_parameters": {"pipeline_file": "retrieve"},
        },
        "component",
    )
    assert retrieval.pipeline_file == "retrieve" and "ranker" in retrieval.pipeline.graph.nodes


def test_mapping_feeds_a_retriever_added_in_yaml():
    pipeline = load_pipeline("retrieve")
    extra = Pipeline.loads(pipeline.dumps(), allowed_modules=ALLOWED_MODULES)
    from gatehouse.components.retrievers.bm25_retriever import BM25Retriever

    extra.add_component("lexical2", BM25Retriever(document_store=pipeline.get_component("search").lexical_store))
    assert "lexical2.query" in retrieval_input_mapping(extra)["query"]


def test_mapping_refuses_a_pipeline_without_a_query_input():
    pipeline = Pipeline()
    pipeline.add_component("result", RetrievalResult())
    with pytest.raises(ValueError, match="no open `query` or `text` input"):
        retrieval_input_mapping(pipeline)


def test_run_retrieves_tenant_pinned_documents(tmp_path, monkeypatch):
    monkeypatch.setenv("GATEHOUSE_DATA_DIR", str(tmp_path))  # its own stores: the faq KB of two tenants
    groups = [g for g in sample_groups() if g.kb == "faq"]
    assert {g.tenant for g in groups} == {None, "globex"}
    assert ingest(groups, progress=False).failed == []
    retrieval = RetrievalPipeline(pipeline_file="retrieve")
    retrieval.warm_up()
    documents = retrieval.run(query="How do I rotate an API key?", tenant="public", kbs=["faq"], top_k=3)["documents"]
    assert 0 < len(documents) <= 3
    assert {d.meta["kb"] for d in documents} == {"faq"} and {d.meta["tenant"] for d in documents} == {"public"}
    quasar = retrieval.run(query="What is Project Quasar?", tenant="globex", top_k=20)["documents"]
    assert "globex" in {d.meta["tenant"] for d in quasar}


def test_request_init_to_dict_from_dict():
    request = RetrievalRequest()
    data = component_to_dict(request, "component")
    assert data == {"type": "gatehouse.components.retrievers.retrieval_request.RetrievalRequest", "init_parameters": {}}
    assert isinstance(component_from_dict(RetrievalRequest, data, "component"), RetrievalRequest)


def test_request_run_asks_for_a_search():
    state = new_state("How do I rotate an API key?", tenant="globex", kbs=["faq"])
    out = RetrievalRequest().run(state=state)
    assert (out["query"], out["tenant"], out["kbs"]) == ("How do I rotate an API key?", "globex", ["faq"])
    assert "documents" not in out and "retrieval_started" in out["state"]


def test_request_run_searches_nothing_for_the_callers_context_alone():
    state = new_state("What is the refund window?", mode="constrained-context", kbs=[])
    out = RetrievalRequest().run(state=state)
    assert out["documents"] == [] and "query" not in out


def test_result_init_to_dict_from_dict():
    data = component_to_dict(RetrievalResult(), "component")
    assert data == {"type": "gatehouse.components.retrievers.retrieval_result.RetrievalResult", "init_parameters": {}}
    assert isinstance(component_from_dict(RetrievalResult, data, "component"), RetrievalResult)


def test_result_run_puts_caller_context_first_and_records_latency():
    context = Document(content="The caller's text.")
    state = RetrievalRequest().run(state=new_state("q", mode="hybrid", context_documents=[context]))["state"]
    retrieved = [Document(content="a", score=0.4), Document(content="b", score=0.2)]
    out = RetrievalResult().run(state=state, documents=retrieved)["state"]
    assert [d.content for d in out["documents"]] == ["The caller's text.", "a", "b"]
    assert out["documents"][0].score > 0.4 and out["chunks_retrieved"] == 2
    assert out["latency_ms"]["retrieval"] >= 0


def test_result_run_constrained_context_is_the_only_passage():
    context = Document(content="The caller's text.")
    state = RetrievalRequest().run(state=new_state("q", mode="constrained-context", context_documents=[context]))
    out = RetrievalResult().run(state=state["state"], documents=state["documents"])["state"]
    assert out["documents"] == [context] and out["documents"][0].score is None
