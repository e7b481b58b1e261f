import time

import pytest
from haystack.core.serialization import component_from_dict, component_to_dict

from gatehouse.components.routers.request_intake import RequestIntake
from gatehouse.components.state import VALIDATION_KEYS


def test_init():
    intake = RequestIntake(default_mode="hybrid", max_history_turns=3)
    assert (intake.default_mode, intake.max_history_turns) == ("hybrid", 3)
    assert (RequestIntake().default_mode, RequestIntake().max_history_turns) == ("full-corpus", 20)


def test_init_unknown_default_mode():
    with pytest.raises(ValueError, match="Unknown default_mode 'fast'"):
        RequestIntake(default_mode="fast")


def test_to_dict():
    assert component_to_dict(RequestIntake(max_history_turns=5), "component") == {
        "type": "gatehouse.components.routers.request_intake.RequestIntake",
        "init_parameters": {"default_mode": "full-corpus", "max_history_turns": 5},
    }


def test_from_dict():
    restored = component_from_dict(
        RequestIntake, component_to_dict(RequestIntake(default_mode="constrained-context"), "component"), "component"
    )
    assert restored.default_mode == "constrained-context" and restored.max_history_turns == 20


def test_run_valid_request():
    before = time.perf_counter()
    out = RequestIntake().run(query="How do I rotate an API key?", tenant=" globex ", kb="faq", mode="hybrid",
                              context="Some text", history=[{"role": "user", "content": "hi"}])
    assert set(out) == {"state"}
    state = out["state"]
    assert state["query"] == state["original_query"] == "How do I rotate an API key?"
    assert state["tenant"] == "globex" and state["kb"] == "faq" and state["mode"] == "hybrid"
    assert state["context"] == "Some text" and state["history"] == [{"role": "user", "content": "hi"}]
    assert state["path"] == ["start"] and state["attempt"] == 0 and state["latency_ms"] == {}
    assert state["validation"] == {key: [] for key in VALIDATION_KEYS}
    assert before <= state["started"] <= time.perf_counter()
    assert "status" not in state


@pytest.mark.parametrize("tenant", [None, "", "   "])
def test_run_tenant_defaults_to_public(tenant):
    state = RequestIntake().run(query="q", tenant=tenant)["state"]
    assert state["tenant"] == "public"
    assert state["mode"] == "full-corpus" and state["kb"] is None and state["history"] == []


def test_run_default_mode_used():
    assert RequestIntake(default_mode="hybrid").run(query="q")["state"]["mode"] == "hybrid"


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
