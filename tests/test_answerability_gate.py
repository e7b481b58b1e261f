import logging
import re
from copy import deepcopy

import pytest
import yaml
from haystack import Document, component
from haystack.components.generators.chat import OpenAIChatGenerator
from haystack.dataclasses import ChatMessage

from gatehouse.components.answerability.answerability_gate import AnswerabilityGate
from gatehouse.components.answerability.evidence import EVIDENCE, heading_text, weigh
from gatehouse.components.answerability.lexicon import Lexicon
from gatehouse.components.embedders.embedding import EmbeddingBackend
from gatehouse.components.sentences import sentence_settings, sentence_texts
from gatehouse.components.state import new_state
from gatehouse.pipelines import PipelineYAMLError, load_pipeline

PASSAGES = [
    Document(
        content=(
            "## Expiry\n\nAPI keys expire after 90 days. You can rotate a key at any time from Settings > API keys. "
            "Only owners and admins can create keys."
        ),
        meta={"source_id": "S1", "title": "API keys", "section": "Expiry", "kb": "faq"},
    ),
    Document(
        content="The Team plan costs $49 per user per month. The Business plan costs $99 per user per month.",
        meta={"source_id": "S2", "title": "Pricing", "section": "Plans", "kb": "product"},
    ),
    Document(
        content="The gateway was first released in 2021 by the platform team in Berlin.",
        meta={"source_id": "S3", "title": "History", "kb": "product"},
    ),
]
#: The sample FAQ's two sections the demo question is about, ranked as retrieval ranks them.
REVOKE = Document(
    content="Revoking is immediate and permanent. Open the key's menu and choose Revoke, then confirm by typing the "
            "key name, or run `corvio keys revoke <key-id>`. The key stops working across all Corvio regions within "
            "60 seconds.",
    meta={"source_id": "S1", "title": "Creating, rotating and revoking API keys",
          "heading_path": ["Creating, rotating and revoking API keys", "Revoke an API key"]})
ROTATE = Document(
    content="Rotation replaces a key's secret while giving your applications time to switch over. To rotate a key:\n\n"
            "1. In the project, open API keys and find the key you want to replace.\n"
            "2. Open the key's menu and choose Rotate.\n"
            "3. Deploy the new secret to every application that used the old key.\n"
            "4. Watch the old key's Last used column. When it stops changing, click Revoke now.",
    meta={"source_id": "S2", "title": "Creating, rotating and revoking API keys",
          "heading_path": ["Creating, rotating and revoking API keys", "Rotate an API key"]})


@pytest.fixture(scope="module")
def gate():
    gate = AnswerabilityGate()
    gate.warm_up()
    return gate


def route(gate, question, passages=PASSAGES, **state):
    out = gate.run(state=new_state(question, passages=passages, **state))
    assert len(out) == 1
    return next(iter(out.items()))


def test_init():
    gate = AnswerabilityGate()
    assert gate.threshold == 0.35 and gate.success_threshold is None
    assert gate.evidence == EVIDENCE
    assert gate.rules["require_entities"] is True and gate.rules["require_type"] is True
    assert gate.rules["max_candidates"] == 5 and gate.rules["max_words"] == 80
    assert gate.on_unanswerable == "fallback"
    assert gate.chat_generator is None
    assert AnswerabilityGate(success_threshold=0.5, evidence={"passages": 2}).evidence["passages"] == 2


def test_init_rejects_bad_parameters():
    with pytest.raises(ValueError, match="'evidence' has no setting 'margin'"):
        AnswerabilityGate(evidence={"margin": 0.1})
    with pytest.raises(ValueError, match="on_unanswerable"):
        AnswerabilityGate(on_unanswerable="guess")
    with pytest.raises(ValueError, match="success_threshold"):
        AnswerabilityGate(threshold=0.5, success_threshold=0.2)
    with pytest.raises(ValueError, match="llm.weight"):
        AnswerabilityGate(llm={"weight": 2.0})
    with pytest.raises(ValueError, match="evidence.passages"):
        AnswerabilityGate(evidence={"passages": 0})


