import re
from copy import deepcopy
from typing import Any

import pytest
import yaml
from haystack import Document, component
from haystack.core.serialization import component_from_dict, component_to_dict
from haystack.dataclasses import ChatMessage, StreamingChunk

from gatehouse.components.validators.citation_verifier import CitationVerifier
from gatehouse.components.generators.extractive_answerer import ExtractiveAnswerer
from gatehouse.components.builders.passage_assembler import PassageAssembler
from gatehouse.components.generators.llm_answerer import LLMAnswerer
from gatehouse.components.guardrails.output_guardrails import OutputGuardrails
from gatehouse.components.validators.verified_reply import VerifiedReply
from gatehouse.components.state import new_state
from gatehouse.pipelines import PipelineYAMLError, load_pipeline


def passage(content: str, source_id: str | None, **overrides) -> Document:
    meta = {
        "kb": "docs",
        "tenant": "public",
        "source": "security/api-keys.md",
        "title": "API keys",
        "section": "Rotating a key",
        "section_id": "rotating-a-key",
        "url": "https://docs.example.com/security/api-keys",
        "doc_id": "api-keys",
    }
    meta.update(overrides)
    meta = {k: v for k, v in meta.items() if v is not None}
    if source_id:
        meta["source_id"] = source_id
    return Document(content=content, meta=meta)


ROTATE = passage(
    "## Rotating a key\n\n"
    "API keys should be rotated every 90 days or immediately when a team member with access leaves.\n\n"
    "To rotate an API key:\n\n"
    "1. Open **Settings** and select **API keys**.\n"
    "2. Click **Rotate** next to the key you want to replace.\n\n"
    "The old key keeps working for 24 hours so that clients can switch over without downtime.",
    "S1",
)
REFUNDS = passage(
    "## Refunds\n\nRefunds are issued to the original payment method within 14 days. Annual plans can be refunded "
    "pro rata during the first 30 days.",
    "S2",
    kb="billing",
    source="billing/refunds.md",
    title="Refunds",
    section="Refunds",
    section_id="refunds",
    url="https://docs.example.com/billing/refunds#refunds",
    doc_id="refunds",
)
PASSAGES = [ROTATE, REFUNDS]

VERBATIM_1 = "API keys should be rotated every 90 days or immediately when a team member with access leaves."
VERBATIM_2 = "Refunds are issued to the original payment method within 14 days."
FABRICATED = "You can rotate keys from the mobile app by shaking your phone twice."
UNMARKED = "Rotated keys are also archived in the audit log for compliance reviews."


@pytest.fixture(scope="module")
def verifier() -> CitationVerifier:
    component = CitationVerifier(scoring={"cache_dir": "off"})
    component.warm_up()
    return component


def verify(verifier: CitationVerifier, answer: str, passages=PASSAGES, **fields) -> dict:
    state = new_state("How do I rotate an API key?", passages=passages, answer=answer, status="success", **fields)
    return verifier.run(state=state)["state"]


def test_init():
    component = CitationVerifier()
    assert component.support == {"threshold": 0.55, "min_ratio": 0.5}
    assert component.citations["url_template"] == "kb://{kb}/{source}"
    assert component.skip_statuses is None
    assert component.reading["connective_max_words"] == 6


def test_to_dict():
    data = component_to_dict(
        CitationVerifier(support={"threshold": 0.7, "min_ratio": 0.8}, skip_statuses=["fallback"]), "component"
    )
    assert data["type"] == "gatehouse.components.validators.citation_verifier.CitationVerifier"
    params = data["init_parameters"]
    assert params["support"] == {"threshold": 0.7, "min_ratio": 0.8}
    assert params["skip_statuses"] == ["fallback"]
    assert params["reading"]["citation_pattern"] == CitationVerifier().reading["citation_pattern"]
    assert "_backend" not in params


def test_from_dict():
    original = CitationVerifier(citations={"snippet_chars": 80, "url_template": "https://kb.local/{kb}/{source}"},
                                scoring={"cache_dir": "off"})
    restored = component_from_dict(CitationVerifier, component_to_dict(original, "component"), "component")
    assert restored.citations["snippet_chars"] == 80
    assert restored.citations["url_template"] == "https://kb.local/{kb}/{source}"
    assert component_to_dict(restored, "component") == component_to_dict(original, "component")


def test_init_rejects_bad_settings():
    with pytest.raises(ValueError, match="'contradictions' has no setting 'window'"):
        CitationVerifier(contradictions={"window": 3})
    with pytest.raises(ValueError, match="'scoring' must be a mapping"):
        CitationVerifier(scoring=0.5)
    with pytest.raises(ValueError, match="'support' has no setting 'min_supported_ratio'"):
        CitationVerifier(support={"min_supported_ratio": 0.5})
    with pytest.raises(ValueError, match="pair of word lists"):
        CitationVerifier(contradictions={"antonyms": [[["on"], ["off"], ["standby"]]]})


