"""
`gatehouse bench answerability`: the answerability gate of a pipeline on SQuAD 2.0, tuned and reported apart.

SQuAD's articles are split in file order (`gatehouse.eval.datasets.squad_articles`): `tune` (1st, 3rd, ...) and `report`
(2nd, 4th, ...). From each split a seeded sample, half unanswerable, spread evenly over its articles
(`squad_sample`). Every question is searched with BM25 over all paragraphs of all articles; its `top_k` paragraphs,
with their BM25 scores, are the passages the gate judges, configured exactly as the pipeline YAML's
`answerability:` component. (The full pipeline retrieves chunks by hybrid search; `gatehouse eval --sets squad2
--squad-sample N --squad-articles report` measures that end to end. This benchmark isolates the gate and is fast
enough to fit on.)

Per split it prints: the AUC of the best candidate's score (0 when the gate's `require_entities` rule applies) for answerable against unanswerable questions, abstention
recall and precision and the false abstention rate at the YAML threshold, and how often the best candidate sentence
(and its short span) contains the gold answer when the gold paragraph was retrieved.

With `fit=True`, a logistic regression is fitted on the `tune` split's candidates (a candidate is positive when it
contains the gold answer of an answerable question) and the threshold chosen on `tune` as the one that abstains
most while keeping the false abstention rate at or below `max_false_abstention`; both splits are then scored with
the fitted model as well, and the YAML to paste is printed. The report split never informs the fit.

Usage:
```python
from gatehouse.eval.answerability_bench import format_table, run_benchmark

report = run_benchmark(sample=300, fit=True)
print(format_table(report))
```
"""

import json
import re
from pathlib import Path
from typing import Any

import bm25s
import numpy as np
import yaml
from haystack import Document
from tqdm import tqdm

from gatehouse.components.routers.answerability_gate import AnswerabilityGate
from gatehouse.components.routers.answerability_model import DEFAULT_WEIGHTS, SIGNALS
from gatehouse.eval.bench_files import configured_component
from gatehouse.eval.datasets import EvalCase, _squad_paragraphs, data_root, squad_sample
from gatehouse.eval.retrieval_bench import data_dir
from gatehouse.pipelines import pipeline_path


def default_dataset() -> Path:
    """SQuAD 2.0 dev under the shared data folder (`$GATEHOUSE_EVAL_DATA` or `../shared/data`)."""
    return data_root() / "squad2_cs224n" / "dev-v2.0.json"


def load_gate(pipeline: str | Path = "ask", component: str = "answerability") -> AnswerabilityGate:
    """The answerability gate exactly as a pipeline YAML configures it, warmed up (ValueError if it has none)."""
    return configured_component(pipeline, component, AnswerabilityGate)


def _contains(text: str, answer: str) -> bool:
    return bool(answer) and re.sub(r"\s+", " ", answer.lower()).strip() in re.sub(r"\s+", " ", text.lower())


def _auc(positives: list[float], negatives: list[float]) -> float | None:
    """Probability that a random positive outscores a random negative (ties count half)."""
    if not positives or not negatives:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in positives for n in negatives)
    return wins / (len(positives) * len(negatives))


def _questions(gate: AnswerabilityGate, cases: list[EvalCase], paragraphs: list[Document], top_k: int,
               progress: bool, label: str) -> list[dict[str, Any]]:
    """Retrieve, then collect every candidate's signals for each case."""
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize([f"{d.meta['title']}\n{d.content}" for d in paragraphs], stopwords="en",
                                   show_progress=False), show_progress=False)
    rows = []
    for case in tqdm(cases, desc=f"answerability {label}", disable=not progress):
        hits, scores = retriever.retrieve(bm25s.tokenize([case.question], stopwords="en", show_progress=False),
                                          k=min(top_k, len(paragraphs)), show_progress=False)
        passages = [Document(id=paragraphs[i].id, content=paragraphs[i].content,
                             meta={**paragraphs[i].meta, "source_id": f"S{rank + 1}"}, score=float(s))
                    for rank, (i, s) in enumerate(zip(hits[0], scores[0]))]
        gold_source = case.gold_sources[0]
        ranked = gate.candidates(case.question, passages)
        answer_type = gate.expected_type(case.question)
        q_terms = set(gate.question_terms(case.question))
        rows.append({
            "id": case.id,
            "answerable": case.answerable,
            "gold": case.gold_answer or "",
            "missing_entities": (gate.missing_entities(case.question, passages) if gate.rules["require_entities"]
                                 else []),
            "gold_retrieved": any(f"{p.meta['kb']}/{p.id}.txt" == gold_source for p in passages),
            "candidates": [
                {"text": c.text, "signals": c.signals,
                 "span": gate.answer_span(answer_type, c.text, q_terms) or "",
                 "positive": case.answerable and _contains(c.text, case.gold_answer or "")}
                for c in ranked
            ],
        })
    return rows


