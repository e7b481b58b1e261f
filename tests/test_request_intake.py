import time

import pytest
from haystack.core.serialization import component_from_dict, component_to_dict

from gatehouse.components.intake.request_intake import RequestIntake
from gatehouse.components.state import VALIDATION_KEYS

CONTEXT = "Refunds are issued within 14 days of a request made through the billing portal."


def test_init():
    intake = RequestIntake(default_mode="hybrid", max_history_turns=3, min_context_chars=10,
                           invalid_context="fallback_to_full_corpus", context_title="Selection")
    assert (intake.default_mode, intake.max_history_turns) == ("hybrid", 3)
    assert (intake.min_context_chars, intake.invalid_context, intake.context_title) == (
        10, "fallback_to_full_corpus", "Selection")
    assert (RequestIntake().default_mode, RequestIntake().max_history_turns) == ("full-corpus", 20)
    bounded = RequestIntake(max_request_history_turns=7, max_history_chars=300, max_context_chars=400)
    assert (bounded.max_request_history_turns, bounded.max_history_chars, bounded.max_context_chars) == (7, 300, 400)
    default = RequestIntake()
    assert (default.max_request_history_turns, default.max_history_chars, default.max_context_chars) == (
        1000, 200_000, 200_000)


@pytest.mark.parametrize("bound", [{"max_history_turns": -1}, {"max_request_history_turns": 0},
                                   {"max_history_chars": 0}, {"max_context_chars": 0}])
def test_init_bounds_must_be_positive(bound):
    with pytest.raises(ValueError, match="max_request_history_turns, max_history_chars and max_context_chars"):
        RequestIntake(**bound)


def test_init_unknown_default_mode():
    with pytest.raises(ValueError, match="Unknown default_mode 'fast'"):
        RequestIntake(default_mode="fast")
    with pytest.raises(ValueError, match="invalid_context"):
        RequestIntake(invalid_context="ignore")


def test_to_dict():
    assert component_to_dict(RequestIntake(max_history_turns=5), "component") == {
        "type": "gatehouse.components.intake.request_intake.RequestIntake",
        "init_parameters": {"default_mode": "full-corpus", "max_history_turns": 5,
                            "max_request_history_turns": 1000, "max_history_chars": 200_000,
                            "max_context_chars": 200_000, "min_context_chars": 50, "invalid_context": "reject",
                            "context_title": "Your selected text"},
    }


def test_from_dict():
    restored = component_from_dict(
        RequestIntake, component_to_dict(RequestIntake(default_mode="constrained-context", max_context_chars=900),
                                         "component"), "component"
    )
    assert restored.default_mode == "constrained-context" and restored.max_history_turns == 20
    assert restored.max_context_chars == 900


def test_run_valid_request():
    before = time.perf_counter()
    out = RequestIntake().run(query="How do I rotate an API key?", tenant=" globex ", kb="faq", mode="full-corpus",
                              context="Some text", history=[{"role": "user", "content": "hi"}])
    assert set(out) == {"state"}
    state = out["state"]
    assert state["query"] == state["original_query"] == "How do I rotate an API key?"
    assert state["tenant"] == "globex" and state["kb"] == "faq" and state["mode"] == "full-corpus"
    assert state["context"] == "Some text" and state["history"] == [{"role": "user", "content": "hi"}]
    assert state["path"] == ["start"] and state["attempt"] == 0 and state["latency_ms"] == {}
    assert state["validation"] == {key: [] for key in VALIDATION_KEYS}
    assert before <= state["started"] <= time.perf_counter()
    assert "status" not in state and "context_documents" not in state  # the context of full-corpus is not used


@pytest.mark.parametrize("tenant", [None, "", "   "])
def test_run_tenant_defaults_to_public(tenant):
    state = RequestIntake().run(query="q", tenant=tenant)["state"]
    assert state["tenant"] == "public"
    assert state["mode"] == "full-corpus" and state["kb"] is None and state["history"] == []


def test_run_default_mode_used():
    assert RequestIntake(default_mode="hybrid").run(query="q", context=CONTEXT)["state"]["mode"] == "hybrid"


def test_run_unknown_mode_invalid():
    out = RequestIntake().run(query="q", mode="telepathy")
    assert set(out) == {"invalid"}
    state = out["invalid"]
    assert state["status"] == "error" and state["answer"] == ""
    assert "Unknown mode 'telepathy'" in state["error_message"]
    assert "constrained-context" in state["error_message"]
    assert state["mode"] == "full-corpus"  # a valid mode in the state for the response builder


@pytest.mark.parametrize(
    "history",
    [
        "not a list",
        [{"role": "robot", "content": "x"}],
        [{"role": "user"}],
        [{"role": "user", "content": 42}],
        ["user: hi"],
    ],
)
def test_run_bad_history_invalid(history):
    out = RequestIntake().run(query="q", history=history)
    assert set(out) == {"invalid"}
    assert "history" in out["invalid"]["error_message"]
    assert out["invalid"]["history"] == []


