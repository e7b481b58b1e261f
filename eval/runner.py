"""
`gatehouse eval`: ask the real `ask.yml` every question of the evaluation sets, score, report and judge regressions.

For each set: its corpus (or the sample KBs) is ingested through the real `index.yml` into the evaluation data
directory (unchanged files are skipped on later runs, embeddings are cached), a copy of `ask.yml` gets the set's
knowledge bases when it brings its own, and every case runs through the pipeline; the passages the answer was
built from are kept as the retrieved contexts. The records are scored with the non-LLM Ragas metrics and
Gatehouse's own, with the LLM judge when one is configured, compared with the previous run and written as a report.

Usage:
```python
from gatehouse.eval.runner import EvalOptions, run_eval

exit_code = run_eval(EvalOptions(sets=["golden"], quick=True))   # 0, or 1 when a metric regressed
run_eval(EvalOptions(sets=["golden"], tags=["multi-part"]))        # only the cases with one of these tags
run_eval(EvalOptions(sets=["golden"], generator="llm"))            # pipelines/generators/llm.yml answers
```
"""

import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from tqdm import tqdm

from gatehouse.settings import data_dir
from gatehouse.eval.datasets import DatasetNotPresent, EvalCase, EvalSet, load_set, stratified_slice, write_corpus
from gatehouse.pipelines import pipeline_path, without_answer_cache

DEFAULT_SETS = ("golden", "mtrag_un", "squad2")
QUICK_LIMITS = {"golden": 24, "mtrag_un": 12, "squad2": 12}
DEFAULT_REPORTS = Path("eval") / "reports"  # under the working directory


@dataclass
class EvalOptions:
    """What `gatehouse eval` runs."""

    sets: list[str] = field(default_factory=lambda: list(DEFAULT_SETS))
    quick: bool = False
    limit: int | None = None
    judge_repeats: int | None = None
    dry_run: bool = False
    baseline: str | None = None
    thresholds: str | None = None
    reports_root: Path = DEFAULT_REPORTS
    pipeline: Path = field(default_factory=lambda: pipeline_path("ask"))
    progress: bool = True
    squad_sample: int | None = None
    squad_articles: str = "all"
    seed: int = 0
    tags: list[str] = field(default_factory=list)
    generator: str | None = None

    def set_options(self, name: str) -> dict[str, Any]:
        """Loader options of one set (only squad2 has any)."""
        if name == "squad2" and self.squad_sample is not None:
            return {"sample": self.squad_sample, "articles": self.squad_articles, "seed": self.seed}
        return {}

    def slice_label(self, name: str) -> str:
        """How the set was sliced, appended to its dataset version so that runs are compared like with like."""
        options = self.set_options(name)
        tags = f"-tags-{'+'.join(sorted(self.tags))}" if self.tags else ""
        tags += f"-generator-{self.generator}" if self.generator else ""
        if options:
            return f"-sample{options['sample']}-{options['articles']}-seed{options['seed']}{tags}"
        limit = _limit(self, name)
        return (f"-first{limit}" if limit else "") + tags


def tagged_set(eval_set: EvalSet, tags: list[str], limit: int | None) -> EvalSet:
    """
    The cases of a set that carry at least one of `tags`, then a slice of `limit` of them stratified by first tag.

    ```python
    tagged_set(load_set("golden"), ["multi-part"], limit=None).cases   # the multi-part cases
    ```
    """
    wanted = set(tags)
    cases = [case for case in eval_set.cases if wanted & set(case.tags)]
    cases = stratified_slice(cases, limit=limit, stratum=lambda c: c.tags[0] if c.tags else "", key=lambda c: c.id)
    return replace(eval_set, cases=cases)


def set_pipeline(eval_set: EvalSet, pipeline: Path, work_dir: Path) -> Path:
    """
    The ask pipeline for a set: a copy of `pipeline` without its answer cache (every case runs every gate, also when
    a condensed follow-up repeats an earlier question), whose router knows the set's own knowledge bases if it has
    any.

    :returns: The YAML file to load.
    """
    spec = without_answer_cache(yaml.safe_load(pipeline.read_text(encoding="utf-8")))
    if eval_set.knowledge_bases:
        router = spec["components"]["router"]["init_parameters"]
        router["knowledge_bases"] = [dict(kb) for kb in eval_set.knowledge_bases]
    copy = work_dir / f"ask-{eval_set.name}.yml"
    copy.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return copy


def ingest_set(eval_set: EvalSet, work_dir: Path) -> dict[str, Any]:
    """Ingest the set's corpus (written as files under `work_dir`), or the sample KBs when it has none."""
    from gatehouse.ingest import ingest, sample_groups

    if eval_set.corpus:
        root = work_dir / "corpus" / eval_set.name
        write_corpus(eval_set.corpus, root)
        groups = sample_groups(root)
    else:
        groups = sample_groups()
    return ingest(groups, progress=False).as_dict()


def _retrieved(result: dict[str, Any]) -> list[dict[str, str]]:
    """The passages the answer was built from: of every part when a plan was answered, else the question's."""
    answered = next(iter((result.get("answer") or {}).values()), None) or {}
    parts = (answered.get("plan") or {}).get("parts") or []
    if parts:
        documents = [document for part in parts for document in part.get("passages") or []]
    else:
        documents = answered.get("passages") or []
    return [{"source": f"{d.meta.get('kb')}/{d.meta.get('source')}", "text": d.content or ""} for d in documents]


