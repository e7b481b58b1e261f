"""gatehouse.eval.report: run metadata, the files of a run, and an HTML report that is self-contained and escaped."""

import hashlib
import html
import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from eval_records import SCRIPT_QUESTION, records

from gatehouse.eval.metrics import aggregate, score_records
from gatehouse.eval.report import package_versions, pipeline_hashes, run_metadata, write_report
from gatehouse.eval.verdict import decide

PIPELINES = Path(__file__).resolve().parents[1] / "pipelines"


@pytest.fixture(scope="module")
def scored():
    cases = score_records(records())
    cases[0]["judge"] = {"faithfulness": [1.0, None, 0.5]}
    cases[0]["judge_errors"] = {"faithfulness": [None, "InstructorRetryException: invalid JSON", None]}
    return cases


def results_for(cases, started, reports_root):
    metadata = run_metadata(
        datasets={"handmade": "abc123"},
        duration_s=12.5,
        judge_model="fixture-judge",
        started=started,
        pipelines_directory=PIPELINES,
    )
    current = {"metadata": metadata, "aggregates": aggregate(cases)}
    return {**current, "verdict": decide(current, reports_root=reports_root), "records": cases}


def test_pipeline_hashes_are_sha256_of_the_yaml_files():
    hashes = pipeline_hashes(PIPELINES)
    assert set(hashes) == {path.name for path in PIPELINES.glob("*.yml")} and "ask.yml" in hashes
    assert hashes["ask.yml"] == hashlib.sha256((PIPELINES / "ask.yml").read_bytes()).hexdigest()


def test_package_versions():
    versions = package_versions(("ragas", "gatehouse", "no-such-package-gatehouse"))
    assert versions == {"ragas": "0.4.3", "gatehouse": "0.1.0", "no-such-package-gatehouse": None}


def test_run_metadata_records_what_the_run_depends_on():
    started = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)
    metadata = run_metadata(
        datasets={"golden": "v1"},
        duration_s=3.25,
        started=started,
        pipelines_directory=PIPELINES,
        extra={"quick": True},
    )
    assert (metadata["run_id"], metadata["timestamp"]) == ("20250304-050607", "2025-03-04T05:06:07+00:00")
    assert metadata["datasets"] == {"golden": "v1"} and metadata["judge_model"] is None and metadata["quick"] is True
    assert set(metadata["packages"]) == {
        "gatehouse",
        "haystack-ai",
        "ragas",
        "hayhooks",
        "sentence-transformers",
        "torch",
    }


def test_report_files(tmp_path, scored):
    started = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)
    results = results_for(scored, started, tmp_path)
    results["aggregates"]["handmade"]["gatehouse"]["latency_ms"]["total"]["mean"] = float("nan")
    run_dir = write_report(results, tmp_path)
    assert run_dir == tmp_path / "20250304-050607"
    assert sorted(p.name for p in run_dir.iterdir()) == ["report.html", "results.json", "summary.md"]

    saved = json.loads((run_dir / "results.json").read_text())
    assert set(saved) == {"metadata", "aggregates", "verdict", "records"}
    assert saved["aggregates"]["handmade"]["gatehouse"]["latency_ms"]["total"]["mean"] is None  # NaN -> null
    assert saved["aggregates"]["handmade"]["judge"]["faithfulness"]["nan"] == 1
    assert [r["id"] for r in saved["records"]] == ["q1", "q2", "q3", "q4"]

    summary = (run_dir / "summary.md").read_text()
    assert "**Verdict: REGRESSED**: handmade: invented_citation_share" in summary
    assert "| handmade | 4 |" in summary
    assert "NaN (failed, never averaged in): handmade faithfulness 1/3" in summary


def test_html_is_self_contained_and_escaped(tmp_path, scored):
    started = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)
    page = (write_report(results_for(scored, started, tmp_path), tmp_path) / "report.html").read_text()
    assert "<script" not in page.lower()  # the question's <script> is shown escaped, never as markup
    assert html.escape(SCRIPT_QUESTION) in page
    assert not re.search(r"<(link|iframe|object|embed)\b", page, re.IGNORECASE)
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page, re.IGNORECASE)
    images = re.findall(r"<img [^>]*>", page)
    assert len(images) >= 5  # trends, distributions, two confusion matrices, latency, retries
    assert all('src="data:image/png;base64,' in image for image in images)
    for text in (
        "REGRESSED",
        "invented_citation_share",
        "InstructorRetryException: invalid JSON",
        "citation S1 cites product/roadmap.md, which was not retrieved",
        "Trends over 1 run(s)",
    ):
        assert html.escape(text) in page


def test_trends_read_the_earlier_runs(tmp_path, scored):
    first = write_report(results_for(scored, datetime(2025, 3, 4, tzinfo=UTC), tmp_path), tmp_path)
    second_results = results_for(scored, datetime(2025, 3, 5, tzinfo=UTC), tmp_path)
    assert second_results["verdict"]["baselines"]["handmade"]["path"] == str(first / "results.json")
    second = write_report(second_results, tmp_path)
    assert "Trends over 2 run(s)" in (second / "report.html").read_text()
    again = write_report(second_results, tmp_path)  # same run id: a new folder, nothing overwritten
    assert again.name == second.name + "-2"


def test_write_report_needs_metadata_and_aggregates(tmp_path):
    with pytest.raises(ValueError, match="metadata"):
        write_report({"aggregates": {}}, tmp_path)
