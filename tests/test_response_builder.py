import json
import time
from haystack.core.serialization import component_from_dict, component_to_dict

from gatehouse.components.builders.response_builder import DEFAULT_PARTIAL_NOTICE, ResponseBuilder
from gatehouse.components.state import VALIDATION_KEYS, advance, new_state, with_validation

CITATION = {
    "id": "S1", "text": "API keys › Rotate", "section": "Rotate", "url": "https://docs.example.com/api-keys#rotate",
    "chunk_id": "c1", "source": "api-keys.md", "kb": "faq", "confidence": 0.8, "snippet": "Rotate keys...",
    "quote": "Rotate keys every 90 days.", "extra": "dropped",
}


def answered(**fields) -> dict:
    state = new_state("How do I rotate a key?", route="retrieve", intent="how_to", kbs=["faq"], tenant="acme",
                      answer="Open Settings and click Rotate [S1].", citations=[CITATION], quality_score=0.812345,
                      chunks_retrieved=8, chunks_used=3, attempts=[{"query": "q", "score": 0.8}],
                      generator="extractive", started=time.perf_counter())
    state = advance(state, stage="retrieval", started=time.perf_counter(), steps=["route_to_faq"])
    state.update(fields)
    return state


def test_init():
    assert ResponseBuilder().require_citations_for_success is True
    assert ResponseBuilder(require_citations_for_success=False).require_citations_for_success is False
    assert ResponseBuilder().partial_notice == DEFAULT_PARTIAL_NOTICE
    assert ResponseBuilder(partial_notice="").partial_notice == ""


def test_to_dict():
    assert component_to_dict(ResponseBuilder(require_citations_for_success=False, partial_notice="Unsure:"),
                             "component") == {
        "type": "gatehouse.components.builders.response_builder.ResponseBuilder",
        "init_parameters": {"require_citations_for_success": False, "partial_notice": "Unsure:"},
    }


def test_from_dict():
    assert (
        component_from_dict(
            ResponseBuilder, component_to_dict(ResponseBuilder(), "component"), "component"
        ).require_citations_for_success
        is True
    )


def test_run_contract_keys():
    response = ResponseBuilder().run(state=answered())["response"]
    assert set(response) == {"answer", "citations", "metadata", "validation", "status", "error_message", "path"}
    assert set(response["metadata"]) == {
        "mode", "intent", "route", "kb", "tenant", "chunks_retrieved", "chunks_used", "attempts",
        "quality_score", "generator", "usage", "latency_ms",
    }
    assert set(response["validation"]) == set(VALIDATION_KEYS) and len(response["validation"]) == 4
    assert response["citations"] == [{k: v for k, v in CITATION.items() if k != "extra"}]
    meta = response["metadata"]
    assert meta["kb"] == "faq" and meta["tenant"] == "acme" and meta["attempts"] == 1
    assert meta["quality_score"] == 0.8123 and meta["chunks_retrieved"] == 8 and meta["chunks_used"] == 3
    assert meta["generator"] == "extractive" and meta["route"] == "retrieve" and meta["mode"] == "full-corpus"
    assert response["status"] == "success" and response["error_message"] is None
    assert response["path"] == ["start", "route_to_faq"]
    json.dumps(response)  # JSON-serialisable


def test_run_latency_total_when_started():
    response = ResponseBuilder().run(state=answered())["response"]
    latency = response["metadata"]["latency_ms"]
    assert "retrieval" in latency and "total" in latency and latency["total"] >= latency["retrieval"]
    no_start = answered()
    no_start.pop("started")
    assert "total" not in ResponseBuilder().run(state=no_start)["response"]["metadata"]["latency_ms"]


def test_run_partial_when_unsupported_sentences():
    state = with_validation(answered(), "unsupported_sentences", "The moon is cheese.")
    response = ResponseBuilder().run(state=state)["response"]
    assert response["status"] == "partial"
    assert response["validation"]["unsupported_sentences"] == ["The moon is cheese."]


def test_run_partial_without_citations():
    assert ResponseBuilder().run(state=answered(citations=[]))["response"]["status"] == "partial"
    lenient = ResponseBuilder(require_citations_for_success=False)
    assert lenient.run(state=answered(citations=[]))["response"]["status"] == "success"
    constrained = answered(citations=[], route=None, mode="constrained-context")
    assert ResponseBuilder().run(state=constrained)["response"]["status"] == "partial"


def test_run_error_passthrough():
    state = answered(status="error", error_message="Unknown mode 'x'.", answer="")
    response = ResponseBuilder().run(state=state)["response"]
    assert response["status"] == "error" and response["error_message"] == "Unknown mode 'x'."
    for final in ("refused", "fallback"):
        out = ResponseBuilder().run(state=answered(status=final, error_message="hidden"))["response"]
        assert out["status"] == final and out["error_message"] is None


def test_run_empty_answer_is_error():
    assert ResponseBuilder().run(state=answered(answer="   "))["response"]["status"] == "error"


def test_run_direct_route_success_without_citations():
    state = answered(route="direct", citations=[], kbs=None, kb=None)
    response = ResponseBuilder().run(state=state)["response"]
    assert response["status"] == "success" and response["metadata"]["kb"] is None


def test_run_minimal_state():
    response = ResponseBuilder().run(state={"query": "q"})["response"]
    assert response["status"] == "error" and response["answer"] == "" and response["citations"] == []
    assert response["path"] == [] and response["metadata"]["quality_score"] is None
    assert response["validation"] == {key: [] for key in VALIDATION_KEYS}


def test_run_kb_fallback_and_join():
    assert ResponseBuilder().run(state=answered(kbs=["faq", "docs"]))["response"]["metadata"]["kb"] == "faq+docs"
    assert ResponseBuilder().run(state=answered(kbs=[], kb="hr"))["response"]["metadata"]["kb"] == "hr"


def test_run_a_partial_answer_says_so_in_its_words():
    partial = ResponseBuilder().run(state=answered(status="partial"))["response"]
    assert partial["status"] == "partial"
    assert partial["answer"] == f"Open Settings and click Rotate [S1].\n\n{DEFAULT_PARTIAL_NOTICE}"
    assert ResponseBuilder().run(state=answered())["response"]["answer"] == "Open Settings and click Rotate [S1]."
    # A partial without citations is a message that says what it is (out of time, no model): no notice.
    assert ResponseBuilder().run(state=answered(status="partial", citations=[]))["response"]["answer"] == \
        "Open Settings and click Rotate [S1]."
    # Built again from a state that already carries it (a cached answer): the notice once.
    again = ResponseBuilder().run(state=answered(status="partial", answer=partial["answer"]))["response"]
    assert again["answer"] == partial["answer"]
    assert ResponseBuilder(partial_notice="").run(state=answered(status="partial"))["response"]["answer"] == \
        "Open Settings and click Rotate [S1]."
