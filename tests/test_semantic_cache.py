"""Tests for the answer cache (`SemanticCache`, `SemanticCacheStore`) with real MiniLM, a real local store and ask.yml."""

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml
from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict

from gatehouse.components.embedders.embedding import EmbeddingBackend
from gatehouse.components.cache.question_keys import key_terms, normalise_question
from gatehouse.components.cache.semantic_cache import SemanticCache
from gatehouse.components.cache.semantic_cache_store import SemanticCacheStore
from gatehouse.components.state import new_state, with_validation
from gatehouse.document_stores.dense_document_store import DenseDocumentStore
from gatehouse.document_stores.lexical_document_store import LexicalDocumentStore
from gatehouse.ingest import ingest, path_groups, sample_groups
from gatehouse.knowledge_bases import KnowledgeBaseCatalogue
from gatehouse.pipelines import PipelineYAMLError, load_pipeline, pipelines_dir

CITATION = {"id": "S1", "text": "Open API keys and choose Rotate.", "url": "faq/api-keys.md#rotate", "chunk_id": "c1",
            "source": "api-keys.md", "kb": "faq", "confidence": 0.9, "snippet": "choose Rotate"}


def answered(state, **fields):
    """`state` as the pipeline finishes it for a retrieved, cited answer."""
    finished = dict(state)
    finished.update({"route": "retrieve", "intent": "procedural", "kbs": ["faq"], "answer": "Choose Rotate [S1].",
                     "citations": [CITATION], "chunks_retrieved": 8, "chunks_used": 3,
                     "attempts": [{"query": state["query"], "score": 0.8}], "quality_score": 0.8,
                     "generator": "extractive"})
    finished.update(fields)
    return finished


def ask_and_store(cache, question, **fields):
    """Look `question` up (a miss) and store its answer; returns the stored state."""
    state = new_state(question, **{k: v for k, v in fields.items() if k in {"tenant", "kb", "mode", "context"}})
    result = cache.run(state=state)
    assert "ticket" in result, result
    finished = answered(result["miss"], **{k: v for k, v in fields.items() if k not in {"tenant", "kb", "mode"}})
    return SemanticCacheStore().run(state=finished, ticket=result["ticket"])["state"]


@pytest.fixture
def store(tmp_path):
    return LexicalDocumentStore(backend="local", local={"path": str(tmp_path / "store")})


@pytest.fixture
def cache(store):
    cache = SemanticCache(document_store=store)
    cache.warm_up()
    return cache


def test_init():
    cache = SemanticCache()
    assert cache.enabled is True and cache.active is True
    assert cache.similarity_threshold == 0.92
    assert cache.max_entries == 1000 and cache.ttl_s == 3600.0
    assert cache.cache_partial is False
    assert cache.document_store is None
    assert cache.cache_dir is None and cache.embedding_model is None
    assert len(cache) == 0


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"similarity_threshold": 0}, "similarity_threshold"),
        ({"similarity_threshold": 1.5}, "similarity_threshold"),
        ({"max_entries": 0}, "max_entries"),
        ({"ttl_s": 0}, "ttl_s"),
        ({"ttl_s": True}, "ttl_s"),
    ],
)
def test_init_rejects_bad_numbers(parameters, message):
    with pytest.raises(ValueError, match=message):
        SemanticCache(**parameters)


def test_to_dict(store):
    data = component_to_dict(SemanticCache(similarity_threshold=0.95, max_entries=10, ttl_s=60, cache_partial=True,
                         document_store=store), "component")
    assert data["type"] == "gatehouse.components.cache.semantic_cache.SemanticCache"
    assert data["init_parameters"] == {
        "enabled": True, "similarity_threshold": 0.95, "max_entries": 10, "ttl_s": 60.0, "cache_partial": True,
        "document_store": store.to_dict(), "embedding_model": None, "cache_dir": None,
    }
    assert component_to_dict(SemanticCacheStore(), "component") == {
        "type": "gatehouse.components.cache.semantic_cache_store.SemanticCacheStore", "init_parameters": {},
    }


