import re
from copy import deepcopy

import pytest
import yaml
from haystack import Document, component
from haystack.dataclasses import ChatMessage
from haystack.components.generators.chat import OpenAIChatGenerator

from gatehouse.components.routers.answerability_gate import AnswerabilityGate
from gatehouse.components.routers.answerability_model import DEFAULT_BIAS, DEFAULT_THRESHOLD, DEFAULT_WEIGHTS, SIGNALS
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
    assert gate.threshold == DEFAULT_THRESHOLD
    assert gate.rules["require_entities"] is True
    assert gate.model == {"weights": None, "bias": DEFAULT_BIAS}
    assert gate.on_unanswerable == "fallback"
    assert gate.rules["max_candidates"] == 5
    assert gate.chat_generator is None
    assert gate.success_threshold is None and gate.rules["require_type"] is True
    assert AnswerabilityGate(success_threshold=0.5, rules={"require_type": False}).success_threshold == 0.5
    with pytest.raises(ValueError, match="success_threshold"):
        AnswerabilityGate(threshold=0.5, success_threshold=0.2)


def test_init_rejects_bad_parameters():
    with pytest.raises(ValueError, match="Unknown answerability signals"):
        AnswerabilityGate(model={"weights": {"topicality": 1.0}})
    with pytest.raises(ValueError, match="'model' has no setting 'intercept'"):
        AnswerabilityGate(model={"intercept": -2.0})
    with pytest.raises(ValueError, match="on_unanswerable"):
        AnswerabilityGate(on_unanswerable="guess")
    with pytest.raises(ValueError, match="threshold"):
        AnswerabilityGate(threshold=1.5)
    with pytest.raises(ValueError, match="pair"):
        AnswerabilityGate(signals={"antonyms": [["hot", "cold", "warm"]]})


def test_to_dict():
    data = AnswerabilityGate(threshold=0.4, model={"weights": {"coverage": 3.0}, "bias": -2.0},
                             on_unanswerable="partial", rules={"require_entities": False}).to_dict()
    assert data["type"] == "gatehouse.components.routers.answerability_gate.AnswerabilityGate"
    params = data["init_parameters"]
    assert params["threshold"] == 0.4
    assert params["model"] == {"weights": {"coverage": 3.0}, "bias": -2.0}
    assert params["on_unanswerable"] == "partial"
    assert params["rules"]["require_entities"] is False
    assert params["chat_generator"] is None
    assert params["success_threshold"] is None and params["rules"]["require_type"] is True
    assert AnswerabilityGate(success_threshold=0.3).to_dict()["init_parameters"]["success_threshold"] == 0.3


