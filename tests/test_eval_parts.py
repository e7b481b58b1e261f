"""Multi-part questions in the evaluation: `gold_parts` in the loader, the parts metrics, `--tags` in the runner."""

from pathlib import Path

import pytest
import yaml
from haystack import Document

from gatehouse.cli import build_parser
from gatehouse.eval.datasets import GOLDEN_SET, EvalSetError, GoldPart, load_golden, load_set
from gatehouse.eval.metrics import aggregate, aspect_words, fact_text, multi_part, part_outcomes, scalars
from gatehouse.eval.report import render_summary
from gatehouse.eval.runner import EvalOptions, _retrieved, tagged_set
from gatehouse.settings import bundled_dir

KB = bundled_dir() / "kb"


def write_set(tmp_path: Path, cases: list[dict]) -> Path:
    path = tmp_path / "set.yml"
    path.write_text(yaml.safe_dump({"kb_root": str(KB), "cases": cases}, sort_keys=False), encoding="utf-8")
    return path


def parts_case(**fields) -> dict:
    case = {
        "id": "mp",
        "question": "What does the Team plan cost, and what does dedicated capacity cost per GPU hour?",
        "gold_parts": [
            {"aspect": "Team plan price", "gold_answer": "$49 per member per month.", "gold_facts": ["$49", "$39"],
             "gold_sources": ["product/pricing-plans.md"]},
            {"aspect": "dedicated capacity cost per GPU hour", "gold_kb": "product", "answerable": False},
        ],
        "gold_kb": "product",
        "gold_intent": "factual",
        "gold_route": "retrieve",
        "tags": ["multi-part"],
    }
    case.update(fields)
    return case


def with_part(number: int, **changes) -> list[dict]:
    """The parts of `parts_case()` with part `number` (1-based) changed; a value of None removes the key."""
    parts = [dict(part) for part in parts_case()["gold_parts"]]
    for key, value in changes.items():
        if value is None:
            parts[number - 1].pop(key, None)
        else:
            parts[number - 1][key] = value
    return parts


# --- loader -------------------------------------------------------------------------------------------------------


def test_gold_parts_are_loaded_and_the_case_labels_derived(tmp_path):
    case = load_golden(write_set(tmp_path, [parts_case()])).cases[0]
    assert case.gold_parts == [
        GoldPart(aspect="Team plan price", gold_answer="$49 per member per month.", gold_facts=["$49", "$39"],
                 gold_sources=["product/pricing-plans.md"], gold_kb="product", answerable=True),
        GoldPart(aspect="dedicated capacity cost per GPU hour", gold_kb="product", answerable=False),
    ]
    assert case.answerable and case.gold_kb == "product"
    assert case.gold_answer == "$49 per member per month."  # the answerable parts' answers, joined
    assert case.gold_sources == ["product/pricing-plans.md"]  # their union


def test_two_kb_parts_derive_the_union_and_no_case_kb(tmp_path):
    second = {"aspect": "SSO plans", "gold_answer": "Business and Enterprise.", "gold_facts": ["Business and Enterprise"],
              "gold_sources": ["faq/single-sign-on.md"]}
    case = load_golden(write_set(tmp_path, [parts_case(gold_parts=with_part(2, **second, gold_kb=None,
                                                                            answerable=None), gold_kb=None)]))
    loaded = case.cases[0]
    assert loaded.gold_sources == ["product/pricing-plans.md", "faq/single-sign-on.md"]
    assert loaded.gold_kb is None
    assert loaded.gold_answer == "$49 per member per month. Business and Enterprise."


