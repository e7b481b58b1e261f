import logging
import re
from copy import deepcopy

import pytest
import yaml
from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict

from gatehouse.components.answer_units import answer_units
from gatehouse.components.citation_markers import strip_markers
from gatehouse.components.generators.extractive_answerer import DEFAULT_NO_ANSWER_MESSAGE, ExtractiveAnswerer
from gatehouse.components.state import new_state
from gatehouse.components.text_units import normalize_space, split_sentences
from gatehouse.pipelines import load_pipeline


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
    component = ExtractiveAnswerer()
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


SETTINGS = passage(
    "Settings are read when the server starts.\n\n#### LISTEN_PORT\n\n- Default: `7700`\n- Description: Port the "
    "server listens on.\n\n#### LOG_LEVEL\n\n- Default: `info`\n- Description: Lowest level that is logged.",
    "S1", section="Settings", section_id="settings",
)
RELEASES = passage(
    "Each release is supported for a year.\n\n- Release: 2.1; Date: 2024-05-01; End of support: 2025-05-01\n"
    "- Release: 3.0; Date: 2025-02-10; End of support: 2026-02-10",
    "S2", section="Releases", section_id="releases",
)
CODE = passage(
    "You can pass a timeout to a single call:\n\n```python\nclient.get(url, timeout=3)\n```\n\nTimeouts are in seconds.",
    "S3",
    section="Timeouts",
    section_id="timeouts",
)


def test_init():
    component = ExtractiveAnswerer()
    assert component.style == "unit"
    assert component.layout == {"max_words": 80, "max_list_items": 8}
    assert component.no_answer_message == DEFAULT_NO_ANSWER_MESSAGE
    with pytest.raises(ValueError, match="style"):
        ExtractiveAnswerer(style="sentence")
    with pytest.raises(ValueError, match="max_words"):
        ExtractiveAnswerer(layout={"max_words": 0})
    with pytest.raises(ValueError, match=r"'layout' has no setting 'style'"):
        ExtractiveAnswerer(layout={"style": "span"})


def test_to_dict():
    data = component_to_dict(ExtractiveAnswerer(style="span", layout={"max_list_items": 4}), "component")
    assert data["type"] == "gatehouse.components.generators.extractive_answerer.ExtractiveAnswerer"
    assert data["init_parameters"] == {"layout": {"max_words": 80, "max_list_items": 4}, "style": "span",
                                       "no_answer_message": DEFAULT_NO_ANSWER_MESSAGE}


def test_from_dict():
    data = component_to_dict(ExtractiveAnswerer(layout={"max_words": 40}), "component")
    restored = component_from_dict(ExtractiveAnswerer, data, "component")
    assert restored.layout == {"max_words": 40, "max_list_items": 8}


def test_from_dict_names_a_moved_setting_and_leaves_out_a_retired_one(tmp_path, caplog):
    data = component_to_dict(ExtractiveAnswerer(), "component")
    data["init_parameters"] = {"max_list_items": 4}
    with pytest.raises(ValueError, match=r"'max_list_items' is now 'layout\.max_list_items'"):
        component_from_dict(ExtractiveAnswerer, data, "component")
    # The settings of the answerer that showed several units: a YAML setting them still loads, with a warning each.
    path = tmp_path / "old.yml"
    path.write_text(yaml.safe_dump({"components": {"generator": {
        "type": "gatehouse.components.generators.extractive_answerer.ExtractiveAnswerer",
        "init_parameters": {"style": "unit", "max_units": 2, "min_relative_score": 0.7,
                            "own_ranking": {"cache_dir": "off"}}}}, "connections": []}))
    with caplog.at_level(logging.WARNING):
        loaded = load_pipeline(path).get_component("generator")
    assert loaded.style == "unit"
    retired = sorted(re.search(r"'(\w+)'", r.getMessage()).group(1) for r in caplog.records
                     if "no longer takes" in r.getMessage())
    assert retired == ["max_units", "min_relative_score", "own_ranking"]


def test_run_procedural_question_returns_the_steps(answerer):
    answer = answerer.run(state=new_state("How do I rotate an API key?", passages=PASSAGES))["state"]["answer"]
    assert answer.startswith("To rotate an API key: [S1]")
    assert "1. Open **Settings** and select **API keys**. [S1]" in answer
    assert "4. Update your applications with the new key. [S1]" in answer
    assert_verbatim(answer, PASSAGES)


