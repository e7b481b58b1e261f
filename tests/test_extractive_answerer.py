import re
from copy import deepcopy

import pytest
from haystack import Document

from gatehouse.components.generators.extractive_answerer import DEFAULT_NO_ANSWER_MESSAGE, ExtractiveAnswerer
from gatehouse.components.state import new_state
from gatehouse.components.text import normalize_space, split_sentences, strip_markers


def passage(content: str, source_id: str, **meta) -> Document:
    section_id = meta.pop("section_id", "rotating-a-key")
    return Document(
        content=content,
        meta={
            "kb": "docs",
            "tenant": "public",
            "source": "security/api-keys.md",
            "title": "API keys",
            "section": "Rotating a key",
            "section_id": section_id,
            "url": f"https://docs.example.com/security/api-keys#{section_id}",
            "doc_id": "api-keys",
            "source_id": source_id,
            **meta,
        },
    )


ROTATE = passage(
    "## Rotating a key\n\n"
    "API keys should be rotated every 90 days or immediately when a team member with access leaves.\n\n"
    "To rotate an API key:\n\n"
    "1. Open **Settings** and select **API keys**.\n"
    "2. Click **Rotate** next to the key you want to replace.\n"
    "3. Copy the new key; it is shown only once.\n"
    "4. Update your applications with the new key.\n\n"
    "The old key keeps working for 24 hours so that clients can switch over without downtime.",
    "S1",
)
SCOPES = passage(
    "## Key scopes\n\nEach API key carries scopes that limit what it can do. A read-only key cannot create or "
    "delete resources. Scopes are chosen when the key is created and cannot be changed later; create a new key "
    "instead.",
    "S2",
    section="Key scopes",
    section_id="key-scopes",
)
SSO = passage(
    "## Configuring SAML single sign-on\n\nSingle sign-on lets your team log in with your identity provider. "
    "Administrators configure SAML under Settings, Security. Users who sign in through SSO for the first time are "
    "created automatically with the Member role.",
    "S3",
    source="security/sso.md",
    title="Single sign-on",
    section="Configuring SAML single sign-on",
    section_id="configuring-saml",
    doc_id="sso",
)
PASSAGES = [ROTATE, SCOPES, SSO]


@pytest.fixture(scope="module")
def answerer() -> ExtractiveAnswerer:
    component = ExtractiveAnswerer(cache_dir="off")
    component.warm_up()
    return component


def answer_sentences(answer: str) -> list[tuple[str, list[str]]]:
    """Each answer sentence without its markers, with the source ids it cites."""
    result = []
    for sentence in split_sentences(answer):
        ids = re.findall(r"S\d+", " ".join(re.findall(r"\[[^\]]*\]", sentence)))
        result.append((strip_markers(sentence), ids))
    return result


def assert_verbatim(answer: str, passages: list[Document]) -> None:
    by_id = {p.meta["source_id"]: normalize_space(p.content) for p in passages}
    sentences = answer_sentences(answer)
    assert sentences
    for text, ids in sentences:
        assert ids, f"sentence without a citation marker: {text!r}"
        for source_id in ids:
            assert source_id in by_id
            assert normalize_space(text) in by_id[source_id], f"{text!r} is not in passage {source_id}"


def test_init():
    component = ExtractiveAnswerer()
    assert component.max_sentences == 3
    assert component.max_list_items == 8
    assert component.keep_lists is True
    assert component.order == "passage"
    assert component.no_answer_message == DEFAULT_NO_ANSWER_MESSAGE
    assert component.embedding_weight + component.lexical_weight == pytest.approx(1.0)
    with pytest.raises(ValueError):
        ExtractiveAnswerer(max_sentences=0)
    with pytest.raises(ValueError):
        ExtractiveAnswerer(order="random")
    assert component.style == "sentence"
    assert component.use_answer_candidates is True
    with pytest.raises(ValueError, match="style"):
        ExtractiveAnswerer(style="essay")


def test_to_dict():
    data = ExtractiveAnswerer(max_sentences=2, min_sentence_score=0.5, no_answer_message="Nope.").to_dict()
    assert data["type"] == "gatehouse.components.generators.extractive_answerer.ExtractiveAnswerer"
    params = data["init_parameters"]
    assert params["max_sentences"] == 2
    assert params["min_sentence_score"] == 0.5
    assert params["no_answer_message"] == "Nope."
    assert params["embedding_model"] is None
    assert "_backend" not in params


def test_from_dict():
    original = ExtractiveAnswerer(max_list_items=4, order="score", style="span", cache_dir="off")
    restored = ExtractiveAnswerer.from_dict(original.to_dict())
    assert restored.max_list_items == 4
    assert restored.order == "score"
    assert restored.style == "span"
    assert restored.to_dict() == original.to_dict()