def test_from_dict(store, monkeypatch):
    monkeypatch.setenv("HAYSTACK_DESERIALIZATION_ALLOWLIST", "gatehouse.components.*,gatehouse.document_stores.*")
    restored = component_from_dict(
        SemanticCache,
        component_to_dict(SemanticCache(enabled=False, ttl_s=5, document_store=store), "component"),
        "component",
    )
    assert restored.enabled is False and restored.ttl_s == 5.0
    assert isinstance(restored.document_store, LexicalDocumentStore)
    assert restored.document_store.local == store.local
    assert isinstance(component_from_dict(SemanticCacheStore, component_to_dict(SemanticCacheStore(), "component"), "component"), SemanticCacheStore)


def test_a_yaml_naming_the_store_by_its_old_module_names_the_new_one(tmp_path):
    spec = yaml.safe_load((pipelines_dir() / "ask.yml").read_text())
    spec["components"]["cache_store"]["type"] = "gatehouse.components.routers.semantic_cache.SemanticCacheStore"
    path = tmp_path / "ask-old.yml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(PipelineYAMLError, match="gatehouse.components.routers.semantic_cache.SemanticCacheStore -> "
                                                "gatehouse.components.cache.semantic_cache_store.SemanticCacheStore"):
        load_pipeline(path)


def test_normalise_question_and_key_terms():
    assert normalise_question("  How do I  rotate an API-key？ ") == normalise_question("how do i rotate an api key")
    assert normalise_question("Ｃａｎ I?") == "can i"
    assert key_terms("How much does the Team plan cost?") == {"team"}
    assert key_terms("Can I upgrade from 3.2 to 3.4 in eu-west?") == {"3.2", "3.4", "eu-west"}
    assert key_terms("What does CGW-3001 mean with MySQL? How do I fix it?") == {"cgw-3001", "mysql"}


def test_run_exact_hit_needs_no_embedding(cache):
    stored = ask_and_store(cache, "How do I rotate an API key?")
    assert stored["cache"] == {"status": "miss", "stored": True}
    encoded = EmbeddingBackend.get().encoded_count  # a new text: embedding it would encode
    result = cache.run(state=new_state("  how do I rotate an API key "))
    assert EmbeddingBackend.get().encoded_count == encoded
    hit = result["hit"]
    assert set(result) == {"hit"}
    assert hit["answer"] == "Choose Rotate [S1]." and hit["citations"] == [CITATION]
    assert hit["kbs"] == ["faq"] and hit["route"] == "retrieve" and hit["chunks_used"] == 3
    assert hit["path"] == ["start", "cache_hit"]
    assert hit["cache"]["status"] == "hit" and hit["cache"]["match"] == "exact" and hit["cache"]["age_s"] >= 0
    assert "cache" in hit["latency_ms"]


def test_run_paraphrase_hits_and_a_same_topic_question_does_not(cache):
    ask_and_store(cache, "How much does the Business plan cost?")
    hit = cache.run(state=new_state("What does the Business plan cost?"))
    assert hit["hit"]["cache"]["match"] == "semantic" and hit["hit"]["cache"]["similarity"] >= 0.92
    for question in ["How much does the Team plan cost?", "How much does the Enterprise plan cost?",
                     "how much does the team plan cost"]:
        result = cache.run(state=new_state(question))
        assert "hit" not in result and result["miss"]["cache"] == {"status": "miss"}, question


PAIRS = yaml.safe_load((Path(__file__).resolve().parents[1] / "eval" / "sets" / "cache_pairs.yml").read_text())


def test_run_near_miss_pairs_never_hit(store):
    """A held-out set written apart from the cache's code: opposite actions, with/without, negations, numbers, roles."""
    near = [pair for pair in PAIRS["pairs"] if pair["kind"] == "near_miss"]
    assert len(near) >= 30
    wrong = []
    for pair in near:
        cache = SemanticCache(document_store=store)
        ask_and_store(cache, pair["first"])
        if "hit" in cache.run(state=new_state(pair["second"])):
            wrong.append(pair["id"])
    assert wrong == []