def test_run_picks_the_relevant_passage(answerer):
    answer = answerer.run(state=new_state("How do users log in with the identity provider?", passages=PASSAGES))
    assert "[S3]" in answer["state"]["answer"] and "[S1]" not in answer["state"]["answer"]


def test_run_key_value_block_with_its_heading(answerer):
    state = new_state("What port does the server listen on by default?", passages=[SETTINGS])
    answer = answerer.run(state=state)["state"]["answer"]
    assert answer.startswith("LISTEN_PORT: [S1]") and "- Default: `7700` [S1]" in answer


def test_run_table_row_keeps_its_headers(answerer):
    state = new_state("When does support for release 3.0 end?", passages=[RELEASES])
    answer = answerer.run(state=state)["state"]["answer"]
    assert "Release: 3.0; Date: 2025-02-10; End of support: 2026-02-10 [S2]" in answer


def test_run_a_table_where_one_row_matches_quotes_that_row_only(answerer):
    rows = "\n".join(f"- Employee ID: E{1000 + n}; Name: {name}; Department: {team}; Office: Floor {n % 5 + 1}"
                     for n, (name, team) in enumerate([("Ines Brennan", "Research"), ("Jonas Ivanova", "Facilities"),
                                                       ("Keiko Petrov", "Legal"), ("Lars Novak", "Sales"),
                                                       ("Maelle Quinn", "Finance")]))
    sheet = passage(f"Staff directory:\n\n{rows}", "S1", source="staff.csv", title="staff", section=None)
    state = new_state("Which department is Keiko Petrov in?", passages=[sheet])
    answer = answerer.run(state=state)["state"]["answer"]
    assert answer == ("Staff directory: [S1]\n\n"
                      "- Employee ID: E1002; Name: Keiko Petrov; Department: Legal; Office: Floor 3 [S1]")


def test_run_items_shown_together_show_their_lead_once(answerer):
    slide = passage("- conda create --name demo_env python=3.7\n- --name demo_env the name of the environment\n"
                    "- python=3.7 the version of python in it", "S1", section="Create a virtual environment with conda",
                    heading_path=["Create a virtual environment with conda"])
    answer = answerer.run(state=new_state("Which command creates a virtual environment?", passages=[slide]))
    assert answer["state"]["answer"] == (
        "Create a virtual environment with conda: [S1]\n\n- conda create --name demo_env python=3.7 [S1]\n"
        "- --name demo_env the name of the environment [S1]\n- python=3.7 the version of python in it [S1]")


def test_run_code_block_with_its_lead_in_and_what_follows(answerer):
    state = new_state("Show me code that passes a timeout to a single call", passages=[CODE])
    answer = answerer.run(state=state)["state"]["answer"]
    assert answer == ("Timeouts: [S3]\n\nYou can pass a timeout to a single call: [S3]\n\n```python\n"
                      "client.get(url, timeout=3)\n```\n\n[S3]\n\nTimeouts are in seconds. [S3]")


def test_run_the_key_unit_first_then_what_completes_it_within_the_bound(answerer):
    # Under its section's heading, the sentence naming the value comes first, then the one that gives it; the bound
    # keeps the rest out.
    limits = passage("Requests are limited per key. The limit is set under Settings.\n\nThe default limit is 600 "
                     "requests per minute. Bursts above it are queued for up to 10 seconds. Queued requests past that "
                     "fail with HTTP 429 and a retry-after header.", "S1", section="Limits")
    units = answer_units([limits])
    named = next(u for u in units if u.text.startswith("The limit is set"))
    candidates = [{"passage": 0, "first": named.first, "last": named.last, "kind": "sentence"}]
    answer = ExtractiveAnswerer(layout={"max_words": 20}).answer("Where is the limit set?", [limits], candidates)
    assert answer == ("Limits: [S1]\n\nThe limit is set under Settings. [S1]\n\nThe default limit is 600 requests per "
                      "minute. [S1]")
    assert "Requests are limited" not in answer  # the key unit first: nothing before it


def test_run_a_section_candidate_answers_with_the_section_under_its_heading(answerer):
    candidates = [{"passage": 1, "first": 0, "last": 3, "kind": "section"}]
    answer = answerer.answer("What about scopes?", PASSAGES, candidates)
    assert answer.startswith("### Key scopes\n\nEach API key carries scopes that limit what it can do. [S2]")
    assert "create a new key instead. [S2]" in answer