def test_run_non_string_query_and_tenant_invalid():
    out = RequestIntake().run(query=None)
    assert out["invalid"]["error_message"] == "The query must be a string." and out["invalid"]["query"] == ""
    out = RequestIntake().run(query="q", tenant=7)
    assert out["invalid"]["error_message"] == "The tenant must be a string." and out["invalid"]["tenant"] == "public"


def test_run_history_trimmed_and_unicode():
    history = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"} for i in range(5)]
    state = RequestIntake(max_history_turns=2).run(query="Schlüssel? ✓", history=history)["state"]
    assert state["history"] == history[-2:]
    assert state["query"] == "Schlüssel? ✓"
    assert len(history) == 5  # input not changed


def test_run_empty_query_is_valid():
    assert RequestIntake().run(query="")["state"]["query"] == ""


def test_run_constrained_context_becomes_the_only_document():
    out = RequestIntake().run(query="What is the refund window?", mode="constrained-context", tenant="acme",
                              context=f"  {CONTEXT}\n")
    state = out["state"]
    assert state["path"] == ["start", "constrained_context"]
    [doc] = state["context_documents"]
    assert doc.content == CONTEXT
    assert doc.meta["source"] == "user-context" and doc.meta["title"] == "Your selected text"
    assert doc.meta["tenant"] == "acme" and doc.meta["kb"] is None and doc.meta["url"] is None


def test_run_hybrid_keeps_the_context_document():
    state = RequestIntake(context_title="Selection").run(query="q", mode="hybrid", context=CONTEXT)["state"]
    assert state["mode"] == "hybrid" and state["path"][-1] == "hybrid_context"
    assert [(d.content, d.meta["title"]) for d in state["context_documents"]] == [(CONTEXT, "Selection")]


@pytest.mark.parametrize("context", [None, "", "too short", "   \n  "])
def test_run_short_context_rejected(context):
    out = RequestIntake().run(query="q", mode="constrained-context", context=context)
    assert set(out) == {"invalid"}
    state = out["invalid"]
    length = len((context or "").strip())
    assert state["status"] == "error" and state["answer"] == ""
    assert f"(got {length})" in state["error_message"]
    assert "at least 50 characters" in state["error_message"] and "constrained-context" in state["error_message"]
    assert state["path"][-1] == "context_invalid"


def test_run_short_context_fallback_to_full_corpus():
    out = RequestIntake(invalid_context="fallback_to_full_corpus").run(query="q", mode="hybrid", context="ünïcode ✓")
    state = out["state"]
    assert state["mode"] == "full-corpus" and state["path"][-1] == "context_invalid_full_corpus"
    [warning] = state["validation"]["confidence_warnings"]
    assert "(got 9)" in warning and "Searched the knowledge bases instead." in warning
    assert "context_documents" not in state


def test_run_min_context_chars_configurable():
    out = RequestIntake(min_context_chars=5).run(query="q", mode="constrained-context", context="Short!")
    assert out["state"]["context_documents"][0].content == "Short!"


def _turns(count: int, size: int) -> list[dict]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": "x" * size} for i in range(count)]


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        ({"history": _turns(8, 10)}, "The history holds 8 turns; the limit is 7 (max_request_history_turns of the "
                                     "ask pipeline's intake)."),
        ({"history": _turns(3, 101)}, "The last 3 turns of the history hold 303 characters; the limit is 300 "
                                      "(max_history_chars of the ask pipeline's intake)."),
        ({"context": CONTEXT * 6, "mode": "constrained-context"},
         f"The context is {len(CONTEXT) * 6} characters long; the limit is 400 (max_context_chars of the ask "
         "pipeline's intake)."),
        ({"context": CONTEXT * 6}, "max_context_chars"),  # any mode: the input guardrails read the context too
    ],
)
def test_run_history_or_context_over_a_bound_is_invalid_naming_the_setting(request_, message):
    intake = RequestIntake(max_history_turns=3, max_request_history_turns=7, max_history_chars=300,
                           max_context_chars=400)
    out = intake.run(query="q", **request_)
    assert set(out) == {"invalid"}
    state = out["invalid"]
    assert state["status"] == "error" and message in state["error_message"]
    assert state["history"] == [] and state["context"] is None  # the oversized input goes no further


def test_run_history_bounds_count_the_turns_sent_and_the_characters_kept():
    intake = RequestIntake(max_history_turns=3, max_request_history_turns=7, max_history_chars=300)
    history = [{"role": "user", "content": "x" * 5000}, *_turns(3, 100)]  # the long turn is dropped: 300 kept
    state = intake.run(query="q", history=history)["state"]
    assert state["history"] == history[-3:]
    assert intake.run(query="q", history=_turns(7, 100), context="x" * 200_001)["invalid"]["error_message"].endswith(
        "(max_context_chars of the ask pipeline's intake).")
    assert RequestIntake(max_history_turns=0).run(query="q", history=_turns(2, 10))["state"]["history"] == []
    assert intake.over_bound(_turns(7, 100), "x" * 200_000) is None
    assert intake.over_bound([], None) is None
