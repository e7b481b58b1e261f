import json
import subprocess
import sys
from pathlib import Path

import pytest

from gatehouse.eval.bench_files import write_json_report
from gatehouse.eval.claims_bench import format_table, load_cases, load_verifier, run_benchmark

PROJECT = Path(__file__).resolve().parent.parent
FIXTURE = PROJECT / "tests" / "fixtures" / "claims"
SCIFACT = PROJECT.parent / "shared" / "data" / "scifact"


def test_load_cases_labels_and_unrelated_pick():
    cases = load_cases(FIXTURE, "dev")
    labels = [c["label"] for c in cases]
    assert labels.count("SUPPORT") == 2 and labels.count("CONTRADICT") == 3
    assert labels.count("unrelated") == 5 and labels.count("nei") == 1
    cited = {c["id"]: {str(i) for i in c["cited_doc_ids"]}
             for c in map(json.loads, (FIXTURE / "claims_dev.jsonl").read_text().splitlines())}
    unrelated = [c for c in cases if c["label"] == "unrelated"]
    assert all(c["doc_id"] not in cited[c["claim_id"]] for c in unrelated)
    assert load_cases(FIXTURE, "dev") == cases  # deterministic
    first = cases[0]
    assert first["passage"].startswith("# API key lifetime\n\n")


def test_load_cases_missing_split():
    with pytest.raises(FileNotFoundError, match="claims_train.jsonl"):
        load_cases(FIXTURE, "train")


def test_load_verifier_uses_the_benchmarks_own_yaml():
    verifier = load_verifier()
    assert verifier.contradictions["enabled"] is True
    assert verifier.remove_unsupported is True
    assert verifier.contradictions["antonyms"]  # the benchmark's lists, not the built-in defaults
    assert load_verifier("ask").contradictions["antonyms"] is None  # the product pipeline carries no benchmark's lexicon


def test_run_benchmark_on_fixture(tmp_path):
    report = run_benchmark(FIXTURE, split="dev", progress=False)
    labels = report["labels"]
    assert labels["SUPPORT"] == {**labels["SUPPORT"], "cases": 2, "supported": 1.0}
    assert labels["CONTRADICT"]["cases"] == 3
    assert labels["CONTRADICT"]["supported"] == 0.0
    assert labels["CONTRADICT"]["contradicted"] == 1.0
    assert labels["unrelated"]["supported"] == 0.0
    assert labels["nei"]["cases"] == 1
    assert report["targets"]["SUPPORT"]["met"] and report["targets"]["CONTRADICT"]["met"]
    cues = {r["claim_id"]: r["cues"] for r in report["cases"] if r["label"] == "CONTRADICT"}
    assert cues[2] == ["negation:not"]
    assert cues[3] == ["negation:never"]
    assert cues[4] == ["number:48 hour"]
    table = format_table(report)
    assert "| SUPPORT | 2 | 1.000 |" in table and "| CONTRADICT | 3 | 0.000 |" in table
    written = json.loads(write_json_report(report, tmp_path / "out" / "claims.json").read_text())
    assert written["labels"] == labels


def test_cli_bench_claims(tmp_path):
    output = tmp_path / "claims.json"
    result = subprocess.run(
        [sys.executable, "-m", "gatehouse.cli", "bench", "claims", "--dataset", str(FIXTURE), "--split", "dev",
         "--output", str(output), "--quiet"],
        cwd=PROJECT, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr
    assert "| CONTRADICT | 3 |" in result.stdout
    assert json.loads(output.read_text())["split"] == "dev"

    missing = subprocess.run(
        [sys.executable, "-m", "gatehouse.cli", "bench", "claims", "--dataset", str(tmp_path), "--quiet"],
        cwd=PROJECT, capture_output=True, text=True, timeout=600,
    )
    assert missing.returncode == 2 and "claims_dev.jsonl not found" in missing.stderr


@pytest.mark.skipif(not (SCIFACT / "claims_dev.jsonl").is_file(), reason=f"SciFact claims not found at {SCIFACT}")
def test_run_benchmark_on_scifact_slice():
    report = run_benchmark(SCIFACT, split="dev", max_claims=20, progress=False)
    labels = report["labels"]
    assert labels["unrelated"]["supported"] == 0.0
    assert labels["SUPPORT"]["cases"] > 0 and labels["SUPPORT"]["supported"] >= 0.5
    assert sum(s["cases"] for s in labels.values()) == len(report["cases"])
