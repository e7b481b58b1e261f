"""Tests for `gatehouse.components.kb_routing.kb_router.KBRouter` with real MiniLM embeddings."""

import pytest
import yaml
from haystack import Document
from haystack.core.serialization import component_from_dict
from haystack.components.generators.chat import MockChatGenerator, OpenAIChatGenerator
from haystack.utils import Secret

from gatehouse.components.embedders.embedding import EmbeddingBackend
from gatehouse.components.kb_routing.kb_router import KBRouter
from gatehouse.components.kb_routing.kb_router_settings import LLM_DEFAULTS, SCORING_DEFAULTS
from gatehouse.components.state import new_state
from gatehouse.document_stores.lexical_document_store import LexicalDocumentStore
from gatehouse.pipelines import PipelineYAMLError, load_pipeline

KNOWLEDGE_BASES = [
    {
        "name": "product",
        "description": "Corvio product: features, pricing, plans, supported models, security certifications.",
        "keywords": ["pricing", "price*", "plan", "feature*", "supported model*", "soc 2", "iso 27001",
                     "certification*"],
        "examples": [
            "What does the Team plan cost?",
            "Which models does Corvio support?",
            "Is Corvio SOC 2 certified?",
            "What features are included in the Enterprise plan?",
        ],
        "threshold": 0.65,
    },
    {
        "name": "ops",
        "description": "Operating the self-hosted Corvio Gateway: deployment, docker, kubernetes, monitoring, "
        "backups, upgrades, troubleshooting.",
        "keywords": ["deploy*", "docker", "docker compose", "kubernetes", "helm", "monitor*", "prometheus",
                     "backup*", "back up", "restore", "troubleshoot*", "gateway"],
        "examples": [
            "How do I deploy the gateway with docker compose?",
            "How do I back up the gateway database?",
            "How do I monitor the gateway with Prometheus?",
            "The gateway container keeps restarting",
        ],
        "threshold": 0.55,
    },
    {
        "name": "faq",
        "description": "Account and billing questions: accounts, passwords, 2FA, refunds, invoices, API keys, "
        "billing, payment methods.",
        "keywords": ["account*", "password*", "2fa", "two-factor", "refund*", "invoice*", "api key*", "billing",
                     "payment method*", "credit card"],
        "examples": [
            "How do I reset my password?",
            "Can I get a refund?",
            "Where do I download my invoices?",
            "How do I add a payment method?",
        ],
        "threshold": 0.60,
    },
]

#: The scoring settings of every router here: no embedding cache on disk.
NO_CACHE = {"cache_dir": "off"}

# Questions written for these tests (not the KB examples), varied wording; several have no keyword hit at all.
QUESTIONS = {
    "product": [
        "Which models are supported?",
        "How much is the Pro plan per month?",
        "Do you have ISO 27001 certification?",
        "Does Corvio offer fine-tuning?",
        "What's included in the free tier?",
        "Can I run Llama 3 on Corvio?",
        "Is there a volume discount for enterprise customers?",
    ],
    "ops": [
        "How do I deploy the gateway with docker compose?",
        "How can I run it on a Kubernetes cluster?",
        "Where are the gateway logs stored?",
        "How do I restore from yesterday's backup?",
        "The service returns 502 errors after I upgraded to the new release, what should I check?",
        "What hardware do I need to self-host it?",
        "My pod is stuck in CrashLoopBackOff",
    ],
    "faq": [
        "How do I rotate an API key?",
        "I forgot my password",
        "How do I turn on two-factor authentication?",
        "Can I pay by bank transfer instead?",
        "How do I get my money back for an unused month?",
        "Where can I find last month's invoice?",
        "How do I close my account?",
    ],
}


@pytest.fixture(scope="module")
def router() -> KBRouter:
    component = KBRouter(knowledge_bases=KNOWLEDGE_BASES, scoring=NO_CACHE)
    component.warm_up()
    return component