def test_from_dict_names_the_new_place_of_a_moved_setting(tmp_path):
    data = {"type": "gatehouse.components.validators.citation_verifier.CitationVerifier",
            "init_parameters": {"support_threshold": 0.45, "min_supported_ratio": 0.5, "detect_contradictions": True,
                                "cue_window": 5, "embedding_weight": 0.5, "citation_text_separator": " / "}}
    with pytest.raises(ValueError) as raised:
        component_from_dict(CitationVerifier, data, "verifier")
    for old, new in [("support_threshold", "support.threshold"), ("min_supported_ratio", "support.min_ratio"),
                     ("detect_contradictions", "contradictions.enabled"), ("cue_window", "contradictions.cue_window"),
                     ("embedding_weight", "scoring.embedding_weight"),
                     ("citation_text_separator", "citations.text_separator")]:
        assert f"'{old}' is now '{new}'" in str(raised.value)
    path = tmp_path / "old.yml"
    path.write_text(yaml.safe_dump({"components": {"verifier": data}, "connections": []}))
    with pytest.raises(PipelineYAMLError, match=r"old\.yml: CitationVerifier settings moved.*'cue_window' is now "
                                                r"'contradictions\.cue_window'"):
        load_pipeline(path)


def test_run_removes_invalid_citations(verifier):
    out = verify(verifier, f"{VERBATIM_1} [S1, S9] {VERBATIM_2} [S2][S9] Extra claim about keys here. [S7]")
    assert "[S9]" not in out["answer"] and "S9" not in out["answer"] and "[S7]" not in out["answer"]
    assert f"{VERBATIM_1} [S1]" in out["answer"]
    assert f"{VERBATIM_2} [S2]" in out["answer"]
    actions = out["validation"]["guardrail_actions"]
    assert actions == ["removed_invalid_citation:S9", "removed_invalid_citation:S7",
                       "removed_unsupported_sentence:Extra claim about keys here."]
    assert [c["id"] for c in out["citations"]] == ["S1", "S2"]
    # The sentence that lost its only marker is now an unsupported claim (never connective text, however short),
    # and is removed from the answer.
    assert "Extra claim about keys here." in out["validation"]["unsupported_sentences"]
    assert out["answer"] == f"{VERBATIM_1} [S1] {VERBATIM_2} [S2]"


def test_run_verbatim_sentences_are_supported(verifier):
    out = verify(verifier, f"{VERBATIM_1} [S1]\n\nTo rotate an API key: [S1]\n\n"
                 "1. Open **Settings** and select **API keys**. [S1]\n"
                 "2. Click **Rotate** next to the key you want to replace. [S1]")
    scores = out["support"]["scores"]
    assert len(scores) == 4
    assert all(s["score"] >= 0.99 and s["supported"] for s in scores)
    assert out["support"]["supported"] is True
    assert out["support"]["supported_ratio"] == 1.0
    assert out["citation_coverage"] == 1.0
    assert out["validation"]["unsupported_sentences"] == []
    assert out["path"][-1] == "verify_citations"


def test_run_flags_fabricated_sentence(verifier):
    out = verify(verifier, f"{VERBATIM_1} [S1] {FABRICATED} [S1] The capital of France is Paris. [S2]")
    unsupported = out["validation"]["unsupported_sentences"]
    assert FABRICATED in unsupported
    assert "The capital of France is Paris." in unsupported
    assert VERBATIM_1 not in unsupported
    scores = {s["sentence"]: s["score"] for s in out["support"]["scores"]}
    assert scores[VERBATIM_1] >= 0.99
    assert scores[FABRICATED] < verifier.support["threshold"]
    assert scores["The capital of France is Paris."] < 0.3
    assert out["support"]["supported"] is False  # 1 of 3 claims supported < 0.5
    assert out["support"]["supported_ratio"] == pytest.approx(1 / 3, abs=1e-3)


def test_run_unrelated_passage_citation_fails(verifier):
    out = verify(verifier, f"{VERBATIM_2} [S1]")  # a true sentence, but cited to the wrong passage
    assert out["support"]["scores"][0]["supported"] is False
    assert out["support"]["supported"] is False


def test_run_paraphrase_is_supported_and_wrong_number_is_not(verifier):
    out = verify(verifier, "Rotate API keys every 90 days, or right away when someone with access leaves. [S1] "
                 "The old key keeps working for 48 hours. [S1]")
    scores = out["support"]["scores"]
    assert scores[0]["supported"] is True
    assert scores[1]["supported"] is False  # 48 is not in the cited passage
    assert out["validation"]["unsupported_sentences"] == ["The old key keeps working for 48 hours."]


