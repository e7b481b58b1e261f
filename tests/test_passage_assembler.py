import re
from copy import deepcopy

import pytest
import yaml
from haystack import Document, Pipeline
from haystack.core.serialization import component_from_dict, component_to_dict

from gatehouse.components.builders.passage_assembler import PassageAssembler
from gatehouse.components.state import FALLBACK_MESSAGE, new_state
from gatehouse.pipelines import PipelineYAMLError, load_pipeline


def make_doc(
    content: str,
    *,
    score: float | None = 0.5,
    section: str = "Rotating a key",
    section_id: str = "rotating-a-key",
    doc_id: str = "api-keys",
    source: str = "security/api-keys.md",
    title: str = "API keys",
    kb: str = "docs",
    **meta,
) -> Document:
    return Document(
        content=content,
        score=score,
        meta={
            "kb": kb,
            "tenant": "public",
            "source": source,
            "title": title,
            "section": section,
            "section_id": section_id,
            "url": f"https://docs.example.com/{source.removesuffix('.md')}#{section_id}",
            "doc_id": doc_id,
            "content_hash": str(abs(hash(content))),
            **meta,
        },
    )


ROTATE = make_doc(
    "To rotate an API key:\n\n1. Open **Settings** and select **API keys**.\n2. Click **Rotate** next to the key.\n"
    "3. Copy the new key; it is shown only once.",
    score=0.9,
)
EXPIRY = make_doc(
    "API keys expire after 90 days unless they are rotated earlier.",
    score=0.7,
    section="Expiry",
    section_id="expiry",
)
SCOPES = make_doc(
    "Each API key carries scopes that limit what it can do. Scopes cannot be changed after creation.",
    score=0.6,
    section="Key scopes",
    section_id="key-scopes",
)
REFUNDS = make_doc(
    "Refunds are issued to the original payment method within 14 days.",
    score=0.3,
    kb="billing",
    source="billing/refunds.md",
    title="Refunds",
    section="Refunds",
    section_id="refunds",
    doc_id="refunds",
)


def test_init():
    assembler = PassageAssembler()
    assert assembler.top_k == 5
    assert assembler.max_context_tokens == 2000
    assert assembler.dedupe == {"threshold": 0.8, "max_per_section": None}
    assert assembler.compression["enabled"] is False
    assert assembler.fallback_message == FALLBACK_MESSAGE
    assert FALLBACK_MESSAGE.startswith("I couldn't locate specific documentation")
    with pytest.raises(ValueError):
        PassageAssembler(top_k=0)
    with pytest.raises(ValueError):
        PassageAssembler(max_context_tokens=0)
    with pytest.raises(ValueError, match=r"dedupe\.max_per_section must be at least 1"):
        PassageAssembler(dedupe={"max_per_section": 0})
    with pytest.raises(ValueError, match=r"'dedupe' has no setting 'dedupe_threshold'"):
        PassageAssembler(dedupe={"dedupe_threshold": 0.5})


def test_to_dict():
    data = component_to_dict(
        PassageAssembler(top_k=3, dedupe={"max_per_section": 1}, compression={"enabled": True},
                         fallback_message="Nothing."), "component"
    )
    assert data["type"] == "gatehouse.components.builders.passage_assembler.PassageAssembler"
    params = data["init_parameters"]
    assert params["top_k"] == 3
    assert params["dedupe"] == {"threshold": 0.8, "max_per_section": 1}
    assert params["compression"]["enabled"] is True
    assert params["fallback_message"] == "Nothing."
    assert params["max_context_tokens"] == 2000
    assert params["tokens_per_word"] == 1.3
    assert params["compression"]["max_sentences"] == 6 and params["compression"]["cache_dir"] is None


def test_from_dict():
    original = PassageAssembler(top_k=2, dedupe={"threshold": 0.6}, max_context_tokens=500)
    restored = component_from_dict(PassageAssembler, component_to_dict(original, "component"), "component")
    assert restored.top_k == 2
    assert restored.dedupe == {"threshold": 0.6, "max_per_section": None}
    assert restored.max_context_tokens == 500
    assert component_to_dict(restored, "component") == component_to_dict(original, "component")