def test_run_no_answer_without_passages_or_a_query(answerer):
    assert answerer.run(state=new_state("How do I rotate a key?", passages=[]))["state"]["status"] == "fallback"
    out = answerer.run(state=new_state("   ", passages=PASSAGES))["state"]
    assert out["status"] == "fallback" and out["answer"] == DEFAULT_NO_ANSWER_MESSAGE


def test_run_does_not_mutate_input_state(answerer):
    state = new_state("How do I rotate an API key?", passages=PASSAGES)
    before = deepcopy(state)
    answerer.run(state=state)
    assert state == before


def gate_candidate(passage_index: int, first: int, last: int, score: float, span: str | None = None) -> dict:
    return {"source_id": f"S{passage_index + 1}", "passage": passage_index, "first": first, "last": last,
            "score": score, "span": span, "text": "", "kind": "sentence"}


def test_run_the_gates_candidate_decides(answerer):
    # The gate judged SCOPES' last sentence (unit 3) the answer: it is shown, from its passage only.
    candidates = [gate_candidate(1, 3, 3, 0.9), gate_candidate(0, 1, 1, 0.8)]
    state = new_state("Can I change a key's scopes?", passages=PASSAGES, answer_candidates=candidates)
    answer = answerer.run(state=state)["state"]["answer"]
    assert answer == ("Key scopes: [S2]\n\nScopes are chosen when the key is created and cannot be changed later; "
                      "create a new key instead. [S2]")


def test_run_style_span_answers_with_the_phrase(answerer):
    candidates = [gate_candidate(0, 1, 1, 0.9, span="24 hours")]
    state = new_state("How long does the old key work?", passages=[ROTATE], answer_candidates=candidates)
    assert ExtractiveAnswerer(style="span").run(state=state)["state"]["answer"] == "24 hours [S1]"


def test_run_unknown_candidate_answers_nothing(answerer):
    candidates = [gate_candidate(0, 40, 41, 0.9)]
    state = new_state("How do I rotate an API key?", passages=PASSAGES, answer_candidates=candidates)
    assert answerer.run(state=state)["state"]["status"] == "fallback"


def test_run_shows_one_procedure():
    both = passage("## Rotate and create\n\nTo rotate a key:\n\n1. Open **API keys**.\n2. Click **Rotate**.\n\n"
                   "To create a key:\n\n1. Open **API keys**.\n2. Click **Create**.", "S1")
    rotate = next(u for u in answer_units([both]) if u.kind == "list")
    answer = ExtractiveAnswerer().answer("How do I rotate an API key?", [both], [
        {"passage": 0, "first": rotate.first, "last": rotate.last, "kind": "list"}])
    assert "Click **Rotate**" in answer and "Create" not in answer


def test_run_heads_a_list_without_a_lead_in_with_its_section():
    create = passage("## Create a key\n\n1. Open **API keys**.\n2. Click **Create**.", "S2",
                     section="Create a key", section_id="create-a-key")
    steps = next(u for u in answer_units([create]) if u.kind == "list")
    answer = ExtractiveAnswerer().answer("How do I create a key?", [create], [
        {"passage": 0, "first": steps.first, "last": steps.last, "score": 0.9, "kind": "list"}])
    assert answer.startswith("Create a key: [S2]\n\n1. Open **API keys**. [S2]")


def test_run_an_item_is_shown_as_its_list_with_the_lead_in():
    flow = passage("In general, a request through a proxy goes like this:\n\n1. The client connects to the proxy.\n"
                   "2. The proxy connects to the server.\n3. The proxy relays the reply.", "S1")
    third = [u for u in answer_units([flow]) if u.kind == "item"][2]
    answer = ExtractiveAnswerer().answer("What does the proxy do?", [flow], [
        {"passage": 0, "first": third.first, "last": third.last, "kind": "item"}])
    assert answer == ("In general, a request through a proxy goes like this: [S1]\n\n"
                      "1. The client connects to the proxy. [S1]\n2. The proxy connects to the server. [S1]\n"
                      "3. The proxy relays the reply. [S1]")