def test_init():
    router = KBRouter(knowledge_bases=KNOWLEDGE_BASES, dual_route_margin=0.1, max_kbs=3, scoring=NO_CACHE)
    assert router.knowledge_bases == KNOWLEDGE_BASES
    assert router.knowledge_bases is not KNOWLEDGE_BASES
    assert router.dual_route_margin == 0.1
    assert router.max_kbs == 3
    assert router.names == ["product", "ops", "faq"]
    assert router.chat_generator is None
    assert router.scoring["keyword_weight"] == 0.3 and router.scoring["embedding_weight"] == 0.7
    assert router.include_public is True
    assert router.catalogue_store is None
    assert router.evidence == {"enabled": False, "margin": 0.05, "lead_below": 0.3}


def test_init_tenant_and_evidence_parameters(tmp_path):
    store = LexicalDocumentStore(backend="local", local={"path": str(tmp_path)})
    router = KBRouter(
        knowledge_bases=KNOWLEDGE_BASES, include_public=False, catalogue_store=store,
        evidence={"enabled": True, "margin": 0}, scoring=NO_CACHE,
    )
    assert router.include_public is False
    assert router.catalogue_store is store
    assert router.evidence == {"enabled": True, "margin": 0.0, "lead_below": 0.3}


@pytest.mark.parametrize(
    ("evidence", "message"),
    [
        ("yes", "'evidence' must be a mapping"),
        ({"enable": True}, "unknown keys"),
        ({"enabled": "yes"}, "'evidence.enabled'"),
        ({"pipeline": "retrieve"}, "the first attempt of the search pipeline"),
        ({"top_k": 10}, r"no longer takes \['top_k'\]"),
        ({"margin": -0.1}, "'evidence.margin'"),
        ({"lead_below": "high"}, "'evidence.lead_below'"),
    ],
)
def test_init_rejects_bad_evidence(evidence, message):
    with pytest.raises(ValueError, match=message):
        KBRouter(knowledge_bases=KNOWLEDGE_BASES, evidence=evidence, scoring=NO_CACHE)


def test_init_without_declared_knowledge_bases():
    # A KB made by `gatehouse ingest DIR --kb NAME` is routed from its profile: no YAML entry is needed.
    for declared in (None, []):
        assert KBRouter(knowledge_bases=declared, scoring=NO_CACHE).knowledge_bases == []


@pytest.mark.parametrize(
    ("knowledge_bases", "message"),
    [
        ({"name": "faq"}, "must be a list of mappings"),
        (["faq"], r"knowledge_bases\[0\] must be a mapping"),
        ([{"description": "no name"}], "needs a 'name'"),
        ([{"name": "a+b", "description": "x"}], "needs a 'name'"),
        ([{"name": "faq", "description": "x"}, {"name": "faq", "description": "y"}], "declared twice"),
        ([{"name": "faq", "description": "x", "keywords": "refund"}], "'keywords' must be a list"),
        ([{"name": "faq", "description": "x", "examples": ["ok", ""]}], "'examples' holds an empty"),
        ([{"name": "faq", "description": "x", "threshold": 1.5}], "'threshold' must be a number"),
        ([{"name": "faq", "description": "x", "threshold": "high"}], "'threshold' must be a number"),
        ([{"name": "faq", "description": "x", "treshold": 0.5}], "unknown keys"),
        ([{"name": "faq", "description": " "}], "needs a 'description'"),
        ([{"name": "faq", "description": "x", "patterns": ["("]}], "invalid regular expression"),
    ],
)
def test_init_rejects_malformed_knowledge_bases(knowledge_bases, message):
    with pytest.raises(ValueError, match=message):
        KBRouter(knowledge_bases=knowledge_bases, scoring=NO_CACHE)


def test_init_rejects_bad_numbers():
    with pytest.raises(ValueError, match="max_kbs"):
        KBRouter(knowledge_bases=KNOWLEDGE_BASES, max_kbs=0)
    with pytest.raises(ValueError, match="keyword_weight"):
        KBRouter(knowledge_bases=KNOWLEDGE_BASES, scoring={"keyword_weight": 0, "embedding_weight": 0})


