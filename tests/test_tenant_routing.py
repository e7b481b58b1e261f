"""
Tenant-aware retrieval and routing on the sample knowledge bases (real MiniLM, the local store's dense and BM25 vectors): a
tenant reads its own documents and the public ones, never another tenant's, and the router only routes to
knowledge bases holding documents the caller may read, deciding by retrieval evidence when unsure.
"""

import pytest
import yaml
from haystack import Document
from haystack.core.serialization import component_from_dict

from gatehouse.components.kb_routing.kb_router import KBRouter
from gatehouse.components.retrievers.retrieval_pipeline import RetrievalPipeline
from gatehouse.components.retrievers.retrieval_request import RetrievalRequest
from gatehouse.components.retrievers.retrieval_result import RetrievalResult
from gatehouse.components.kb_routing.kb_evidence import KBEvidence
from gatehouse.components.state import new_state
from gatehouse.document_stores.dense_document_store import DenseDocumentStore
from gatehouse.document_stores.edge_document_store import EdgeDocumentStore
from gatehouse.document_stores.lexical_document_store import LexicalDocumentStore
from gatehouse.ask import ask
from gatehouse.ingest import ingest, path_groups, sample_groups
from gatehouse.pipelines import pipelines_dir

INITECH_FAQ = """# Initech refund terms

Initech's TPS programme refunds unused prepaid platform fees within 10 business days when the programme is cancelled.
"""
INITECH_HANDBOOK = """# Initech staff handbook

## Parental leave

Initech employees receive sixteen weeks of paid parental leave, to be taken within the first year after the birth.
"""


@pytest.fixture(scope="module")
def ingested(tmp_path_factory):
    folder = tmp_path_factory.mktemp("initech")
    (folder / "faq").mkdir()
    (folder / "faq" / "initech-refunds.md").write_text(INITECH_FAQ)
    (folder / "handbook").mkdir()
    (folder / "handbook" / "staff-handbook.md").write_text(INITECH_HANDBOOK)
    groups = sample_groups()
    groups += path_groups([str(folder / "faq")], "faq", "initech")
    groups += path_groups([str(folder / "handbook")], "handbook", "initech")
    summary = ingest(groups, progress=False)
    assert summary.failed == []