def test_run_coverage_on_hand_made_answer(verifier):
    answer = (
        f"Here is what I found:\n\n{VERBATIM_1} [S1] {VERBATIM_2} [S2] {FABRICATED} [S1] {UNMARKED}"
    )
    out = verify(verifier, answer)
    # 5 sentences: 1 connective, 2 supported, 1 fabricated, 1 unmarked claim.
    assert len(out["support"]["scores"]) == 5
    assert out["citation_coverage"] == pytest.approx(2 / 5)
    assert out["support"]["supported_ratio"] == pytest.approx(0.5)
    assert out["support"]["supported"] is True  # 0.5 >= support.min_ratio
    assert out["validation"]["unsupported_sentences"] == [FABRICATED, UNMARKED]
    connective = [s for s in out["support"]["scores"] if s["connective"]]
    assert [s["sentence"] for s in connective] == ["Here is what I found:"]

    stricter = CitationVerifier(support={"min_ratio": 0.75}, scoring={"cache_dir": "off"})
    assert verify(stricter, answer)["support"]["supported"] is False


def test_run_citations_urls_name_the_section(verifier):
    out = verify(verifier, f"{VERBATIM_2} [S2] {VERBATIM_1} [S1]")
    citations = out["citations"]
    assert [c["id"] for c in citations] == ["S2", "S1"]  # order of first use
    refunds, rotate = citations
    assert refunds["url"] == "https://docs.example.com/billing/refunds#refunds"  # already anchored, kept
    assert rotate["url"] == "https://docs.example.com/security/api-keys#rotating-a-key"  # anchor appended
    assert rotate["text"] == "API keys › Rotating a key" and rotate["section"] == "Rotating a key"
    assert refunds["text"] == "Refunds"  # section equal to title is not repeated
    assert rotate["chunk_id"] == ROTATE.id
    assert rotate["source"] == "security/api-keys.md"
    assert rotate["kb"] == "docs"
    assert rotate["confidence"] == pytest.approx(1.0, abs=0.01)
    assert rotate["snippet"].startswith("API keys should be rotated")
    assert len(rotate["snippet"]) <= 201
    assert "#" not in rotate["snippet"]
    # the quote is the unit each citing sentence stands on, whole; not the rest of the passage
    assert rotate["quote"] == VERBATIM_1 and refunds["quote"] == VERBATIM_2


def test_run_document_level_url_without_section(verifier):
    whole_doc = passage(
        "The status page lists incidents of the last 90 days.",
        "S1",
        section=None,
        section_id=None,
        title="Status page",
        source="ops/status.md",
        url="https://docs.example.com/ops/status",
    )
    out = verify(verifier, "The status page lists incidents of the last 90 days. [S1]", passages=[whole_doc])
    citation = out["citations"][0]
    assert citation["url"] == "https://docs.example.com/ops/status"
    assert citation["text"] == "Status page" and citation["section"] is None


def test_run_kb_url_fallback(verifier):
    no_url = passage("The status page lists incidents of the last 90 days.", "S1", url=None,
                     source="ops/status.md", section_id="incidents", title=None, section=None)
    out = verify(verifier, "The status page lists incidents of the last 90 days. [S1]", passages=[no_url])
    citation = out["citations"][0]
    assert citation["url"] == "kb://docs/ops/status.md#incidents"
    assert citation["text"] == "ops/status.md"  # no title: the source name

    user_text = Document(content="Our VPN client must be version 5.2 or later.",
                         meta={"source_id": "S1", "source": "selection"})
    out = verify(verifier, "Our VPN client must be version 5.2 or later. [S1]", passages=[user_text],
                 mode="constrained-context")
    citation = out["citations"][0]
    assert citation["url"] == "kb://context/selection"
    assert citation["kb"] is None
    assert out["support"]["supported"] is True