def test_from_dict_names_where_a_moved_setting_went(tmp_path):
    data = component_to_dict(PassageAssembler(), "component")
    data["init_parameters"] = {"top_k": 3, "compress_min_tokens": 100, "cache_dir": "off", "compress": True,
                               "dedupe_threshold": 0.6, "max_per_section": 2}
    with pytest.raises(ValueError) as raised:
        component_from_dict(PassageAssembler, data, "component")
    for old, new in [("compress_min_tokens", "compression.min_tokens"), ("cache_dir", "compression.cache_dir"),
                     ("compress", "compression.enabled"), ("dedupe_threshold", "dedupe.threshold"),
                     ("max_per_section", "dedupe.max_per_section")]:
        assert re.search(rf"\W{old}\W.*\W{re.escape(new)}\W", str(raised.value)), (old, str(raised.value))
    with pytest.raises(ValueError, match=r"'compression'.*'min_token'"):
        PassageAssembler(compression={"min_token": 100})
    # A user's pipeline YAML written before the settings moved: loading it names the new place.
    path = tmp_path / "old.yml"
    path.write_text(yaml.safe_dump({"components": {"assembler": {
        "type": "gatehouse.components.builders.passage_assembler.PassageAssembler",
        "init_parameters": {"compress": True, "compress_max_sentences": 3}}}, "connections": []}))
    with pytest.raises(PipelineYAMLError) as raised:  # a ValueError naming the file, the old and the new place
        load_pipeline(path)
    assert str(path) in str(raised.value)
    assert re.search(r"\Wcompress_max_sentences\W.*\Wcompression\.max_sentences\W", str(raised.value))


def test_pipeline_yaml_round_trip():
    pipeline = Pipeline()
    pipeline.add_component("assemble", PassageAssembler(top_k=4))
    restored = Pipeline.loads(pipeline.dumps(), allowed_modules=["gatehouse.components.builders.passage_assembler"])
    component = restored.get_component("assemble")
    assert isinstance(component, PassageAssembler)
    assert component.top_k == 4


def test_run_labels_passages_in_score_order():
    state = new_state("How do I rotate an API key?", documents=[REFUNDS, SCOPES, ROTATE, EXPIRY])
    result = PassageAssembler().run(state=state)
    assert set(result) == {"passages"}
    out = result["passages"]
    passages = out["passages"]
    assert [p.meta["source_id"] for p in passages] == ["S1", "S2", "S3", "S4"]
    assert [p.id for p in passages] == [ROTATE.id, EXPIRY.id, SCOPES.id, REFUNDS.id]
    assert passages[0].meta["url"] == ROTATE.meta["url"]
    assert out["chunks_used"] == 4
    assert out["path"] == ["start", "assemble_context"]
    assert "assemble_context" in out["latency_ms"]
    # The retrieved documents are untouched: labels live on copies.
    assert "source_id" not in ROTATE.meta


def test_run_does_not_mutate_input_state():
    state = new_state("How do I rotate an API key?", documents=[ROTATE, ROTATE, EXPIRY])
    snapshot = deepcopy(state)
    PassageAssembler(compression={"enabled": False}).run(state=state)
    assert state == snapshot


def test_run_dedupes_same_id_and_near_duplicate_content():
    near_copy = make_doc(
        "API keys expire after 90 days unless they are rotated earlier on.",  # one extra word
        score=0.65,
        doc_id="api-keys-v2",
        source="security/api-keys-v2.md",
    )
    state = new_state("When do keys expire?", documents=[EXPIRY, EXPIRY, near_copy, SCOPES])
    passages = PassageAssembler().run(state=state)["passages"]["passages"]
    assert [p.id for p in passages] == [EXPIRY.id, SCOPES.id]


def test_run_dedupe_threshold_is_tunable():
    near_copy = make_doc("API keys expire after 90 days unless they are rotated earlier on.", score=0.65)
    state = new_state("When do keys expire?", documents=[EXPIRY, near_copy])
    passages = PassageAssembler(dedupe={"threshold": 0.99}).run(state=state)["passages"]["passages"]
    assert len(passages) == 2


def test_run_max_per_section():
    second_chunk = make_doc("Rotation takes effect immediately for new requests.", score=0.85)
    state = new_state("rotate", documents=[ROTATE, second_chunk, EXPIRY])
    limited = PassageAssembler(dedupe={"max_per_section": 1}).run(state=state)["passages"]["passages"]
    assert [p.id for p in limited] == [ROTATE.id, EXPIRY.id]
    unlimited = PassageAssembler().run(state=state)["passages"]["passages"]
    assert [p.id for p in unlimited] == [ROTATE.id, second_chunk.id, EXPIRY.id]


def test_run_top_k():
    state = new_state("keys", documents=[REFUNDS, SCOPES, ROTATE, EXPIRY])
    passages = PassageAssembler(top_k=2).run(state=state)["passages"]["passages"]
    assert [p.id for p in passages] == [ROTATE.id, EXPIRY.id]
    assert [p.meta["source_id"] for p in passages] == ["S1", "S2"]


def test_run_token_budget_trims_least_relevant():
    words = " ".join(f"word{i}" for i in range(100))  # 100 words = 130 estimated tokens
    docs = [
        make_doc(f"Alpha {words}", score=0.9, doc_id="a", section_id="a"),
        make_doc(f"Beta {words.replace('word', 'term')}", score=0.8, doc_id="b", section_id="b"),
        make_doc(f"Gamma {words.replace('word', 'item')}", score=0.7, doc_id="c", section_id="c"),
    ]
    state = new_state("alpha", documents=docs)
    passages = PassageAssembler(max_context_tokens=300).run(state=state)["passages"]["passages"]
    assert [p.meta["doc_id"] for p in passages] == ["a", "b"]
    all_fit = PassageAssembler(max_context_tokens=400).run(state=state)["passages"]["passages"]
    assert len(all_fit) == 3


