import logging
import re
import shutil

import pytest

from gatehouse.components.intake.request_intake import RequestIntake
from gatehouse.components.intent.intent_gate import IntentGate
from gatehouse.pipelines import PipelineYAMLError, build_pipeline, component_spec, load_pipeline, read_spec
from gatehouse.settings import pipelines_dir


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
    assert "components.intent_gate.IntentGate -> gatehouse.components.intent.intent_gate.IntentGate" in message
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
    assert "`rewriter` sets `task: retry`, but QueryRewriter only rewrites a weak query for a retry now" in message
    assert "`subqueries.init_parameters.rewriter` sets `task: retry`" in message



def test_load_pipeline_names_the_new_place_of_a_query_setting_that_moved_into_a_group(tmp_path):
    path = tmp_path / "moved.yml"
    path.write_text(
        "components:\n"
        "  rewriter:\n"
        "    type: gatehouse.components.query.query_rewriter.QueryRewriter\n"
        "    init_parameters: {prf_terms: 4}\n"
        "  condenser:\n"
        "    type: gatehouse.components.query.query_condenser.QueryCondenser\n"
        "    init_parameters: {pronouns: [it]}\n"
        "connections: []\n"
    )
    with pytest.raises(PipelineYAMLError, match=r"'prf_terms' is now 'expansion.prf_terms'|'pronouns' is now "
                                                r"'grammar.pronouns'"):
        load_pipeline(path)


def test_load_pipeline_refuses_a_class_outside_the_allowlist(tmp_path):
    path = tmp_path / "foreign.yml"
    path.write_text("components:\n  x:\n    type: collections.OrderedDict\n    init_parameters: {}\nconnections: []\n")
    with pytest.raises(Exception, match="collections"):
        load_pipeline(path)


def test_load_pipeline_says_what_does_a_retired_class_job_now(tmp_path):
    path = tmp_path / "old-ask.yml"
    path.write_text(
        "components:\n"
        "  context:\n"
        "    type: gatehouse.components.routers.context_selector.ContextSelector\n"
        "    init_parameters: {}\n"
        "  subqueries:\n"
        "    type: gatehouse.components.retrievers.subquery_retrieval.SubQueryRetrieval\n"
        "    init_parameters: {}\n"
        "connections: []\n"
    )
    with pytest.raises(PipelineYAMLError) as raised:
        load_pipeline(path)
    message = str(raised.value)
    assert "ContextSelector -> no component: RequestIntake takes the caller's context" in message
    assert "SubQueryRetrieval -> gatehouse.components.pipelines.search_pipeline.SearchPipeline" in message
    assert "gatehouse init" in message


def test_component_spec_reaches_into_sub_pipelines_without_writing_their_files():
    spec = read_spec("ask")
    assert component_spec(spec, "router")["type"].endswith(".KBRouter")
    verifier = component_spec(spec, "answer.verifier")
    assert verifier is component_spec(spec, "verifier")  # the only one of that name, found in answer.yml
    verifier["init_parameters"]["contradictions"]["enabled"] = False
    assert spec["components"]["answer"]["init_parameters"]["spec"]["components"]["verifier"] is verifier
    assert read_spec("answer")["components"]["verifier"]["init_parameters"]["contradictions"]["enabled"] is True
    with pytest.raises(KeyError, match="no_such"):
        component_spec(spec, "no_such")
    with pytest.raises(KeyError, match="router"):
        component_spec(spec, "router.verifier")


def test_build_pipeline_with_a_changed_sub_pipeline_and_a_generator_profile():
    spec = read_spec("ask")
    component_spec(spec, "answerability")["init_parameters"]["success_threshold"] = 0.9
    component_spec(spec, "answerability")["init_parameters"]["threshold"] = 0.2
    pipeline = build_pipeline(spec, generator="llm")
    answer = pipeline.get_component("answer").pipeline
    gate = answer.get_component("answerability")
    assert gate.success_threshold == 0.9  # the spec's own change stays...
    assert gate.threshold == 0.25  # ...under the profile's `settings`, which win where they say something
    assert gate.rules["require_entities"] is False and gate.rules["require_type"] is False
    assert gate.rules["max_candidates"] == 5  # a mapping is merged key by key: its other keys as they were
    assert type(answer.get_component("generator")).__name__ == "LLMAnswerer"
    # the profile's model condenses follow-ups (its `llm_tiers`); the planner splits by its rules alone
    assert type(pipeline.get_component("condenser").chat_generator).__name__ == "OpenAICompatibleChatGenerator"
    assert pipeline.get_component("planner").chat_generator is None
    assert component_spec(spec, "condenser")["init_parameters"].get("chat_generator") is None
    assert component_spec(spec, "generator")["type"].endswith(".ExtractiveAnswerer")  # the spec given is unchanged
    assert component_spec(spec, "answerability")["init_parameters"]["threshold"] == 0.2
    with pytest.raises(PipelineYAMLError, match="no `generator` component"):
        load_pipeline("retrieve", generator="llm")