def test_init_groups_keep_the_defaults_left_out():
    router = KBRouter(knowledge_bases=KNOWLEDGE_BASES, scoring={"keyword_weight": "0.4", "cache_dir": "off"},
                      llm={"margin": 0.2})
    assert router.scoring == {**SCORING_DEFAULTS, "keyword_weight": 0.4, "cache_dir": "off"}
    assert router.llm == {**LLM_DEFAULTS, "margin": 0.2}
    assert KBRouter(knowledge_bases=KNOWLEDGE_BASES).scoring == SCORING_DEFAULTS


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"scoring": 0.3}, "'scoring' must be a mapping"),
        ({"scoring": {"keyword_weights": 0.3}}, "'scoring' has no setting 'keyword_weights'"),
        ({"scoring": {"pattern_weight": "high"}}, r"'scoring\.pattern_weight' must be a number"),
        ({"scoring": {"keyword_saturation": 0}}, r"'scoring\.keyword_saturation' must be positive"),
        ({"llm": {"margin": 0.1, "temperature": 0}}, "'llm' has no setting 'temperature'"),
    ],
)
def test_init_rejects_bad_groups(settings, message):
    with pytest.raises(ValueError, match=message):
        KBRouter(knowledge_bases=KNOWLEDGE_BASES, **settings)


def test_from_dict_names_the_new_place_of_a_moved_setting(tmp_path):
    data = {"type": "gatehouse.components.kb_routing.kb_router.KBRouter",
            "init_parameters": {"max_kbs": 2, "keyword_weight": 0.4, "min_route_score": 0.3, "cache_dir": "off",
                                "llm_margin": 0.2, "llm_prompt": "{query}"}}
    with pytest.raises(ValueError) as raised:
        component_from_dict(KBRouter, data, "router")
    for old, new in [("keyword_weight", "scoring.keyword_weight"), ("min_route_score", "scoring.min_route_score"),
                     ("cache_dir", "scoring.cache_dir"), ("llm_margin", "llm.margin"), ("llm_prompt", "llm.prompt")]:
        assert f"'{old}' is now '{new}'" in str(raised.value)
    assert "max_kbs" not in str(raised.value)  # still a setting of its own
    path = tmp_path / "old.yml"
    path.write_text(yaml.safe_dump({"components": {"router": data}, "connections": []}))
    with pytest.raises(PipelineYAMLError,
                       match=r"old\.yml: KBRouter settings moved.*'llm_margin' is now 'llm\.margin'"):
        load_pipeline(path)


def test_to_dict():
    router = KBRouter(knowledge_bases=KNOWLEDGE_BASES, max_kbs=1, scoring=NO_CACHE)
    data = router.to_dict()
    assert data["type"] == "gatehouse.components.kb_routing.kb_router.KBRouter"
    params = data["init_parameters"]
    assert params["knowledge_bases"] == KNOWLEDGE_BASES
    assert params["max_kbs"] == 1
    assert params["dual_route_margin"] == 0.05
    assert params["scoring"]["cache_dir"] == "off"
    assert params["chat_generator"] is None
    assert params["include_public"] is True
    assert params["catalogue_store"] is None
    assert params["evidence"]["enabled"] is False


def test_to_dict_from_dict_with_catalogue_and_evidence(tmp_path, monkeypatch):
    monkeypatch.setenv("HAYSTACK_DESERIALIZATION_ALLOWLIST", "gatehouse.components.*,gatehouse.document_stores.*")
    store = LexicalDocumentStore(backend="local", local={"path": str(tmp_path)})
    router = KBRouter(
        knowledge_bases=KNOWLEDGE_BASES, include_public=False, catalogue_store=store,
        evidence={"enabled": True, "margin": 0.1, "lead_below": 0.5},
        scoring=NO_CACHE,
    )
    data = router.to_dict()
    params = data["init_parameters"]
    assert params["include_public"] is False
    assert params["catalogue_store"] == store.to_dict()
    assert params["evidence"] == {"enabled": True, "margin": 0.1, "lead_below": 0.5}
    restored = KBRouter.from_dict(data)
    assert isinstance(restored.catalogue_store, LexicalDocumentStore)
    assert restored.catalogue_store.local == {"path": str(tmp_path)}
    assert restored.evidence == router.evidence and restored.include_public is False
    assert restored.to_dict() == data