@pytest.fixture(scope="module")
def router(ingested):
    """The router exactly as `ask.yml` declares it."""
    spec = yaml.safe_load((pipelines_dir() / "ask.yml").read_text())["components"]["router"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HAYSTACK_DESERIALIZATION_ALLOWLIST", "gatehouse.components.*,gatehouse.document_stores.*")
        component = component_from_dict(KBRouter, spec, "component")
    component.warm_up()
    return component


def test_store_counts_documents_per_tenant_and_kb(tmp_path):
    store = EdgeDocumentStore(path=str(tmp_path))
    store.write_documents([
        Document(content="a", meta={"tenant": "public", "kb": "faq"}),
        Document(content="b", meta={"tenant": "public", "kb": "faq"}),
        Document(content="c", meta={"tenant": "acme", "kb": "faq"}),
        Document(content="d", meta={"kb": "ops"}),
    ])
    counts = store.metadata_counts(["tenant", "kb"])
    assert counts == {("public", "faq"): 2, ("acme", "faq"): 1, (None, "ops"): 1}
    assert LexicalDocumentStore(backend="local", local={"path": str(tmp_path)}).metadata_counts(["kb"]) == {
        ("faq",): 3, ("ops",): 1
    }
    other_view = DenseDocumentStore(path=str(tmp_path))  # another store of the folder (the index writer's)
    assert other_view.delete_by_filter({"field": "meta.tenant", "operator": "==", "value": "acme"}) == 1
    assert store.metadata_counts(["tenant", "kb"]) == {("public", "faq"): 2, (None, "ops"): 1}  # not a stale count


def test_retrieval_tenant_reads_own_and_public_never_another_tenants(ingested):
    retrieve = RetrievalPipeline(pipeline_file="retrieve")
    question = "Can I get a refund of prepaid platform fees?"
    seen = {}
    for tenant in ("globex", "initech", None):
        documents = retrieve.run(query=question, tenant=tenant, top_k=30)["documents"]
        seen[tenant] = {doc.meta["tenant"] for doc in documents}
    assert seen["globex"] == {"globex", "public"}
    assert seen["initech"] == {"initech", "public"}
    assert seen[None] == {"public"}
    assert not any(
        doc.meta["tenant"] != "public" for doc in retrieve.run(query=question, tenant="umbrella")["documents"]
    )


def test_router_catalogue_of_the_sample_stores(router):
    # The sample KBs bring their entries (kb.yml, stored at ingest); initech's handbook has none: routed on evidence.
    for tenant, without_entry in (("globex", []), ("initech", ["handbook"]), (None, [])):
        declared, undeclared = router.candidates(tenant, router.entries(tenant).names)
        assert sorted(declared) == ["faq", "ops", "product"] and undeclared == without_entry


def _first_attempt(routed):
    """The routed state through the search's first attempt up to the evidence step (search.yml's order)."""
    request = RetrievalRequest().run(state=routed)
    documents = RetrievalPipeline(pipeline_file="retrieve").run(query=request["query"], tenant=request["tenant"],
                                                                kbs=request["kbs"])["documents"]
    retrieved = RetrievalResult().run(state=request["state"], documents=documents)["state"]
    return KBEvidence().run(state=retrieved)["state"]


def test_router_evidence_finds_the_tenants_own_document(router):
    routed = router.run(state=new_state("What is Project Quasar?", tenant="globex"))["routed"]
    pending = routed["route_pending"]
    assert routed["route_reason"] == "evidence" and set(routed["kbs"]) == set(pending["candidates"])
    assert len(pending["candidates"]) > 1 and not any(step.startswith("route_to_") for step in routed["path"])
    # The evidence is the first attempt's retrieval over the candidates: the KB of the best document wins.
    chosen = _first_attempt(routed)
    assert chosen["kbs"] == ["faq"] and chosen["route_reason"] == "evidence" and chosen["route_pending"] is None
    assert next(iter(chosen["route_evidence"])) == "faq" and chosen["path"][-1] == "route_to_faq"
    assert chosen["documents"] and {d.meta["kb"] for d in chosen["documents"]} == {"faq"}
    assert {d.meta["tenant"] for d in chosen["documents"]} <= {"globex", "public"}
    again = KBEvidence().run(state=chosen)["state"]  # a retry has nothing pending: the choice stands
    assert again is chosen


def test_router_undeclared_kb_of_the_tenant_by_evidence(router):
    question = "How many weeks of parental leave do employees get?"
    chosen = _first_attempt(router.run(state=new_state(question, tenant="initech"))["routed"])
    assert chosen["kbs"][0] == "handbook" and chosen["route_reason"] == "evidence"
    for tenant in ("globex", None):
        routed = router.run(state=new_state(question, tenant=tenant))["routed"]
        assert "handbook" not in routed["kbs"] and "handbook" not in _first_attempt(routed)["kbs"]


def test_router_confident_question_skips_the_evidence(router):
    routed = router.run(state=new_state("How do I rotate an API key?", tenant="globex"))["routed"]
    assert routed["kbs"] == ["faq"] and routed["route_reason"] == "keywords" and routed["route_evidence"] == {}
    assert routed["route_pending"] is None and routed["path"][-1] == "route_to_faq"


def test_ask_tenant_gets_public_documentation(ingested):
    response = ask("How much does the Team plan cost?", tenant="globex")
    assert response["status"] == "success"
    assert response["metadata"]["tenant"] == "globex"
    assert response["citations"] and all(c["kb"] == "product" for c in response["citations"])
    assert "$49" in response["answer"]


def test_ask_tenant_gets_its_own_document_never_another_tenants(ingested):
    globex = ask("What is Project Quasar?", tenant="globex")
    assert globex["status"] in {"success", "partial"}
    assert globex["metadata"]["kb"] == "faq"
    assert any(c["source"] == "globex-contract.md" for c in globex["citations"])
    for tenant in ("initech", None):
        other = ask("What is Project Quasar?", tenant=tenant)
        assert all(c["source"] != "globex-contract.md" for c in other["citations"])
        assert "Quasar" not in other["answer"]
    initech = ask("How many weeks of parental leave do Initech employees get?", tenant="initech")
    assert any(c["source"] == "staff-handbook.md" for c in initech["citations"])
    assert all(c["source"] != "staff-handbook.md" for c in ask("How many weeks of parental leave do Initech "
                                                                 "employees get?", tenant="globex")["citations"])