def test_run_paraphrase_pairs_hit_rate_is_reported(store, capsys):
    pairs = [pair for pair in PAIRS["pairs"] if pair["kind"] == "paraphrase"]
    hits = 0
    for pair in pairs:
        cache = SemanticCache(document_store=store)
        ask_and_store(cache, pair["first"])
        hits += "hit" in cache.run(state=new_state(pair["second"]))
    with capsys.disabled():
        print(f"\nanswer cache: {hits} of {len(pairs)} held-out paraphrase pairs hit")
    assert hits >= 1


def test_run_never_across_tenants_kbs_or_modes(cache):
    ask_and_store(cache, "How do I rotate an API key?", tenant="globex")
    assert "hit" in cache.run(state=new_state("How do I rotate an API key?", tenant="globex"))
    assert "miss" in cache.run(state=new_state("How do I rotate an API key?", tenant="initech"))
    assert "miss" in cache.run(state=new_state("How do I rotate an API key?"))
    assert "miss" in cache.run(state=new_state("How do I rotate an API key?", tenant="globex", kb="faq"))
    for mode in ("constrained-context", "hybrid"):
        result = cache.run(state=new_state("How do I rotate an API key?", tenant="globex", mode=mode,
                                           context="Rotate keys in the console, then revoke the old one."))
        assert set(result) == {"miss"} and result["miss"]["cache"]["status"] == "skipped"
        assert mode in result["miss"]["cache"]["reason"]


def test_run_stores_only_answers_worth_repeating(cache, store):
    assert ask_and_store(cache, "What is 12 * 7?", route="direct", citations=[])["cache"]["stored"] is False
    assert ask_and_store(cache, "Write me a scraper", route="refuse", status="refused")["cache"]["stored"] is False
    assert ask_and_store(cache, "How do I frobnicate?", fallback=True, status="fallback")["cache"]["stored"] is False
    assert ask_and_store(cache, "How do I rotate a key?", citations=[])["cache"]["stored"] is False
    assert ask_and_store(cache, "How do I revoke a key?", status="partial")["cache"]["stored"] is False
    assert len(cache) == 0
    partial = SemanticCache(cache_partial=True, document_store=store)
    assert ask_and_store(partial, "How do I revoke a key?", status="partial")["cache"]["stored"] is True


def test_run_restores_the_answers_warnings_not_the_requests(cache):
    state = with_validation(new_state("How do I rotate an API key?"), "guardrail_actions", "redacted_pii:email")
    result = cache.run(state=state)
    finished = with_validation(answered(result["miss"]), "confidence_warnings", "kb_router: low confidence")
    SemanticCacheStore().run(state=finished, ticket=result["ticket"])
    hit = cache.run(state=new_state("How do I rotate an API key?"))["hit"]
    assert hit["validation"]["confidence_warnings"] == ["kb_router: low confidence"]
    assert hit["validation"]["guardrail_actions"] == []


def test_run_least_recently_used_goes_first(store):
    cache = SemanticCache(max_entries=2, document_store=store)
    for question in ["How do I rotate an API key?", "How do I reset my password?"]:
        ask_and_store(cache, question)
    assert "hit" in cache.run(state=new_state("How do I rotate an API key?"))  # now the most recently used
    ask_and_store(cache, "Where can I download my invoices?")
    assert len(cache) == 2
    assert "miss" in cache.run(state=new_state("How do I reset my password?"))
    assert "hit" in cache.run(state=new_state("How do I rotate an API key?"))
    assert "hit" in cache.run(state=new_state("Where can I download my invoices?"))


def test_run_expires_after_ttl(store):
    cache = SemanticCache(ttl_s=1.0, document_store=store)
    ask_and_store(cache, "How do I rotate an API key?")
    assert "hit" in cache.run(state=new_state("How do I rotate an API key?"))
    time.sleep(1.2)
    assert "miss" in cache.run(state=new_state("How do I rotate an API key?"))
    assert len(cache) == 0  # the expired entry looked up is dropped


def write(store, tenant, kb, text="A new paragraph."):
    store.write_documents([Document(content=text, meta={"tenant": tenant, "kb": kb})])


