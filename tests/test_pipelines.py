import pytest

from gatehouse.pipelines import PipelineYAMLError, load_pipeline


def test_load_pipeline_names_the_new_module_of_an_old_components_type(tmp_path):
    path = tmp_path / "old.yml"
    path.write_text(
        "components:\n"
        "  intent:\n"
        "    type: components.intent_gate.IntentGate\n"
        "    init_parameters: {}\n"
        "  lexical:\n"
        "    type: components.bm25_retriever.BM25Retriever\n"
        "    init_parameters:\n"
        "      document_store:\n"
        "        type: components.stores.lexical_document_store.LexicalDocumentStore\n"
        "        init_parameters: {}\n"
        "connections: []\n"
    )
    with pytest.raises(PipelineYAMLError) as raised:
        load_pipeline(path)
    message = str(raised.value)
    assert "components.intent_gate.IntentGate -> gatehouse.components.routers.intent_gate.IntentGate" in message
    assert "gatehouse.document_stores.lexical_document_store.LexicalDocumentStore" in message
    assert "gatehouse.components.retrievers.bm25_retriever.BM25Retriever" in message


def test_load_pipeline_names_the_replacement_of_a_query_rewriter_task(tmp_path):
    path = tmp_path / "split.yml"
    path.write_text(
        "components:\n"
        "  condenser:\n"
        "    type: gatehouse.components.query.query_rewriter.QueryRewriter\n"
        "    init_parameters: {task: condense, max_history_turns: 2, pronouns: [it]}\n"
        "  rewriter:\n"
        "    type: gatehouse.components.query.query_rewriter.QueryRewriter\n"
        "    init_parameters: &retry {task: retry, prf_terms: 4}\n"
        "  subqueries:\n"
        "    type: gatehouse.components.retrievers.subquery_retrieval.SubQueryRetrieval\n"
        "    init_parameters:\n"
        "      rewriter: {type: gatehouse.components.query.query_rewriter.QueryRewriter, init_parameters: *retry}\n"
        "connections: []\n"
    )
    with pytest.raises(PipelineYAMLError) as raised:
        load_pipeline(path)
    message = str(raised.value)
    assert ("`condenser` is a QueryRewriter with `task: condense`, and follow-ups are condensed by their own component "
            "now: write `type: gatehouse.components.query.query_condenser.QueryCondenser` and remove `task`") in message
    assert "`condenser`: `pronouns` is a key of `grammar` now" in message
    assert "`rewriter` sets `task: retry`, but QueryRewriter only rewrites a weak query for a retry now" in message
    assert "`subqueries.init_parameters.rewriter` sets `task: retry`" in message
    assert "`rewriter`: `prf_terms` is a key of `expansion` now" in message


def test_load_pipeline_refuses_a_class_outside_the_allowlist(tmp_path):
    path = tmp_path / "foreign.yml"
    path.write_text("components:\n  x:\n    type: collections.OrderedDict\n    init_parameters: {}\nconnections: []\n")
    with pytest.raises(Exception, match="collections"):
        load_pipeline(path)