def test_run_procedural_question_returns_the_steps(answerer):
    state = new_state("How do I rotate an API key?", passages=PASSAGES)
    out = answerer.run(state=state)["state"]
    answer = out["answer"]
    assert out["status"] != "fallback"
    assert out["generator"] == "extractive"
    assert out["path"][-1] == "generate_extractive"
    assert "To rotate an API key: [S1]" in answer
    steps = [line for line in answer.splitlines() if re.match(r"\d\. ", line)]
    assert [s[:2] for s in steps] == ["1.", "2.", "3.", "4."]
    assert all(s.endswith("[S1]") for s in steps)
    assert "Click **Rotate** next to the key you want to replace." in answer
    assert "#" not in answer  # heading markers never reach the answer
    assert_verbatim(answer, PASSAGES)


def test_run_answer_sentences_occur_in_passages(answerer):
    for query in (
        "Can I change the scopes of a key?",
        "When does the old key stop working?",
        "What happens to users who sign in with SSO for the first time?",
        "How often should API keys be rotated?",
    ):
        out = answerer.run(state=new_state(query, passages=PASSAGES))["state"]
        assert out["status"] != "fallback", query
        assert_verbatim(out["answer"], PASSAGES)


def test_run_picks_the_relevant_passage(answerer):
    out = answerer.run(state=new_state("Can I change the scopes of a key?", passages=PASSAGES))["state"]
    assert "cannot be changed later" in out["answer"]
    assert "[S2]" in out["answer"]
    assert "[S3]" not in out["answer"]
    assert "1. Open" not in out["answer"]  # the rotation steps are not dragged in

    sso = answerer.run(state=new_state("Who configures SAML single sign-on?", passages=PASSAGES))["state"]
    assert "Administrators configure SAML under Settings, Security. [S3]" in sso["answer"]


def test_run_no_answer_when_nothing_is_relevant(answerer):
    out = answerer.run(state=new_state("What is the capital of France?", passages=PASSAGES))["state"]
    assert out["answer"] == DEFAULT_NO_ANSWER_MESSAGE
    assert out["status"] == "fallback"
    assert "[S" not in out["answer"]
    assert out["generator"] == "extractive"


def test_run_empty_passages_and_empty_query(answerer):
    out = answerer.run(state=new_state("How do I rotate an API key?", passages=[]))["state"]
    assert out["answer"] == DEFAULT_NO_ANSWER_MESSAGE
    assert out["status"] == "fallback"
    empty_query = answerer.run(state=new_state("", passages=PASSAGES))["state"]
    assert empty_query["status"] == "fallback"
    no_key = answerer.run(state=new_state("rotate keys"))["state"]
    assert no_key["status"] == "fallback"


def test_run_custom_no_answer_message_and_strict_threshold():
    strict = ExtractiveAnswerer(min_sentence_score=0.99, no_answer_message="No answer found.", cache_dir="off")
    out = strict.run(state=new_state("How often should keys be rotated?", passages=PASSAGES))["state"]
    assert out["answer"] == "No answer found."
    assert out["status"] == "fallback"


def test_run_max_sentences_and_lists_off():
    single = ExtractiveAnswerer(max_sentences=1, keep_lists=False, cache_dir="off")
    out = single.run(state=new_state("When does the old key stop working?", passages=PASSAGES))["state"]
    assert len(answer_sentences(out["answer"])) == 1
    assert "24 hours" in out["answer"]
    no_lists = single.run(state=new_state("How do I rotate an API key?", passages=PASSAGES))["state"]
    assert "To rotate an API key:" not in no_lists["answer"]  # an introduction alone is never an answer
    assert len(answer_sentences(no_lists["answer"])) == 1


def test_run_max_list_items():
    short = ExtractiveAnswerer(max_list_items=2, cache_dir="off")
    out = short.run(state=new_state("How do I rotate an API key?", passages=PASSAGES))["state"]
    assert "1. Open" in out["answer"] and "2. Click" in out["answer"]
    assert "3. Copy" not in out["answer"]


def test_run_skips_near_duplicate_sentences(answerer):
    mirror = passage(
        "The old key keeps working for 24 hours so that clients can switch over without downtime.",
        "S2",
        source="changelog.md",
        section_id="2024-05",
    )
    passages = [ROTATE, mirror]
    out = answerer.run(state=new_state("How long does the old key keep working?", passages=passages))["state"]
    assert out["answer"].count("The old key keeps working for 24 hours") == 1
    assert_verbatim(out["answer"], passages)


def test_run_constrained_context_user_text(answerer):
    user_text = Document(
        content="Our VPN client must be version 5.2 or later. Older clients are blocked at login. "
        "Download the client from the IT portal.",
        meta={"source_id": "S1", "source": "selection"},
    )
    state = new_state("Which VPN client version do I need?", mode="constrained-context", passages=[user_text])
    out = answerer.run(state=state)["state"]
    assert out["status"] != "fallback"
    assert "Our VPN client must be version 5.2 or later. [S1]" in out["answer"]
    assert_verbatim(out["answer"], [user_text])


