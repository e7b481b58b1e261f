"""
`gatehouse bench latency`: warm ask latency of a pipeline beside the same pipeline without its answer checks.

The baseline is built in the same run from the measured YAML: the `answerability` gate removed (the assembler feeds
the generator directly), the router's `evidence` tier disabled and the verifier's contradiction detection off. Both
pipelines are warmed up on the first questions, then every question of the golden set that the set routes to
retrieval is asked of each, alternating, so both see the same caches and machine load. It prints P50/P95 per
pipeline and the ratio of the P50s. The sample knowledge bases are ingested first (unchanged files are skipped).

Usage:
```python
from gatehouse.eval.latency_bench import format_table, run_benchmark

print(format_table(run_benchmark(repeats=1)))
```
"""

import copy
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from gatehouse.eval.datasets import GOLDEN_SET, load_golden
from gatehouse.ask import run_ask
from gatehouse.ingest import ingest, sample_groups
from gatehouse.pipelines import component_spec, load_pipeline, pipeline_path, sub_pipeline_spec
from gatehouse.stats import percentile


def without_answer_checks(spec: dict[str, Any]) -> dict[str, Any]:
    """
    The ask pipeline spec without the answerability gate, the router's evidence tier and contradiction detection.

    :param spec: A loaded ask.yml; it is not changed.
    :returns: A new spec (the answer pipeline's read into it, see `gatehouse.pipelines.component_spec`).
    :raises ValueError: If the spec has no answerability gate.
    """
    spec = copy.deepcopy(spec)
    try:
        component_spec(spec, "answerability")
    except KeyError:
        raise ValueError("The pipeline has no 'answerability' component to leave out.") from None
    component_spec(spec, "router")["init_parameters"]["evidence"] = {"enabled": False}
    verifier = component_spec(spec, "verifier")["init_parameters"]
    verifier["contradictions"] = {**(verifier.get("contradictions") or {}), "enabled": False}
    answer = sub_pipeline_spec(spec, "answer")
    del answer["components"]["answerability"]
    connections = []
    for connection in answer["connections"]:
        if connection["receiver"] == "answerability.state":
            connections.append({"sender": connection["sender"], "receiver": "generator.state"})
        elif not connection["sender"].startswith("answerability."):
            connections.append(connection)
    answer["connections"] = connections
    spec["connections"] = [c for c in spec["connections"] if c["sender"] != "answer.unanswerable"]
    return spec


def run_benchmark(*, pipeline: str | Path = "ask", repeats: int = 1, warmup: int = 3,
                  limit: int | None = None) -> dict[str, Any]:
    """
    Time the pipeline and its baseline on the golden set's retrieval questions.

    :param pipeline: Pipeline name or YAML measured.
    :param repeats: Times each question is asked of each pipeline.
    :param warmup: Questions asked of each pipeline before timing.
    :param limit: At most this many questions.
    :returns: The report: per pipeline the timings (ms), P50, P95, and the P50 ratio.
    """
    ingest(sample_groups(), progress=False)
    cases = [c for c in load_golden(GOLDEN_SET).cases if c.gold_route == "retrieve" and not c.history]
    cases = cases[:limit] if limit else cases
    spec = yaml.safe_load(pipeline_path(pipeline).read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory() as folder:
        baseline_path = Path(folder) / "ask-baseline.yml"
        baseline_path.write_text(yaml.safe_dump(without_answer_checks(spec), sort_keys=False), encoding="utf-8")
        pipelines = {"with answer checks": load_pipeline(pipeline), "baseline": load_pipeline(baseline_path)}
    for case in cases[:warmup]:
        for loaded in pipelines.values():
            run_ask(loaded, case.question, tenant=case.tenant)
    timings: dict[str, list[float]] = {name: [] for name in pipelines}
    for _ in range(repeats):
        for case in cases:
            for name, loaded in pipelines.items():
                started = time.perf_counter()
                run_ask(loaded, case.question, tenant=case.tenant)
                timings[name].append((time.perf_counter() - started) * 1000.0)
    report: dict[str, Any] = {"pipeline": str(pipeline_path(pipeline)), "questions": len(cases),
                              "repeats": repeats, "systems": {}}
    for name, values in timings.items():
        report["systems"][name] = {"p50_ms": round(percentile(values, 0.5), 1),
                                   "p95_ms": round(percentile(values, 0.95), 1)}
    report["p50_ratio"] = round(report["systems"]["with answer checks"]["p50_ms"]
                                / report["systems"]["baseline"]["p50_ms"], 3)
    return report


def format_table(report: dict[str, Any]) -> str:
    """The report as a markdown table."""
    rows = [f"Warm ask latency, {report['questions']} golden retrieval questions x {report['repeats']} "
            f"({Path(report['pipeline']).name})", "", "| pipeline | P50 ms | P95 ms |", "| --- | --- | --- |"]
    for name, figures in report["systems"].items():
        rows.append(f"| {name} | {figures['p50_ms']} | {figures['p95_ms']} |")
    rows += ["", f"P50 ratio (with / baseline): {report['p50_ratio']}"]
    return "\n".join(rows)
