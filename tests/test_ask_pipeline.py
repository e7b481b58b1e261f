"""End-to-end behaviour of the YAML pipelines on the sample knowledge bases (real MiniLM, Qdrant, BM25)."""

import json
from pathlib import Path

import pytest
import yaml
from haystack import Pipeline

from gatehouse.components.retrievers.retrieval_pipeline import RetrievalPipeline
from gatehouse.ask import ask, run_ask
from gatehouse.ingest import ingest, sample_groups
from gatehouse.pipelines import ALLOWED_MODULES, load_pipeline, pipelines_dir

QUESTIONS = yaml.safe_load((Path(__file__).parent / "fixtures" / "kb_questions.yml").read_text())
NONSENSE = "asdkjh qwpoeiru zxmcnv"


@pytest.fixture(scope="module")
def ingested():
    summary = ingest(sample_groups(), progress=False)
    assert summary.failed == []
    return summary


@pytest.mark.parametrize("name", ["index", "retrieve", "ask"])
def test_yaml_round_trip(name):
    pipeline = load_pipeline(name)
    again = Pipeline.loads(pipeline.dumps(), allowed_modules=ALLOWED_MODULES)
    first, second = pipeline.to_dict(), again.to_dict()
    assert second["components"] == first["components"]
    edges = {(c["sender"], c["receiver"]) for c in first["connections"]}
    assert {(c["sender"], c["receiver"]) for c in second["connections"]} == edges
    original = yaml.safe_load((pipelines_dir() / f"{name}.yml").read_text())
    assert set(again.to_dict()["components"]) == set(original["components"])


def test_reingest_skips_unchanged_files(ingested):
    total = ingested.documents_written + len(ingested.skipped)  # written here, or by an earlier module's ingest
    assert total >= 45
    again = ingest(sample_groups(), progress=False)
    assert again.documents_written == 0
    assert len(again.skipped) == total


def test_rotate_api_key_is_answered_from_the_faq_section(ingested):
    response = ask("How do I rotate an API key?")
    assert response["status"] == "success"
    assert response["metadata"]["kb"] == "faq"
    assert any(c["kb"] == "faq" and c["url"].endswith("#rotate-an-api-key") for c in response["citations"])
    assert "attempt_0_score_" in " ".join(response["path"])
    json.dumps(response)


def test_revoke_an_api_key_is_answered_from_its_section_also_as_the_readmes_follow_up(ingested):
    """The demo: "Revoke an API key" ranks first, and no list of rotation steps (which say "click Revoke now") takes
    its place; the README's follow-up asks the same, and the answer cache then serves that answer, not another."""
    pipeline = load_pipeline("ask")
    pipeline.warm_up()
    follow_up = run_ask(pipeline, "and how do I revoke it?",
                        history=[{"role": "user", "content": "How do I rotate an API key?"}])
    direct = run_ask(pipeline, "How do I revoke an API key?")
    for response in (follow_up, direct):
        assert response["status"] == "success", response["path"]
        assert [c["url"].rsplit("#", 1)[-1] for c in response["citations"]] == ["revoke-an-api-key"]
        assert response["answer"].startswith("Revoke an API key: [S1]\n\nOpen the key's menu and choose Revoke")
        assert "Rotate" not in response["answer"]
    assert direct["metadata"]["cache"]["status"] == "hit" and direct["answer"] == follow_up["answer"]


def test_nonsense_loops_to_max_retries_then_falls_back(ingested):
    response = ask(NONSENSE)
    assert response["status"] == "fallback"
    assert response["citations"] == []
    path = response["path"]
    attempts = [step for step in path if step.startswith("attempt_")]
    assert [step.split("_score_")[0] for step in attempts] == ["attempt_0", "attempt_1", "attempt_2"]
    assert path.count("rewrite_and_retry") == 2
    assert "max_retries_reached" in path
    assert response["metadata"]["attempts"] == 3
    assert "couldn't locate" in response["answer"]


def test_direct_question_skips_retrieval(ingested):
    response = ask("What is 12 * 7?")
    assert "84" in response["answer"]
    assert "skip_retrieval" in response["path"]
    assert not any(step.startswith(("attempt_", "route_to_")) for step in response["path"])
    assert response["metadata"]["chunks_retrieved"] == 0


def test_code_writing_request_is_refused(ingested):
    # No knowledge base documents scraping: the intent gate refuses the request (a request for code with a
    # documented API is retrieved instead; see test_intent_gate's profile tests).
    response = ask("Write a Python script that scrapes a website")
    assert response["status"] == "refused"
    assert response["validation"]["boundary_violations"][0].startswith("request refused")
    assert response["citations"] == []


