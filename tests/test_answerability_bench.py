from pathlib import Path

import pytest
import yaml

from gatehouse.components.answerability.answerability_gate import AnswerabilityGate
from gatehouse.eval.answerability_bench import (_auc, choose_success_threshold, choose_threshold, domain_rows,
                                                format_table, run_benchmark)
from gatehouse.eval.latency_bench import without_answer_checks
from gatehouse.pipelines import component_spec, load_pipeline, pipeline_path, sub_pipeline_spec

SQUAD = Path(__file__).parent / "fixtures" / "eval" / "squad2_cs224n" / "dev-v2.0.json"


def test_auc_and_threshold_choice():
    assert _auc([0.9, 0.8], [0.1, 0.2]) == 1.0
    assert _auc([0.5], [0.5]) == 0.5
    assert _auc([0.1], [0.9, 0.8]) == 0.0
    assert _auc([], [0.1]) is None
    rows = [{"answerable": True, "score": b, "refusal": None, "right": b > 0.5}
            for b in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)]
    rows.append({"answerable": False, "score": 0.05, "refusal": None, "right": False})
    assert choose_threshold(rows, 0.0) == 0.1  # abstain on nothing answerable
    assert choose_threshold(rows, 0.2) == 0.3  # two of ten answerable may fall below
    with pytest.raises(ValueError, match="No answerable"):
        choose_threshold([{"answerable": False, "score": 0.1}], 0.1)
    # The success threshold: the lowest evidence above which the wrong answers are few enough (here none of 11).
    assert choose_success_threshold(rows, 0.0) == 0.6
    assert choose_success_threshold(rows, 0.2) == 0.4  # two wrong answers of 11 allowed: 0.4 and 0.5


def test_run_benchmark_tunes_and_reports_on_different_articles():
    report = run_benchmark(SQUAD, sample=4, fit=True, progress=False)
    configured, fitted = report["configured"]["splits"], report["fitted"]["splits"]
    # The fixture's tune split is its first article (4 questions), report its second (one of each kind).
    assert configured["tune"]["questions"] == 4 and configured["report"]["questions"] == 2
    for figures in (*configured.values(), *fitted.values()):
        assert figures["gold_retrieved"] == 1.0  # three paragraphs, top 5: the gold one is always there
        assert 0.0 <= figures["false_abstention_rate"] <= 1.0
        assert 0.0 <= figures["answered_right"] <= 1.0
    # The chosen threshold keeps false abstention on tune within the limit.
    assert fitted["tune"]["false_abstention_rate"] <= report["fitted"]["max_false_abstention"]
    assert report["fitted"]["success_threshold"] >= report["fitted"]["threshold"]
    table = format_table(report)
    assert "| tune | 4 |" in table and "| report | 2 |" in table and "threshold:" in table
    # The YAML, pasted under answerability.init_parameters, is the gate's settings.
    pasted = yaml.safe_load(table.split("paste under answerability.init_parameters:")[1])
    gate = AnswerabilityGate(**pasted)
    assert (gate.threshold, gate.success_threshold) == (report["fitted"]["threshold"],
                                                        report["fitted"]["success_threshold"])


def test_domain_rows_judge_the_answers_of_a_tuning_set(tmp_path):
    corpora = tmp_path / "corpora"
    (corpora / "tools").mkdir(parents=True)
    (corpora / "tools" / "backups.md").write_text(
        "# Backups\n\n## Retention\n\nNightly backups are kept for 14 days. Weekly backups are kept for a year.\n\n"
        "## Restore\n\nTo restore a backup, open Backups and click Restore.\n", encoding="utf-8")
    cases = [{"id": "t-a1", "kind": "answerable", "question": "How long are nightly backups kept?",
              "answer": "14 days", "sources": ["backups.md"]},
             {"id": "t-u1", "kind": "unanswerable", "question": "Can backups be encrypted with my own key?"}]
    tune = tmp_path / "tools.yml"
    tune.write_text(yaml.safe_dump({"name": "tools", "corpus": "tools", "kb": "tools", "role": "tune",
                                    "cases": cases}), encoding="utf-8")
    gate = AnswerabilityGate()
    rows = domain_rows(gate, [str(tune)], tmp_path / "work", "ask", False, corpora=corpora)
    answerable, unanswerable = rows
    assert answerable["answerable"] and answerable["gold_retrieved"] and answerable["right"]
    assert "14 days" in answerable["answer"] and answerable["score"] > 0
    assert not unanswerable["answerable"] and not unanswerable["right"]
    report_set = tmp_path / "report.yml"
    report_set.write_text(tune.read_text(encoding="utf-8").replace("role: tune", "role: report"), encoding="utf-8")
    with pytest.raises(ValueError, match="tuning sets"):
        domain_rows(gate, [str(report_set)], tmp_path / "work", "ask", False, corpora=corpora)


def test_latency_baseline_leaves_out_the_answer_checks_and_still_loads(tmp_path):
    spec = yaml.safe_load(pipeline_path("ask").read_text(encoding="utf-8"))
    baseline = without_answer_checks(spec)
    answer = sub_pipeline_spec(baseline, "answer")
    assert "answerability" not in answer["components"] and "spec" not in spec["components"]["answer"]["init_parameters"]
    assert {"sender": "passage_screen.state", "receiver": "generator.state"} in answer["connections"]
    assert not any("answerability" in c["sender"] + c["receiver"] for c in answer["connections"])
    assert component_spec(baseline, "router")["init_parameters"]["evidence"] == {"enabled": False}
    assert component_spec(baseline, "verifier")["init_parameters"]["contradictions"]["enabled"] is False
    path = tmp_path / "baseline.yml"
    path.write_text(yaml.safe_dump(baseline))
    assert "answerability" not in dict(load_pipeline(path).get_component("answer").pipeline.walk())
    with pytest.raises(ValueError, match="no 'answerability'"):
        without_answer_checks(baseline)