BAD_PARTS = [
    ({"gold_parts": with_part(1, gold_fatcs=["$49"])}, "gold_parts[1].gold_fatcs", "unknown key"),
    ({"gold_parts": with_part(1, gold_facts=["$59"])}, "gold_parts[1].gold_facts",
     "'$59' does not occur in product/pricing-plans.md"),
    ({"gold_parts": with_part(1, gold_facts=None)}, "gold_parts[1].gold_facts", "is required for an answerable"),
    ({"gold_parts": with_part(1, gold_facts="$49")}, "gold_parts[1].gold_facts", "must be a list of non-empty"),
    ({"gold_parts": with_part(1, gold_answer=None)}, "gold_parts[1].gold_answer", "is required for an answerable"),
    ({"gold_parts": with_part(1, gold_sources=["product/pricing.md"])}, "gold_parts[1].gold_sources",
     "does not exist"),
    ({"gold_parts": with_part(1, gold_sources=["pricing-plans.md"])}, "gold_parts[1].gold_sources",
     "not of the form '<kb>/<source>'"),
    ({"gold_parts": with_part(1, gold_kb="faq")}, "gold_parts[1].gold_kb", "not the knowledge base of any"),
    ({"gold_parts": with_part(2, gold_facts=["$49"])}, "gold_parts[2].gold_facts", "must be empty for an unanswerable"),
    ({"gold_parts": with_part(2, gold_answer="None.")}, "gold_parts[2].gold_answer",
     "must be empty for an unanswerable"),
    ({"gold_parts": with_part(2, gold_sources=["product/sla.md"])}, "gold_parts[2].gold_sources",
     "must be empty for an unanswerable"),
    ({"gold_parts": with_part(2, answerable="no")}, "gold_parts[2].answerable", "must be true or false"),
    ({"gold_parts": with_part(2, aspect="what is it?")}, "gold_parts[2].aspect", "has no content word"),
    ({"gold_parts": with_part(2, aspect="team plan PRICE")}, "gold_parts[2].aspect", "aspect of an earlier part"),
    ({"gold_parts": with_part(1)[:1]}, "gold_parts", "at least two parts"),
    ({"gold_parts": "Team price"}, "gold_parts", "at least two parts"),
    ({"gold_parts": [with_part(1)[1], with_part(1)[1] | {"aspect": "Brazil region"}]}, "gold_parts",
     "needs an answerable part"),
    ({"gold_sources": ["product/sla.md"]}, "gold_sources", "must be the union of the parts' gold sources"),
    ({"gold_kb": "faq"}, "gold_kb", "not the knowledge base of every part"),
    ({"answerable": False}, "answerable", "must be true with gold_parts"),
    ({"gold_route": "direct", "gold_kb": None}, "gold_parts", "must be empty when gold_route is direct"),
]


@pytest.mark.parametrize(("changes", "field_name", "problem"), BAD_PARTS)
def test_bad_gold_parts_name_file_case_and_field(tmp_path, changes, field_name, problem):
    path = write_set(tmp_path, [parts_case(id="ok"), parts_case(**changes)])
    with pytest.raises(EvalSetError) as raised:
        load_golden(path)
    message = str(raised.value)
    assert str(path) in message and "case 'mp' (#2)" in message and f"field '{field_name}'" in message
    assert problem in message


def test_facts_are_checked_against_a_corpus_too(tmp_path):
    data = {
        "corpus": [{"id": "leave", "kb": "handbook", "text": "You get 28 days of leave \u2013 carried over: 5."}],
        "cases": [{
            "id": "mp", "question": "How many leave days, and how many sick days?",
            "gold_parts": [
                {"aspect": "leave days", "gold_answer": "28 days.", "gold_facts": ["28 days", "leave - carried"],
                 "gold_sources": ["handbook/leave.txt"]},
                {"aspect": "sick days", "answerable": False},
            ],
        }],
    }
    path = tmp_path / "set.yml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert load_golden(path).cases[0].gold_parts[0].gold_facts == ["28 days", "leave - carried"]
    data["cases"][0]["gold_parts"][0]["gold_facts"] = ["30 days"]
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(EvalSetError, match="'30 days' does not occur in handbook/leave.txt"):
        load_golden(path)


def test_the_real_multi_part_cases():
    cases = [case for case in load_set("golden").cases if case.tags[0] == "multi-part"]
    assert len(cases) >= 18
    missing = [case for case in cases if any(not part.answerable for part in case.gold_parts)]
    assert len(missing) >= 4 and all("missing-part" in case.tags for case in missing)
    assert {case.gold_intent for case in cases} >= {"comparison", "factual"}
    assert sum(1 for case in cases if case.gold_kb is None) >= 4  # questions across two knowledge bases
    assert sum(1 for case in cases if len(case.gold_parts) >= 3) >= 6
    for case in cases:
        assert case.answerable and case.gold_route == "retrieve" and case.gold_answer, case.id
        assert all(part.gold_kb for part in case.gold_parts), case.id