def test_from_dict():
    generator = MockChatGenerator(responses="ops")
    router = KBRouter(knowledge_bases=KNOWLEDGE_BASES, chat_generator=generator, llm={"margin": 0.2},
                      scoring=NO_CACHE)
    data = router.to_dict()
    assert data["init_parameters"]["chat_generator"]["type"].endswith("MockChatGenerator")
    restored = KBRouter.from_dict(data)
    assert restored.knowledge_bases == KNOWLEDGE_BASES
    assert restored.llm["margin"] == 0.2
    assert isinstance(restored.chat_generator, MockChatGenerator)
    assert restored.to_dict() == data


def test_from_dict_minimal_yaml_style():
    restored = KBRouter.from_dict(
        {
            "type": "gatehouse.components.kb_routing.kb_router.KBRouter",
            "init_parameters": {"knowledge_bases": [{"name": "docs", "description": "all documentation"}]},
        }
    )
    assert restored.names == ["docs"]
    assert restored.dual_route_margin == 0.05
    assert restored.entries(None).kbs[0]["threshold"] == restored.default_threshold


@pytest.mark.parametrize("kb", sorted(QUESTIONS))
def test_run_routes_clear_questions(router, kb):
    correct = [q for q in QUESTIONS[kb] if router.run(state=new_state(q))["routed"]["kbs"][0] == kb]
    assert len(QUESTIONS[kb]) >= 6
    assert len(correct) >= len(QUESTIONS[kb]) - 1, f"{kb}: only {correct} routed correctly"


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("How do I rotate an API key?", "faq"),
        ("How do I deploy the gateway with docker compose?", "ops"),
        ("Which models are supported?", "product"),
    ],
)
def test_run_required_routes(router, question, expected):
    result = router.run(state=new_state(question, tenant="acme"))
    assert set(result) == {"routed"}
    state = result["routed"]
    assert state["kbs"] == [expected]
    assert state["path"] == ["start", f"route_to_{expected}"]
    assert state["threshold"] == next(kb["threshold"] for kb in KNOWLEDGE_BASES if kb["name"] == expected)
    assert max(state["route_scores"], key=state["route_scores"].get) == expected
    assert set(state["route_scores"]) == {"product", "ops", "faq"}
    assert state["route_reason"] in {"keywords", "embedding", "combined"}
    assert state["latency_ms"]["kb_router"] >= 0


def test_run_embedding_only_question_has_no_keyword_hit(router):
    state = router.run(state=new_state("What hardware do I need to self-host it?"))["routed"]
    assert state["route_reason"] == "embedding"
    assert state["kbs"] == ["ops"]


def test_run_without_tenant(router):
    for state in (new_state("I forgot my password", tenant=None), {"query": "I forgot my password"}):
        assert router.run(state=state)["routed"]["kbs"] == ["faq"]


def test_run_explicit_kb(router):
    state = new_state("Which models are supported?", kb="ops", tenant="acme")
    routed = router.run(state=state)["routed"]
    assert routed["kbs"] == ["ops"]
    assert routed["route_reason"] == "explicit"
    assert routed["path"][-1] == "route_to_ops"
    assert routed["threshold"] == 0.55


def test_run_unknown_kb(router):
    state = new_state("Which models are supported?", kb="legal")
    result = router.run(state=state)
    assert set(result) == {"unknown_kb"}
    failed = result["unknown_kb"]
    assert failed["status"] == "error"
    assert "'legal'" in failed["error_message"]
    for name in ("product", "ops", "faq"):
        assert name in failed["error_message"]
    assert failed["path"] == ["start", "unknown_kb"]
    assert state.get("status") is None and state["path"] == ["start"]


