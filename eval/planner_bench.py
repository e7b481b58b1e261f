"""
`gatehouse bench planner`: how long a plan's parts searched at the same time take beside one part after the other.

The golden set's multi-part questions are planned by ask.yml's `planner`; each plan is searched by ask.yml's
`search` component as configured (its parts in parallel) and with `max_workers` 1 (one part after the other),
alternating, so both see the same caches and machine load. Per question: the parallel wall time, the slowest part
searched alone (the sequential run's slowest part) and their ratio (the issue's target: at most 1.3), and the
sequential total. The sample knowledge bases are ingested first (unchanged files are skipped).

Usage:
```python
from gatehouse.eval.planner_bench import format_table, run_benchmark

print(format_table(run_benchmark(repeats=1)))
```
"""

import copy
from pathlib import Path
from typing import Any

from gatehouse.components.pipelines.search_pipeline import SearchPipeline
from gatehouse.components.state import new_state
from gatehouse.eval.datasets import GOLDEN_SET, load_golden
from gatehouse.ingest import ingest, sample_groups
from gatehouse.pipelines import load_pipeline, pipeline_path
from gatehouse.stats import percentile


def run_benchmark(*, pipeline: str | Path = "ask", repeats: int = 1, limit: int | None = None) -> dict[str, Any]:
    """
    Time parallel and sequential search of the golden multi-part questions' parts.

    :param pipeline: The ask pipeline (name or YAML) whose `planner` and `search` are measured.
    :param repeats: Times each question is retrieved each way.
    :param limit: At most this many questions.
    :returns: The report: per question the parts, wall, slowest-alone and sequential ms, and the ratios' P50/P95.
    """
    ingest(sample_groups(), progress=False)
    loaded = load_pipeline(pipeline)
    planner = loaded.get_component("planner")
    parallel: SearchPipeline = loaded.get_component("search")
    sequential = copy.copy(parallel)  # the same search pipeline, one part at a time
    sequential.max_workers = 1
    parallel.warm_up()
    cases = [c for c in load_golden(GOLDEN_SET).cases if "multi-part" in c.tags]
    cases = cases[:limit] if limit else cases
    rows = []
    for case in cases:
        state = planner.run(state=new_state(case.question, tenant=case.tenant))["state"]
        if "plan" not in state:
            rows.append({"question": case.question, "parts": 1})
            continue
        sequential.run(state=state)  # warm: the parts' embeddings and the stores' snapshots are cached alike
        for _ in range(repeats):
            together = parallel.run(state=state)["done"]["plan"]
            alone = sequential.run(state=state)["done"]["plan"]
            slowest_alone = max(part["ms"] for part in alone["parts"])
            rows.append({"question": case.question, "parts": len(alone["parts"]), "wall_ms": together["wall_ms"],
                         "slowest_alone_ms": slowest_alone, "sequential_ms": alone["wall_ms"],
                         "ratio": round(together["wall_ms"] / slowest_alone, 3)})
    timed = [row for row in rows if "ratio" in row]
    ratios = [row["ratio"] for row in timed]
    speedups = [row["sequential_ms"] / row["wall_ms"] for row in timed]
    return {
        "pipeline": str(pipeline_path(pipeline)),
        "max_workers": parallel.max_workers,
        "questions": len(cases),
        "not_planned": sum(1 for row in rows if row["parts"] == 1),
        "rows": rows,
        "ratio_p50": round(percentile(ratios, 0.5), 3) if ratios else None,
        "ratio_p95": round(percentile(ratios, 0.95), 3) if ratios else None,
        "speedup_p50": round(percentile(speedups, 0.5), 3) if speedups else None,
    }


def format_table(report: dict[str, Any]) -> str:
    """The report as a markdown table."""
    lines = [f"A plan's parts searched, {report['questions']} golden multi-part questions "
             f"({Path(report['pipeline']).name}, max_workers {report['max_workers']}; "
             f"{report['not_planned']} not split)", "",
             "| parts | parallel wall ms | slowest part alone ms | sequential ms | wall / slowest |",
             "| --- | --- | --- | --- | --- |"]
    for row in report["rows"]:
        if "ratio" in row:
            lines.append(f"| {row['parts']} | {row['wall_ms']} | {row['slowest_alone_ms']} | {row['sequential_ms']} "
                         f"| {row['ratio']} |")
    lines += ["", f"wall / slowest part alone: P50 {report['ratio_p50']}, P95 {report['ratio_p95']} (target <= 1.3); "
                  f"sequential / parallel P50 {report['speedup_p50']}"]
    return "\n".join(lines)
