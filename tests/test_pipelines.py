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


def test_load_pipeline_refuses_a_class_outside_the_allowlist(tmp_path):
    path = tmp_path / "foreign.yml"
    path.write_text("components:\n  x:\n    type: collections.OrderedDict\n    init_parameters: {}\nconnections: []\n")
    with pytest.raises(Exception, match="collections"):
        load_pipeline(path)


def test_load_pipeline_names_the_two_classes_of_a_split_guardrails(tmp_path):
    # A pipeline copied by `gatehouse init` before Guardrails became InputGuardrails and OutputGuardrails.
    path = tmp_path / "ask.yml"
    path.write_text(
        "components:\n"
        "  input_guard:\n"
        "    type: gatehouse.components.guardrails.guardrails.Guardrails\n"
        "    init_parameters: {stage: input, max_query_chars: 4000}\n"
        "  output_guard:\n"
        "    type: gatehouse.components.guardrails.guardrails.Guardrails\n"
        "    init_parameters: {stage: output, allowed_tags: []}\n"
        "connections:\n"
        "  - {sender: input_guard.passed, receiver: output_guard.state}\n"
    )
    with pytest.raises(PipelineYAMLError) as raised:
        load_pipeline(path)
    message = str(raised.value)
    assert (
        "gatehouse.components.guardrails.guardrails.Guardrails -> "
        "gatehouse.components.guardrails.input_guardrails.InputGuardrails for `stage: input` (the default) or "
        "gatehouse.components.guardrails.output_guardrails.OutputGuardrails for `stage: output`, without `stage`"
    ) in message
    assert message.count("InputGuardrails") == 1  # one fix for both components
    # Its pre-`gatehouse.components` path gets the same fix.
    path.write_text(path.read_text().replace("gatehouse.components.guardrails.guardrails.", "components.guardrails."))
    with pytest.raises(PipelineYAMLError, match=r"components\.guardrails\.Guardrails -> .*InputGuardrails for "
                                                r"`stage: input`.*OutputGuardrails for `stage: output`"):
        load_pipeline(path)
