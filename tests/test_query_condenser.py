from copy import deepcopy

import pytest
from haystack import component
from haystack.components.generators.chat import OpenAIChatGenerator
from haystack.dataclasses import ChatMessage

from gatehouse.components.query.followup_rules import FollowUpRules
from gatehouse.components.query.query_condenser import QueryCondenser
from gatehouse.components.state import new_state


@pytest.fixture(scope="module")
def condenser():
    return QueryCondenser()


def history(*user_turns, assistant="Open Settings."):
    turns = []
    for text in user_turns:
        turns += [{"role": "user", "content": text}, {"role": "assistant", "content": assistant}]
    return turns


def test_init():
    component = QueryCondenser()
    assert component.rules == {"max_history_turns": 2, "use_assistant_turns": False, "max_condense_words": 12,
                               "max_reference_content_terms": 3, "context_template": "Regarding {topic}, {question}"}
    assert component.grammar is None
    assert component.chat_generator is None
    assert component.llm["max_query_chars"] == 500

    condense = QueryCondenser(rules={"max_history_turns": 1, "context_template": "{topic}: {question}"})
    assert condense.rules["max_history_turns"] == 1 and condense.rules["max_condense_words"] == 12
    assert condense.rules["context_template"] == "{topic}: {question}"
    assert condense.grammar is None


def test_init_rejects_bad_parameters():
    with pytest.raises(TypeError, match="task"):
        QueryCondenser(task="condense")  # one job: no task to choose
    with pytest.raises(ValueError, match="max_history_turns"):
        QueryCondenser(rules={"max_history_turns": -1})
    with pytest.raises(ValueError, match="'rules' has no setting 'max_words'"):
        QueryCondenser(rules={"max_words": 10})
    with pytest.raises(ValueError, match="'llm' has no setting 'condense_prompt'"):
        QueryCondenser(llm={"condense_prompt": "{question}"})
    with pytest.raises(ValueError, match="'grammar' has no setting 'pronoun'"):
        QueryCondenser(grammar={"pronoun": ["it"]})
    with pytest.raises(ValueError, match="'grammar' must be a mapping"):
        QueryCondenser(grammar=["it"])


def test_to_dict():
    data = QueryCondenser(rules={"max_history_turns": 3}).to_dict()
    assert data["type"] == "gatehouse.components.query.query_condenser.QueryCondenser"
    params = data["init_parameters"]
    assert "task" not in params
    assert params["rules"]["max_history_turns"] == 3
    assert params["rules"]["context_template"] == "Regarding {topic}, {question}"
    assert params["llm"]["max_query_chars"] == 500
    assert params["grammar"] is None
    assert params["chat_generator"] is None


