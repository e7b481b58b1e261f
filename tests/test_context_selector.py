from copy import deepcopy

import pytest
from haystack.core.serialization import component_from_dict, component_to_dict

from gatehouse.components.routers.context_selector import ContextSelector
from gatehouse.components.state import new_state

CONTEXT = "Refunds are issued within 14 days of a request made through the billing portal."


def test_init():
    selector = ContextSelector(min_context_chars=10, invalid_context="fallback_to_full_corpus",
                               context_source_name="selection", context_title="Selection")
    assert (selector.min_context_chars, selector.invalid_context) == (10, "fallback_to_full_corpus")
    assert (selector.context_source_name, selector.context_title) == ("selection", "Selection")


def test_init_bad_invalid_context():
    with pytest.raises(ValueError, match="invalid_context"):
        ContextSelector(invalid_context="ignore")


def test_to_dict():
    assert component_to_dict(ContextSelector(min_context_chars=20), "component") == {
        "type": "gatehouse.components.routers.context_selector.ContextSelector",
        "init_parameters": {
            "min_context_chars": 20,
            "invalid_context": "reject",
            "context_source_name": "user-context",
            "context_title": "Your selected text",
        },
    }


def test_from_dict():
    restored = component_from_dict(
        ContextSelector,
        component_to_dict(ContextSelector(invalid_context="fallback_to_full_corpus"), "component"),
        "component",
    )
    assert restored.invalid_context == "fallback_to_full_corpus" and restored.min_context_chars == 50


def test_run_full_corpus():
    state = new_state("q")
    out = ContextSelector().run(state=state)
    assert set(out) == {"retrieve"}
    assert out["retrieve"]["path"] == ["start"]
    assert "context_selection" in out["retrieve"]["latency_ms"]
    assert out["retrieve"] is not state


def test_run_constrained():
    state = new_state("What is the refund window?", mode="constrained-context", context=f"  {CONTEXT}\n", tenant="acme")
    snapshot = deepcopy(state)
    out = ContextSelector().run(state=state)
    assert set(out) == {"constrained"}
    new = out["constrained"]
    assert new["path"] == ["start", "constrained_context"]
    assert new["kbs"] == [] and new["quality_score"] is None
    [doc] = new["documents"]
    assert doc.content == CONTEXT
    assert doc.meta["source"] == "user-context" and doc.meta["title"] == "Your selected text"
    assert doc.meta["tenant"] == "acme" and doc.meta["section_id"] is None and doc.meta["url"] is None
    assert state == snapshot  # input not mutated


def test_run_hybrid_keeps_context_documents():
    out = ContextSelector(context_source_name="sel").run(state=new_state("q", mode="hybrid", context=CONTEXT))
    assert set(out) == {"retrieve"}
    new = out["retrieve"]
    assert new["mode"] == "hybrid" and new["path"][-1] == "hybrid_context"
    assert [d.content for d in new["context_documents"]] == [CONTEXT]
    assert new["context_documents"][0].meta["source"] == "sel"
    assert "documents" not in new


@pytest.mark.parametrize("context", [None, "", "too short", "   \n  "])
def test_run_short_context_rejected(context):
    out = ContextSelector().run(state=new_state("q", mode="constrained-context", context=context))
    assert set(out) == {"invalid"}
    state = out["invalid"]
    length = len((context or "").strip())
    assert state["status"] == "error" and state["answer"] == ""
    assert f"(got {length})" in state["error_message"]
    assert "at least 50 characters" in state["error_message"] and "constrained-context" in state["error_message"]
    assert state["path"][-1] == "context_invalid"


def test_run_short_context_fallback_to_full_corpus():
    state = new_state("q", mode="hybrid", context="ünïcode ✓")
    out = ContextSelector(invalid_context="fallback_to_full_corpus").run(state=state)
    assert set(out) == {"retrieve"}
    new = out["retrieve"]
    assert new["mode"] == "full-corpus" and new["path"][-1] == "context_invalid_full_corpus"
    [warning] = new["validation"]["confidence_warnings"]
    assert "(got 9)" in warning and "Searched the knowledge bases instead." in warning
    assert state["validation"]["confidence_warnings"] == [] and state["mode"] == "hybrid"


def test_run_min_context_chars_configurable():
    out = ContextSelector(min_context_chars=5).run(state=new_state("q", mode="constrained-context", context="Short!"))
    assert set(out) == {"constrained"}