def test_run_citations_carry_safe_urls_and_plain_text(verifier):
    hostile = passage(
        "Refunds are issued within 14 days. <img src=x onerror=alert(1)> [more](javascript:alert(2))",
        "S1",
        url="javascript:alert(document.cookie)",
        title="Refunds <script>alert(3)</script>",
        section="&lt;b onmouseover=alert(4)&gt;Policy\x1b[2J",
        source="refunds\u202e.md",
        section_id="policy",
    )
    out = verify(verifier, "Refunds are issued within 14 days. [S1]", passages=[hostile])
    citation = out["citations"][0]
    assert citation["url"] == "kb://docs/refunds.md#policy"  # the unsafe page URL is replaced by the KB link
    assert "dropped_unsafe_url:S1" in out["validation"]["guardrail_actions"]
    for field in ("text", "section", "snippet", "quote", "source"):
        assert not any(mark in citation[field] for mark in ("<", "javascript", "\x1b", "\u202e")), citation[field]
    assert citation["text"] == "Refunds › Policy" and citation["section"] == "Policy"
    assert citation["quote"] == "Refunds are issued within 14 days."
    assert citation["snippet"].startswith("Refunds are issued within 14 days. more")
    for url in ("https://docs.example.com/a", "/relative/page", "kb://docs/a.md"):
        out = verify(verifier, "Refunds are issued within 14 days. [S1]", passages=[passage(
            "Refunds are issued within 14 days.", "S1", url=url, section_id=None)])
        assert out["citations"][0]["url"] == url
        assert not any(a.startswith("dropped_unsafe_url") for a in out["validation"]["guardrail_actions"])


def test_run_no_passages_passes_through(verifier):
    state = new_state("Hello!", answer="Hello! I can answer questions about the docs.", status="success",
                      route="direct")
    out = verifier.run(state=state)["state"]
    assert out["path"] == state["path"] + ["verify_citations"]
    assert {k: v for k, v in out.items() if k not in ("path", "latency_ms")} == {
        k: v for k, v in state.items() if k not in ("path", "latency_ms")
    }
    assert "citations" not in out and "support" not in out


def test_run_markers_without_passages_are_removed(verifier):
    state = new_state("Hi", answer="Paris is the capital of France. [S1] It is large [S2, S3].", passages=[])
    out = verifier.run(state=state)["state"]
    assert out["answer"] == "Paris is the capital of France. It is large."
    assert out["validation"]["guardrail_actions"] == [
        "removed_invalid_citation:S1",
        "removed_invalid_citation:S2",
        "removed_invalid_citation:S3",
    ]


def test_run_skips_fallback_status(verifier):
    state = new_state("q", passages=PASSAGES, answer="I couldn't find an answer.", status="fallback")
    out = verifier.run(state=state)["state"]
    assert out["answer"] == state["answer"]
    assert "support" not in out
    assert out["path"][-1] == "verify_citations"


def test_run_empty_answer_with_passages(verifier):
    out = verify(verifier, "")
    assert out["citation_coverage"] == 0.0
    assert out["support"]["supported"] is False
    assert out["citations"] == []


def test_run_does_not_mutate_input_state(verifier):
    state = new_state("q", passages=PASSAGES, answer=f"{VERBATIM_1} [S1] {FABRICATED} [S9]", status="success")
    snapshot = deepcopy(state)
    out = verifier.run(state=state)["state"]
    assert state == snapshot
    assert out["validation"] is not state["validation"]
    assert state["validation"]["guardrail_actions"] == []


def test_run_unicode(verifier):
    french = passage(
        "Les clés API expirent après 90 jours — renouvelez-les à temps.",
        "S1",
        section="Expiration",
        section_id="expiration",
    )
    out = verify(verifier, "Les clés API expirent après 90 jours — renouvelez-les à temps. [S1]", passages=[french])
    assert out["support"]["scores"][0]["score"] >= 0.99
    assert out["citations"][0]["url"].endswith("#expiration")
    assert out["citations"][0]["text"] == "API keys › Expiration"


def test_run_a_code_block_is_cited_by_the_marker_on_the_line_after_it(verifier):
    backup = Document(content="To back up the gateway, run:\n\n```shell\ngateway backup --to /var/backups\n```",
                      meta={"source_id": "S1"})
    answer = "To back up the gateway, run: [S1]\n\n```shell\ngateway backup --to /var/backups\n```\n\n[S1]"
    out = verify(verifier, answer, passages=[backup])
    assert out["answer"] == answer  # the block is kept whole, its marker once, on its own line
    assert out["support"]["supported_ratio"] == 1.0 and out["citation_coverage"] == 1.0


def test_run_after_assembler_and_extractive_answerer(verifier):
    documents = [
        Document(content=d.content, score=score, meta={k: v for k, v in d.meta.items() if k != "source_id"})
        for d, score in ((REFUNDS, 0.2), (ROTATE, 0.9))
    ]
    state = new_state("How do I rotate an API key?", documents=documents)
    state = PassageAssembler().run(state=state)["passages"]
    state = ExtractiveAnswerer().run(state=state)["state"]
    out = verifier.run(state=state)["state"]
    assert out["support"]["supported"] is True
    assert out["citation_coverage"] == 1.0
    assert out["citations"][0]["id"] == "S1"
    assert out["citations"][0]["url"] == "https://docs.example.com/security/api-keys#rotating-a-key"
    assert out["path"][-3:] == ["assemble_context", "generate_extractive", "verify_citations"]