def test_run_truncates_a_single_oversized_passage():
    long_text = " ".join(f"Sentence number {i} explains one more detail of key rotation." for i in range(60))
    state = new_state("key rotation", documents=[make_doc(long_text, score=0.9)])
    passages = PassageAssembler(max_context_tokens=100).run(state=state)["passages"]["passages"]
    assert len(passages) == 1
    content = passages[0].content
    assert len(content.split()) * 1.3 <= 100
    assert content.startswith("Sentence number 0 explains")
    assert content.endswith(".")  # cut at a sentence boundary
    assert passages[0].meta["truncated"] is True


def test_run_missing_scores_fall_back_to_dense_score():
    low = make_doc("Refunds take 14 days.", score=None, dense_score=0.2, section_id="r")
    high = make_doc("Keys expire after 90 days.", score=None, dense_score=0.8, section_id="e")
    passages = PassageAssembler().run(state=new_state("q", documents=[low, high]))["passages"]["passages"]
    assert [p.id for p in passages] == [high.id, low.id]


def test_run_fallback_when_no_documents():
    for documents in (None, [], [Document(content="   ")]):
        state = new_state("How do I rotate an API key?")
        if documents is not None:
            state["documents"] = documents
        result = PassageAssembler().run(state=state)
        assert set(result) == {"fallback"}
        out = result["fallback"]
        assert out["answer"] == FALLBACK_MESSAGE
        assert out["status"] == "fallback"
        assert out["passages"] == []
        assert out["path"][-1] == "fallback"
        assert out["fallback_reason"] == "no_documents"


def test_run_fallback_flag_from_quality_gate():
    state = new_state("Something vague", documents=[ROTATE, EXPIRY], fallback=True)
    result = PassageAssembler(fallback_message="No documentation matched.").run(state=state)
    assert set(result) == {"fallback"}
    out = result["fallback"]
    assert out["answer"] == "No documentation matched."
    assert out["status"] == "fallback"
    assert out["passages"] == []
    assert out["chunks_used"] == 0
    assert out["path"] == ["start", "fallback"]
    assert out["fallback_reason"] == "quality_below_floor"


def test_run_fallback_false_assembles():
    state = new_state("rotate", documents=[ROTATE], fallback=False)
    assert "passages" in PassageAssembler().run(state=state)


def test_run_constrained_context_single_passage():
    user_text = Document(content="Our VPN requires the client version 5.2 or later.", meta={"source": "selection"})
    out = PassageAssembler().run(state=new_state("Which VPN version?", mode="constrained-context",
                                                 documents=[user_text]))["passages"]
    assert len(out["passages"]) == 1
    assert out["passages"][0].meta == {"source": "selection", "source_id": "S1"}
    assert out["passages"][0].content == user_text.content


def test_run_unicode():
    doc = make_doc("Les clés API expirent après 90 jours — renouvelez-les à temps. 鍵は90日で失効します。", score=0.5)
    out = PassageAssembler().run(state=new_state("Quand les clés expirent-elles ?", documents=[doc]))["passages"]
    assert out["passages"][0].content == doc.content
    assert out["passages"][0].meta["source_id"] == "S1"


def test_run_compress_keeps_query_relevant_sentences_in_order():
    filler = [
        "The dashboard shows usage graphs for every project.",
        "Invoices are emailed on the first day of the month.",
        "Dark mode can be enabled in the profile menu.",
        "Support is available on weekdays from nine to five.",
        "Team members can be invited by email address.",
        "Webhooks retry failed deliveries three times.",
    ]
    relevant = "To rotate an API key, click Rotate next to the key in Settings."
    text = " ".join(filler[:3] + [relevant] + filler[3:])
    doc = make_doc(text, score=0.9)
    assembler = PassageAssembler(compression={"enabled": True, "min_tokens": 20, "max_sentences": 2, "cache_dir": "off"})
    passage = assembler.run(state=new_state("How do I rotate an API key?", documents=[doc]))["passages"]["passages"][0]
    assert relevant in passage.content
    assert passage.meta["compressed"] is True
    kept = [s for s in filler + [relevant] if s in passage.content]
    assert len(kept) == 2
    # Order of the original text is kept.
    assert sorted(kept, key=text.index) == sorted(kept, key=passage.content.index)
    # Short passages are left alone.
    short = PassageAssembler(compression={"enabled": True, "min_tokens": 500, "cache_dir": "off"})
    untouched = short.run(state=new_state("rotate", documents=[doc]))["passages"]["passages"][0]
    assert untouched.content == text