def test_run_a_write_to_a_kb_the_answer_depends_on_invalidates_it(cache, store):
    ask_and_store(cache, "How do I rotate an API key?", kb="faq")                       # explicit: faq
    ask_and_store(cache, "How do I rotate an API key?")                                 # routed: every KB
    ask_and_store(cache, "How do I rotate an API key?", tenant="globex", kb="faq")
    write(store, "initech", "faq")                      # another tenant's KB: nothing depends on it
    write(store, "public", "ops")                       # a public KB the routed answers depend on
    assert "hit" in cache.run(state=new_state("How do I rotate an API key?", kb="faq"))
    assert "hit" in cache.run(state=new_state("How do I rotate an API key?", tenant="globex", kb="faq"))
    assert "miss" in cache.run(state=new_state("How do I rotate an API key?"))
    write(store, "public", "faq", "Rotation now needs two approvals.")   # globex reads the public faq too
    assert "miss" in cache.run(state=new_state("How do I rotate an API key?", kb="faq"))
    assert "miss" in cache.run(state=new_state("How do I rotate an API key?", tenant="globex", kb="faq"))
    assert len(cache) == 0


def test_run_on_postgres_a_write_by_another_server_invalidates_it(postgres):
    table = {"url": postgres.primary_url, "table": f"cache_{uuid.uuid4().hex[:12]}"}
    cache = SemanticCache(document_store=LexicalDocumentStore(postgres=table))
    assert cache.active  # the database keeps the write counters
    other_server = LexicalDocumentStore(postgres=table)  # its own connections, as another process has
    write(other_server, "public", "faq")
    ask_and_store(cache, "How do I rotate an API key?", kb="faq")
    write(other_server, "public", "ops")
    assert "hit" in cache.run(state=new_state("How do I rotate an API key?", kb="faq"))
    write(other_server, "public", "faq", "Rotation now needs two approvals.")
    assert "miss" in cache.run(state=new_state("How do I rotate an API key?", kb="faq"))