def domain_rows(gate: AnswerabilityGate, names: list[str], workdir: str | Path | None, pipeline: str | Path,
                progress: bool, corpora: str | Path | None = None) -> list[dict[str, Any]]:
    """
    Candidate rows of documentation question sets (`eval/sets/domains/`, role `tune` only): each answerable, follow-up
    and unanswerable question, and each part of a multi-part one asked alone, runs through the ask pipeline up to its
    passages (routing, retrieval, assembly as in production, in the domain benchmark's data folder); a candidate unit
    is positive when it holds the gold answer by the domain benchmark's judging rule.

    :param names: Set names or YAML files (as `gatehouse bench domains --sets` takes them).
    :param corpora: The folder of the documentation corpora (default: `docs_corpora` of the shared data folder).
    :raises ValueError: For a set that is not a tuning set (report sets never inform a fit).
    """
    from gatehouse.eval import domains_bench
    from gatehouse.ingest import ingest
    from gatehouse.pipelines import load_pipeline, without_answer_cache

    sets = [domains_bench.load_set(path) for path in domains_bench.set_files(names)]
    if any(domain.role != "tune" for domain in sets):
        raise ValueError(f"Only tuning sets may inform a fit; {', '.join(names)} must all be sets of role tune.")
    from gatehouse import settings

    work = Path(workdir).expanduser().resolve() if workdir else settings.data_dir() / "bench" / "domains"
    root = domains_bench.corpora_root(corpora)
    rows: list[dict[str, Any]] = []
    with data_dir(work / "data"):
        for domain in sets:
            ingest(domains_bench._groups(domain, root), progress=False)
        spec = without_answer_cache(yaml.safe_load(pipeline_path(pipeline).read_text(encoding="utf-8")))
        copy = work / "ask-fit.yml"
        copy.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
        loaded = load_pipeline(copy)
        loaded.warm_up()
        assembler = loaded.get_component("answer").pipeline.get_component("assembler")
        for domain in sets:
            questions = []
            for case in domain.cases:
                if case.kind == "multi-part":
                    questions += [(f"{case.id}-p{n}", part.question, [], part.answer, part.aliases, part.sources)
                                  for n, part in enumerate(case.parts) if part.answerable]
                else:
                    questions.append((case.id, case.question, case.history, case.answer, case.aliases, case.sources))
            for key, question, history, answer, aliases, sources in tqdm(questions, desc=f"answerability {domain.name}",
                                                                         disable=not progress):
                result = loaded.run({"intake": {"query": question, "history": history}},
                                    include_outputs_from={"search", "condenser"})
                searched = (result.get("search") or {}).get("done")  # the passages the answerability gate judges
                assembled = assembler.run(state=searched).get("passages") if searched and not searched.get("plan") \
                    else None
                passages = (assembled or {}).get("passages") or []
                asked = ((result.get("condenser") or {}).get("state") or {}).get("condensed_query") or question
                ranked = gate.candidates(asked, passages)
                rows.append({
                    "id": key,
                    "answerable": bool(answer),
                    "gold": answer or "",
                    "missing_entities": (gate.missing_entities(asked, passages) if gate.rules["require_entities"]
                                         else []),
                    "gold_retrieved": any(p.meta.get("source") in sources for p in passages),
                    "candidates": [
                        {"text": c.text, "signals": c.signals, "span": "", "kind": c.unit.kind,
                         "key": list(c.unit.key), "lead": c.unit.lead,
                         "positive": bool(answer) and domains_bench.answer_correct(
                             f"{c.unit.lead} {c.unit.text}", answer, aliases)}
                        for c in ranked
                    ],
                })
    return rows


def _score(rows: list[dict[str, Any]], gate: AnswerabilityGate) -> None:
    """Score every candidate with the gate's logistic model and rank them; `best` is what the gate judges by."""
    for row in rows:
        for candidate in row["candidates"]:
            candidate["score"] = gate.score(candidate["signals"])
        row["candidates"].sort(key=lambda c: -c["score"])
        # A question naming something no passage names is not answered, whatever the score (require_entities).
        row["best"] = row["candidates"][0]["score"] if row["candidates"] and not row["missing_entities"] else 0.0