def test_to_dict():
    data = AnswerabilityGate(threshold=0.4, success_threshold=0.6, evidence={"switch_margin": 0.1},
                             on_unanswerable="partial", rules={"require_entities": False}).to_dict()
    assert data["type"] == "gatehouse.components.answerability.answerability_gate.AnswerabilityGate"
    params = data["init_parameters"]
    assert params["threshold"] == 0.4 and params["success_threshold"] == 0.6
    assert params["evidence"] == {**EVIDENCE, "switch_margin": 0.1}
    assert params["on_unanswerable"] == "partial"
    assert params["rules"]["require_entities"] is False
    assert params["chat_generator"] is None


def test_from_dict(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    generator = OpenAIChatGenerator(api_base_url="http://127.0.0.1:9/v1", model="local", max_retries=0, timeout=2.0)
    original = AnswerabilityGate(evidence={"passages": 2}, signals={"units": ["parsecs"]}, chat_generator=generator)
    data = original.to_dict()
    restored = AnswerabilityGate.from_dict(deepcopy(data))
    assert restored.to_dict() == data
    assert isinstance(restored.chat_generator, OpenAIChatGenerator)


def test_from_dict_names_a_moved_setting_and_leaves_out_a_retired_one(tmp_path, caplog):
    data = AnswerabilityGate().to_dict()
    data["init_parameters"] = {"threshold": 0.2, "require_entities": False, "llm_weight": 1.0}
    with pytest.raises(ValueError) as raised:
        AnswerabilityGate.from_dict(data)
    for old, new in [("require_entities", "rules.require_entities"), ("llm_weight", "llm.weight")]:
        assert re.search(rf"\W{old}\W.*\W{re.escape(new)}\W", str(raised.value)), (old, str(raised.value))
    # The logistic model's weights of an earlier YAML: left out with one warning line, the rest loads.
    data["init_parameters"] = {"threshold": 0.2, "model": {"weights": {"coverage": 2.0}, "bias": -9.0}}
    with caplog.at_level(logging.WARNING):
        restored = AnswerabilityGate.from_dict(data)
    assert restored.threshold == 0.2
    assert [r.getMessage() for r in caplog.records if "'model'" in r.getMessage()] == [
        "AnswerabilityGate no longer takes 'model' (the logistic model of thirteen signals gave way to the evidence "
        "of `evidence` (cosine, coverage, heading)): left out; remove it from the YAML."]
    # A flat setting of a YAML written before the settings moved: loading it names the new place.
    path = tmp_path / "old.yml"
    path.write_text(yaml.safe_dump({"components": {"answerability": {
        "type": "gatehouse.components.answerability.answerability_gate.AnswerabilityGate",
        "init_parameters": {"threshold": 0.2, "cache_dir": "off"}}}, "connections": []}))
    with pytest.raises(PipelineYAMLError) as raised:
        load_pipeline(path)
    assert re.search(r"\Wcache_dir\W.*\Wsignals\.cache_dir\W", str(raised.value)), str(raised.value)


def test_from_dict_the_old_type_path_loads_with_a_deprecation_warning(tmp_path, caplog):
    path = tmp_path / "answer.yml"
    old = "gatehouse.components.routers.answerability_gate.AnswerabilityGate"
    path.write_text(yaml.safe_dump({"components": {"answerability": {
        "type": old, "init_parameters": {"threshold": 0.3, "model": {"bias": -9.0}}}}, "connections": []}))
    with caplog.at_level(logging.WARNING):
        pipeline = load_pipeline(path)
    assert isinstance(pipeline.get_component("answerability"), AnswerabilityGate)
    assert pipeline.get_component("answerability").threshold == 0.3
    moved = [r.getMessage() for r in caplog.records if old in r.getMessage()]
    assert moved == [f"{path}: `type: {old}` is deprecated; it loads "
                     "gatehouse.components.answerability.answerability_gate.AnswerabilityGate, write that instead."]


def test_run_answerable_ranks_the_answering_unit_first(gate):
    name, state = route(gate, "How much does the Business plan cost?")
    assert name == "answerable"
    best = state["answer_candidates"][0]
    assert best["source_id"] == "S2"
    assert best["text"] == "The Business plan costs $99 per user per month."
    assert best["span"] == "$99 per user per month"
    assert state["path"][-1].startswith("answerable_")
    record = state["answerability"]
    assert record["score"] >= gate.threshold and record["passage"] == "S2" and record["shape"] == "unit"
    assert record["missing_terms"] == [] and 0 < record["best"]["cosine"] <= 1 and record["best"]["coverage"] > 0


def test_run_keeps_the_first_passage_unless_another_is_clearly_stronger(gate):
    # The demo: the revoke section ranks first; the rotation steps name every word of the question too (step 4 says
    # "click Revoke now"), but no list of steps overrides a better-ranked passage.
    name, state = route(gate, "How do I revoke an API key?", passages=[REVOKE, ROTATE])
    assert name == "answerable" and state["answerability"]["passage"] == "S1"
    assert state["answer_candidates"][0]["text"].startswith("Open the key's menu and choose Revoke")
    # Ranked the other way round, the revoke section is still clearly stronger: its heading and its sentence.
    swapped = [Document(content=d.content, meta={**d.meta, "source_id": f"S{i + 1}"})
               for i, d in enumerate([ROTATE, REVOKE])]
    name, state = route(gate, "How do I revoke an API key?", passages=swapped)
    assert state["answerability"]["passage"] == "S2"
    # With no margin asked, the stronger evidence wins; with a margin nothing reaches, the first passage stays.
    never = AnswerabilityGate(evidence={"switch_margin": 10.0})
    assert route(never, "How do I revoke an API key?", passages=swapped)[1]["answerability"]["passage"] == "S1"


def test_run_a_heading_that_matches_the_question_counts_as_evidence(gate):
    reading = weigh("How do I revoke an API key?", [REVOKE, ROTATE], lexicon=Lexicon(), embed=gate._embed,
                    settings=EVIDENCE)
    assert heading_text(REVOKE) == "Revoke an API key" and heading_text(PASSAGES[2]) == "History"
    assert reading.headings[0] == 1.0 and reading.headings[1] < EVIDENCE["heading_match"]
    assert reading.passages[0] == pytest.approx(max(reading.of_passage(0)[0].score + EVIDENCE["heading_bonus"], 1.0))
    assert reading.passages[1] == pytest.approx(reading.of_passage(1)[0].score)
    # A list's coverage is its best item's with the lead: naming every word across six steps states no one thing.
    steps = next(u for u in reading.of_passage(1) if u.unit.kind == "list")
    assert steps.coverage < 1.0


def test_run_a_strong_heading_over_weak_units_answers_with_the_section(gate):
    """No unit names what the question asks ("Python 3.10 or later."), but the heading does: the section answers."""
    requirements = Document(content="Python 3.10 or later.\n\nNote (Windows): the tool runs on Windows through WSL "
                                    "only.",
                            meta={"source_id": "S1", "title": "Installing", "heading_path": ["Installing",
                                                                                              "System requirements"]})
    name, state = route(AnswerabilityGate(threshold=0.411, success_threshold=0.665),
                        "What are the system requirements for the tool?", passages=[requirements])
    assert name == "answerable" and state["answerability"]["shape"] == "section"
    assert state["answerability"]["score"] >= 0.665 and state.get("status") != "partial"
    assert state["answer_candidates"][0]["kind"] == "section"


def test_run_on_topic_question_the_passages_do_not_answer(gate):
    name, state = route(gate, "How much does the Platinum plan cost?")
    assert name == "unanswerable"
    assert state["status"] == "fallback"
    assert state["answer"] == gate.fallback_message
    assert state["passages"] == PASSAGES and state["citations"] == []
    assert state["answerability"]["missing_terms"] == ["platinum"]
    assert state["answerability"]["missing_entities"] == ["platinum"]
    assert state["path"][-2].startswith("not_answerable_") and state["path"][-1] == "fallback"
    assert any("no passage names platinum" in w for w in state["validation"]["confidence_warnings"])


def test_run_number_and_entity_the_passages_never_state(gate):
    lexicon = Lexicon()
    assert lexicon.missing_entities("What did the platform team release in Munich in 2019?", PASSAGES) == [
        "2019", "munich"]
    assert lexicon.missing_entities("What does error CGW-3001 mean?",
                                    [Document(content="CGW-3001: upstream timeout.")]) == []
    # Contractions are no names, and a title-cased question's capitals say nothing (only its numbers count).
    assert lexicon.missing_entities("Isn't Munich where I'm going?", PASSAGES) == ["munich"]
    assert lexicon.missing_entities("Platform Team Release In Munich 2019", PASSAGES) == ["2019"]
    # require_entities: a name no passage states ends in fallback whatever the evidence; off, the evidence decides.
    lenient = AnswerabilityGate(threshold=0.0, rules={"require_entities": False})
    assert route(lenient, "What did the platform team release in Munich?")[0] == "answerable"
    assert route(AnswerabilityGate(threshold=0.0), "What did the platform team release in Munich?")[0] == \
        "unanswerable"


def test_run_typed_question_needs_a_unit_of_its_type(gate):
    passages = [Document(content="Keys are rotated from Settings. Support is reached at help@example.org.",
                         meta={"source_id": "S1", "title": "Keys", "section": "Rotation"})]
    name, state = route(gate, "How many keys can a project hold?", passages=passages)
    assert name == "unanswerable" and any("gives a number" in w for w in state["validation"]["confidence_warnings"])
    out = gate.run(state=new_state("Where do I reach support for keys?", passages=passages))["answerable"]
    assert "help@example.org" in out["answer_candidates"][0]["text"]
    # The passage's best unit of the expected type answers, even when another unit is closer to the question.
    dated = route(gate, "When was the gateway first released?")[1]["answer_candidates"][0]
    assert dated["text"].startswith("The gateway was first released in 2021") and dated["span"] == "2021"


CUSTOMERS = Document(
    content="- Index: 1; Customer Id: DD41Cf93aecB7Ab; First Name: Sheryl; Last Name: Baxter; "
            "Company: Rasmussen Group; City: East Leonard; Country: Chile; Phone 1: 229.077.5154\n"
            "- Index: 2; Customer Id: 1Ef7b82A4CAAD10; First Name: Preston; Last Name: Lozano; Company: Vega-Gentry; "
            "City: East Jimmychester; Country: Djibouti; Phone 1: 5153435776\n"
            "- Index: 3; Customer Id: 6F94879bDAfE5a6; First Name: Roy; Last Name: Berry; Company: Murillo-Perry; "
            "City: Isabelborough; Country: Antigua; Phone 1: (496)978-3969",
    meta={"source_id": "S1", "title": "customers", "source": "customers.csv"})
ORDER = [Document(content=content, meta={"source_id": f"S{n + 1}", "title": "order", "source": "order.json",
                                         "heading_path": path})
         for n, (path, content) in enumerate([
             ([], "- orderId: ORD-77120\n- orderDate: 2024-03-18\n- paymentMethod: card\n- totalAmount: 182.4"),
             (["shipAddress"], "- street: 14 Linden Walk\n- city: Cluj-Napoca\n- postalCode: 400117\n"
                               "- countryCode: RO")])]


@pytest.mark.parametrize(("question", "value"), [
    ("Which company does Sheryl Baxter work for?", "Rasmussen Group"),
    ("What is Roy Berry's phone number?", "(496)978-3969"),
    ("Which country is customer 1Ef7b82A4CAAD10 in?", "Djibouti"),
    ("Is Murillo-Perry in Antigua?", "Murillo-Perry"),  # nothing asked beyond the values the row holds
])
def test_run_a_row_that_holds_the_asked_field_answers(gate, question, value):
    name, state = route(gate, question, passages=[CUSTOMERS])
    assert name == "answerable" and value in state["answer_candidates"][0]["text"]


def test_run_a_record_with_camel_case_keys_answers_a_question_in_words(gate):
    name, state = route(gate, "What is the postal code of the shipping address?", passages=ORDER)
    assert name == "answerable" and "postalCode: 400117" in state["answer_candidates"][0]["text"]
    assert route(gate, "What payment method was used for order ORD-77120?", passages=ORDER)[0] == "answerable"


def test_run_a_number_written_in_words_is_a_number():
    passages = [Document(content="Employees receive sixteen weeks of paid parental leave.",
                         meta={"source_id": "S1", "title": "Handbook", "section": "Parental leave"})]
    out = AnswerabilityGate(signals={"cache_dir": "off"}).run(
        state=new_state("How many weeks of parental leave do employees get?", passages=passages))
    assert "answerable" in out and "sixteen weeks" in out["answerable"]["answer_candidates"][0]["text"]


def test_run_units_too_close_to_tell_answer_with_the_section(gate):
    passage = Document(content="Backups run every night. Backups run every night as well on replicas.\n\n"
                               "Snapshots are kept for two weeks. Older snapshots are deleted.",
                       meta={"source_id": "S1", "heading_path": ["Backups"]})
    sure = AnswerabilityGate(rules={"section_margin": 0.0}).run(state=new_state("How do backups work?",
                                                                                passages=[passage]))
    assert sure["answerable"]["answerability"]["shape"] == "unit"
    # The units too close to tell, and the runner-up not among what the answer would show with the best: the section
    close = AnswerabilityGate(rules={"section_margin": 1.0, "max_words": 6}).run(
        state=new_state("How do backups work?", passages=[passage]))
    record, first = close["answerable"]["answerability"], close["answerable"]["answer_candidates"][0]
    assert record["shape"] == "section" and first["kind"] == "section" and first["passage"] == 0


def test_run_partial_mode_answers_with_a_warning():
    gate = AnswerabilityGate(on_unanswerable="partial")
    name, state = route(gate, "How much does the Platinum plan cost?")
    assert name == "answerable"
    assert state["status"] == "partial"
    assert state["answer_candidates"]
    assert state["passages"] == PASSAGES


def test_run_skips_a_fallback_and_empty_passages(gate):
    name, state = route(gate, "Anything?", passages=[], status="fallback")
    assert name == "answerable" and state["status"] == "fallback"
    name, state = route(gate, "How much does the Team plan cost?", passages=[])
    assert name == "unanswerable" and state["status"] == "fallback"


def test_run_uses_the_condensed_question(gate):
    name, state = route(gate, "and the Business one?", condensed_query="How much does the Business plan cost?")
    assert name == "answerable"
    assert state["answer_candidates"][0]["source_id"] == "S2"


def test_run_a_refused_follow_up_is_read_on_the_users_own_words(gate):
    # The condenser's context ("Regarding alerts,") found the passage; its words are no terms the answer must state:
    # refused as the standalone question, the follow-up is read on what the user wrote, and answered as partial only.
    passages = [Document(content="To turn notifications off, clear the notify setting and restart the agent.",
                         meta={"source_id": "S1", "title": "Agent", "section": "Configuration"})]
    strict = AnswerabilityGate(threshold=0.6, success_threshold=0.7)
    follow_up = {"passages": passages, "condensed_query": "Regarding alerts, how do I turn notifications off?"}
    name, state = route(strict, "ok, and how do I turn notifications off?", **follow_up)
    assert name == "answerable" and state["status"] == "partial" and state["answerability"]["score"] >= 0.7
    assert state["answerability"]["missing_terms"] == []
    assert any("own words" in w for w in state["validation"]["confidence_warnings"])
    # A question asked as such, or a plan's part, is read on all its words.
    name, state = route(strict, "Regarding alerts, how do I turn notifications off?", passages=passages)
    assert name == "unanswerable" and state["answerability"]["missing_terms"] == ["regard", "alert"]
    assert route(strict, "ok, and how do I turn notifications off?", plan={"parts": []}, **follow_up)[0] == \
        "unanswerable"
    # Answered as the standalone question, a follow-up is judged as before.
    assert route(gate, "ok, and how do I turn notifications off?", **follow_up)[1]["answerability"][
        "missing_terms"] == ["regard", "alert"]


def test_run_a_when_clause_is_a_condition_not_a_date(gate):
    lexicon = Lexicon()
    assert lexicon.expected_type("When I pass a string as the body, what encoding is used?") is None
    assert lexicon.expected_type("When the key expires, what happens to my requests?") is None
    assert [lexicon.expected_type(q) for q in ("When did the gateway ship?", "when?", "When's the next release?",
                                               "And when will it be fixed?")] == ["date"] * 4
    passages = [Document(content="Text bodies are encoded as UTF-8 before they are sent.",
                         meta={"source_id": "S1", "title": "Requests", "section": "Encoding"})]
    assert route(gate, "When I send a text body, which encoding is used?", passages=passages)[0] == "answerable"


def test_run_does_not_mutate_input(gate):
    state = new_state("How much does the Team plan cost?", passages=list(PASSAGES))
    snapshot = deepcopy(state)
    gate.run(state=state)
    assert state == snapshot


def test_run_below_the_success_threshold_is_partial():
    passages = [Document(content="Keys are rotated from Settings at any time.", meta={"source_id": "S1"})]
    out = AnswerabilityGate(threshold=0.0, success_threshold=0.99, signals={"cache_dir": "off"}).run(
        state=new_state("How are keys rotated?", passages=passages))["answerable"]
    assert out["status"] == "partial"
    assert any("may not answer" in w for w in out["validation"]["confidence_warnings"])


def test_run_reads_the_sentence_vectors_ingest_stored(tmp_path):
    """Warm, a question encodes only itself: the units' cosines come from the vectors of the chunk's sentences that
    ingest embedded (the embedding cache holds them under the same texts)."""
    backend = EmbeddingBackend.get(cache_dir=tmp_path / "cache")
    backend.embed([text for p in PASSAGES for text in sentence_texts(p, sentence_settings(None))])  # as ingest does
    gate = AnswerabilityGate(signals={"cache_dir": str(tmp_path / "cache")})
    gate.warm_up()
    before = backend.encoded_count
    name, state = route(gate, "When do API keys expire?")
    assert name == "answerable" and state["answer_candidates"][0]["text"] == "API keys expire after 90 days."
    assert backend.encoded_count - before <= 1  # the question, unless this process embedded it already


def test_run_llm_tier_failure_keeps_the_evidence_and_warns(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    generator = OpenAIChatGenerator(api_base_url="http://127.0.0.1:9/v1", model="local", max_retries=0, timeout=2.0)
    with_llm = AnswerabilityGate(chat_generator=generator)
    name, state = route(with_llm, "How much does the Business plan cost?")
    assert name == "answerable"
    assert any("LLM tier unavailable" in w for w in state["validation"]["confidence_warnings"])
    assert state["answerability"]["score"] == pytest.approx(
        AnswerabilityGate().run(state=new_state("How much does the Business plan cost?", passages=PASSAGES))[
            "answerable"]["answerability"]["score"])


@component
class Verdicts:
    """A chat generator that gives the same verdict to every prompt and counts the prompts."""

    def __init__(self, verdict: str) -> None:
        self.verdict = verdict
        self.calls = 0

    @component.output_types(replies=list[ChatMessage])
    def run(self, messages: list[ChatMessage]) -> dict:
        self.calls += 1
        return {"replies": [ChatMessage.from_assistant(self.verdict)]}


def test_run_llm_no_refuses_and_yes_answers():
    question = "How much does the Business plan cost?"
    refuse = AnswerabilityGate(chat_generator=Verdicts("No."), llm={"weight": 1.0})
    assert route(refuse, question)[0] == "unanswerable" and refuse.chat_generator.calls == 1
    accept = AnswerabilityGate(chat_generator=Verdicts("Yes."), llm={"weight": 1.0})
    name, state = route(accept, question)
    assert name == "answerable" and accept.chat_generator.calls == 1 and state["answerability"]["score"] == 1.0