def _profile(folder, text: str) -> None:
    """Pipelines folder `folder`: this one's pipelines and one generator profile, `custom`, of `text`."""
    from gatehouse.settings import pipelines_dir

    (folder / "generators").mkdir(parents=True)
    for path in pipelines_dir().glob("*.yml"):
        (folder / path.name).write_text(path.read_text())
    (folder / "generators" / "custom.yml").write_text(text)


EXTRACTIVE_PROFILE = "type: gatehouse.components.generators.extractive_answerer.ExtractiveAnswerer\n"


def test_a_generator_profile_sets_other_components_settings(tmp_path, monkeypatch):
    _profile(tmp_path, EXTRACTIVE_PROFILE + "init_parameters: {style: span}\n"
                       "settings:\n"
                       "  answer.answerability: {on_unanswerable: partial, evidence: {passages: 2}}\n"
                       "  intake: {max_history_turns: 3}\n")
    monkeypatch.setenv("GATEHOUSE_PIPELINES_DIR", str(tmp_path))
    pipeline = load_pipeline("ask", generator="custom")
    gate = pipeline.get_component("answer").pipeline.get_component("answerability")
    assert gate.on_unanswerable == "partial" and gate.evidence["passages"] == 2
    assert gate.evidence["switch_margin"] == 0.05 and gate.threshold == 0.425  # the rest as answer.yml says
    assert pipeline.get_component("intake").max_history_turns == 3
    assert pipeline.get_component("answer").pipeline.get_component("generator").style == "span"
    assert load_pipeline("ask").get_component("intake").max_history_turns == 20  # without the profile: the YAML's


@pytest.mark.parametrize(("settings", "error"), [
    ("settings:\n  nowhere: {threshold: 0.1}\n", "`settings` names 'nowhere', which .* does not have"),
    ("settings: [answerability]\n", "`settings` must map a component's name to the settings it changes"),
    ("settings:\n  answerability: 0.1\n", "`settings` must map a component's name to the settings it changes"),
    ("settings:\n  answerability: {no_such_setting: 1}\n", "component 'answerability' .*no setting 'no_such_setting'"),
])
def test_a_generator_profiles_settings_that_cannot_apply_are_one_clear_error(tmp_path, monkeypatch, settings, error):
    _profile(tmp_path, EXTRACTIVE_PROFILE + settings)
    monkeypatch.setenv("GATEHOUSE_PIPELINES_DIR", str(tmp_path))
    with pytest.raises(PipelineYAMLError, match=error):
        load_pipeline("ask", generator="custom")


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


def test_the_pipelines_written_with_the_old_routers_paths_load_with_one_warning_a_type(tmp_path, monkeypatch, caplog):
    folder = tmp_path / "pipelines"
    shutil.copytree(pipelines_dir(), folder)
    for name in ("ask.yml", "search.yml"):  # as main shipped them before the gates had a folder per family
        path = folder / name
        path.write_text(re.sub(r"gatehouse\.components\.(intake|intent|kb_routing|cache|quality)\.",
                               "gatehouse.components.routers.", path.read_text(encoding="utf-8")), encoding="utf-8")
    monkeypatch.setenv("GATEHOUSE_PIPELINES_DIR", str(folder))
    with caplog.at_level(logging.WARNING):
        ask = load_pipeline("ask")
    moved = sorted(r.getMessage() for r in caplog.records if "is deprecated" in r.getMessage())
    new = {"RequestIntake": "intake.request_intake", "SemanticCache": "cache.semantic_cache",
           "IntentGate": "intent.intent_gate", "KBRouter": "kb_routing.kb_router",
           "SemanticCacheStore": "cache.semantic_cache_store", "KBEvidence": "kb_routing.kb_evidence",
           "QualityGate": "quality.quality_gate"}
    expected = sorted(
        f"{folder / ('search.yml' if name in {'KBEvidence', 'QualityGate'} else 'ask.yml')}: `type: "
        f"gatehouse.components.routers.{module.split('.')[1]}.{name}` is deprecated; it loads "
        f"gatehouse.components.{module}.{name}, write that instead." for name, module in new.items())
    assert moved == expected
    assert type(ask.get_component("intake")) is RequestIntake and type(ask.get_component("intent")) is IntentGate
