"""
`gatehouse bench ask`: warm ask latency on the sample knowledge bases, Haystack's input copying within it, and the
answer cache's hit, beside another checkout's Gatehouse (a baseline) measured in the same run.

Each side runs in a process of its own (`python ask_bench.py --worker`, this file run by path, so a baseline
interpreter runs it against its own `gatehouse` package): it loads `ask.yml` without its answer cache, asks every
golden question meant for retrieval once to warm up, then `--rounds` times each, timing each ask and the time Haystack
spends copying component inputs (its `_deepcopy_with_exceptions`); then, with the answer cache on, one question once
(a stored miss) and `--hits` times again (exact hits). The sides take turns, round by round, so both see the same
machine. Both read the same data folder (the sample knowledge bases, ingested first).

With `--set prometheus` (a documentation set of `eval/sets/domains/`), the set's corpus is ingested as its KB instead
and its answerable and unanswerable questions are timed, once each per round, after its follow-up and multi-part
questions warmed the process up: documentation pages are long, so what a question costs there (its answer step above
all) is not what it costs on the short sample pages. Every timed ask also adds its stages' milliseconds (the response's
`metadata.latency_ms`), printed as each stage's share of the asks' total. With a baseline, the questions whose answer
(status and text) differs between the sides are counted (a change meant only to be faster should print 0).

Usage:
```bash
gatehouse bench ask                                             # this checkout only
gatehouse bench ask --baseline-python ../base/.venv/bin/python  # beside another checkout's Gatehouse
gatehouse bench ask --set prometheus --corpora ../shared/data/docs_corpora --rounds 1 --hits 0
```
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

WORKER_QUESTIONS = "questions"
CACHE_QUESTION = "How do I rotate an API key?"


def _worker(questions: list[str], rounds: int, hits: int, warm: list[str] | None = None) -> dict[str, Any]:
    """Time the asks of this process's Gatehouse (see the module docstring); only APIs every version has."""
    from haystack.core.pipeline import base, pipeline as haystack_pipeline

    from gatehouse import runtime

    runtime.configure()
    copying = [0.0]
    original = haystack_pipeline._deepcopy_with_exceptions

    def timed_copy(value: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(value)
        finally:
            copying[0] += time.perf_counter() - started

    haystack_pipeline._deepcopy_with_exceptions = base._deepcopy_with_exceptions = timed_copy
    try:
        return _timed_asks(questions, rounds, hits, copying, questions if warm is None else warm)
    finally:
        haystack_pipeline._deepcopy_with_exceptions = base._deepcopy_with_exceptions = original


def _timed_asks(questions: list[str], rounds: int, hits: int, copying: list[float], warm: list[str]) -> dict[str, Any]:
    """The warm asks (after asking `warm`) and cache hits of `_worker`, `copying[0]` counting Haystack's copying time;
    the timed asks' stage milliseconds summed by stage."""
    import yaml

    from gatehouse.ask import run_ask
    from gatehouse.pipelines import load_pipeline, pipeline_path, without_answer_cache

    spec = yaml.safe_load(pipeline_path("ask").read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "ask-uncached.yml"
        path.write_text(yaml.safe_dump(without_answer_cache(spec), sort_keys=False), encoding="utf-8")
        uncached = load_pipeline(path)
    uncached.warm_up()
    for question in warm:
        run_ask(uncached, question)
    asks, copies, stages, answers = [], [], {}, {}
    for _ in range(rounds):
        for question in questions:
            copying[0] = 0.0
            started = time.perf_counter()
            response = run_ask(uncached, question)
            asks.append((time.perf_counter() - started) * 1000.0)
            copies.append(copying[0] * 1000.0)
            answers[question] = [response.get("status"), response.get("answer") or ""]
            for stage, ms in response["metadata"]["latency_ms"].items():
                if stage != "total":
                    stages[stage] = stages.get(stage, 0.0) + ms
    cache_hits: list[float] = []
    timed = {"ask_ms": asks, "copy_ms": copies, "cache_hit_ms": cache_hits, "stage_ms": stages, "answers": answers}
    if not hits:
        return timed
    cached = load_pipeline("ask")
    cached.warm_up()
    run_ask(cached, CACHE_QUESTION)
    for _ in range(hits):
        started = time.perf_counter()
        response = run_ask(cached, CACHE_QUESTION)
        cache_hits.append((time.perf_counter() - started) * 1000.0)
        if (response["metadata"].get("cache") or {}).get("status") != "hit":
            raise RuntimeError(f"the repeated question was not answered from the cache: {response['metadata']}")
    return timed


def _side(python: str, questions: list[str], rounds: int, hits: int, data: Path,
          warm: list[str] | None = None) -> dict[str, Any]:
    """One worker run of the interpreter `python` over the data folder `data`."""
    environment = {**{k: v for k, v in os.environ.items() if k != "GATEHOUSE_PIPELINES_DIR"},
                   "GATEHOUSE_DATA_DIR": str(data), "HAYSTACK_TELEMETRY_ENABLED": "False", "HF_HUB_OFFLINE": "1"}
    arguments = json.dumps({WORKER_QUESTIONS: questions, "rounds": rounds, "hits": hits, "warm": warm})
    with tempfile.TemporaryDirectory() as elsewhere:  # not a project folder: each side reads the pipelines it ships
        done = subprocess.run([python, str(Path(__file__).resolve()), "--worker", arguments], env=environment,
                              capture_output=True, text=True, check=False, cwd=elsewhere)
    if done.returncode != 0:
        raise RuntimeError(f"{python}: the ask worker failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _questions(domain_set: str | None, corpora: str | Path | None, limit: int | None) -> tuple[str, list[str],
                                                                                            list[str] | None]:
    """
    Ingest what is asked (in a process of its own: a data folder's store is open in one process at a time, and the
    workers need it) and return its label, the timed questions and the warm-up questions (None: the timed ones).
    """
    if domain_set is None:
        from gatehouse.eval.datasets import GOLDEN_SET, load_golden

        subprocess.run([sys.executable, "-c", "from gatehouse.ingest import ingest, sample_groups; "
                        "ingest(sample_groups(), progress=False)"], check=True)
        cases = [c for c in load_golden(GOLDEN_SET).cases if c.gold_route == "retrieve" and not c.history
                 and c.tenant == "public"]
        return "golden retrieval questions", [case.question for case in (cases[:limit] if limit else cases)], None
    from gatehouse.eval.domains_bench import corpora_root, load_set, set_files

    domain = load_set(set_files([domain_set])[0])
    folder = corpora_root(corpora) / domain.corpus
    if not folder.is_dir():
        raise ValueError(f"The corpus of {domain.name} is not at {folder}; pass --corpora.")
    subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; "
                    "from gatehouse.ingest import IngestGroup, files_under, ingest; "
                    "folder = Path(sys.argv[2]); "
                    "ingest([IngestGroup(kb=sys.argv[1], tenant=None, root=folder, files=files_under(folder))], "
                    "progress=False)", domain.kb or domain.corpus, str(folder)], check=True)
    timed = [c.question for c in domain.cases if c.kind in ("answerable", "unanswerable")]
    warm = [c.question for c in domain.cases if c.kind in ("follow-up", "multi-part")]
    return f"{domain.name} questions (answerable and unanswerable)", timed[:limit] if limit else timed, warm