def test_from_dict(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    generator = OpenAIChatGenerator(api_base_url="http://127.0.0.1:9/v1", model="local", max_retries=0, timeout=2.0)
    original = AnswerabilityGate(model={"weights": {"cosine": 1.0}}, signals={"antonyms": [["hot", "cold"]]},
                                 chat_generator=generator)
    data = original.to_dict()
    restored = AnswerabilityGate.from_dict(deepcopy(data))
    assert restored.to_dict() == data
    assert isinstance(restored.chat_generator, OpenAIChatGenerator)
    assert restored.score({"cosine": 1.0}) == pytest.approx(original.score({"cosine": 1.0}))


def test_from_dict_names_where_a_moved_setting_went(tmp_path):
    data = AnswerabilityGate().to_dict()
    data["init_parameters"] = {"threshold": 0.2, "require_entities": False, "llm_weight": 1.0, "weights": {},
                               "bias": -2.0}
    with pytest.raises(ValueError) as raised:
        AnswerabilityGate.from_dict(data)
    for old, new in [("require_entities", "rules.require_entities"), ("llm_weight", "llm.weight"),
                     ("weights", "model.weights"), ("bias", "model.bias")]:
        assert re.search(rf"\W{old}\W.*\W{re.escape(new)}\W", str(raised.value)), (old, str(raised.value))
    with pytest.raises(ValueError, match=r"'rules'.*'require_entity'"):
        AnswerabilityGate(rules={"require_entity": False})
    # A user's pipeline YAML written before the settings moved: loading it names the new place.
    path = tmp_path / "old.yml"
    path.write_text(yaml.safe_dump({"components": {"answerability": {
        "type": "gatehouse.components.routers.answerability_gate.AnswerabilityGate",
        "init_parameters": {"threshold": 0.2, "cache_dir": "off"}}}, "connections": []}))
    with pytest.raises(PipelineYAMLError) as raised:  # a ValueError naming the file, the old and the new place
        load_pipeline(path)
    assert str(path) in str(raised.value)
    assert re.search(r"\Wcache_dir\W.*\Wsignals\.cache_dir\W", str(raised.value)), str(raised.value)


def test_score_is_logistic():
    gate = AnswerabilityGate(model={"weights": {"coverage": 2.0}, "bias": -1.0})
    assert gate.score({"coverage": 0.5}) == pytest.approx(0.5)
    assert gate.score({"coverage": 1.0}) > 0.7 > 0.3 > gate.score({"coverage": 0.0})
    assert set(SIGNALS) >= {"coverage", "type_missing", "negation_mismatch", "antonym"}


def test_run_answerable_ranks_the_answering_sentence_first(gate):
    name, state = route(gate, "How much does the Business plan cost?")
    assert name == "answerable"
    best = state["answer_candidates"][0]
    assert best["source_id"] == "S2"
    assert best["text"] == "The Business plan costs $99 per user per month."
    assert best["span"] == "$99 per user per month"
    assert state["path"][-1].startswith("answerable_")
    assert state["answerability"]["score"] >= gate.threshold
    assert state["answerability"]["missing_terms"] == []


def test_run_on_topic_question_the_passages_do_not_answer(gate):
    name, state = route(gate, "How much does the Platinum plan cost?")
    assert name == "unanswerable"
    assert state["status"] == "fallback"
    assert state["answer"] == gate.fallback_message
    assert state["passages"] == PASSAGES and state["citations"] == []
    assert state["answerability"]["missing_terms"] == ["platinum"]
    assert state["answerability"]["missing_entities"] == ["platinum"]
    assert state["path"][-2].startswith("not_answerable_") and state["path"][-1] == "fallback"
    assert any("platinum" in w for w in state["validation"]["confidence_warnings"])


def test_run_wrong_answer_type_scores_lower(gate):
    when = gate.candidates("When were API keys rotated from Settings?", PASSAGES)
    rotate = next(c for c in when if c.text.startswith("You can rotate a key"))
    assert rotate.signals["type_missing"] == 1.0  # no date in the sentence about rotating
    dated = gate.candidates("When was the gateway first released?", PASSAGES)
    assert dated[0].text.startswith("The gateway was first released in 2021")
    assert dated[0].signals["type_missing"] == 0.0
    assert gate.answer_span("date", dated[0].text, set(gate.question_terms("When was the gateway released?"))) == "2021"


def test_run_number_and_entity_the_passages_never_state(gate):
    candidates = gate.candidates("What did the platform team release in Munich?", PASSAGES)
    assert candidates[0].signals["missing_entity"] == 1.0
    candidates = gate.candidates("What did the platform team release in Berlin?", PASSAGES)
    assert candidates[0].signals["missing_entity"] == 0.0
    assert gate.missing_entities("What did the platform team release in Munich in 2019?", PASSAGES) == ["2019",
                                                                                                       "munich"]
    assert gate.missing_entities("What does error CGW-3001 mean?", [Document(content="CGW-3001: upstream timeout.")]) == []
    # Contractions are no names, and a title-cased question's capitals say nothing (only its numbers count).
    assert gate.missing_entities("Isn't Munich where I'm going?", PASSAGES) == ["munich"]
    assert gate.missing_entities("Platform Team Release In Munich 2019", PASSAGES) == ["2019"]
    # require_entities: a name no passage states ends in fallback whatever the score; off, the score alone decides.
    lenient = AnswerabilityGate(threshold=0.0, rules={"require_entities": False})
    assert route(lenient, "What did the platform team release in Munich?")[0] == "answerable"
    name, state = route(AnswerabilityGate(threshold=0.0), "What did the platform team release in Munich?")
    assert name == "unanswerable"
    assert any("no passage names munich" in w for w in state["validation"]["confidence_warnings"])


def test_run_negation_and_antonym_lower_the_score(gate):
    # The SQuAD fit leaves negation almost unweighted (+0.08); a deployment that wants it to count says so in YAML.
    strict = AnswerabilityGate(model={"weights": {**DEFAULT_WEIGHTS, "negation_mismatch": -2.0}})
    plain = strict.candidates("When do API keys expire?", PASSAGES)[0]
    negated = strict.candidates("When do API keys not expire?", PASSAGES)[0]
    assert negated.signals["negation_mismatch"] == 1.0 and plain.signals["negation_mismatch"] == 0.0
    assert negated.score < plain.score
    first = gate.candidates("Where was the gateway last released?", PASSAGES)[0]
    assert first.text.startswith("The gateway was first released")
    assert first.signals["antonym"] == 1.0


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


def test_run_does_not_mutate_input(gate):
    state = new_state("How much does the Team plan cost?", passages=list(PASSAGES))
    snapshot = deepcopy(state)
    gate.run(state=state)
    assert state == snapshot


def test_run_llm_tier_failure_keeps_heuristic_and_warns(monkeypatch):
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
    name, state = route(refuse, question)
    assert name == "unanswerable" and refuse.chat_generator.calls == 1  # no unrated candidate takes the top
    accept = AnswerabilityGate(chat_generator=Verdicts("Yes."), llm={"weight": 1.0, "candidates": 2})
    name, state = route(accept, question)
    assert name == "answerable" and accept.chat_generator.calls == 2
    assert len(state["answer_candidates"]) == 2  # only the rated candidates are ranked


def test_run_heading_and_retrieval_score_signals(gate):
    expiry = gate.candidates("What is the expiry of API keys?", PASSAGES)[0]
    assert expiry.source_id == "S1" and expiry.signals["heading_coverage"] > 0  # the heading "Expiry"
    assert expiry.signals["passage_score"] == 1.0  # no retrieval scores (a user's own context): all count fully
    scored = [Document(content=d.content, meta=d.meta, score=s) for d, s in zip(PASSAGES, (2.0, 1.0, None))]
    by_source = {c.source_id: c.signals["passage_score"] for c in gate.candidates("When do API keys expire?", scored)}
    assert by_source == {"S1": 1.0, "S2": 0.5, "S3": 0.0}


# --- plan parts -----------------------------------------------------------------------------------------------------
PLAN_PASSAGES = [
    Document(content="Each plan combines a platform fee with a monthly usage credit; usage beyond the credit is billed "
                     "at the per-model list prices. Corvio offers four plans: Free, Team, Business and Enterprise.",
             meta={"source_id": "S1", "section": "Pricing plans"}, score=1.0),
    Document(content="Enterprise pricing is negotiated and starts at $4,500 per month on an annual contract.",
             meta={"source_id": "S2", "section": "Enterprise"}, score=0.9),
    Document(content="Enterprise: P1 within 30 minutes, around the clock. "
                     "Business: P1 within 2 hours, at any time of day.",
             meta={"source_id": "S3", "section": "Target response times"}, score=0.9),
]
MODEL_PASSAGES = [
    Document(content="- `atlas-2-mini` has a 128,000-token context window and an 8,192-token output limit.\n"
                     "- `atlas-2-large` is the most capable model, with the same context window.",
             meta={"source_id": "S1", "section": "Atlas chat models"}, score=1.0),
    Document(content="- A preview of `atlas-3`, the next generation of the Atlas family, opens to Enterprise customers.",
             meta={"source_id": "S2", "section": "Roadmap"}, score=0.8),
]
ROLE_PASSAGES = [
    Document(content="Both plans support the five built-in roles, and Enterprise adds custom roles built from more "
                     "than 40 individual permissions. Enterprise organizations can also create custom roles.",
             meta={"source_id": "S1", "section": "Identity and access control"}, score=1.0),
]


def test_run_typed_question_needs_a_unit_of_its_type(gate):
    passages = [Document(content="Keys are rotated from Settings. Support is reached at help@example.org.",
                         meta={"source_id": "S1", "title": "Keys", "section": "Rotation"})]
    assert "unanswerable" in gate.run(state=new_state("How many keys can a project hold?", passages=passages))
    out = gate.run(state=new_state("Where do I reach support for keys?", passages=passages))["answerable"]
    assert "help@example.org" in out["answer_candidates"][0]["text"]


def test_run_a_number_written_in_words_is_a_number():
    passages = [Document(content="Employees receive sixteen weeks of paid parental leave.",
                         meta={"source_id": "S1", "title": "Handbook", "section": "Parental leave"})]
    out = AnswerabilityGate(signals={"cache_dir": "off"}).run(
        state=new_state("How many weeks of parental leave do employees get?", passages=passages))
    assert "answerable" in out and "sixteen weeks" in out["answerable"]["answer_candidates"][0]["text"]


def test_run_below_the_success_threshold_is_partial():
    passages = [Document(content="Keys are rotated from Settings at any time.", meta={"source_id": "S1"})]
    out = AnswerabilityGate(threshold=0.0, success_threshold=0.99, signals={"cache_dir": "off"}).run(
        state=new_state("How are keys rotated?", passages=passages))["answerable"]
    assert out["status"] == "partial"
    assert any("may not answer" in w for w in out["validation"]["confidence_warnings"])
