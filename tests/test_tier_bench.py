"""
`gatehouse bench tiers` (gatehouse.eval.tier_bench): the metric computation, the YAML patches of each tier's variants,
and each gate's LLM tier against a real llama.cpp server (xllamacpp with SmolLM2 135M, one server for the module).
"""

import pytest
from gatehouse.components.intent.intent_gate import ROUTES
from gatehouse.components.state import new_state
from gatehouse.eval.tier_bench import (
    COMPONENTS,
    RecordingChatGenerator,
    build,
    chat_generator_spec,
    context_recall,
    format_table,
    score_rows,
    variant_spec,
)
from haystack import Document

from gatehouse.pipelines import component_spec, read_spec

SPEC = read_spec("ask")


def ask_component(name: str) -> dict:
    """A component of ask.yml or of one of its sub-pipelines."""
    return component_spec(SPEC, name)
GENERATOR = chat_generator_spec("http://127.0.0.1:9/v1", model=None, timeout=2, max_tokens=16)
PASSAGES = [
    Document(content="To reset your password, open the sign-in page, click Forgot password and follow the link we "
                     "email you. The reset link is valid for 60 minutes.",
             meta={"source_id": "S1", "kb": "faq", "source": "password-reset.md", "title": "Password reset"}, score=0.9),
]


def call(ms, prompt=100, completion=5, error=None):
    return {"ms": ms, "prompt_tokens": prompt, "completion_tokens": completion, "cached_tokens": 0, "error": error}


def test_score_rows_accuracy_abstention_latency_tokens():
    rows = [
        {"correct": True, "route_correct": True, "calls": [], "llm_decided": False},
        {"correct": False, "route_correct": True, "calls": [call(100.0)], "llm_decided": True},
        {"correct": True, "route_correct": False, "calls": [call(300.0, 50, 3)], "llm_decided": True},
        {"correct": True, "calls": [call(5000.0, error="APITimeoutError: timed out")], "llm_decided": False},
    ]
    figures = score_rows(rows)
    assert figures["n"] == 4 and figures["accuracy"] == 0.75 and figures["route_accuracy"] == round(2 / 3, 4)
    assert figures["reached_llm"] == 3 and figures["llm_decided"] == 2
    assert figures["llm_calls"] == 3 and figures["llm_errors"] == 1
    assert figures["llm_ms_p50"] == 200.0 and 200.0 < figures["llm_ms_p95"] <= 300.0  # failed calls are not timed
    assert figures["prompt_tokens"] == 250 and figures["completion_tokens"] == 13
    assert "abstention_precision" not in figures and "context_recall" not in figures


def test_score_rows_abstention_and_recall():
    rows = [{"abstain": True, "gold_abstain": True}, {"abstain": True, "gold_abstain": False},
            {"abstain": False, "gold_abstain": True}, {"abstain": False, "gold_abstain": True},
            {"abstain": False, "gold_abstain": False, "recall": 0.5}, {"recall": 1.0}]
    figures = score_rows(rows)
    assert figures["abstention_precision"] == 0.5 and figures["abstention_recall"] == round(1 / 3, 4)
    assert figures["abstention"] == {"tp": 1, "fp": 1, "fn": 2, "tn": 1}
    assert figures["context_recall"] == 0.75
    assert figures["llm_calls"] == 0 and figures["llm_ms_p50"] is None and figures["prompt_tokens"] is None


def test_score_rows_without_labels():
    figures = score_rows([{"calls": []}])
    assert figures["accuracy"] is None and figures["route_accuracy"] is None
    assert "abstention_precision" not in figures


def test_context_recall():
    documents = [Document(content="a", meta={"kb": "faq", "source": "api-keys.md"}),
                 Document(content="b", meta={"kb": "ops", "source": "backups.md"})]
    assert context_recall(documents, ["faq/api-keys.md", "product/pricing-plans.md"]) == 0.5
    assert context_recall([], ["faq/api-keys.md"]) == 0.0
    assert context_recall(documents, []) is None


def test_variant_specs_patch_a_copy():
    intent = ask_component("intent")
    off = variant_spec(intent, "intent", "off", GENERATOR)
    assert off["init_parameters"]["chat_generator"] is None
    llm = variant_spec(intent, "intent", "llm", GENERATOR)
    assert llm["init_parameters"]["chat_generator"] == GENERATOR
    assert "rules" not in llm["init_parameters"]  # as configured: the cheaper tiers first
    only = variant_spec(intent, "intent", "llm_only", GENERATOR)["init_parameters"]
    assert only["rules"]["refuse_patterns"] == [] and only["rules"]["domain_keywords"] == []
    assert only["tuning"]["embedding_threshold"] == only["tuning"]["intent_embedding_threshold"] == 2.0
    assert only["rules"]["intent_patterns"]["procedural"] == [] and "factual" in only["rules"]["intent_keywords"]
    assert "chat_generator" not in intent["init_parameters"]  # ask.yml's own entry is untouched

    router = variant_spec(ask_component("router"), "router", "llm_only", GENERATOR)["init_parameters"]
    assert router["evidence"]["enabled"] is False and router["evidence"]["margin"] == 0.05
    assert router["llm"]["margin"] == 2.0
    assert ask_component("router")["init_parameters"]["evidence"]["enabled"] is True
    judge = variant_spec(ask_component(COMPONENTS["judge"]), "judge", "llm_only", GENERATOR)["init_parameters"]
    assert judge["llm"] == {"weight": 1.0}
    quality = variant_spec(ask_component(COMPONENTS["quality"]), "quality", "llm_only", GENERATOR)["init_parameters"]
    assert quality["judge"]["weight"] == 1.0
    with pytest.raises(ValueError, match="rewriter tier has no llm_only variant"):
        variant_spec(ask_component("rewriter"), "rewriter", "llm_only", GENERATOR)


