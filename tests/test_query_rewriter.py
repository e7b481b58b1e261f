from copy import deepcopy

import pytest
from haystack import Document
from haystack.components.generators.chat import OpenAIChatGenerator

from gatehouse.components.routers.quality_gate import QualityGate
from gatehouse.components.query.query_rewriter import QueryRewriter
from gatehouse.components.state import new_state

# As declared in the knowledge bases' YAML (`keywords:`), `_` reads as a space.
KB_KEYWORDS = {
    "faq": ["account", "password", "refund", "invoice", "billing", "api_key"],
    "ops": ["deployment", "docker", "monitoring", "backup", "troubleshooting"],
    "product": ["pricing", "features", "models", "security", "certifications"],
}
QUESTION = "How do I reset my login?"
WEAK = [
    Document(
        content="Sign-in problems: clear your browser cookies and try the sign-in page again. "
        "Sign-in links expire after 15 minutes.",
        meta={"dense_score": 0.21},
    ),
    Document(
        content="Two-factor authentication codes are sent by SMS. Authentication apps are also supported.",
        meta={"dense_score": 0.18},
    ),
    Document(content="Invoices are emailed monthly to the billing contact.", meta={"dense_score": 0.05}),
    Document(content="Our office is closed on public holidays.", meta={"dense_score": 0.01}),
]


@pytest.fixture(scope="module")
def rewriter():
    component = QueryRewriter(task="retry", kb_keywords=KB_KEYWORDS, embedding_cache_dir="off")
    component.warm_up()
    return component


@pytest.fixture(scope="module")
def condenser():
    return QueryRewriter(task="condense")


def retry_state(question=QUESTION, **fields):
    """The state as the quality gate emits it on `retry` after attempt 0."""
    state = new_state(question, kbs=["faq"], documents=WEAK, attempt=1)
    state["attempts"] = [{"attempt": 0, "query": question, "score": 0.21}]
    state["path"] = ["start", "route_to_faq", "attempt_0_score_0.21"]
    state.update(fields)
    return state


def history(*user_turns, assistant="Open Settings."):
    turns = []
    for text in user_turns:
        turns += [{"role": "user", "content": text}, {"role": "assistant", "content": assistant}]
    return turns


def test_init():
    component = QueryRewriter()
    assert component.task == "retry"
    assert component.kb_keywords is None
    assert component.strategies is None
    assert component.max_expansion_terms == 3
    assert component.prf_terms == 3
    assert component.max_history_turns == 2
    assert component.chat_generator is None

    condense = QueryRewriter(task="condense", max_history_turns=1, context_template="{topic}: {question}")
    assert (condense.task, condense.max_history_turns) == ("condense", 1)
    assert condense.context_template == "{topic}: {question}"
    assert condense.pronouns is None and condense.ellipsis_patterns is None


def test_init_rejects_bad_parameters():
    with pytest.raises(ValueError, match="Unknown task"):
        QueryRewriter(task="translate")
    with pytest.raises(ValueError, match="Unknown strategies"):
        QueryRewriter(strategies=["keywords", "magic"])
    with pytest.raises(ValueError):
        QueryRewriter(prf_terms=-1)


def test_to_dict():
    data = QueryRewriter(task="retry", kb_keywords=KB_KEYWORDS, strategies=["feedback", "keywords"]).to_dict()
    assert data["type"] == "gatehouse.components.query.query_rewriter.QueryRewriter"
    params = data["init_parameters"]
    assert params["task"] == "retry"
    assert params["kb_keywords"] == KB_KEYWORDS
    assert params["strategies"] == ["feedback", "keywords"]
    assert params["chat_generator"] is None
    assert params["max_history_turns"] == 2
    assert params["context_template"] == "Regarding {topic}, {question}"
    assert params["ellipsis_patterns"] is None