def _figures(rows: list[dict[str, Any]], threshold: float) -> dict[str, Any]:
    answerable = [r for r in rows if r["answerable"]]
    unanswerable = [r for r in rows if not r["answerable"]]
    abstained = [r for r in rows if r["best"] < threshold]
    reachable = [r for r in answerable if r["gold_retrieved"] and any(c["positive"] for c in r["candidates"])]

    def share(part: int, whole: int) -> float | None:
        return round(part / whole, 3) if whole else None

    return {
        "questions": len(rows),
        "answerable": len(answerable),
        "unanswerable": len(unanswerable),
        "auc": None if (a := _auc([r["best"] for r in answerable], [r["best"] for r in unanswerable])) is None
        else round(a, 3),
        "threshold": threshold,
        "abstention_recall": share(sum(not r["answerable"] for r in abstained), len(unanswerable)),
        "abstention_precision": share(sum(not r["answerable"] for r in abstained), len(abstained)),
        "false_abstention_rate": share(sum(r["answerable"] for r in abstained), len(answerable)),
        "gold_retrieved": share(sum(r["gold_retrieved"] for r in answerable), len(answerable)),
        "top1_sentence_hit": share(sum(r["candidates"][0]["positive"] for r in reachable), len(reachable)),
        "top1_span_hit": share(sum(_contains(r["candidates"][0]["span"], r["gold"]) for r in reachable),
                               len(reachable)),
        "reachable": len(reachable),
    }


def fit(rows: list[dict[str, Any]], *, regularization: float = 1.0,
        extra: list[dict[str, Any]] | None = None) -> tuple[dict[str, float], float]:
    """
    A logistic regression of "this candidate contains the gold answer" on the signals; (weights, bias). The `extra`
    rows (documentation sets) weigh as much in total as `rows` (SQuAD), so the structured documents' signals
    (headings, unit kinds) are not drowned by prose paragraphs.
    """
    from sklearn.linear_model import LogisticRegression

    groups = [(rows, 1.0)]
    if extra:
        ratio = sum(len(r["candidates"]) for r in rows) / max(1, sum(len(r["candidates"]) for r in extra))
        groups.append((extra, ratio))
    features = [[c["signals"][name] for name in SIGNALS] for group, _ in groups for r in group for c in r["candidates"]]
    labels = [c["positive"] for group, _ in groups for r in group for c in r["candidates"]]
    weights = [weight for group, weight in groups for r in group for _ in r["candidates"]]
    if len(set(labels)) < 2:
        raise ValueError("The tune split has no positive (or no negative) candidate to fit on; sample more.")
    model = LogisticRegression(C=regularization, max_iter=4000).fit(np.array(features), np.array(labels),
                                                                   sample_weight=np.array(weights))
    return ({name: round(float(w), 3) for name, w in zip(SIGNALS, model.coef_[0])},
            round(float(model.intercept_[0]), 3))


def choose_success_threshold(rows: list[dict[str, Any]], max_wrong_success: float) -> float:
    """
    The lowest score at which the best candidate may be a `success`: above it, questions whose best candidate does not
    hold the answer (unanswerable ones included) are at most `max_wrong_success` of all questions.
    """
    points = sorted({round(r["best"], 3) for r in rows})
    for threshold in points:
        wrong = sum(1 for r in rows if r["best"] >= threshold and not (r["candidates"] and r["candidates"][0]["positive"]))
        if wrong <= max_wrong_success * len(rows):
            return threshold
    return 1.0


def choose_threshold(rows: list[dict[str, Any]], max_false_abstention: float) -> float:
    """The highest threshold (most abstention) whose false abstention rate stays at or below the limit."""
    answerable = sorted(r["best"] for r in rows if r["answerable"])
    if not answerable:
        raise ValueError("No answerable question to choose a threshold on.")
    allowed = int(max_false_abstention * len(answerable))  # answerable questions that may fall below
    return round(float(np.floor(answerable[allowed] * 1000) / 1000), 3)