def test_from_dict(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    generator = OpenAIChatGenerator(api_base_url="http://127.0.0.1:9/v1", model="local", max_retries=0, timeout=2.0)
    original = QueryCondenser(
        rules={"max_history_turns": 3, "context_template": "{question}"}, chat_generator=generator,
        grammar={"pronouns": ["it"]}
    )
    restored = QueryCondenser.from_dict(original.to_dict())
    assert restored.rules["max_history_turns"] == 3
    assert restored.grammar == {"pronouns": ["it"]} and restored.rules["context_template"] == "{question}"
    assert isinstance(restored.chat_generator, OpenAIChatGenerator)
    assert restored.to_dict() == original.to_dict()

    plain = QueryCondenser.from_dict(
        {"type": "gatehouse.components.query.query_condenser.QueryCondenser",
         "init_parameters": {"rules": {"max_condense_words": 25}}}
    )
    assert plain.rules["max_condense_words"] == 25 and plain.chat_generator is None


def test_from_dict_names_where_a_moved_setting_went():
    data = {"type": "gatehouse.components.query.query_condenser.QueryCondenser",
            "init_parameters": {"max_condense_words": 25, "context_template": "{question}", "max_query_chars": 300,
                                "condense_prompt": "{question}", "pronouns": ["it"]}}
    with pytest.raises(ValueError) as raised:
        QueryCondenser.from_dict(data)
    for old, new in [("max_condense_words", "rules.max_condense_words"),
                     ("context_template", "rules.context_template"), ("max_query_chars", "llm.max_query_chars"),
                     ("condense_prompt", "llm.prompt"), ("pronouns", "grammar.pronouns")]:
        assert f"'{old}' is now '{new}'" in str(raised.value)


def test_run_condense_with_history(condenser):
    state = new_state("and how do I revoke it?", history=history("How do I rotate an API key?"))
    out = condenser.run(state=state)["state"]
    assert out["query"] == "how do I revoke an API key?"
    assert out["condensed_query"] == out["query"]
    assert out["original_query"] == "and how do I revoke it?"
    assert out["path"] == ["start", "condense_query"]
    assert "query_condenser" in out["latency_ms"]


@pytest.mark.parametrize(
    ("previous", "question", "standalone"),
    [
        # A pronoun becomes the topic of the previous question.
        ("How do I rotate an API key?", "and how do I revoke it?", "how do I revoke an API key?"),
        ("How do I rotate an API key?", "And how do I revoke it instead?", "How do I revoke an API key instead?"),
        ("Tell me about the Enterprise plan.", "How much does it cost?", "How much does the Enterprise plan cost?"),
        ("How do I back up the gateway?", "How do I restore it?", "How do I restore the gateway?"),
        ("How do I request a refund?", "and how long does that take?", "how long does a refund take?"),
        ("How do I configure nightly backups?", "so how do I delete them?", "how do I delete nightly backups?"),
        ("How do I rotate an API key?", "How do I create one?", "How do I create an API key?"),
        ("Which regions does Corvio run in?", "Which models can I use in the last one?",
         "Which models can I use in the last region?"),
        ("What uptime does the Business plan guarantee?", "What credit do we get if it drops below that?",
         "What credit do we get if the uptime drops below that?"),
        # A new entity takes the place of the matching one.
        ("How much does the Team plan cost?", "what about the Business plan?", "How much does the Business plan cost?"),
        ("How much does the Team plan cost?", "And the Business plan?", "How much does the Business plan cost?"),
        ("What is the rate limit of the Pro plan?", "and for the free tier?",
         "What is the rate limit for the free tier?"),
        # Nothing to replace: the question is put in context.
        ("How do I turn on two-factor authentication?", "What if I lose my phone?",
         "Regarding two-factor authentication, what if I lose my phone?"),
        ("How do I configure nightly backups?", "What about the retention?",
         "Regarding nightly backups, what about the retention?"),
    ],
)
def test_run_condense_follow_ups(condenser, previous, question, standalone):
    out = condenser.run(state=new_state(question, history=history(previous)))["state"]
    assert out["query"] == standalone
    assert out["path"][-1] == "condense_query"


@pytest.mark.parametrize(
    ("previous", "question", "standalone"),
    [
        # A reply's opening word ("ok,") is no part of the question.
        ("How do I create a token?", "ok, and how do I delete it?", "how do I delete a token?"),
        ("How do I create a token?", "Okay, then how do I delete it?", "how do I delete a token?"),
        # "one" before a noun is a number, not the topic's noun.
        ("Can I send a batch of messages at once?", "how many can I send in one go?",
         "Regarding batch, how many can I send in one go?"),
    ],
)
def test_run_condense_replies_questions_and_numbers(condenser, previous, question, standalone):
    assert condenser.run(state=new_state(question, history=history(previous)))["state"]["query"] == standalone


@pytest.mark.parametrize(
    "question",
    [
        "How do I restore a database backup?",
        "Is it possible to export usage reports to CSV from the dashboard?",
        "What are the supported SSO providers?",
        "How would one write T(n) = 7n2 + 15n + 40 in big O notation?",
        "and how do I revoke the API key?",  # a follow-up that names its topic already
    ],
)
def test_run_condense_standalone_unchanged(condenser, question):
    out = condenser.run(state=new_state(question, history=history("How do I rotate an API key?")))["state"]
    assert out["query"] == question
    assert out["condensed_query"] == question
    assert "condense_query" not in out["path"]


@pytest.mark.parametrize(
    ("previous", "question", "standalone"),
    [
        # "that proxy" points at the earlier turn's proxy, not at its first phrase: the question names its topic
        ("How do I send all my requests through a proxy?", "What if that proxy requires a password?",
         "What if that proxy requires a password?"),
        ("How much does the basic tier cost for each request?", "and what limits does that tier have?",
         "what limits does the basic tier have?"),
    ],
)
def test_run_condense_a_demonstrative_points_at_the_phrase_it_names(condenser, previous, question, standalone):
    assert condenser.run(state=new_state(question, history=history(previous)))["state"]["query"] == standalone


def test_run_condense_without_history_unchanged(condenser):
    out = condenser.run(state=new_state("and how do I revoke it?"))["state"]
    assert out["query"] == "and how do I revoke it?"
    assert out["path"] == ["start"]


def test_run_condense_uses_most_recent_turns_only():
    component = QueryCondenser(rules={"max_history_turns": 1})
    turns = history("How do I rotate an API key?", "How do I configure nightly backups?")
    out = component.run(state=new_state("and how do I delete them?", history=turns))["state"]
    assert out["query"] == "how do I delete nightly backups?"


def test_run_condense_chain_of_follow_ups(condenser):
    """An earlier follow-up is made standalone first, so the topic survives two turns."""
    turns = history("How much does the Team plan cost?", "And the Business plan?")
    out = condenser.run(state=new_state("Does it include SSO?", history=turns))["state"]
    assert out["query"] == "Does the Business plan include SSO?"


def test_run_condense_assistant_turn_optional():
    turns = [
        {"role": "user", "content": "Which plans are there?"},
        {"role": "assistant", "content": "There is the Team plan."},
    ]
    without = QueryCondenser().run(state=new_state("how much is it?", history=turns))["state"]
    with_assistant = QueryCondenser(rules={"use_assistant_turns": True}).run(
        state=new_state("how much is it?", history=turns)
    )["state"]
    assert without["query"] == "how much is the plans?"
    assert with_assistant["query"] == "how much is the Team plan?"


def test_run_condense_yaml_parameters():
    component = QueryCondenser(
        rules={"context_template": "{question} ({topic})"},
        grammar={"leading_connectives": [], "pronouns": ["it"]},
    )
    turns = history("How do I turn on two-factor authentication?")
    out = component.run(state=new_state("What if I lose my phone?", history=turns))["state"]
    assert out["query"] == "What if I lose my phone? (two-factor authentication)"
    kept = component.run(state=new_state("and how do I revoke it?", history=history("How do I rotate an API key?")))
    assert kept["state"]["query"] == "and how do I revoke an API key?"


def test_noun_phrases():
    rules = FollowUpRules()
    phrases = rules.noun_phrases("How much does the Team plan cost per month?")
    assert [(p.text, p.mention, p.determiner) for p in phrases] == [("Team plan", "the Team plan", "the"),
                                                                    ("month", "month", None)]
    assert [p.text for p in rules.noun_phrases("How do I rotate an API key?")] == ["API key"]
    assert [p.text for p in rules.noun_phrases("Which regions does Corvio run in?")] == ["regions", "Corvio"]

    assert rules.noun_phrases("Reset") == []  # a lone verb ends the text: no phrase, no index error
    assert rules.noun_phrases("how do I upgrade") == []


def test_run_condense_unicode(condenser):
    turns = history("How do I set up the café's Wi-Fi?")
    out = condenser.run(state=new_state("and how do I reset it?", history=turns))["state"]
    assert out["query"] == "how do I reset the café's Wi-Fi?"
    assert out["path"][-1] == "condense_query"


def test_run_condense_empty_query(condenser):
    out = condenser.run(state=new_state("", history=history("How do I rotate an API key?")))["state"]
    assert out["query"] == ""
    assert "condense_query" not in out["path"]


def test_run_condense_does_not_mutate_input(condenser):
    state = new_state("and how do I revoke it?", history=history("How do I rotate an API key?"))
    snapshot = deepcopy(state)
    condenser.run(state=state)
    assert state == snapshot


def test_run_condense_llm_failure_falls_back(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    generator = OpenAIChatGenerator(api_base_url="http://127.0.0.1:9/v1", model="local", max_retries=0, timeout=2.0)
    component = QueryCondenser(chat_generator=generator)
    out = component.run(state=new_state("and how do I revoke it?", history=history("How do I rotate an API key?")))
    assert out["state"]["query"] == "how do I revoke an API key?"
    assert any("LLM condense failed" in w for w in out["state"]["validation"]["confidence_warnings"])


@component
class Rewrites:
    """A chat generator that replies `text` to every prompt."""

    def __init__(self, text: str) -> None:
        self.text = text

    @component.output_types(replies=list[ChatMessage])
    def run(self, messages: list[ChatMessage]) -> dict:
        return {"replies": [ChatMessage.from_assistant(self.text)]}


def test_run_condense_llm_rewrite_that_drops_the_follow_ups_words_falls_back_to_the_rules():
    turns = history("How do I rotate an API key?")
    dropped = QueryCondenser(chat_generator=Rewrites("rotate api key")).run(
        state=new_state("and how do I revoke it?", history=turns))["state"]
    assert dropped["query"] == "how do I revoke an API key?"  # the rules' question, not the model's
    assert dropped["validation"]["confidence_warnings"] == [
        "query_condenser: the LLM's rewrite left out revoke; rules used"]
    kept = QueryCondenser(chat_generator=Rewrites("Revoking an API key: how?")).run(
        state=new_state("and how do I revoke it?", history=turns))["state"]
    assert kept["query"] == "Revoking an API key: how?" and kept["validation"]["confidence_warnings"] == []
