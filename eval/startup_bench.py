"""
`gatehouse bench startup`: what a new process costs, beside the floor of the same machine in the same run.

Every figure is the median of `repeats` new processes on the data folder in use (the sample knowledge bases are
ingested first; unchanged files are skipped):

- floor: `python -c pass`, and `import torch` (which Haystack imports whenever torch is installed);
- `gatehouse --help`, `gatehouse kb list`, and `gatehouse ask <question>` end to end;
- the split of a new process's first ask: import (Gatehouse, Haystack), load (`ask.yml` into a pipeline), warm-up
  (models, stores) and the first ask;
- server ready: `gatehouse serve` until `/status` lists its pipelines;
- asks per CPU-second of one warm process: distinct golden questions asked one after another, divided by the CPU
  time the process used for them (the answer cache cannot help: no question repeats).

Usage:
```python
from gatehouse.eval.startup_bench import format_table, run_benchmark

print(format_table(run_benchmark(repeats=3)))
```
"""

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

QUESTION = "How do I rotate an API key?"
CHILD = "gatehouse.eval.startup_bench"


def _wall(command: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    return time.perf_counter() - started


def _median(samples: list[float]) -> float:
    return round(statistics.median(samples), 2)


def child(asks: int) -> dict[str, Any]:
    """In a new process: the first ask's split, then `asks` more distinct questions per CPU-second."""
    started = time.perf_counter()
    from gatehouse.ask import run_ask
    from gatehouse.pipelines import load_pipeline

    imported = time.perf_counter()
    pipeline = load_pipeline("ask")
    loaded = time.perf_counter()
    pipeline.warm_up()
    warmed = time.perf_counter()
    first = run_ask(pipeline, QUESTION)
    asked = time.perf_counter()
    split = {"import_s": imported - started, "load_s": loaded - imported, "warm_up_s": warmed - loaded,
             "first_ask_s": asked - warmed, "status": first["status"]}
    if asks:
        from gatehouse.eval.datasets import GOLDEN_SET, load_golden

        questions = [case.question for case in load_golden(GOLDEN_SET).cases if case.question != QUESTION][:asks]
        cpu, wall = time.process_time(), time.perf_counter()
        for question in questions:
            run_ask(pipeline, question)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        split.update(asks=len(questions), asks_cpu_s=cpu, asks_wall_s=wall)
    return split


def _server_ready() -> float:
    from gatehouse.eval.serving_bench import serve_process
    from gatehouse.settings import project_path

    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        with serve_process(project_path("hayhooks.yml"), Path(folder) / "server.log", deployments=3,
                           what="the startup benchmark"):
            return time.perf_counter() - started


def run_benchmark(*, repeats: int = 3, asks: int = 20) -> dict[str, Any]:
    """
    Measure new processes.

    :param repeats: New processes per figure (the median is reported).
    :param asks: Distinct golden questions asked by one warm process for the asks-per-CPU-second figure.
    :returns: The report (seconds).
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    python, cli = sys.executable, [sys.executable, "-m", "gatehouse.cli"]
    _wall([*cli, "ingest"])  # in its own process: the store admits one process at a time
    figures: dict[str, list[float]] = {name: [] for name in
                                       ("python", "import_torch", "help", "kb_list", "ask", "server_ready")}
    splits = []
    for index in range(repeats):
        figures["python"].append(_wall([python, "-c", "pass"]))
        figures["import_torch"].append(_wall([python, "-c", "import torch"]))
        figures["help"].append(_wall([*cli, "--help"]))
        figures["kb_list"].append(_wall([*cli, "kb", "list"]))
        figures["ask"].append(_wall([*cli, "ask", QUESTION]))
        done = subprocess.run([python, "-m", CHILD, str(asks if index == 0 else 0)], capture_output=True, text=True,
                              timeout=1200)
        if done.returncode != 0:
            raise RuntimeError(f"the startup benchmark's child failed:\n{done.stderr[-2000:]}")
        splits.append(json.loads(done.stdout.strip().splitlines()[-1]))
        figures["server_ready"].append(_server_ready())
    report: dict[str, Any] = {name: _median(samples) for name, samples in figures.items()}
    report["split"] = {key: _median([split[key] for split in splits])
                       for key in ("import_s", "load_s", "warm_up_s", "first_ask_s")}
    throughput = splits[0]
    if throughput.get("asks"):
        report["asks"] = throughput["asks"]
        report["asks_per_cpu_s"] = round(throughput["asks"] / throughput["asks_cpu_s"], 2)
        report["ask_wall_mean_s"] = round(throughput["asks_wall_s"] / throughput["asks"], 2)
    report["repeats"] = repeats
    return report


def format_table(report: dict[str, Any]) -> str:
    """The report as text, each figure beside the floor of the same run."""
    floor = report["import_torch"]
    split = report["split"]
    lines = [
        f"new processes, median of {report['repeats']} (seconds; x = times the `import torch` floor of this run)",
        f"  python -c pass            {report['python']:>6.2f}",
        f"  import torch (floor)      {floor:>6.2f}",
        f"  gatehouse --help          {report['help']:>6.2f}  x{report['help'] / floor:.2f}",
        f"  gatehouse kb list         {report['kb_list']:>6.2f}  x{report['kb_list'] / floor:.2f}",
        f"  gatehouse ask (end to end) {report['ask']:>5.2f}  x{report['ask'] / floor:.2f}",
        f"    import {split['import_s']:.2f} / load {split['load_s']:.2f} / warm-up {split['warm_up_s']:.2f} / "
        f"first ask {split['first_ask_s']:.2f}",
        f"  gatehouse serve ready     {report['server_ready']:>6.2f}  x{report['server_ready'] / floor:.2f}",
    ]
    if "asks_per_cpu_s" in report:
        lines.append(f"one warm process: {report['asks']} distinct questions, {report['asks_per_cpu_s']} asks per "
                     f"CPU-second ({report['ask_wall_mean_s']} s wall per ask on average)")
    return "\n".join(lines)


if __name__ == "__main__":
    print(json.dumps(child(int(sys.argv[1]) if len(sys.argv) > 1 else 0)))