def test_run_the_quote_shows_code_as_the_answer_does(verifier):
    revoke = passage("Open the menu and choose Revoke, or run `corvio keys revoke <key-id>`. Revoking is permanent.",
                     "S1")
    answer = "Open the menu and choose Revoke, or run `corvio keys revoke <key-id>`. [S1]"
    out = verify(verifier, answer, passages=[revoke])
    assert out["answer"] == answer
    assert out["citations"][0]["quote"] == "Open the menu and choose Revoke, or run `corvio keys revoke <key-id>`."


def test_run_a_quote_of_its_passage_is_supported_without_being_embedded(tmp_path):
    """What the extractive answerer writes (sentences, items, code, a heading as a lead) quotes its passage word for
    word: such a claim scores 1.0 and nothing is encoded; a paraphrase is embedded and scored as before."""
    from gatehouse.components.embedders.embedding import EmbeddingBackend

    verifier = CitationVerifier(scoring={"cache_dir": str(tmp_path / "cache")})
    verifier.warm_up()
    backend = EmbeddingBackend.get(cache_dir=tmp_path / "cache")
    settings = passage("## Settings\n\n#### PORT\n\n- Default: `7700`\n\nThe port is read at start-up.", "S1",
                       section="Settings", heading_path=["Settings", "PORT"])
    quoted = "PORT: [S1]\n\n- Default: `7700` [S1]\n\nThe port is read at start-up. [S1]"
    before = backend.encoded_count
    out = verify(verifier, quoted, passages=[settings])
    assert out["answer"] == quoted and out["support"]["supported_ratio"] == 1.0
    assert [s["score"] for s in out["support"]["scores"]] == [1.0, 1.0, 1.0]
    assert backend.encoded_count == before
    out = verify(verifier, "The server reads its port when it starts. [S1]", passages=[settings])
    assert backend.encoded_count > before and out["support"]["scores"][0]["score"] < 1.0
    # A part of a word is no quote: "expire" is not quoted by "expires".
    assert verify(verifier, "Keys expire [S1]", passages=[passage("Keys expires monthly.", "S1")])["support"][
        "scores"][0]["score"] < 1.0


def test_run_an_excerpt_of_its_passage_is_a_quote_each_piece_between_cuts_quoted(tmp_path):
    """The extractive answerer's excerpt of a wide record or long notes ("…" where it cut) quotes its passage piece by
    piece: supported as a quote; a piece the passage does not hold, or of one word, makes it no quote."""
    verifier = CitationVerifier(scoring={"cache_dir": str(tmp_path / "cache")})
    row = passage("- hospital_name: West Mercy; version: 3.0.0; " + "; ".join(f"note {n}: text {n}" for n in range(30))
                  + "; attester_name: Leigh Attester; attester_title: CFO", "S1")
    excerpt = "- hospital_name: West Mercy; …; attester_name: Leigh Attester; … [S1]"
    out = verify(verifier, excerpt, passages=[row])
    assert out["answer"] == excerpt and out["support"]["scores"][0]["score"] == 1.0
    for not_quoted in ("- hospital_name: West Mercy; …; attester_name: Ann Other; … [S1]",
                       "- hospital_name: West Mercy; …; CFO [S1]"):
        assert verify(verifier, not_quoted, passages=[row])["support"]["scores"][0]["score"] < 1.0


EXPIRY = passage(
    "## Expiry\n\nAPI keys expire after 90 days. Audit logs are always enabled on the Business plan. "
    "Single sign-on is included in the Enterprise plan. Usage rises when a key is rotated.",
    "S3",
    section="Expiry",
    section_id="expiry",
)


def test_init_contradiction_parameters():
    component = CitationVerifier()
    assert component.contradictions["enabled"] is True
    assert component.remove_unsupported is True
    assert component.contradictions["negation_cues"] is None and component.contradictions["antonyms"] is None
    assert component.contradictions["alignment_top_k"] == 1 and component.contradictions["cue_window"] == 5
    assert component.fallback_message


def test_to_dict_from_dict_contradiction_parameters():
    original = CitationVerifier(contradictions={"negation_cues": ["not", "never"], "antonyms": [[["on"], ["off"]]],
                                                "cue_window": 3, "alignment_top_k": 2},
                                remove_unsupported=False, fallback_message="Nothing found.")
    params = component_to_dict(original, "component")["init_parameters"]
    assert params["contradictions"]["negation_cues"] == ["not", "never"]
    assert params["contradictions"]["antonyms"] == [[["on"], ["off"]]]
    assert params["remove_unsupported"] is False and params["fallback_message"] == "Nothing found."
    restored = component_from_dict(CitationVerifier, component_to_dict(original, "component"), "component")
    assert component_to_dict(restored, "component") == component_to_dict(original, "component")