# --- metrics ------------------------------------------------------------------------------------------------------


def _record(answer: str, status: str, citations: list[tuple[str, str]], missing: list[str] | None = None,
            parts: list[dict] | None = None, case_id: str = "mp") -> dict:
    metadata = {"intent": "factual", "route": "retrieve", "kb": "product"}
    if missing is not None:
        metadata["plan"] = {"subqueries": [], "missing": missing, "wall_ms": 1.0, "slowest_ms": 1.0}
    return {
        "set": "golden",
        "id": case_id,
        "question": "What does the Team plan cost, and what does dedicated capacity cost per GPU per hour?",
        "tags": ["multi-part"],
        "gold": {"answer": "$49.", "sources": ["product/pricing-plans.md"], "contexts": [], "kb": "product",
                 "intent": "factual", "route": "retrieve", "answerable": True,
                 "parts": parts if parts is not None else [
                     {"aspect": "Team plan price", "answer": "$49.", "facts": ["$49", "$39"],
                      "sources": ["product/pricing-plans.md"], "kb": "product", "answerable": True},
                     {"aspect": "dedicated capacity cost per GPU hour", "answer": None, "facts": [], "sources": [],
                      "kb": "product", "answerable": False},
                 ]},
        "response": {
            "answer": answer,
            "citations": [{"id": f"S{n}", "kb": kb, "source": source, "text": "", "url": "", "chunk_id": ""}
                          for n, (kb, source) in enumerate(citations, start=1)],
            "metadata": metadata,
            "validation": {},
            "status": status,
        },
        "retrieved": [],
    }


PARTIAL = "The Team plan costs $49 per member per month \u2014 or $39 billed annually. [S1]"


def test_answered_and_reported_missing():
    record = _record(PARTIAL, "partial", [("product", "pricing-plans.md")],
                     missing=["How much does dedicated capacity cost per GPU per hour?"])
    assert part_outcomes(record) == [
        {"aspect": "Team plan price", "answerable": True, "handled": True, "reason": None},
        {"aspect": "dedicated capacity cost per GPU hour", "answerable": False, "handled": True, "reason": None},
    ]
    result = multi_part([record])
    assert result["parts_answered"]["mean"] == 1.0 and result["parts_reported_missing"]["mean"] == 1.0
    assert result["parts_handled_cases"]["mean"] == 1.0 and result["false_success_with_missing_part"] == 0


def test_false_success_and_facts_or_citation_missing():
    # today's pipeline: one answer, status success, no plan; the missing part is silently dropped
    silent = _record(PARTIAL, "success", [("product", "pricing-plans.md")], case_id="silent")
    # answered from the wrong document, and only one of the two facts
    wrong_source = _record("Team costs $49. [S1]", "partial", [("faq", "team-members.md")],
                           missing=["dedicated capacity GPU hour cost"], case_id="wrong")
    # the missing entry names another part: fewer than half of the aspect's words
    other_missing = _record(PARTIAL, "partial", [("product", "pricing-plans.md")], missing=["Enterprise GPU price"],
                            case_id="other")
    outcomes = {r["id"]: part_outcomes(r) for r in (silent, wrong_source, other_missing)}
    assert outcomes["silent"][1]["reason"] == "status success; not in metadata.plan.missing"
    assert outcomes["wrong"][0]["reason"] == ("facts not in the answer: $39; "
                                              "no citation of product/pricing-plans.md")
    assert outcomes["wrong"][1]["handled"]  # 4 of its 5 aspect words: dedicated, capacity, GPU, hour
    assert outcomes["other"][1]["reason"] == "not in metadata.plan.missing"  # only "gpu" of 5 words
    result = multi_part([silent, wrong_source, other_missing])
    assert result["parts_answered"]["mean"] == pytest.approx(2 / 3)
    assert result["parts_reported_missing"]["mean"] == pytest.approx(1 / 3)
    assert result["parts_handled_cases"]["mean"] == 0.0
    assert result["false_success_with_missing_part"] == 1
    assert set(result["unhandled"]) == {"silent", "wrong", "other"}