def run_benchmark(
    dataset: str | Path | None = None,
    *,
    pipeline: str | Path = "ask",
    sample: int = 300,
    seed: int = 0,
    top_k: int = 5,
    fit_weights: bool = False,
    max_false_abstention: float = 0.15,
    domains: list[str] | None = None,
    domains_workdir: str | Path | None = None,
    max_wrong_success: float = 0.04,
    progress: bool = True,
) -> dict[str, Any]:
    """
    Score the pipeline's answerability gate on the tune and report splits (and, with `fit_weights`, a fit on tune).

    :param dataset: SQuAD 2.0 dev JSON (default: under the shared data folder).
    :param pipeline: Pipeline name or YAML whose `answerability:` gate is measured.
    :param sample: Questions per split (half unanswerable).
    :param seed: Sampling seed.
    :param top_k: Paragraphs retrieved per question.
    :param fit_weights: Fit weights, bias and threshold on the tune split and score both splits with them too.
    :param max_false_abstention: With `fit_weights`: the largest false abstention rate the chosen threshold allows
        on tune.
    :param domains: Documentation sets of role `tune` (`eval/sets/domains/`) whose questions join the fit, and on
        which the success threshold is chosen.
    :param domains_workdir: The domain benchmark's workdir holding their ingested corpora.
    :param max_wrong_success: With `domains`: the largest share of questions whose best candidate is wrong (or that
        have no answer) that may still score at or above the success threshold.
    :param progress: Show progress bars.
    :returns: The report.
    :raises FileNotFoundError: If the dataset is missing.
    """
    path = Path(dataset) if dataset else default_dataset()
    if not path.is_file():
        raise FileNotFoundError(f"SQuAD 2.0 file not found: {path}")
    paragraphs = _squad_paragraphs(json.loads(path.read_text(encoding="utf-8")), path)
    documents = [Document(id=d.id, content=d.text, meta={"title": d.title, "kb": d.kb}) for d, _ in paragraphs]
    gate = load_gate(pipeline)
    splits = {
        split: _questions(gate, squad_sample(paragraphs, sample, articles=split, seed=seed), documents, top_k,
                          progress, split)
        for split in ("tune", "report")
    }
    weights = dict(DEFAULT_WEIGHTS if gate.model["weights"] is None else gate.model["weights"])
    report: dict[str, Any] = {
        "pipeline": str(pipeline_path(pipeline)),
        "dataset": str(path),
        "sample": sample,
        "seed": seed,
        "top_k": top_k,
        "configured": {"weights": weights, "bias": gate.model["bias"], "threshold": gate.threshold, "splits": {}},
    }
    for split, rows in splits.items():
        _score(rows, gate)
        report["configured"]["splits"][split] = _figures(rows, gate.threshold)
    extra = domain_rows(gate, domains, domains_workdir, pipeline, progress) if domains else []
    if extra:
        _score(extra, gate)
        report["configured"]["splits"]["domains"] = _figures(extra, gate.threshold)
    if fit_weights:
        fitted, bias = fit(splits["tune"], extra=extra)
        for rows in [*splits.values(), extra]:
            _score(rows, AnswerabilityGate(model={"weights": fitted, "bias": bias}))
        threshold = choose_threshold(splits["tune"] + extra, max_false_abstention)
        report["fitted"] = {
            "weights": fitted,
            "bias": bias,
            "threshold": threshold,
            "max_false_abstention": max_false_abstention,
            "splits": {split: _figures(rows, threshold) for split, rows in splits.items()},
        }
        if extra:
            report["fitted"]["splits"]["domains"] = _figures(extra, threshold)
            report["fitted"]["success_threshold"] = max(threshold, choose_success_threshold(extra, max_wrong_success))
    return report


_COLUMNS = ("questions", "auc", "threshold", "abstention_recall", "abstention_precision", "false_abstention_rate",
            "gold_retrieved", "top1_sentence_hit", "top1_span_hit")


def format_table(report: dict[str, Any]) -> str:
    """The report as markdown tables (configured model, then the fit), and the YAML of the fit."""
    rows = [f"Answerability gate of {Path(report['pipeline']).name} on SQuAD 2.0 (sample {report['sample']} per "
            f"split, seed {report['seed']}, BM25 top {report['top_k']} paragraphs)", ""]
    for model in ("configured", "fitted"):
        if model not in report:
            continue
        rows += [f"{model}:", "", "| split | " + " | ".join(_COLUMNS) + " |", "|---" * (len(_COLUMNS) + 1) + "|"]
        for split, figures in report[model]["splits"].items():
            rows.append(f"| {split} | " + " | ".join("—" if figures[c] is None else str(figures[c])
                                                     for c in _COLUMNS) + " |")
        rows.append("")
    if "fitted" in report:
        fitted = report["fitted"]
        rows += ["fitted on tune; paste under answerability.init_parameters:", "",
                 yaml.safe_dump({"threshold": fitted["threshold"],
                                 **({"success_threshold": fitted["success_threshold"]}
                                    if "success_threshold" in fitted else {}),
                                 "model": {"bias": fitted["bias"], "weights": fitted["weights"]}},
                                sort_keys=False).rstrip()]
    return "\n".join(rows)