def cues_of(out: dict) -> list[list[str]]:
    return [s["cues"] for s in out["support"]["scores"]]


def test_run_negation_is_contradiction(verifier):
    out = verify(verifier, "API keys do not expire after 90 days. [S3]", passages=[EXPIRY])
    score = out["support"]["scores"][0]
    assert score["score"] > 0.9  # as similar as a paraphrase ...
    assert score["contradicted"] and score["cues"] == ["negation:not"]  # ... but contradicted
    assert score["supported"] is False
    contracted = verify(verifier, "API keys don't expire after 90 days. [S3]", passages=[EXPIRY])
    assert cues_of(contracted) == [["negation:n't"]]
    # A negation that bears on nothing the evidence says is not a flip.
    out = verify(verifier, "API keys expire after 90 days, not counting paused periods. [S3]", passages=[EXPIRY])
    assert cues_of(out) == [[]]


def test_run_number_mismatch_is_contradiction(verifier):
    out = verify(verifier, "The old key keeps working for 48 hours. [S1]")
    assert cues_of(out) == [["number:48 hour"]]
    assert out["support"]["scores"][0]["supported"] is False
    assert cues_of(verify(verifier, "The old key keeps working for 24 hours. [S1]")) == [[]]


def test_run_antonym_is_contradiction(verifier):
    out = verify(verifier, "Single sign-on is excluded from the Enterprise plan. [S3]", passages=[EXPIRY])
    assert cues_of(out) == [["antonym:excluded/included"]]
    never = verify(verifier, "Audit logs are never enabled on the Business plan. [S3]", passages=[EXPIRY])
    assert cues_of(never) == [["negation:never"]]  # "never" counts once, as a negation of "always"
    assert cues_of(verify(verifier, "Usage drops when a key is rotated. [S3]", passages=[EXPIRY]))[0]
    # Two flips cancel: "does not decrease" agrees with "rises".
    assert cues_of(verify(verifier, "Usage does not decrease when a key is rotated. [S3]", passages=[EXPIRY])) == [[]]


def test_run_custom_cue_lists():
    component = CitationVerifier(scoring={"cache_dir": "off"},
                                 contradictions={"negation_cues": ["hardly"], "antonyms": [[["on"], ["off"]]]})
    evidence = passage("Backups are on by default for every workspace.", "S1")
    assert cues_of(verify(component, "Backups are off by default for every workspace. [S1]", passages=[evidence]))[0]
    assert cues_of(verify(component, "Backups are hardly on by default for every workspace. [S1]",
                          passages=[evidence])) == [["negation:hardly"]]
    assert cues_of(verify(component, "Backups are not on by default for every workspace. [S1]",
                          passages=[evidence])) == [[]]  # "not" is no longer a cue
    off = CitationVerifier(scoring={"cache_dir": "off"}, contradictions={"enabled": False})
    assert verify(off, "API keys do not expire after 90 days. [S3]", passages=[EXPIRY])["support"]["supported"]


def test_run_contradicted_sentence_removed_with_its_citation(verifier):
    answer = f"{VERBATIM_2} [S2] API keys never expire. [S3, S2]\n\n{VERBATIM_1} [S1]"
    out = verify(verifier, answer, passages=PASSAGES + [EXPIRY])
    assert out["answer"] == f"{VERBATIM_2} [S2]\n\n{VERBATIM_1} [S1]"
    assert out["status"] == "partial"
    assert [c["id"] for c in out["citations"]] == ["S2", "S1"]  # S3 is gone, S2 is still used
    assert out["validation"]["unsupported_sentences"] == ["API keys never expire."]
    assert out["validation"]["guardrail_actions"] == ["removed_contradicted_sentence:API keys never expire."]
    assert out["support"]["supported_ratio"] == pytest.approx(2 / 3, abs=1e-3)


def test_run_unsupported_list_item_removed(verifier):
    answer = f"To rotate an API key: [S1]\n\n1. Open **Settings** and select **API keys**. [S1]\n2. {FABRICATED} [S2]"
    out = verify(verifier, answer)
    assert out["answer"] == "To rotate an API key: [S1]\n\n1. Open **Settings** and select **API keys**. [S1]"
    assert [c["id"] for c in out["citations"]] == ["S1"]
    assert out["validation"]["guardrail_actions"] == [f"removed_unsupported_sentence:2. {FABRICATED}"]
    assert out["status"] == "partial"