def run_benchmark(*, baseline_python: str | None = None, rounds: int = 3, hits: int = 50,
                  limit: int | None = None, domain_set: str | None = None,
                  corpora: str | Path | None = None) -> dict[str, Any]:
    """
    Time warm asks of this checkout (and of `baseline_python`'s Gatehouse) on the golden retrieval questions, or on a
    documentation set's corpus and questions.

    :param baseline_python: The interpreter of another checkout's environment; None measures this one only.
    :param rounds: Times each question is asked by each side, the sides taking turns round by round.
    :param hits: Answer-cache hits timed per side (0: none).
    :param limit: At most this many questions.
    :param domain_set: A set of `eval/sets/domains/` (its corpus ingested as its KB) instead of the sample KBs.
    :param corpora: The folder of the documentation corpora (default: `docs_corpora` of the shared data folder).
    :returns: The report: per side the ask P50/P95, the copying share, the cache hit P50, each stage's share; the P50
        ratio.
    :raises ValueError: If `baseline_python` is not an executable file, or the set or its corpus is missing.
    """
    from gatehouse.settings import data_dir
    from gatehouse.stats import percentile

    if baseline_python and not os.access(baseline_python, os.X_OK):
        raise ValueError(f"--baseline-python {baseline_python} is not an executable interpreter.")
    label, questions, warm = _questions(domain_set, corpora, limit)
    sides = {"this checkout": sys.executable, **({"baseline": baseline_python} if baseline_python else {})}
    runs: dict[str, dict[str, Any]] = {name: {"ask_ms": [], "copy_ms": [], "cache_hit_ms": [], "stage_ms": {},
                                              "answers": {}} for name in sides}
    for _ in range(rounds):
        for name, python in sides.items():
            result = _side(python, questions, 1, hits, data_dir(), warm)
            for key in ("ask_ms", "copy_ms", "cache_hit_ms"):
                runs[name][key] += result[key]
            for stage, ms in result.get("stage_ms", {}).items():
                runs[name]["stage_ms"][stage] = runs[name]["stage_ms"].get(stage, 0.0) + ms
            runs[name]["answers"].update(result.get("answers", {}))
    report: dict[str, Any] = {"questions": len(questions), "asked": label, "rounds": rounds, "sides": {}}
    for name, run in runs.items():
        total = sum(run["ask_ms"])
        report["sides"][name] = {
            "python": sides[name],
            "ask_p50_ms": round(percentile(run["ask_ms"], 0.5), 1),
            "ask_p95_ms": round(percentile(run["ask_ms"], 0.95), 1),
            "copy_share": round(sum(run["copy_ms"]) / total, 3),
            "cache_hit_p50_ms": round(percentile(run["cache_hit_ms"], 0.5), 2) if run["cache_hit_ms"] else None,
            "stage_shares": {stage: round(ms / total, 3) for stage, ms in
                             sorted(run["stage_ms"].items(), key=lambda item: -item[1])},
        }
    if baseline_python:
        mine, theirs = runs["this checkout"]["answers"], runs["baseline"]["answers"]
        report["answers_differing"] = sorted(q for q in questions if mine.get(q) != theirs.get(q))
        report["ratio_p50"] = round(report["sides"]["this checkout"]["ask_p50_ms"]
                                    / report["sides"]["baseline"]["ask_p50_ms"], 3)
    return report