def test_run_a_write_by_another_store_invalidates_and_another_process_cannot_write(cache, store):
    write(store, "public", "faq")
    ask_and_store(cache, "How do I rotate an API key?", kb="faq")
    assert "hit" in cache.run(state=new_state("How do I rotate an API key?", kb="faq"))
    # Only the process holding the folder writes to it: another process (a CLI beside a server) is refused, so no
    # write can go unseen by this process's cache.
    script = (
        "import sys\n"
        "from gatehouse.document_stores.edge_document_store import EdgeDocumentStore\n"
        "EdgeDocumentStore(path=sys.argv[1]).delete_by_filter({'field': 'meta.kb', 'operator': '==', 'value': 'faq'})\n"
    )
    done = subprocess.run([sys.executable, "-c", script, store.local["path"]], env=dict(os.environ),
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 1
    assert "DataDirInUseError" in done.stderr and "is in use by another process" in done.stderr
    assert store.count_documents() == 1
    assert "hit" in cache.run(state=new_state("How do I rotate an API key?", kb="faq"))
    # Another store of the folder in this process (the index pipeline's writer) writes to the same shard.
    other = DenseDocumentStore(path=store.local["path"])
    assert other.delete_by_filter({"field": "meta.kb", "operator": "==", "value": "faq"}) == 1
    assert "miss" in cache.run(state=new_state("How do I rotate an API key?", kb="faq"))


def test_run_disabled_passes_every_request_untouched(store):
    cache = SemanticCache(enabled=False, document_store=store)
    state = new_state("How do I rotate an API key?")
    assert cache.run(state=state) == {"miss": state}
    assert SemanticCacheStore().run(state=answered(state))["state"] == answered(state)


# -- in ask.yml -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pipeline():
    assert ingest(sample_groups(), progress=False).failed == []
    pipeline = load_pipeline("ask")
    pipeline.warm_up()
    return pipeline


def ask(pipeline, question, **intake):
    return pipeline.run({"intake": {"query": question, **intake}})["response"]["response"]


def test_run_in_ask_yml_a_repeated_question_is_answered_from_the_cache(pipeline):
    first = ask(pipeline, "How do I rotate an API key?")
    assert first["status"] == "success" and first["metadata"]["cache"] == {"status": "miss", "stored": True}
    again = ask(pipeline, "how do I rotate an API key")
    assert again["metadata"]["cache"]["status"] == "hit" and again["metadata"]["cache"]["match"] == "exact"
    assert again["answer"] == first["answer"] and again["citations"] == first["citations"]
    assert again["status"] == "success" and again["metadata"]["kb"] == first["metadata"]["kb"]
    assert "cache_hit" in again["path"]
    assert not any(step.startswith(("attempt_", "route_to_")) for step in again["path"])  # no search, no routing
    paraphrase = ask(pipeline, "How can I rotate an API key?")
    assert paraphrase["metadata"]["cache"]["match"] == "semantic" and paraphrase["answer"] == first["answer"]
    other_tenant = ask(pipeline, "How do I rotate an API key?", tenant="globex")
    assert other_tenant["metadata"]["cache"]["status"] == "miss"


def test_run_in_ask_yml_another_plan_is_not_a_hit(pipeline):
    business = ask(pipeline, "How much does the Business plan cost?")
    team = ask(pipeline, "How much does the Team plan cost?")
    assert team["metadata"]["cache"]["status"] == "miss"
    assert business["answer"] != team["answer"]


def test_run_in_ask_yml_ingest_kb_delete_and_prune_invalidate(pipeline, tmp_path):
    question = "How do I reset my password?"
    folder = tmp_path / "scratch"
    folder.mkdir()
    (folder / "one.md").write_text("# Scratch\n\n## Parking\n\nThe office car park opens at seven in the morning.\n")
    (folder / "two.md").write_text("# Scratch\n\n## Lunch\n\nThe canteen serves lunch from noon until two.\n")

    def cached() -> str:
        ask(pipeline, question)
        return ask(pipeline, question)["metadata"]["cache"]["status"]

    assert cached() == "hit"
    assert ingest(path_groups([str(folder)], kb="scratch", tenant=None), progress=False).documents_written == 2
    assert ask(pipeline, question)["metadata"]["cache"]["status"] == "miss"   # routed: every public KB counts
    assert cached() == "hit"
    (folder / "two.md").unlink()
    summary = ingest(path_groups([str(folder)], kb="scratch", tenant=None), progress=False, prune_missing=True)
    assert len(summary.pruned) == 1
    assert ask(pipeline, question)["metadata"]["cache"]["status"] == "miss"
    assert cached() == "hit"
    catalogue = KnowledgeBaseCatalogue.from_index_pipeline(load_pipeline("index"))
    catalogue.delete(kb="scratch", tenant="public")
    assert ask(pipeline, question)["metadata"]["cache"]["status"] == "miss"


def test_run_in_ask_yml_enabled_false(pipeline, tmp_path):
    spec = yaml.safe_load((pipelines_dir() / "ask.yml").read_text())
    spec["components"]["cache_lookup"]["init_parameters"]["enabled"] = False
    path = tmp_path / "ask-no-cache.yml"
    path.write_text(yaml.safe_dump(spec))
    uncached = load_pipeline(path)
    uncached.warm_up()
    for _ in range(2):
        response = ask(uncached, "Where can I download my invoices?")
        assert "cache" not in response["metadata"] and "cache_hit" not in response["path"]
    constrained = ask(pipeline, "How long?", mode="constrained-context",
                         context="Refund requests must be filed within 30 days of the renewal date.")
    assert constrained["metadata"]["cache"]["status"] == "skipped"


def test_cache_bench_prints_hit_and_miss(pipeline, capsys):
    from gatehouse.eval.cache_bench import bench

    figures = bench(pipeline, ["Which Prometheus metrics does the gateway expose?"], repeats=5)
    assert figures["hit_p50_ms"] > 0 and figures["miss_p50_ms"] > 0  # the ratio is the benchmark's, not a test's
    assert "ratio" in capsys.readouterr().out