def test_run_all_removed_becomes_fallback(verifier):
    out = verify(verifier, f"API keys do not expire. [S3] {FABRICATED} [S1]", passages=PASSAGES + [EXPIRY])
    assert out["status"] == "fallback"
    assert out["answer"] == verifier.fallback_message
    assert out["citations"] == []
    assert out["validation"]["unsupported_sentences"] == ["API keys do not expire.", FABRICATED]
    assert out["validation"]["guardrail_actions"] == [
        "removed_contradicted_sentence:API keys do not expire.",
        f"removed_unsupported_sentence:{FABRICATED}",
        "fallback:no_supported_sentence",
    ]
    custom = CitationVerifier(scoring={"cache_dir": "off"}, fallback_message="No supported answer.")
    assert verify(custom, f"{FABRICATED} [S1]")["answer"] == "No supported answer."


def test_run_keep_unsupported_when_configured():
    component = CitationVerifier(scoring={"cache_dir": "off"}, remove_unsupported=False)
    out = verify(component, f"{VERBATIM_1} [S1] API keys do not expire after 90 days. [S3]",
                 passages=PASSAGES + [EXPIRY])
    assert "API keys do not expire after 90 days. [S3]" in out["answer"]
    assert out["status"] == "success"
    assert [c["id"] for c in out["citations"]] == ["S1", "S3"]
    assert out["validation"]["unsupported_sentences"] == ["API keys do not expire after 90 days."]
    assert out["validation"]["guardrail_actions"] == []


def test_run_supported_paraphrase_kept(verifier):
    answer = "Rotate API keys every 90 days, or right away when someone with access leaves. [S1]"
    out = verify(verifier, answer)
    assert out["answer"] == answer
    assert out["status"] == "success"
    assert out["support"]["scores"][0]["supported"] and not out["support"]["scores"][0]["contradicted"]
    assert [c["id"] for c in out["citations"]] == ["S1"]


def test_init_reattribute_is_off_by_default():
    assert CitationVerifier().reattribute is False
    assert component_to_dict(CitationVerifier(reattribute=True), "component")["init_parameters"]["reattribute"] is True
    restored = component_from_dict(CitationVerifier, component_to_dict(CitationVerifier(reattribute=True, scoring={"reattribute_threshold": 0.8}), "component"), "component")
    assert (restored.reattribute, restored.scoring["reattribute_threshold"]) == (True, 0.8)


def test_run_wrong_citation_is_removed_without_reattribution(verifier):
    out = verify(verifier, f"{VERBATIM_1} [S1] {VERBATIM_2} [S1]")
    assert out["answer"] == f"{VERBATIM_1} [S1]"
    assert out["status"] == "partial"


def test_run_reattributes_a_sentence_to_the_passage_that_says_it():
    component = CitationVerifier(scoring={"cache_dir": "off"}, reattribute=True)
    out = verify(component, f"{VERBATIM_1} [S1] {VERBATIM_2} [S1]")
    assert out["answer"] == f"{VERBATIM_1} [S1] {VERBATIM_2} [S2]"
    assert out["status"] == "success"
    assert [c["id"] for c in out["citations"]] == ["S1", "S2"]
    assert out["validation"]["guardrail_actions"] == [f"reattributed_citation:S1->S2:{VERBATIM_2}"]
    assert out["validation"]["unsupported_sentences"] == []
    assert out["support"]["supported_ratio"] == 1.0
    assert [s.get("reattributed_from") for s in out["support"]["scores"]] == [None, ["S1"]]


def test_run_reattributes_an_unmarked_claim_and_list_item():
    component = CitationVerifier(scoring={"cache_dir": "off"}, reattribute=True)
    step = "Click **Rotate** next to the key you want to replace."
    answer = f"To rotate an API key:\n\n1. {step}\n2. {VERBATIM_2}"
    out = verify(component, answer)
    assert out["answer"] == f"To rotate an API key:\n\n1. {step} [S1]\n2. {VERBATIM_2} [S2]"
    assert out["validation"]["guardrail_actions"] == [
        f"reattributed_citation:none->S1:1. {step}",
        f"reattributed_citation:none->S2:2. {VERBATIM_2}",
    ]


def test_run_never_reattributes_an_invented_or_negated_claim():
    # "never expire" negates its passage S3 and scores 0.59 against S1, the invented sentence 0.46 against S1: both are
    # above support.threshold there, below reattribute_threshold, so neither moves to S1
    component = CitationVerifier(scoring={"cache_dir": "off"}, reattribute=True)
    out = verify(component, f"{VERBATIM_1} [S1] API keys never expire. [S3] {FABRICATED} [S2]",
                 passages=PASSAGES + [EXPIRY])
    assert out["answer"] == f"{VERBATIM_1} [S1]"
    assert out["validation"]["guardrail_actions"] == ["removed_contradicted_sentence:API keys never expire.",
                                                     f"removed_unsupported_sentence:{FABRICATED}"]
    assert verify(component, f"{VERBATIM_1} [S1] {FABRICATED}")["answer"] == f"{VERBATIM_1} [S1]"