def test_run_dual_route_when_scores_are_close():
    router = KBRouter(knowledge_bases=KNOWLEDGE_BASES, dual_route_margin=1.0, max_kbs=2, scoring=NO_CACHE)
    routed = router.run(state=new_state("How do I rotate the API key the gateway uses?"))["routed"]
    assert len(routed["kbs"]) == 2
    assert set(routed["kbs"]) == {"faq", "ops"}
    assert routed["path"][-1] == f"route_to_{routed['kbs'][0]}+{routed['kbs'][1]}"
    assert routed["threshold"] == 0.55  # the lower of faq (0.60) and ops (0.55)


def test_run_single_route_when_margin_is_large(router):
    routed = router.run(state=new_state("How do I rotate an API key?"))["routed"]
    scores = list(routed["route_scores"].values())
    assert scores[0] - scores[1] >= router.dual_route_margin
    assert len(routed["kbs"]) == 1


def test_run_nonsense_is_low_confidence(router):
    routed = router.run(state=new_state("asdkjh qwpoeiru zxmcnv"))["routed"]
    assert routed["route_reason"] == "low_confidence"
    assert len(routed["kbs"]) == router.max_kbs
    assert any("kb_router" in warning for warning in routed["validation"]["confidence_warnings"])


@pytest.mark.parametrize("query", ["", "   "])
def test_run_empty_query(router, query):
    routed = router.run(state=new_state(query))["routed"]
    assert routed["route_reason"] == "low_confidence"
    assert 1 <= len(routed["kbs"]) <= router.max_kbs


def test_run_unicode_query(router):
    routed = router.run(state=new_state("Rückerstattung? I'd like a refund 💸 for my last invoice"))["routed"]
    assert routed["kbs"][0] == "faq"


def test_run_does_not_mutate_input(router):
    state = new_state("I forgot my password", tenant="acme")
    snapshot = {key: (list(value) if isinstance(value, list) else value) for key, value in state.items()}
    router.run(state=state)
    assert state["path"] == ["start"]
    assert state["latency_ms"] == {}
    assert "kbs" not in state
    assert state["query"] == snapshot["query"]


def test_examples_are_embedded_once_per_instance(router):
    backend = EmbeddingBackend.get(cache_dir="off")
    matrix = router._candidates.static.index._matrix
    assert matrix is not None and matrix.shape[0] == sum(1 + len(kb["examples"]) for kb in KNOWLEDGE_BASES)
    before = backend.encoded_count
    router.run(state=new_state("Is my data encrypted at rest? (unique query 1)"))
    router.run(state=new_state("Is my data encrypted at rest? (unique query 2)"))
    assert backend.encoded_count - before == 2  # only the two queries were encoded
    assert router._candidates.static.index._matrix is matrix


def test_run_llm_tier_decides_when_ambiguous():
    router = KBRouter(
        knowledge_bases=KNOWLEDGE_BASES, chat_generator=MockChatGenerator(responses="ops"), llm={"margin": 1.0},
        scoring=NO_CACHE,
    )
    routed = router.run(state=new_state("Which models are supported?"))["routed"]
    assert routed["kbs"] == ["ops"]
    assert routed["route_reason"] == "llm"
    assert routed["path"][-1] == "route_to_ops"


def test_run_llm_tier_not_asked_when_confident():
    router = KBRouter(
        knowledge_bases=KNOWLEDGE_BASES, chat_generator=MockChatGenerator(responses="ops"), llm={"margin": 0.01},
        scoring=NO_CACHE,
    )
    routed = router.run(state=new_state("How do I rotate an API key?"))["routed"]
    assert routed["kbs"] == ["faq"]
    assert routed["route_reason"] != "llm"


