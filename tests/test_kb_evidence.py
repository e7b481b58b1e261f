"""KBEvidence: the router's evidence tier decided by the search's first attempt."""

from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict

from gatehouse.components.kb_routing.kb_evidence import KBEvidence
from gatehouse.components.state import new_state

PENDING = {"candidates": ["faq", "ops", "product"], "margin": 0.05, "max_kbs": 2,
           "thresholds": {"faq": 0.6, "ops": 0.55, "product": 0.65},
           "default": {"kbs": ["faq", "ops"], "reason": "low_confidence", "threshold": 0.55}}


def _documents(*rows):
    return [Document(content=f"{kb} {score}", score=score, meta={"kb": kb}) for kb, score in rows]


def test_init():
    assert isinstance(KBEvidence(), KBEvidence)


def test_to_dict():
    assert component_to_dict(KBEvidence(), "evidence") == {
        "type": "gatehouse.components.kb_routing.kb_evidence.KBEvidence", "init_parameters": {}}


def test_from_dict():
    data = component_to_dict(KBEvidence(), "evidence")
    assert isinstance(component_from_dict(KBEvidence, data, "evidence"), KBEvidence)


def test_run_keeps_the_kb_of_the_best_document_and_those_within_the_margin():
    documents = _documents(("ops", 0.8), ("product", 0.78), ("faq", 0.5), ("ops", 0.4))
    state = KBEvidence().run(state=new_state("q", route_pending=PENDING, documents=documents, kbs=PENDING["candidates"]))
    out = state["state"]
    assert out["kbs"] == ["ops", "product"] and out["route_reason"] == "evidence" and out["route_pending"] is None
    assert out["route_evidence"] == {"ops": 1.0, "product": 0.975, "faq": 0.625}
    assert out["threshold"] == 0.55 and out["path"][-1] == "route_to_ops+product"
    assert [d.content for d in out["documents"]] == ["ops 0.8", "product 0.78", "ops 0.4"]
    assert out["chunks_retrieved"] == 3 and "kb_router" in out["latency_ms"]


def test_run_caps_at_max_kbs_and_keeps_the_callers_context():
    context = Document(content="The caller's text.", score=9.0, meta={"kb": None})
    documents = [context, *_documents(("faq", 0.7), ("ops", 0.7), ("product", 0.7))]
    out = KBEvidence().run(state=new_state("q", route_pending=PENDING, documents=documents))["state"]
    assert out["kbs"] == ["faq", "ops"] and out["documents"][0] is context and len(out["documents"]) == 3


def test_run_nothing_found_keeps_the_routers_own_choice():
    documents = _documents(("product", 0.9))  # not a candidate's document: no evidence among the candidates
    pending = {**PENDING, "candidates": ["faq", "ops"]}
    out = KBEvidence().run(state=new_state("q", route_pending=pending, documents=documents))["state"]
    assert out["kbs"] == ["faq", "ops"] and out["route_reason"] == "low_confidence" and out["route_evidence"] == {}
    assert out["threshold"] == 0.55 and out["documents"] == [] and out["path"][-1] == "route_to_faq+ops"


def test_run_without_pending_choice_is_unchanged():
    state = new_state("q", kbs=["faq"], documents=_documents(("faq", 0.4)))
    assert KBEvidence().run(state=state)["state"] is state
