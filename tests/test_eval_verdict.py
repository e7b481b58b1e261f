"""gatehouse.eval.verdict: thresholds, baseline selection and the verdict on synthetic runs."""

import json

import pytest
from eval_records import records

from gatehouse.eval.metrics import aggregate
from gatehouse.eval.verdict import (
    allowed_drop,
    check,
    decide,
    format_verdict,
    load_thresholds,
    previous_runs,
    rule_for,
)


def clean_records():
    """The hand-made records without invented citations (q4 cites a retrieved passage, no stray marker)."""
    cases = records()
    q4 = cases[3]
    q4["response"]["answer"] = "Quasar launches in May. [S1]"
    q4["retrieved"].append({"source": "product/roadmap.md", "text": "Quasar launches in May."})
    return cases


def run(cases, timestamp, *, version="v1", judge_model=None):
    return {
        "metadata": {"timestamp": timestamp, "datasets": {"handmade": version}, "judge_model": judge_model},
        "aggregates": aggregate(cases),
    }


def save(root, name, results):
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps(results))
    return folder / "results.json"


def test_check_by_hand():
    higher = {"direction": "higher", "max_drop": 0.02}
    assert check("a", 0.77, 0.80, higher)["status"] == "regressed"  # dropped 0.03 > 0.02
    assert check("a", 0.79, 0.80, higher)["status"] == "ok"  # dropped 0.01
    assert check("a", 0.78, 0.80, higher)["status"] == "ok"  # exactly the allowed drop
    assert check("a", 0.85, 0.80, higher)["status"] == "improved"
    lower = {"direction": "lower", "max_drop_relative": 0.5}
    assert allowed_drop(lower, 1000.0) == 500.0
    assert check("t", 1400.0, 1000.0, lower)["status"] == "ok"
    result = check("t", 1600.0, 1000.0, lower)
    assert (result["status"], result["delta"], result["allowed"]) == ("regressed", 600.0, 500.0)
    both = {"direction": "higher", "max_drop": 0.05, "max_drop_relative": 0.1}
    assert allowed_drop(both, 0.9) == pytest.approx(0.09)  # the larger allowance
    bound = {"direction": "lower", "max": 0.0}
    assert check("invented", 0.1, None, bound)["status"] == "regressed"  # bounds need no previous run
    assert check("invented", 0.0, None, bound)["status"] == "new"
    assert check("x", None, 0.5, higher)["status"] == "missing"


def test_default_thresholds():
    rules = load_thresholds()
    assert rules["invented_citation_share"] == {"direction": "lower", "max": 0.0}
    assert rule_for("latency_p95_ms.total", rules)["max_drop_relative"] == 0.5
    assert rule_for("nan_share.faithfulness", rules) == {"direction": "lower", "max_drop": 0.05}
    assert rule_for("latency_p50_ms.intent", rules) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("metrics:\n  rouge_score: {direction: up}\n", "rouge_score.*direction"),
        ("metrics:\n  rouge_score: {direction: higher, max_drop: -1}\n", "rouge_score.*negative"),
        ("metrics:\n  rouge_score: {direction: higher, drop: 1}\n", "rouge_score.*unknown keys"),
        ("metrics: [1, 2]\n", "mapping under 'metrics:'"),
    ],
)
def test_bad_thresholds_name_the_file_and_metric(tmp_path, text, message):
    path = tmp_path / "thresholds.yml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message) as error:
        load_thresholds(path)
    assert str(path) in str(error.value)


def test_same_numbers_as_the_previous_run_pass(tmp_path):
    previous = save(tmp_path, "20250101-000000", run(clean_records(), "2025-01-01T00:00:00+00:00"))
    slower = clean_records()
    for case in slower:  # 20% slower everywhere: within the allowed 50% on P95 total latency
        latency = case["response"]["metadata"]["latency_ms"]
        latency.update({stage: ms * 1.2 for stage, ms in latency.items()})
    verdict = decide(run(slower, "2025-01-02T00:00:00+00:00"), reports_root=tmp_path)
    assert verdict["regressed"] is False and verdict["regressions"] == []
    assert verdict["baselines"]["handmade"]["path"] == str(previous)
    by_metric = {c["metric"]: c for c in verdict["checks"]}
    assert (by_metric["intent_accuracy"]["previous"], by_metric["intent_accuracy"]["status"]) == (0.75, "ok")
    assert by_metric["latency_p95_ms.total"]["delta"] == pytest.approx(570.0 * 0.2)
    assert format_verdict(verdict).startswith("Verdict: PASS")