def test_router_picks_the_right_kb_for_clear_questions(ingested):
    first = searched = 0
    for item in QUESTIONS:
        routed = (ask(item["question"])["metadata"]["kb"] or "").split("+")
        first += routed[0] == item["kb"]
        searched += item["kb"] in routed
    assert first / len(QUESTIONS) >= 0.85, f"{first}/{len(QUESTIONS)} routed first to the expected KB"
    assert searched / len(QUESTIONS) >= 0.9, f"{searched}/{len(QUESTIONS)} searched the expected KB"


def test_tenant_isolation(ingested):
    question = "What does the Project Quasar contract addendum say about refunds?"
    public = ask(question, kb="faq")
    assert all("globex" not in (c["source"] or "") for c in public["citations"])
    assert "Quasar" not in public["answer"]
    globex = ask(question, kb="faq", tenant="globex")
    assert any(c["source"] == "globex-contract.md" for c in globex["citations"])
    other = ask(question, kb="faq", tenant="initech")
    assert other["citations"] == [] or all(c["source"] != "globex-contract.md" for c in other["citations"])
    retrieve = RetrievalPipeline(pipeline_file="retrieve")
    for tenant in (None, "public", "initech"):
        docs = retrieve.run(query=question, tenant=tenant)["documents"]
        assert all(doc.meta["tenant"] != "globex" for doc in docs)


def test_pii_is_redacted_before_retrieval_and_never_echoed(ingested):
    email, card = "jane.doe@example.com", "4111 1111 1111 1111"
    response = ask(f"My email is {email} and my card is {card}. How do I reset my password?")
    text = json.dumps(response)
    assert email not in text and card not in text
    assert "redacted_pii:email" in response["validation"]["guardrail_actions"]
    assert response["metadata"]["kb"] == "faq"


def test_constrained_context_never_retrieves(ingested):
    context = (
        "Refund requests for annual plans must be filed within 30 days of the renewal date. "
        "After that, the plan runs until the end of the term and no refund is issued."
    )
    response = ask("How long do I have to ask for a refund?", mode="constrained-context", context=context)
    assert response["metadata"]["chunks_retrieved"] == 0
    assert not any(step.startswith(("attempt_", "route_to_")) for step in response["path"])
    assert response["citations"] and all(c["source"] == "user-context" for c in response["citations"])
    assert "30 days" in response["answer"]
    short = ask("How long?", mode="constrained-context", context="too short")
    assert short["status"] == "error" and "at least 50 characters" in short["error_message"]


def test_threshold_edited_in_yaml_changes_behaviour(ingested, tmp_path):
    spec = yaml.safe_load((pipelines_dir() / "ask.yml").read_text())
    # An entry in ask.yml overrides the KB's own (kb.yml): here a lenient threshold for every sample KB.
    spec["components"]["router"]["init_parameters"]["knowledge_bases"] = [
        {"name": name, "description": f"The {name} documentation.", "threshold": 0.01}
        for name in ("faq", "product", "ops")]
    lenient = tmp_path / "ask-lenient.yml"
    lenient.write_text(yaml.safe_dump(spec))
    baseline = ask(NONSENSE)
    edited = ask(NONSENSE, pipeline=str(lenient))
    assert baseline["path"].count("rewrite_and_retry") == 2
    assert "rewrite_and_retry" not in edited["path"]
    assert [step for step in edited["path"] if step.startswith("attempt_")] == [edited["path"][4]]
    assert "max_retries_reached" not in edited["path"]


def test_yaml_connection_between_incompatible_sockets_fails_at_load(tmp_path):
    spec = yaml.safe_load((pipelines_dir() / "search.yml").read_text())
    spec["connections"] = [c for c in spec["connections"] if c["receiver"] != "quality_gate.state"]
    spec["connections"].append({"sender": "retrieval.documents", "receiver": "quality_gate.state"})
    path = tmp_path / "search.yml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(Exception, match=r"retrieval\.documents.*quality_gate\.state|quality_gate.*state") as raised:
        load_pipeline(path)
    assert "State" in str(raised.value) and "list[" in str(raised.value)


def test_every_state_key_the_pipeline_sets_is_declared_on_state(ingested):
    from gatehouse.components.state import State

    pipeline = load_pipeline("ask")
    declared = set(State.__annotations__)
    questions = ["How do I rotate an API key?", NONSENSE, "What is 17 * 3?", "What is Project Quasar?"]
    for question in questions:
        result = pipeline.run({"intake": {"query": question, "tenant": "globex"}}, include_outputs_from={"output_guard"})
        assert set(result["output_guard"]["state"]) <= declared, question
    constrained = pipeline.run(
        {"intake": {"query": "What is the price?", "mode": "hybrid", "context": "The Team plan costs 30 euros a month."}},
        include_outputs_from={"output_guard"},
    )
    assert set(constrained["output_guard"]["state"]) <= declared