def ask_case(pipeline: Any, eval_set: EvalSet, case: EvalCase) -> dict[str, Any]:
    """Run one case through the ask pipeline and return its record (see `gatehouse.eval.metrics`)."""
    result = pipeline.run(
        {"intake": {"query": case.question, "tenant": case.tenant, "history": case.history}},
        include_outputs_from={"answer"},
    )
    return {
        "set": eval_set.name,
        "id": case.id,
        "question": case.question,
        "tags": list(case.tags),
        "gold": {"answer": case.gold_answer, "sources": list(case.gold_sources), "contexts": list(case.gold_contexts),
                 "kb": case.gold_kb, "intent": case.gold_intent, "route": case.gold_route,
                 "answerable": case.answerable,
                 "parts": [{"aspect": part.aspect, "answer": part.gold_answer, "facts": list(part.gold_facts),
                            "sources": list(part.gold_sources), "kb": part.gold_kb, "answerable": part.answerable}
                           for part in case.gold_parts]},
        "response": result["response"]["response"],
        "retrieved": _retrieved(result),
    }


def work_dir() -> Path:
    """Where evaluation corpora and pipeline copies are written: `<data dir>/eval-work`."""
    folder = data_dir() / "eval-work"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def prepare_set(eval_set: EvalSet, pipeline_file: Path, *, generator: str | None = None) -> Any:
    """Ingest the set and return its warmed-up ask pipeline (with the generator profile `generator`, if given)."""
    from gatehouse.pipelines import load_pipeline

    folder = work_dir()
    ingest_set(eval_set, folder)
    pipeline = load_pipeline(set_pipeline(eval_set, pipeline_file, folder), generator=generator)
    pipeline.warm_up()
    return pipeline


def run_set(eval_set: EvalSet, pipeline_file: Path, *, progress: bool,
            generator: str | None = None) -> list[dict[str, Any]]:
    """Ingest, then ask every case of one set."""
    pipeline = prepare_set(eval_set, pipeline_file, generator=generator)
    return [ask_case(pipeline, eval_set, case)
            for case in tqdm(eval_set.cases, desc=f"ask {eval_set.name}", unit="q", disable=not progress)]


def _limit(options: EvalOptions, name: str) -> int | None:
    if options.set_options(name):
        return None
    if options.limit is not None:
        return options.limit
    return QUICK_LIMITS.get(name) if options.quick else None


def run_eval(options: EvalOptions) -> int:
    """
    The whole evaluation; prints the summary and the verdict.

    :returns: 0, or 1 when the verdict names regressed metrics.
    """
    from gatehouse.eval.judge import JudgeConfig, run_judge
    from gatehouse.eval.metrics import aggregate, score_records
    from gatehouse.eval.report import render_summary, run_metadata, write_report
    from gatehouse.eval.verdict import decide, format_verdict, previous_runs

    started, clock = datetime.now(UTC), time.perf_counter()
    overrides = {"repeats": options.judge_repeats} if options.judge_repeats else {}
    judge_config = JudgeConfig.from_env(**overrides)
    records: list[dict[str, Any]] = []
    versions: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for name in options.sets:
        try:
            if options.tags:  # the whole set, filtered, then sliced (a loader's limit would slice before filtering)
                eval_set = tagged_set(load_set(name, **options.set_options(name)), options.tags, _limit(options, name))
            else:
                eval_set = load_set(name, limit=_limit(options, name), **options.set_options(name))
        except DatasetNotPresent as missing:
            skipped[name] = missing.reason
            print(f"skipping {name}: {missing.reason}")
            continue
        if not eval_set.cases:
            skipped[name] = f"no case tagged {', '.join(options.tags)}"
            print(f"skipping {name}: {skipped[name]}")
            continue
        versions[name] = eval_set.version + options.slice_label(name)
        records += run_set(eval_set, options.pipeline, progress=options.progress, generator=options.generator)
    if not records:
        print("nothing to evaluate: no set is present")
        return 2

    records = score_records(records, progress=options.progress)
    judge_run = None
    if judge_config is not None:
        judge_run = run_judge(records, judge_config, dry_run=options.dry_run, progress=options.progress)
        if options.dry_run:
            return 0
        records = judge_run["records"] or records
    elif options.dry_run:
        print("no judge configured (GATEHOUSE_JUDGE_URL / GATEHOUSE_JUDGE_MODEL): nothing would be sent")
        return 0

    aggregates = aggregate(records)
    metadata = run_metadata(
        datasets=versions, duration_s=time.perf_counter() - clock, started=started,
        judge_model=judge_config.model if judge_config else None, pipelines_directory=options.pipeline.parent,
        extra={"quick": options.quick, "tags": list(options.tags), "generator": options.generator,
               "skipped_sets": skipped},
    )
    history = previous_runs(options.reports_root)  # read once: the verdict's baseline and the report's trends
    verdict = decide({"metadata": metadata, "aggregates": aggregates}, reports_root=options.reports_root,
                     baseline=options.baseline, thresholds=options.thresholds, history=history)
    results = {"metadata": metadata, "aggregates": aggregates, "verdict": verdict, "records": records}
    if judge_run is not None:
        results["judge"] = {key: judge_run[key] for key in ("estimate", "usage", "cost")}
    run_dir = write_report(results, options.reports_root, history)
    print(render_summary(results))
    print(format_verdict(verdict))
    print(f"report: {run_dir / 'report.html'}")
    return 1 if verdict["regressed"] else 0
