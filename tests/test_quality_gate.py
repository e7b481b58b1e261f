from copy import deepcopy

import pytest
import yaml
from haystack import Document
from haystack.components.generators.chat import OpenAIChatGenerator

from gatehouse.components.embedders.embedding import EmbeddingBackend
from gatehouse.components.quality.quality_gate import QualityGate, parse_relevance
from gatehouse.components.terms import DEFAULT_STOPWORDS, TermNormaliser, tokenize
from gatehouse.components.state import new_state
from gatehouse.pipelines import PipelineYAMLError, load_pipeline

QUESTION = "How do I rotate an API key?"

RELEVANT = [
    (
        "API keys",
        "Rotating keys",
        "To rotate an API key, open Settings > API keys, click Rotate next to the key and update your "
        "applications with the new secret. The old key stays valid for 24 hours.",
    ),
    (
        "API keys",
        "Revoking keys",
        "You can revoke an API key at any time from the API keys page. Revoked keys stop working immediately.",
    ),
    ("Billing", "Refunds", "Annual plans can be refunded within 30 days of purchase."),
]
UNRELATED = [
    ("Office", "Pets", "Our office dog is named Biscuit and loves long walks in the park on sunny afternoons."),
    ("Cafeteria", "Menu", "The cafeteria serves vegetarian lasagna every Thursday at noon."),
    ("Travel", "Trains", "The night train to Vienna leaves at 22:10 from platform 4."),
]


@pytest.fixture(scope="module")
def backend():
    return EmbeddingBackend.get(cache_dir="off")


def scored_documents(backend, question, rows):
    """Documents as the hybrid retriever returns them: meta with a real cosine `dense_score`."""
    vectors = backend.embed([question] + [content for _, _, content in rows])
    cosines = vectors[1:] @ vectors[0]
    return [
        Document(
            content=content,
            meta={"kb": "faq", "title": title, "section": section, "dense_score": float(score)},
            score=1.0 / (60 + rank),
        )
        for rank, ((title, section, content), score) in enumerate(zip(rows, cosines))
    ]


@pytest.fixture(scope="module")
def relevant_docs(backend):
    return scored_documents(backend, QUESTION, RELEVANT)


@pytest.fixture(scope="module")
def unrelated_docs(backend):
    return scored_documents(backend, QUESTION, UNRELATED)


def only_route(result):
    assert len(result) == 1, f"expected exactly one output, got {list(result)}"
    return next(iter(result.items()))


def test_init():
    gate = QualityGate()
    assert gate.default_threshold == 0.6
    assert gate.floor == 0.40
    assert gate.max_retries == 2
    assert gate.top_n == 3
    assert gate.chat_generator is None
    assert gate.dense["range"] == [0.1, 0.6]
    assert gate.weights == {"best_dense": 0.5, "mean_dense": 0.1, "coverage": 0.4}
    assert gate.judge["weight"] == 0.5 and gate.judge["max_context_chars"] == 4000

    custom = QualityGate(default_threshold=0.5, floor=0.3, max_retries=1, top_n=5, coverage={"stopwords": ["how"]})
    assert (custom.default_threshold, custom.floor, custom.max_retries, custom.top_n) == (0.5, 0.3, 1, 5)
    assert custom.coverage["stopwords"] == ["how"]
    assert QualityGate(weights={"coverage": 1.0}).weights == {"best_dense": 0.0, "mean_dense": 0.0, "coverage": 1.0}


def test_init_rejects_bad_parameters():
    with pytest.raises(ValueError):
        QualityGate(max_retries=-1)
    with pytest.raises(ValueError):
        QualityGate(top_n=0)
    with pytest.raises(ValueError):
        QualityGate(weights={"best_dense": 0, "mean_dense": 0, "coverage": 0})
    with pytest.raises(ValueError):
        QualityGate(dense={"range": [0.6, 0.1]})
    with pytest.raises(ValueError):
        QualityGate(judge={"weight": 1.5})
    with pytest.raises(ValueError, match="Unknown quality signals \\['cosine'\\] in 'weights'"):
        QualityGate(weights={"cosine": 1.0})
    with pytest.raises(ValueError, match="'judge' has no setting 'llm_weight'"):
        QualityGate(judge={"llm_weight": 0.3})