def test_run_llm_unparseable_reply_falls_back():
    router = KBRouter(
        knowledge_bases=KNOWLEDGE_BASES, chat_generator=MockChatGenerator(responses="I am not sure."),
        llm={"margin": 1.0}, scoring=NO_CACHE,
    )
    routed = router.run(state=new_state("How do I rotate an API key?"))["routed"]
    assert routed["kbs"] == ["faq"]
    assert routed["route_reason"] != "llm"
    assert any("LLM tier failed" in w for w in routed["validation"]["confidence_warnings"])


def test_run_llm_failure_falls_back():
    unreachable = OpenAIChatGenerator(
        api_key=Secret.from_token("not-a-key"), api_base_url="http://127.0.0.1:9/v1", timeout=2, max_retries=0
    )
    router = KBRouter(knowledge_bases=KNOWLEDGE_BASES, chat_generator=unreachable, llm={"margin": 1.0},
                      scoring=NO_CACHE)
    routed = router.run(state=new_state("I forgot my password"))["routed"]
    assert routed["kbs"] == ["faq"]
    warnings = routed["validation"]["confidence_warnings"]
    assert len(warnings) == 1 and "LLM tier failed" in warnings[0]


def _catalogue(tmp_path, placements):
    """A local lexical store holding one document per (tenant, kb) pair."""
    store = LexicalDocumentStore(backend="local", local={"path": str(tmp_path)})
    store.write_documents(
        [Document(content=f"{kb} notes of {tenant}", meta={"tenant": tenant, "kb": kb}) for tenant, kb in placements]
    )
    return store


def test_run_routes_only_to_kbs_with_the_callers_documents(tmp_path):
    store = _catalogue(tmp_path, [("public", "ops"), ("public", "faq"), ("globex", "product")])
    router = KBRouter(knowledge_bases=KNOWLEDGE_BASES, catalogue_store=store, scoring=NO_CACHE)
    public = router.run(state=new_state("Which models are supported?"))["routed"]
    assert set(public["route_scores"]) == {"ops", "faq"}
    assert "product" not in public["kbs"]
    globex = router.run(state=new_state("Which models are supported?", tenant="globex"))["routed"]
    assert set(globex["route_scores"]) == {"product", "ops", "faq"}
    assert globex["kbs"] == ["product"]
    other = router.run(state=new_state("Which models are supported?", tenant="initech"))["routed"]
    assert "product" not in other["route_scores"]


def test_run_tenant_without_public_documents(tmp_path):
    store = _catalogue(tmp_path, [("public", "product"), ("public", "faq"), ("acme", "ops")])
    router = KBRouter(knowledge_bases=KNOWLEDGE_BASES, catalogue_store=store, include_public=False, scoring=NO_CACHE)
    routed = router.run(state=new_state("How do I rotate an API key?", tenant="acme"))["routed"]
    assert list(routed["route_scores"]) == ["ops"] and routed["kbs"] == ["ops"]


def test_run_catalogue_sees_new_documents(tmp_path):
    store = _catalogue(tmp_path, [("public", "ops")])
    router = KBRouter(knowledge_bases=KNOWLEDGE_BASES, catalogue_store=store, scoring=NO_CACHE)
    assert router.candidates(None) == (["ops"], [])
    LexicalDocumentStore(backend="local", local={"path": str(tmp_path)}).write_documents(
        [Document(content="refund policy", meta={"tenant": "public", "kb": "faq"})]
    )
    assert router.candidates(None) == (["ops", "faq"], [])
    assert router.run(state=new_state("How do I get a refund?"))["routed"]["kbs"] == ["faq"]


def test_run_empty_catalogue_considers_every_declared_kb(tmp_path):
    router = KBRouter(knowledge_bases=KNOWLEDGE_BASES, catalogue_store=_catalogue(tmp_path, []), scoring=NO_CACHE)
    assert router.candidates("acme") == (["product", "ops", "faq"], [])
    assert router.run(state=new_state("How do I rotate an API key?"))["routed"]["kbs"] == ["faq"]