def test_score_rows_parts_accuracy():
    rows = [{"correct": True, "parts_correct": True}, {"correct": True, "parts_correct": False}, {"correct": False}]
    figures = score_rows(rows)
    assert (figures["accuracy"], figures["parts_accuracy"]) == (round(2 / 3, 4), 0.5)
    assert score_rows([{"correct": True}])["parts_accuracy"] is None


def test_forced_intent_gate_asks_the_llm_every_time():
    """The llm_only patch leaves no cheaper tier confident: even a greeting reaches the (here unreachable) LLM."""
    gate = build(variant_spec(ask_component("intent"), "intent", "llm_only", GENERATOR), "intent")
    out = gate.run(state=new_state("hello"))
    route, state = next(iter(out.items()))
    assert len(gate.chat_generator.calls) == 1 and gate.chat_generator.calls[0]["error"]
    assert route == "retrieve" and state["decision_tier"] == "default"  # the non-LLM fallback


def test_format_table():
    report = {"cases": 2, "guarded": [], "pipeline": "/x/ask.yml", "llm_url": "http://127.0.0.1:8080/v1",
              "figures": {"intent": {"off": score_rows([{"correct": True, "calls": []}]),
                                     "llm": score_rows([{"correct": False, "calls": [call(120.0)],
                                                         "llm_decided": True}])}}}
    table = format_table(report)
    assert "| intent | off | 1 | 1.0 |" in table and "| intent | llm | 1 | 0.0 |" in table
    assert "| 1 (0) | 120.0 | 120.0 | 100 (0) | 5 |" in table


# --- against a real server ---------------------------------------------------------------------------------------


def gate(tier, variant, url):
    spec = variant_spec(ask_component(COMPONENTS[tier]), tier, variant,
                        chat_generator_spec(url, model=None, timeout=120, max_tokens=24))
    built = build(spec, COMPONENTS[tier])
    assert isinstance(built.chat_generator, RecordingChatGenerator)
    return built


def assert_one_answered_call(built):
    calls = built.chat_generator.calls
    assert len(calls) == 1, calls
    assert calls[0]["error"] is None and calls[0]["ms"] > 0
    assert calls[0]["prompt_tokens"] > 20 and calls[0]["completion_tokens"] > 0  # the server's own usage counts


def test_intent_tier_real_server(smollm2_url):
    built = gate("intent", "llm_only", smollm2_url)
    route, state = next(iter(built.run(state=new_state("How do I reset my password?")).items()))
    assert_one_answered_call(built)
    assert route in ROUTES and state["route"] == route and state["intent"] in built.intents
    # SmolLM2 may not reply in JSON: then the tier's failure is a warning and the defaults decide
    warned = any("intent_gate: LLM tier failed" in w for w in state["validation"]["confidence_warnings"])
    assert warned or "llm" in (state["decision_tier"], state["intent_tier"])


def test_router_tier_real_server(smollm2_url):
    built = gate("router", "llm_only", smollm2_url)
    out = built.run(state=new_state("How do I reset my password?"))
    assert_one_answered_call(built)
    state = out["routed"]
    assert state["kbs"] and set(state["kbs"]) <= {"product", "ops", "faq"}
    warned = any("kb_router: LLM tier failed" in w for w in state["validation"]["confidence_warnings"])
    assert warned or state["route_reason"] == "llm"


def test_answerability_tier_real_server(smollm2_url):
    built = gate("judge", "llm", smollm2_url)
    name, state = next(iter(built.run(state=new_state("How long is the password reset link valid?",
                                                      passages=PASSAGES)).items()))
    assert_one_answered_call(built)
    assert name in ("answerable", "unanswerable") and state["answerability"]["score"] is not None


def test_quality_tier_real_server(smollm2_url):
    built = gate("quality", "llm", smollm2_url)
    state = new_state("How long is the password reset link valid?", documents=PASSAGES, kbs=["faq"], threshold=0.6)
    name, out = next(iter(built.run(state=state).items()))
    assert_one_answered_call(built)
    assert name in ("retry", "done") and "llm" in out["quality_signals"]


def test_rewriter_tier_real_server(smollm2_url):
    built = gate("rewriter", "llm", smollm2_url)
    state = new_state("How long is the password reset link valid?", documents=PASSAGES, kbs=["faq"], attempt=1,
                      attempts=[{"attempt": 0, "query": "How long is the password reset link valid?", "score": 0.3}])
    out = built.run(state=state)["state"]
    assert_one_answered_call(built)
    rewrite = out["rewrites"][-1]
    assert out["query"].strip() and rewrite["method"] in ("llm", "deterministic")
    assert rewrite["method"] == "llm" or rewrite["llm_error"]


def test_condenser_tier_real_server(smollm2_url):
    built = gate("condenser", "llm", smollm2_url)
    history = [{"role": "user", "content": "How do I rotate an API key?"},
               {"role": "assistant", "content": "Open API keys and choose Rotate."}]
    out = built.run(state=new_state("and how do I revoke it?", history=history))["state"]
    assert_one_answered_call(built)
    assert out["query"].strip() and out["condensed_query"] == out["query"]


def test_planner_tier_real_server(smollm2_url):
    built = gate("planner", "llm", smollm2_url)
    name, state = next(iter(built.run(state=new_state(
        "Is the gateway faster or cheaper than calling providers directly?")).items()))  # the rules leave it whole
    assert_one_answered_call(built)
    assert name == "state"
    assert "plan" not in state or state["plan"]["strategy"] == "llm"