def test_a_dropped_metric_is_named(tmp_path):
    save(tmp_path, "20250101-000000", run(clean_records(), "2025-01-01T00:00:00+00:00"))
    worse = clean_records()
    worse[0]["response"]["metadata"]["intent"] = "procedural"  # intent accuracy 3/4 -> 2/4
    verdict = decide(run(worse, "2025-01-02T00:00:00+00:00"), reports_root=tmp_path)
    assert verdict["regressed"] is True
    assert verdict["regressions"] == ["handmade: intent_accuracy"]
    text = format_verdict(verdict)
    assert "REGRESSED" in text and "intent_accuracy" in text and "0.75 -> 0.5" in text


def test_invented_citations_fail_without_any_previous_run(tmp_path):
    verdict = decide(run(records(), "2025-01-01T00:00:00+00:00"), reports_root=tmp_path / "empty")
    assert verdict["regressions"] == ["handmade: invented_citation_share"]
    assert verdict["baselines"] == {"handmade": None}
    assert "no run with the same dataset version" in verdict["notes"][0]


def test_baseline_is_the_newest_run_on_the_same_data(tmp_path):
    older = save(tmp_path, "a", run(clean_records(), "2025-01-01T00:00:00+00:00"))
    save(tmp_path, "b", run(clean_records(), "2025-01-03T00:00:00+00:00", version="v2"))  # other data version
    save(tmp_path, "c", run(clean_records()[:3], "2025-01-04T00:00:00+00:00"))  # a smaller slice (--quick)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "results.json").write_text("{not json")  # a half-written run is skipped
    assert [r["metadata"]["timestamp"][:10] for r in previous_runs(tmp_path)] == [
        "2025-01-04",
        "2025-01-03",
        "2025-01-01",
    ]
    current = run(clean_records(), "2025-01-05T00:00:00+00:00")
    assert decide(current, reports_root=tmp_path)["baselines"]["handmade"]["path"] == str(older)
    assert len(previous_runs(tmp_path, exclude=tmp_path / "a")) == 2


def test_baseline_file_replaces_the_previous_run(tmp_path):
    baseline = save(tmp_path / "baseline", "run", run(clean_records(), "2024-12-01T00:00:00+00:00"))
    worse = clean_records()
    worse[1]["response"]["status"] = "success"  # q2 no longer abstains: abstention recall 1/2 -> 0/2
    verdict = decide(run(worse, "2025-01-02T00:00:00+00:00"), baseline=baseline.parent)
    assert verdict["baselines"]["handmade"]["path"] == str(baseline)
    assert "handmade: abstention_recall" in verdict["regressions"]
    with pytest.raises(ValueError, match="Cannot read run results"):
        decide(run(worse, "2025-01-02T00:00:00+00:00"), baseline=tmp_path / "missing.json")


def test_judge_metrics_compare_only_with_the_same_judge(tmp_path):
    def judged(values, model, timestamp):
        cases = clean_records()
        cases[0]["judge"] = {"faithfulness": values}
        return run(cases, timestamp, judge_model=model)

    save(tmp_path, "a", judged([0.9, 0.9, 0.9], "judge-a", "2025-01-01T00:00:00+00:00"))
    other_judge = decide(judged([0.5, 0.5, 0.5], "judge-b", "2025-01-02T00:00:00+00:00"), reports_root=tmp_path)
    assert other_judge["regressed"] is False
    assert any("judge model changed" in note for note in other_judge["notes"])
    same_judge = decide(judged([0.5, 0.5, 0.5], "judge-a", "2025-01-02T00:00:00+00:00"), reports_root=tmp_path)
    assert same_judge["regressions"] == ["handmade: faithfulness"]
    failing = decide(judged([None, None, 0.9], "judge-a", "2025-01-02T00:00:00+00:00"), reports_root=tmp_path)
    assert failing["regressions"] == ["handmade: nan_share.faithfulness"]  # 0 -> 2/3 of judgements failed
