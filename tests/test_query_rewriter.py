from copy import deepcopy

import pytest
from haystack import Document
from haystack.components.generators.chat import OpenAIChatGenerator

from gatehouse.components.quality.quality_gate import QualityGate
from gatehouse.components.query.query_rewriter import DEFAULT_EXPANSION, QueryRewriter
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
    component = QueryRewriter(kb_keywords=KB_KEYWORDS, expansion={"cache_dir": "off"})
    component.warm_up()
    return component


def retry_state(question=QUESTION, **fields):
    """The state as the quality gate emits it on `retry` after attempt 0."""
    state = new_state(question, kbs=["faq"], documents=WEAK, attempt=1)
    state["attempts"] = [{"attempt": 0, "query": question, "score": 0.21}]
    state["path"] = ["start", "route_to_faq", "attempt_0_score_0.21"]
    state.update(fields)
    return state


def test_init():
    component = QueryRewriter()
    assert component.kb_keywords is None
    assert component.expansion == DEFAULT_EXPANSION and component.expansion["strategies"] is None
    assert DEFAULT_EXPANSION["max_expansion_terms"] == 3
    assert DEFAULT_EXPANSION["prf_terms"] == 3
    assert component.chat_generator is None
    assert component.llm["max_query_chars"] == 500

    tuned = QueryRewriter(expansion={"strategies": ["feedback"], "prf_terms": 5})
    assert tuned.expansion == {**DEFAULT_EXPANSION, "strategies": ["feedback"], "prf_terms": 5}


def test_init_rejects_bad_parameters():
    with pytest.raises(TypeError, match="task"):
        QueryRewriter(task="retry")  # one job: no task to choose
    with pytest.raises(ValueError, match=r"Unknown expansion\.strategies \['magic'\]"):
        QueryRewriter(expansion={"strategies": ["keywords", "magic"]})
    with pytest.raises(ValueError, match="'llm' has no setting 'rewrite_prompt'"):
        QueryRewriter(llm={"rewrite_prompt": "{question}"})
    with pytest.raises(ValueError, match="prf_terms"):
        QueryRewriter(expansion={"prf_terms": -1})
    with pytest.raises(ValueError, match="'expansion' has no setting 'max_history_turns'"):
        QueryRewriter(expansion={"max_history_turns": 2})


def test_to_dict():
    data = QueryRewriter(kb_keywords=KB_KEYWORDS, expansion={"strategies": ["feedback", "keywords"]}).to_dict()
    assert data["type"] == "gatehouse.components.query.query_rewriter.QueryRewriter"
    params = data["init_parameters"]
    assert "task" not in params
    assert params["kb_keywords"] == KB_KEYWORDS
    assert params["expansion"] == {**DEFAULT_EXPANSION, "strategies": ["feedback", "keywords"]}
    assert params["llm"]["max_query_chars"] == 500
    assert params["chat_generator"] is None


def test_from_dict(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    generator = OpenAIChatGenerator(api_base_url="http://127.0.0.1:9/v1", model="local", max_retries=0, timeout=2.0)
    original = QueryRewriter(chat_generator=generator, expansion={"strategies": ["feedback"], "prf_top_k": 2})
    restored = QueryRewriter.from_dict(original.to_dict())
    assert restored.expansion == {**DEFAULT_EXPANSION, "strategies": ["feedback"], "prf_top_k": 2}
    assert isinstance(restored.chat_generator, OpenAIChatGenerator)
    assert restored.to_dict() == original.to_dict()

    plain = QueryRewriter.from_dict(
        {"type": "gatehouse.components.query.query_rewriter.QueryRewriter", "init_parameters": {"kb_keywords": KB_KEYWORDS}}
    )
    assert plain.kb_keywords == KB_KEYWORDS and plain.chat_generator is None


def test_from_dict_names_where_a_moved_setting_went():
    data = {"type": "gatehouse.components.query.query_rewriter.QueryRewriter",
            "init_parameters": {"strategies": ["feedback"], "embedding_model": None, "embedding_cache_dir": "off",
                                "rewrite_prompt": "{question}", "max_query_chars": 300, "prf_terms": 4}}
    with pytest.raises(ValueError) as raised:
        QueryRewriter.from_dict(data)
    for old, new in [("strategies", "expansion.strategies"), ("embedding_model", "expansion.embedding_model"),
                     ("embedding_cache_dir", "expansion.cache_dir"), ("rewrite_prompt", "llm.prompt"),
                     ("max_query_chars", "llm.max_query_chars"), ("prf_terms", "expansion.prf_terms")]:
        assert f"'{old}' is now '{new}'" in str(raised.value)


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
    assert len(record["keywords"]) <= DEFAULT_EXPANSION["max_expansion_terms"]
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
    assert 0 < len(feedback) <= DEFAULT_EXPANSION["prf_terms"]
    weak_text = " ".join(d.content.lower() for d in WEAK[: DEFAULT_EXPANSION["prf_top_k"]])
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
    component = QueryRewriter()
    out = component.run(state=retry_state(documents=[], kbs=[]))["state"]
    assert out["query"] != QUESTION
    assert out["query"] == "reset login"
    assert out["rewrites"][-1]["strategies"][0] == "focus"


def test_run_retry_llm_failure_falls_back(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    generator = OpenAIChatGenerator(api_base_url="http://127.0.0.1:9/v1", model="local", max_retries=0, timeout=2.0)
    component = QueryRewriter(chat_generator=generator, expansion={"strategies": ["feedback"]})
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
    assert routes == ["retry", "retry", "done"]
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