def test_from_dict_names_the_new_place_of_a_moved_setting(tmp_path):
    data = {"type": "gatehouse.components.quality.quality_gate.QualityGate",
            "init_parameters": {"max_retries": 2, "coverage_weight": 0.4, "dense_range": [0.1, 0.6], "llm_weight": 0.3,
                                "embedding_cache_dir": "off"}}
    with pytest.raises(ValueError) as raised:
        QualityGate.from_dict(data)
    for old, new in [("coverage_weight", "weights.coverage"), ("dense_range", "dense.range"),
                     ("llm_weight", "judge.weight"), ("embedding_cache_dir", "dense.cache_dir")]:
        assert f"'{old}' is now '{new}'" in str(raised.value)
    # the gate in a sub-pipeline, as ask.yml runs search.yml's
    inner = tmp_path / "old-search.yml"
    inner.write_text(yaml.safe_dump({"components": {"quality_gate": data}, "connections": []}))
    outer = tmp_path / "old-ask.yml"
    outer.write_text(yaml.safe_dump({"components": {"search": {
        "type": "gatehouse.components.pipelines.state_pipeline.StatePipeline",
        "init_parameters": {"pipeline_file": str(inner)}}}, "connections": []}))
    with pytest.raises(PipelineYAMLError, match=r"old-search\.yml: QualityGate settings moved.*'llm_weight' is now "
                                                r"'judge\.weight'"):
        load_pipeline(outer)


def test_to_dict():
    data = QualityGate(default_threshold=0.55, max_retries=1, coverage={"stopwords": ["a", "the"]}).to_dict()
    assert data["type"] == "gatehouse.components.quality.quality_gate.QualityGate"
    params = data["init_parameters"]
    assert params["default_threshold"] == 0.55
    assert params["max_retries"] == 1
    assert params["floor"] == 0.40
    assert params["coverage"]["stopwords"] == ["a", "the"]
    assert params["dense"]["range"] == [0.1, 0.6]
    assert params["chat_generator"] is None