def format_table(report: dict[str, Any]) -> str:
    """The report as markdown tables: latency per side, then each stage's share of the asks' time."""
    lines = [f"Warm ask, {report['questions']} {report.get('asked', 'golden retrieval questions')} x "
             f"{report['rounds']} rounds (answer cache off; the cache hit with it on)", "",
             "| side | ask P50 ms | ask P95 ms | Haystack input copying | cache hit P50 ms |", "| --- | --- | --- | --- | --- |"]
    for name, side in report["sides"].items():
        lines.append(f"| {name} | {side['ask_p50_ms']} | {side['ask_p95_ms']} | {side['copy_share']:.1%} "
                     f"| {side['cache_hit_p50_ms'] if side['cache_hit_p50_ms'] is not None else '-'} |")
    if "ratio_p50" in report:
        lines += ["", f"ask P50, this checkout / baseline: {report['ratio_p50']}"]
    if "answers_differing" in report:
        lines.append(f"answers (status and text) differing from the baseline's: {len(report['answers_differing'])} "
                     f"of {report['questions']}")
    stages = list(dict.fromkeys(stage for side in report["sides"].values() for stage in side.get("stage_shares", {})))
    if stages:
        names = list(report["sides"])
        lines += ["", "Share of the asks' time per stage (metadata.latency_ms):", "",
                  "| stage | " + " | ".join(names) + " |", "| --- |" + " --- |" * len(names)]
        for stage in stages:
            lines.append(f"| {stage} | " + " | ".join(f"{report['sides'][n].get('stage_shares', {}).get(stage, 0):.1%}"
                                                      for n in names) + " |")
    return "\n".join(lines)


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    options = json.loads(sys.argv[2])
    print(json.dumps(_worker(options[WORKER_QUESTIONS], options["rounds"], options["hits"], options.get("warm"))))