def test_run_a_negation_the_question_makes_is_no_contradiction():
    passage = Document(content="- `max_connections`, maximum number of allowable connections. (Default 100)",
                       meta={"source_id": "S1", "title": "Limits"})
    claim = "If you don't pass any limits to the client, the pool allows at most 100 connections. [S1]"
    asked = new_state("If I don't pass any limits, what's the maximum number of connections?", passages=[passage],
                      answer=claim)
    kept = CitationVerifier(support={"threshold": 0.45}).run(state=asked)["state"]  # answer.yml's threshold
    assert kept["answer"] == claim and not kept["validation"]["unsupported_sentences"]
    plain = new_state("What's the maximum number of connections?", passages=[passage],
                      answer="The pool does not allow 100 connections. [S1]")
    assert CitationVerifier().run(state=plain)["state"]["validation"]["unsupported_sentences"]


def test_run_a_code_name_the_passage_never_writes_is_unsupported():
    passage = Document(content="Catch `TimeoutException` to handle connect, read, write and pool timeouts.",
                       meta={"source_id": "S1", "title": "Timeouts"})
    wrong = new_state("Which exception covers all timeouts?", passages=[passage],
                      answer="Catch `TimeoutError` to handle every timeout. [S1]")
    verifier = CitationVerifier(support={"threshold": 0.45})
    assert verifier.run(state=wrong)["state"]["validation"]["unsupported_sentences"]
    right = new_state("Which exception covers all timeouts?", passages=[passage],
                      answer="Catch `TimeoutException` to handle every timeout. [S1]")
    assert not verifier.run(state=right)["state"]["validation"]["unsupported_sentences"]


def test_run_a_verbatim_sentence_repeating_the_questions_negation_is_supported():
    passage = Document(content="To raise the level without a restart, run `ctl level set debug`.",
                       meta={"source_id": "S1", "title": "Logging"})
    state = new_state("How do I raise the level without a restart?", passages=[passage],
                      answer="To raise the level without a restart, run `ctl level set debug`. [S1]")
    verifier = CitationVerifier(support={"threshold": 0.45})
    assert not verifier.run(state=state)["state"]["validation"]["unsupported_sentences"]


# --- a streamed reply, verified while it is written ---------------------------------------------------------------

@component
class StreamedReply:
    """A chat generator that streams one reply word by word, recording each word's turn among everything sent."""

    def __init__(self, text: str, events: list[str]) -> None:
        self.text = text
        self.events = events

    @component.output_types(replies=list[ChatMessage])
    def run(self, messages: list[ChatMessage], streaming_callback: Any = None) -> dict[str, Any]:
        for word in re.findall(r"\s*\S+", self.text):
            self.events.append(f"model:{word.strip()}")
            if streaming_callback is not None:
                streaming_callback(StreamingChunk(content=word))
        self.events.append("model:end")
        return {"replies": [ChatMessage.from_assistant(self.text)]}


def test_run_a_streamed_reply_releases_verified_sentences_while_the_model_writes(verifier):
    text = f"{VERBATIM_1} [S1] {FABRICATED} [S1] {VERBATIM_2} [S2]"
    events: list[str] = []
    answerer = LLMAnswerer(chat_generator=StreamedReply(text, events), fallback_to_extractive=False)
    state = new_state("How often should keys be rotated?", passages=PASSAGES)
    chunks: list[StreamingChunk] = []

    def received(chunk: StreamingChunk) -> None:
        chunks.append(chunk)
        events.append("sent" if chunk.content else "finish")

    streamed = answerer.run(state=state, streaming_callback=received)["state"]
    verified = verifier.run(state=streamed)["state"]
    assert isinstance(verified["reply"], VerifiedReply) and events == []  # nothing asked until the guard follows it
    final = OutputGuardrails().run(state=[verified], streaming_callback=received)["state"]
    whole = verifier.run(state=answerer.run(state=state)["state"])["state"]
    assert final["answer"] == OutputGuardrails().run(state=[whole])["state"]["answer"]  # the same answer either way
    assert "".join(c.content for c in chunks) == final["answer"]
    assert FABRICATED not in final["answer"] and chunks[-1].meta["sentences_dropped"] == 1
    assert events.index("sent") < events.index("model:end")  # the first sentence went out while the model wrote
    assert chunks[0].meta["citations"][0]["id"] == "S1" and "reply" not in final