def test_run_a_wide_record_is_shown_as_its_name_and_the_fields_asked_for_marked_cut():
    # A record of 14 fields (a legislators file's row): the first field names it, the asked one answers, "…" marks
    # what is left out; the citation still points at the whole row.
    cells = ["last_name: Rivera", "first_name: Ana", "birthday: 1970-01-02", "gender: F", "state: NM",
             "party: Independent", "url: https://rivera.example.gov", "address: 12 Hart Building Washington DC",
             "phone: 202-555-0101", "twitter: SenRivera", "twitter_id: 1058520120", "youtube: RepRivera",
             "bioguide_id: R000601", "wikipedia_id: Ana Rivera"]
    people = passage("- " + "; ".join(cells), "S1", source="legislators.csv", title="legislators", section=None)
    row = answer_units([people])[0]
    candidates = [{"passage": 0, "first": row.first, "last": row.last, "kind": "item"}]
    answer = ExtractiveAnswerer().answer("What is Ana Rivera's phone number?", [people], candidates)
    assert answer == "- last_name: Rivera; first_name: Ana; …; phone: 202-555-0101; … [S1]"


def test_run_long_speaker_notes_are_shown_as_the_sentences_that_answer_within_the_bound():
    filler = " ".join(f"Point {n} of the talk is about something else entirely." for n in range(12))
    notes = passage(f"- Speaker notes: {filler} Anaconda ships with more than 1500 packages. Conda installs the "
                    f"rest. {filler}", "S1", section="Intro to Anaconda", heading_path=["Intro to Anaconda"])
    item = answer_units([notes])[0]
    candidates = [{"passage": 0, "first": item.first, "last": item.last, "kind": "item"}]
    answer = ExtractiveAnswerer().answer("How many packages does Anaconda include?", [notes], candidates)
    assert answer == ("Intro to Anaconda: [S1]\n\n- Speaker notes: … Point 11 of the talk is about something else "
                      "entirely. Anaconda ships with more than 1500 packages. Conda installs the rest. … [S1]")
    assert len(strip_markers(answer).split()) <= 80


def test_run_a_record_block_of_more_fields_than_shown_shows_the_field_asked_for():
    # A JSON record as a key-value block of 12 fields: the city asked for is the 11th, past the 8 a block shows.
    names = ["orderID", "customerID", "employeeID", "orderDate", "requiredDate", "shippedDate", "shipVia", "freight",
             "shipName", "shipAddress", "shipCity", "shipCountry"]
    values = ["10653", "FRANK", "1", "1997-09-02", "1997-09-30", "1997-09-19", "1", "93.25", "Frankenversand",
              "Berliner Platz 43", "Berlin", "Germany"]
    order = passage("### Order 10653\n\n" + "\n".join(f"- {n}: {v}" for n, v in zip(names, values)), "S1",
                    source="orders.json", title="orders", section=None)
    block = next(u for u in answer_units([order]) if u.kind == "block")
    candidates = [{"passage": 0, "first": block.first, "last": block.last, "kind": "block"}]
    answer = ExtractiveAnswerer().answer("Which city was order 10653 shipped to?", [order], candidates)
    assert "- shipCity: Berlin [S1]" in answer and "- orderID: 10653 [S1]\n…\n" in answer  # "…": items left out
    assert len(re.findall(r"^- ", answer, re.MULTILINE)) == 8


def test_run_the_steps_a_how_do_i_question_asks_for_are_shown_whole_however_long():
    steps = "\n".join(f"{n}. Step {n} of the procedure: {'do the careful thing here ' * 3}and check it." for n in
                      range(1, 7))
    guide = passage(f"To renew a certificate:\n\n{steps}", "S1", section="Renew a certificate",
                    heading_path=["Renew a certificate"])
    procedure = next(u for u in answer_units([guide]) if u.kind == "list")
    candidates = [{"passage": 0, "first": procedure.first, "last": procedure.last, "kind": "list"}]
    answer = ExtractiveAnswerer().answer("How do I renew a certificate?", [guide], candidates)
    assert len(strip_markers(answer).split()) > 80 and "…" not in answer
    assert [line[:2] for line in answer.splitlines() if line[:1].isdigit()] == ["1.", "2.", "3.", "4.", "5.", "6."]
    asked = ExtractiveAnswerer().answer("What does step 4 of the procedure check?", [guide], candidates)
    assert "…" in asked and "4. Step 4" in asked  # not asked for the steps: the part that answers