def test_to_dict_with_chat_generator(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    generator = OpenAIChatGenerator(api_base_url="http://127.0.0.1:9/v1", model="local", max_retries=0, timeout=2.0)
    data = QualityGate(chat_generator=generator, judge={"weight": 0.3}).to_dict()
    serialized = data["init_parameters"]["chat_generator"]
    assert serialized["type"] == "haystack.components.generators.chat.openai.OpenAIChatGenerator"
    assert serialized["init_parameters"]["api_base_url"] == "http://127.0.0.1:9/v1"
    assert "test-key" not in str(data)


def test_from_dict(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    generator = OpenAIChatGenerator(api_base_url="http://127.0.0.1:9/v1", model="local", max_retries=0, timeout=2.0)
    original = QualityGate(default_threshold=0.65, floor=0.35, top_n=4, chat_generator=generator, judge={"weight": 0.3})
    restored = QualityGate.from_dict(original.to_dict())
    assert restored.default_threshold == 0.65
    assert restored.floor == 0.35
    assert restored.top_n == 4
    assert restored.judge["weight"] == 0.3
    assert isinstance(restored.chat_generator, OpenAIChatGenerator)
    assert restored.chat_generator.api_base_url == "http://127.0.0.1:9/v1"
    assert restored.to_dict() == original.to_dict()

    plain = QualityGate.from_dict({"type": "gatehouse.components.quality.quality_gate.QualityGate", "init_parameters": {}})
    assert plain.chat_generator is None and plain.max_retries == 2


def test_run_scores_relevant_high_and_unrelated_low(relevant_docs, unrelated_docs):
    gate = QualityGate()
    _, good = only_route(gate.run(state=new_state(QUESTION, documents=relevant_docs)))
    _, bad = only_route(gate.run(state=new_state(QUESTION, documents=unrelated_docs)))
    assert good["quality_score"] >= 0.8
    assert bad["quality_score"] <= 0.2
    assert good["quality_signals"]["coverage"] == 1.0
    assert bad["quality_signals"]["coverage"] == 0.0
    assert 0.0 <= bad["quality_score"] < good["quality_score"] <= 1.0


def test_run_passes_with_exact_path(relevant_docs):
    state = new_state(QUESTION, documents=relevant_docs, kbs=["faq"])
    route, out = only_route(QualityGate().run(state=state))
    assert route == "done"
    score = out["quality_score"]
    assert out["path"] == ["start", f"attempt_0_score_{score:.2f}"]
    assert out["attempts"] == [{"attempt": 0, "query": QUESTION, "score": score}]
    assert out["fallback"] is False
    assert out["documents"] == relevant_docs
    assert out["attempt"] == 0
    assert "quality_gate" in out["latency_ms"]


def test_run_retry_increments_attempt_and_keeps_documents(unrelated_docs):
    state = new_state(QUESTION, documents=unrelated_docs)
    route, out = only_route(QualityGate().run(state=state))
    assert route == "retry"
    assert out["attempt"] == 1
    assert out["documents"] == unrelated_docs
    assert out["path"][-1] == f"attempt_0_score_{out['quality_score']:.2f}"
    assert "rewrite_and_retry" not in out["path"]  # the rewriter appends it
    assert "max_retries_reached" not in out["path"]


def test_run_exhausted_with_fallback_below_floor(unrelated_docs):
    gate = QualityGate(max_retries=2)
    state = new_state(QUESTION, documents=unrelated_docs)
    routes = []
    for _ in range(3):
        route, state = only_route(gate.run(state=state))
        routes.append(route)
    assert routes == ["retry", "retry", "done"]
    scores = [a["score"] for a in state["attempts"]]
    assert [a["attempt"] for a in state["attempts"]] == [0, 1, 2]
    assert state["path"] == [
        "start",
        f"attempt_0_score_{scores[0]:.2f}",
        f"attempt_1_score_{scores[1]:.2f}",
        f"attempt_2_score_{scores[2]:.2f}",
        "max_retries_reached",
    ]
    assert state["fallback"] is True
    assert state["documents"] == []
    assert state["best_score"] < gate.floor
    assert state["status"] == "partial"


def test_run_exhausted_keeps_best_attempt_above_floor(backend, relevant_docs, unrelated_docs):
    # Attempt 0 finds a half-relevant set, attempt 1 only unrelated text: the gate keeps attempt 0's documents.
    middling = scored_documents(backend, QUESTION, [RELEVANT[1], UNRELATED[0], UNRELATED[1]])
    gate = QualityGate(max_retries=1, default_threshold=0.95, floor=0.3)
    route, state = only_route(gate.run(state=new_state(QUESTION, documents=middling)))
    assert route == "retry"
    first = state["quality_score"]
    assert 0.3 <= first < 0.95

    state = dict(state, query="rotate API key credentials", documents=unrelated_docs)
    route, state = only_route(gate.run(state=state))
    assert route == "done"
    assert state["attempts"][1]["query"] == "rotate API key credentials"
    assert state["attempts"][1]["score"] < first
    assert state["path"][-1] == "max_retries_reached"
    assert state["fallback"] is False
    assert state["status"] == "partial"
    assert state["best_score"] == first
    assert state["best_attempt"] == 0
    assert state["documents"] == middling
    assert state["best_documents"] == middling
    assert state["quality_score"] == first


def test_run_threshold_from_state_overrides_default(backend):
    middling = scored_documents(backend, QUESTION, [RELEVANT[1], UNRELATED[0]])
    gate = QualityGate(default_threshold=0.6)
    score = only_route(gate.run(state=new_state(QUESTION, documents=middling)))[1]["quality_score"]
    below, above = round(score - 0.05, 2), round(score + 0.05, 2)
    assert only_route(gate.run(state=new_state(QUESTION, documents=middling, threshold=below)))[0] == "done"
    route, out = only_route(gate.run(state=new_state(QUESTION, documents=middling, threshold=above)))
    assert route == "retry"
    assert out["threshold"] == above
    assert only_route(QualityGate(default_threshold=below).run(state=new_state(QUESTION, documents=middling)))[0] == (
        "done"
    )


def test_run_scores_original_query_not_rewritten_one(relevant_docs):
    state = new_state(QUESTION, documents=relevant_docs)
    state["query"] = "cafeteria lasagna thursday"
    route, out = only_route(QualityGate().run(state=state))
    assert route == "done"
    assert out["quality_signals"]["coverage"] == 1.0
    assert out["attempts"][0]["query"] == "cafeteria lasagna thursday"


def test_run_empty_documents():
    route, out = only_route(QualityGate().run(state=new_state(QUESTION, documents=[])))
    assert route == "retry"
    assert out["quality_score"] == 0.0
    assert out["path"][-1] == "attempt_0_score_0.00"

    route, out = only_route(QualityGate(max_retries=0).run(state=new_state(QUESTION)))
    assert route == "done"
    assert out["fallback"] is True
    assert out["path"][-2:] == ["attempt_0_score_0.00", "max_retries_reached"]


def test_run_without_dense_scores_uses_term_coverage():
    docs = [Document(content="To rotate an API key open Settings and click Rotate.", meta={"bm25_score": 7.1})]
    _, out = only_route(QualityGate().run(state=new_state(QUESTION, documents=docs)))
    assert out["quality_signals"]["best_dense"] is None
    assert out["quality_signals"]["coverage"] == 1.0
    assert out["quality_score"] == 1.0


def test_run_unicode_question(backend):
    question = "Wie ändere ich mein Passwort?"
    rows = [("Konto", "Passwort", "Um das Passwort zu ändern, öffnen Sie die „Kontoeinstellungen“.")]
    docs = scored_documents(backend, question, rows)
    gate = QualityGate(coverage={"stemmer_language": "german", "stopwords": ["wie", "ich", "mein"]})
    _, out = only_route(gate.run(state=new_state(question, documents=docs)))
    assert out["quality_signals"]["coverage"] == 1.0
    assert out["path"][-1].startswith("attempt_0_score_")


def test_run_does_not_mutate_input(relevant_docs, unrelated_docs):
    gate = QualityGate(max_retries=0)
    for docs in (relevant_docs, unrelated_docs):
        state = new_state(QUESTION, documents=list(docs))
        snapshot = deepcopy(dict(state))
        gate.run(state=state)
        assert state == snapshot


def test_run_llm_judge_failure_falls_back_and_is_recorded(monkeypatch, relevant_docs):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    generator = OpenAIChatGenerator(api_base_url="http://127.0.0.1:9/v1", model="local", max_retries=0, timeout=2.0)
    plain = only_route(QualityGate().run(state=new_state(QUESTION, documents=relevant_docs)))[1]
    route, out = only_route(
        QualityGate(chat_generator=generator).run(state=new_state(QUESTION, documents=relevant_docs))
    )
    assert route == "done"
    assert out["quality_score"] == plain["quality_score"]
    assert out["quality_signals"]["llm"] is None
    assert any("LLM judge failed" in w for w in out["validation"]["confidence_warnings"])


def test_parse_relevance():
    assert parse_relevance("0.8") == 0.8
    assert parse_relevance("Relevance: 0.35.") == 0.35
    assert parse_relevance("7/10") == 0.7
    assert parse_relevance("85%") == 0.85
    assert parse_relevance("1") == 1.0
    assert parse_relevance("very relevant") is None
    assert parse_relevance("3.5") is None
    assert parse_relevance("") is None


def test_term_helpers():
    assert tokenize("API_key rotation, naïve Café!") == ["api", "key", "rotation", "naïve", "café"]
    terms = TermNormaliser(None, "english", 2)
    assert terms.terms("How do I rotate my API keys?") == ["rotat", "api", "key"]
    assert "how" in DEFAULT_STOPWORDS
    assert len(set(terms.terms("keys key KEY"))) == 1


def test_run_max_retries_per_request(unrelated_docs):
    gate = QualityGate(max_retries=2)
    route, out = only_route(gate.run(state=new_state(QUESTION, documents=unrelated_docs), max_retries=0))
    assert route == "done" and out["path"][-1] == "max_retries_reached"
    assert only_route(gate.run(state=new_state(QUESTION, documents=unrelated_docs)))[0] == "retry"


def test_run_constrained_context_is_not_scored(unrelated_docs):
    state = new_state(QUESTION, mode="constrained-context", documents=unrelated_docs)
    assert QualityGate().run(state=state) == {"done": state}