def test_run_kbs_without_an_entry(tmp_path):
    store = _catalogue(tmp_path, [("public", "faq"), ("public", "wiki"), ("acme", "handbook"), ("globex", "quasar")])
    router = KBRouter(knowledge_bases=KNOWLEDGE_BASES, catalogue_store=store, scoring=NO_CACHE)
    assert router.candidates("acme") == (["faq"], ["handbook", "wiki"])
    assert router.candidates(None) == (["faq"], ["wiki"])  # a public KB needs no entry to be a candidate
    explicit = router.run(state=new_state("What is the leave policy?", tenant="acme", kb="handbook"))["routed"]
    assert explicit["kbs"] == ["handbook"] and explicit["route_reason"] == "explicit"
    assert explicit["threshold"] == router.default_threshold
    for tenant in ("globex", None):
        result = router.run(state=new_state("What is the leave policy?", tenant=tenant, kb="handbook"))
        assert set(result) == {"unknown_kb"}
        assert "handbook" not in result["unknown_kb"]["error_message"].split("Known knowledge bases:")[1]
    # Without the evidence tier a KB without an entry is only searched when asked for by name.
    assert router.run(state=new_state("What is the leave policy?", tenant="acme"))["routed"]["kbs"] == ["faq"]


def test_run_single_candidate_and_no_entries(tmp_path):
    store = _catalogue(tmp_path, [("public", "wiki")])
    router = KBRouter(catalogue_store=store, scoring=NO_CACHE)
    routed = router.run(state=new_state("What is the leave policy?"))["routed"]
    assert routed["kbs"] == ["wiki"] and routed["route_reason"] == "only"


def test_run_entry_stored_with_the_profile(tmp_path, monkeypatch):
    from gatehouse.components.kb_profile import KBProfiles

    monkeypatch.setenv("GATEHOUSE_DATA_DIR", str(tmp_path))
    store = _catalogue(tmp_path / "store", [("public", "wiki"), ("public", "billing")])
    KBProfiles(store).set_entry("public", "billing", {"description": "Invoices, refunds and payments",
                                                      "keywords": ["invoice*", "refund*"], "threshold": 0.4})
    router = KBRouter(catalogue_store=store, scoring=NO_CACHE)
    assert router.entries(None).names == ["billing"]
    routed = router.run(state=new_state("Where can I download my invoices?"))["routed"]
    assert routed["route_scores"] == {"billing": routed["route_scores"]["billing"]}
    assert routed["kbs"] == ["billing"] and routed["threshold"] == 0.4


def test_run_leaves_constrained_context_and_plans_unrouted(router):
    constrained = router.run(state=new_state("Can it be refunded?", mode="constrained-context", kb="legal"))
    assert set(constrained) == {"routed"} and constrained["routed"]["kbs"] == []
    plan = {"strategy": "questions", "question": "q", "parts": []}
    state = new_state("What is the SLA and how do I back up?", plan=plan)
    assert router.run(state=state) == {"routed": state}


def test_run_unsure_leaves_the_choice_to_the_first_search_attempt():
    router = KBRouter(knowledge_bases=KNOWLEDGE_BASES, scoring={"min_route_score": 0.99, "cache_dir": "off"},
                      evidence={"enabled": True, "margin": 0.1})
    routed = router.run(state=new_state("asdkjh qwpoeiru zxmcnv"))["routed"]
    pending = routed["route_pending"]
    assert routed["route_reason"] == "evidence" and routed["kbs"] == pending["candidates"] == ["product", "ops", "faq"]
    assert pending["margin"] == 0.1 and pending["max_kbs"] == router.max_kbs
    assert pending["thresholds"] == {"product": 0.65, "ops": 0.55, "faq": 0.6}
    assert pending["default"]["reason"] == "low_confidence" and len(pending["default"]["kbs"]) == router.max_kbs
    assert routed["path"] == ["start"]  # the route is taken when the first attempt chose (KBEvidence)
