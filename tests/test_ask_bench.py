"""`gatehouse bench ask`: warm asks, Haystack's input copying and the answer cache's hit, beside a baseline."""

import pytest
from haystack.core.pipeline import base, pipeline as haystack_pipeline

from gatehouse.eval.ask_bench import _worker, format_table, run_benchmark
from gatehouse.ingest import ingest, sample_groups


@pytest.fixture(scope="module")
def ingested():
    assert ingest(sample_groups(), progress=False).failed == []


def test_worker_times_warm_asks_their_copying_and_cache_hits(ingested):
    copy = haystack_pipeline._deepcopy_with_exceptions
    result = _worker(["How do I rotate an API key?", "How much does the Team plan cost?"], rounds=1, hits=3)
    assert len(result["ask_ms"]) == len(result["copy_ms"]) == 2 and len(result["cache_hit_ms"]) == 3
    # the stages of the timed asks, summed: they account for most of the asks' time
    assert {"retrieval", "answerability", "verify"} <= set(result["stage_ms"])
    assert 0 < sum(result["stage_ms"].values()) <= sum(result["ask_ms"])
    assert all(0 < copied < asked for copied, asked in zip(result["copy_ms"], result["ask_ms"]))
    assert set(result["answers"]) == {"How do I rotate an API key?", "How much does the Team plan cost?"}
    assert haystack_pipeline._deepcopy_with_exceptions is copy and base._deepcopy_with_exceptions is copy  # restored


def test_format_table_prints_both_sides_and_their_ratio():
    side = {"python": "python", "ask_p50_ms": 80.0, "ask_p95_ms": 120.0, "copy_share": 0.012, "cache_hit_p50_ms": 2.1}
    report = {"questions": 10, "rounds": 2, "ratio_p50": 0.5, "answers_differing": ["How much?"],
              "sides": {"this checkout": side, "baseline": {**side, "ask_p50_ms": 160.0, "copy_share": 0.4}}}
    table = format_table(report)
    assert "| this checkout | 80.0 | 120.0 | 1.2% | 2.1 |" in table and "| baseline | 160.0 |" in table
    assert "this checkout / baseline: 0.5" in table
    assert "differing from the baseline's: 1 of 10" in table


def test_run_benchmark_refuses_a_baseline_that_is_no_interpreter(tmp_path):
    with pytest.raises(ValueError, match="not an executable interpreter"):
        run_benchmark(baseline_python=str(tmp_path / "python"))


def test_format_table_prints_each_stages_share():
    side = {"python": "python", "ask_p50_ms": 40.0, "ask_p95_ms": 90.0, "copy_share": 0.02, "cache_hit_p50_ms": None,
            "stage_shares": {"retrieval": 0.5, "answerability": 0.1}}
    baseline = {**side, "stage_shares": {"answerability": 0.6}}
    table = format_table({"questions": 34, "asked": "prometheus questions", "rounds": 1,
                          "sides": {"this checkout": side, "baseline": baseline}})
    assert "34 prometheus questions x 1 rounds" in table and "| this checkout | 40.0 | 90.0 | 2.0% | - |" in table
    assert "| retrieval | 50.0% | 0.0% |" in table and "| answerability | 10.0% | 60.0% |" in table


def test_run_benchmark_needs_the_sets_corpus(tmp_path):
    with pytest.raises(ValueError, match="corpus of prometheus"):
        run_benchmark(domain_set="prometheus", corpora=tmp_path)