def test_a_fallback_answers_no_part():
    record = _record("I could not find this in the knowledge bases.", "fallback", [], missing=[])
    assert [o["handled"] for o in part_outcomes(record)] == [False, False]


def test_only_cases_with_parts_count_and_scalars_name_the_metrics():
    plain = _record("Yes. [S1]", "success", [("faq", "api-keys.md")], parts=[], case_id="plain")
    answered = _record(PARTIAL, "partial", [("product", "pricing-plans.md")],
                       missing=["dedicated capacity cost per GPU per hour"])
    result = multi_part([plain, answered])
    assert result["cases"] == 1 and result["parts_handled_cases"]["not_applicable"] == 1
    gatehouse = aggregate([plain, answered])["golden"]["gatehouse"]
    values = scalars({"gatehouse": gatehouse})
    assert values["parts_answered"] == 1.0 and values["parts_reported_missing"] == 1.0
    assert values["parts_handled_cases"] == 1.0 and values["false_success_with_missing_part"] == 0
    assert scalars({"gatehouse": aggregate([plain])["golden"]["gatehouse"]})["parts_handled_cases"] is None
    summary = render_summary({"metadata": {"timestamp": "t", "duration_s": 1.0, "datasets": {"golden": "v"}},
                              "aggregates": {"golden": {"cases": 2, "ragas": {}, "judge": {}, "gatehouse": gatehouse}}})
    assert "Multi-part (golden, 1 cases): parts answered 1.000 (n=1)" in summary
    assert "| multi-part handled |" in summary


def test_fact_text_and_aspect_words():
    assert fact_text("Costs $49 \u2013 billed\u00a0`monthly`") == "costs $49 - billed monthly"
    assert aspect_words("Enterprise support hours and the policies") == {"enterprise", "support", "hour", "policy"}
    assert aspect_words("What is it?") == set()


# --- runner and command line ----------------------------------------------------------------------------------------


def test_tagged_set_and_the_tags_option():
    golden = load_golden(GOLDEN_SET)
    multi = tagged_set(golden, ["multi-part"], limit=None)
    assert multi.cases and all("multi-part" in case.tags for case in multi.cases)
    assert len(tagged_set(golden, ["multi-part"], limit=5).cases) == 5
    assert {case.id for case in tagged_set(golden, ["missing-part", "tenant"], limit=None).cases} == {
        case.id for case in golden.cases if {"missing-part", "tenant"} & set(case.tags)}
    assert EvalOptions(tags=["multi-part"]).slice_label("golden") == "-tags-multi-part"
    assert EvalOptions(tags=["multi-part"], limit=5).slice_label("golden") == "-first5-tags-multi-part"
    args = build_parser().parse_args(["eval", "--sets", "golden", "--tags", "multi-part, missing-part"])
    assert args.tags == "multi-part, missing-part"


def test_retrieved_contexts_of_a_plan_are_every_part_s_passages():
    def passage(kb: str, source: str) -> Document:
        return Document(content=f"text of {source}", meta={"kb": kb, "source": source})

    plan = {"parts": [{"passages": [passage("product", "sla.md")]}, {"passages": []},
                      {"passages": [passage("ops", "backup-and-restore.md")]}]}
    result = {"answer": {"plan": {"plan": plan, "passages": [passage("ops", "last-part-only.md")]}}}
    assert [r["source"] for r in _retrieved(result)] == ["product/sla.md", "ops/backup-and-restore.md"]
    one = {"answer": {"unanswerable": {"passages": [passage("ops", "backup-and-restore.md")]}}}
    assert _retrieved(one) == [{"source": "ops/backup-and-restore.md", "text": "text of backup-and-restore.md"}]
    assert _retrieved({}) == []  # the question never reached the answering (a refusal, a direct answer)
