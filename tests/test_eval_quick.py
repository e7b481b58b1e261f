"""`gatehouse eval --quick` end to end: real pipeline, real stores, the report on disk, the verdict's exit code."""

import json
import os
import re
import subprocess
import sys

import pytest


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("eval")
    env = {**os.environ, "GATEHOUSE_DATA_DIR": str(tmp / "data")}
    env.pop("GATEHOUSE_JUDGE_URL", None)
    done = subprocess.run(
        [sys.executable, "-m", "gatehouse.cli", "eval", "--quick", "--reports", str(tmp / "reports")],
        check=False, env=env, capture_output=True, text=True, timeout=900,
    )
    runs = sorted((tmp / "reports").iterdir()) if (tmp / "reports").exists() else []
    return done, runs


def test_quick_eval_passes_and_writes_the_report(quick_run):
    done, runs = quick_run
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert len(runs) == 1
    assert {p.name for p in runs[0].iterdir()} >= {"report.html", "results.json", "summary.md"}
    assert "Verdict: PASS" in done.stdout


def test_results_record_pipeline_hashes_versions_and_every_case(quick_run):
    _, runs = quick_run
    results = json.loads((runs[0] / "results.json").read_text(encoding="utf-8"))
    metadata = results["metadata"]
    assert {"ask.yml", "retrieve.yml", "index.yml"} <= set(metadata["pipelines"])
    assert all(re.fullmatch(r"[0-9a-f]{64}", digest) for digest in metadata["pipelines"].values())
    assert metadata["packages"]["haystack-ai"] == "3.4.0"
    assert metadata["judge_model"] is None
    assert metadata["datasets"]["golden"].endswith("-first24")
    golden = [r for r in results["records"] if r["set"] == "golden"]
    assert len(golden) == 24
    assert results["aggregates"]["golden"]["gatehouse"]["invented_citation_share"]["mean"] == 0
    answered = [r for r in golden if r["response"]["citations"]]
    assert answered and all(r["retrieved"] for r in answered)


def test_the_html_report_opens_offline(quick_run):
    _, runs = quick_run
    html = (runs[0] / "report.html").read_text(encoding="utf-8")
    assert "<script" not in html.lower()
    assert not re.search(r"""(?:src|href)=["']https?://""", html)
    assert "data:image/png;base64," in html