def test_from_dict(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    generator = OpenAIChatGenerator(api_base_url="http://127.0.0.1:9/v1", model="local", max_retries=0, timeout=2.0)
    original = QueryRewriter(
        task="condense", max_history_turns=3, chat_generator=generator, pronouns=["it"], context_template="{question}"
    )
    restored = QueryRewriter.from_dict(original.to_dict())
    assert restored.task == "condense"
    assert restored.max_history_turns == 3
    assert restored.pronouns == ["it"] and restored.context_template == "{question}"
    assert isinstance(restored.chat_generator, OpenAIChatGenerator)
    assert restored.to_dict() == original.to_dict()

    plain = QueryRewriter.from_dict(
        {"type": "gatehouse.components.query.query_rewriter.QueryRewriter", "init_parameters": {"kb_keywords": KB_KEYWORDS}}
    )
    assert plain.kb_keywords == KB_KEYWORDS and plain.chat_generator is None


def test_run_retry_adds_yaml_keywords(rewriter):
    state = retry_state()
    out = rewriter.run(state=state)["state"]
    query = out["query"]
    assert query != QUESTION
    assert query.startswith(QUESTION)
    record = out["rewrites"][-1]
    assert record["attempt"] == 1
    assert record["strategies"] == ["keywords"]
    assert record["keywords"], "expected at least one KB keyword"
    assert "password" in record["keywords"]
    assert all(k in KB_KEYWORDS["faq"] for k in record["keywords"])
    assert len(record["keywords"]) <= rewriter.max_expansion_terms
    assert all(k in query for k in record["keywords"])
    assert out["original_query"] == QUESTION
    assert out["path"][-1] == "rewrite_and_retry"
    assert out["attempt"] == 1
    assert "query_rewriter" in out["latency_ms"]


def test_run_retry_keywords_only_from_routed_kbs(rewriter):
    out = rewriter.run(state=retry_state("My container keeps crashing after deploy", kbs=["ops"]))["state"]
    keywords = out["rewrites"][-1]["keywords"]
    assert "docker" in keywords
    assert set(keywords) <= set(KB_KEYWORDS["ops"])
    assert "deployment" not in keywords  # already in the question ("deploy")


def test_run_retry_second_attempt_adds_feedback_terms(rewriter):
    first = rewriter.run(state=retry_state())["state"]
    attempts = first["attempts"] + [{"attempt": 1, "query": first["query"], "score": 0.3}]
    second_in = dict(first, attempt=2, attempts=attempts)
    second = rewriter.run(state=second_in)["state"]
    record = second["rewrites"][-1]
    assert record["strategies"] == ["keywords", "feedback"]
    feedback = record["feedback_terms"]
    assert 0 < len(feedback) <= rewriter.prf_terms
    weak_text = " ".join(d.content.lower() for d in WEAK[: rewriter.prf_top_k])
    assert all(term.lower() in weak_text for term in feedback)
    assert not {"the", "are", "your", "reset", "login"} & {t.lower() for t in feedback}
    assert "authentication" in feedback or "sign" in feedback
    assert second["query"] != first["query"]
    assert second["original_query"] == QUESTION
    assert [r["attempt"] for r in second["rewrites"]] == [1, 2]
    assert second["path"].count("rewrite_and_retry") == 2


def test_run_consecutive_attempts_differ(rewriter):
    state = retry_state()
    queries = [QUESTION]
    for attempt in (1, 2, 3, 4):
        state = dict(state, attempt=attempt)
        state = rewriter.run(state=state)["state"]
        state = dict(state, attempts=state["attempts"] + [{"attempt": attempt, "query": state["query"], "score": 0.2}])
        queries.append(state["query"])
    assert len(set(queries)) == len(queries), queries
    assert state["original_query"] == QUESTION


def test_run_retry_without_keywords_or_documents_still_changes_query():
    component = QueryRewriter(task="retry")
    out = component.run(state=retry_state(documents=[], kbs=[]))["state"]
    assert out["query"] != QUESTION
    assert out["query"] == "reset login"
    assert out["rewrites"][-1]["strategies"][0] == "focus"


def test_run_retry_llm_failure_falls_back(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    generator = OpenAIChatGenerator(api_base_url="http://127.0.0.1:9/v1", model="local", max_retries=0, timeout=2.0)
    component = QueryRewriter(task="retry", chat_generator=generator, strategies=["feedback"])
    out = component.run(state=retry_state())["state"]
    record = out["rewrites"][-1]
    assert record["method"] == "deterministic"
    assert "llm_error" in record
    assert record["feedback_terms"]
    assert out["query"] != QUESTION
    assert any("LLM rewrite failed" in w for w in out["validation"]["confidence_warnings"])


def test_run_retry_does_not_mutate_input(rewriter):
    state = retry_state()
    snapshot = deepcopy(state)
    rewriter.run(state=state)
    assert state == snapshot


def test_run_quality_loop_with_gate(rewriter):
    """The gate and the rewriter as the pipeline wires them: retry -> rewrite -> (retrieval) -> gate."""
    gate = QualityGate(max_retries=2)
    state = new_state(QUESTION, kbs=["faq"], documents=WEAK)
    routes = []
    while True:
        route, state = next(iter(gate.run(state=state).items()))
        routes.append(route)
        if route != "retry":
            break
        state = rewriter.run(state=state)["state"]
    assert routes == ["retry", "retry", "exhausted"]
    queries = [a["query"] for a in state["attempts"]]
    assert len(set(queries)) == 3
    assert [p for p in state["path"] if p.startswith(("attempt_", "rewrite_", "max_"))] == [
        f"attempt_0_score_{state['attempts'][0]['score']:.2f}",
        "rewrite_and_retry",
        f"attempt_1_score_{state['attempts'][1]['score']:.2f}",
        "rewrite_and_retry",
        f"attempt_2_score_{state['attempts'][2]['score']:.2f}",
        "max_retries_reached",
    ]
    assert state["original_query"] == QUESTION


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


def test_run_condense_without_history_unchanged(condenser):
    out = condenser.run(state=new_state("and how do I revoke it?"))["state"]
    assert out["query"] == "and how do I revoke it?"
    assert out["path"] == ["start"]


def test_run_condense_uses_most_recent_turns_only():
    component = QueryRewriter(task="condense", max_history_turns=1)
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
    without = QueryRewriter(task="condense").run(state=new_state("how much is it?", history=turns))["state"]
    with_assistant = QueryRewriter(task="condense", use_assistant_turns=True).run(
        state=new_state("how much is it?", history=turns)
    )["state"]
    assert without["query"] == "how much is the plans?"
    assert with_assistant["query"] == "how much is the Team plan?"


def test_run_condense_yaml_parameters():
    component = QueryRewriter(
        task="condense",
        context_template="{question} ({topic})",
        leading_connectives=[],
        pronouns=["it"],
    )
    turns = history("How do I turn on two-factor authentication?")
    out = component.run(state=new_state("What if I lose my phone?", history=turns))["state"]
    assert out["query"] == "What if I lose my phone? (two-factor authentication)"
    kept = component.run(state=new_state("and how do I revoke it?", history=history("How do I rotate an API key?")))
    assert kept["state"]["query"] == "and how do I revoke an API key?"


def test_noun_phrases(condenser):
    phrases = condenser.noun_phrases("How much does the Team plan cost per month?")
    assert [(p.text, p.mention, p.determiner) for p in phrases] == [("Team plan", "the Team plan", "the"),
                                                                    ("month", "month", None)]
    assert [p.text for p in condenser.noun_phrases("How do I rotate an API key?")] == ["API key"]
    assert [p.text for p in condenser.noun_phrases("Which regions does Corvio run in?")] == ["regions", "Corvio"]

    assert condenser.noun_phrases("Reset") == []  # a lone verb ends the text: no phrase, no index error
    assert condenser.noun_phrases("how do I upgrade") == []


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
    component = QueryRewriter(task="condense", chat_generator=generator)
    out = component.run(state=new_state("and how do I revoke it?", history=history("How do I rotate an API key?")))
    assert out["state"]["query"] == "how do I revoke an API key?"
    assert any("LLM condense failed" in w for w in out["state"]["validation"]["confidence_warnings"])