def test_run_order_by_score():
    by_score = ExtractiveAnswerer(order="score", cache_dir="off")
    by_passage = ExtractiveAnswerer(order="passage", cache_dir="off")
    query = "Can I change the scopes of a key?"
    scored = by_score.run(state=new_state(query, passages=PASSAGES))["state"]["answer"]
    reading = by_passage.run(state=new_state(query, passages=PASSAGES))["state"]["answer"]
    assert sorted(answer_sentences(scored)) == sorted(answer_sentences(reading))
    texts = [t for t, _ in answer_sentences(reading)]
    assert texts == sorted(texts, key=lambda t: normalize_space(SCOPES.content).find(t))
    assert answer_sentences(scored)[0][0].startswith("Scopes are chosen")


def test_run_unicode(answerer):
    french = passage("Les clés API expirent après 90 jours. Le tableau de bord affiche l’utilisation.", "S1")
    out = answerer.run(state=new_state("Quand les clés API expirent-elles ?", passages=[french]))["state"]
    assert "Les clés API expirent après 90 jours. [S1]" in out["answer"]
    assert_verbatim(out["answer"], [french])


def test_run_does_not_mutate_input_state(answerer):
    state = new_state("How do I rotate an API key?", passages=PASSAGES)
    snapshot = deepcopy(state)
    out = answerer.run(state=state)["state"]
    assert state == snapshot
    assert out is not state
    assert "answer" not in state


def gate_candidate(passage_index: int, text: str, span: str | None = None) -> dict:
    """The answerability gate's best candidate for PASSAGES, as it puts it in the state."""
    from gatehouse.components.text import split_units

    units = split_units(PASSAGES[passage_index].content)
    unit = next(i for i, u in enumerate(units) if normalize_space(strip_markers(u.text)) == text)
    return {"source_id": f"S{passage_index + 1}", "passage": passage_index, "unit": unit, "text": text,
            "score": 0.9, "span": span}


def test_run_the_gates_best_candidate_leads_the_answer(answerer):
    best = gate_candidate(0, "The old key keeps working for 24 hours so that clients can switch over without downtime.")
    state = new_state("How long does the old key keep working?", passages=PASSAGES, answer_candidates=[best])
    answer = answerer.run(state=state)["state"]["answer"]
    assert answer_sentences(answer)[0] == (best["text"], ["S1"])
    assert_verbatim(answer, PASSAGES)


def test_run_style_sentence_with_one_sentence_answers_concisely():
    component = ExtractiveAnswerer(max_sentences=1, cache_dir="off")
    best = gate_candidate(1, "A read-only key cannot create or delete resources.")
    state = new_state("Can a read-only key delete resources?", passages=PASSAGES, answer_candidates=[best])
    assert component.run(state=state)["state"]["answer"] == f"{best['text']} [S2]"


def test_run_style_span_answers_with_the_phrase_and_falls_back_to_the_sentence():
    component = ExtractiveAnswerer(style="span", max_sentences=1, cache_dir="off")
    text = "The old key keeps working for 24 hours so that clients can switch over without downtime."
    with_span = new_state("How long does the old key keep working?", passages=PASSAGES,
                          answer_candidates=[gate_candidate(0, text, span="24 hours")])
    assert component.run(state=with_span)["state"]["answer"] == "24 hours [S1]"
    without = new_state("How long does the old key keep working?", passages=PASSAGES,
                        answer_candidates=[gate_candidate(0, text)])
    assert component.run(state=without)["state"]["answer"] == f"{text} [S1]"


def test_run_style_passage_adds_the_rest_of_the_paragraph():
    component = ExtractiveAnswerer(style="passage", max_sentences=1, cache_dir="off")
    best = gate_candidate(1, "A read-only key cannot create or delete resources.")
    state = new_state("Can a read-only key delete resources?", passages=PASSAGES, answer_candidates=[best])
    answer = component.run(state=state)["state"]["answer"]
    texts = [text for text, _ in answer_sentences(answer)]
    assert texts[0].startswith("Each API key carries scopes")
    assert best["text"] in texts and len(texts) == 3
    assert_verbatim(answer, PASSAGES)


def test_run_ignores_a_candidate_that_does_not_match_the_passage(answerer):
    stale = {"source_id": "S1", "passage": 0, "unit": 1, "text": "Something else entirely.", "score": 0.9}
    state = new_state("How do I rotate an API key?", passages=PASSAGES, answer_candidates=[stale])
    answer = answerer.run(state=state)["state"]["answer"]
    assert "Something else" not in answer
    assert_verbatim(answer, PASSAGES)
