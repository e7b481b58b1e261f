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

from gatehouse.components.routers.answerability_gate import DEFAULT_WEIGHTS, SIGNALS, AnswerabilityGate
from gatehouse.eval.bench_files import configured_component
from gatehouse.eval.datasets import EvalCase, _squad_paragraphs, data_root, squad_sample
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
            "missing_entities": gate.missing_entities(case.question, passages) if gate.require_entities else [],
            "gold_retrieved": any(f"{p.meta['kb']}/{p.id}.txt" == gold_source for p in passages),
            "candidates": [
                {"text": c.text, "signals": c.signals,
                 "span": gate.answer_span(answer_type, c.text, q_terms) or "",
                 "positive": case.answerable and _contains(c.text, case.gold_answer or "")}
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


def fit(rows: list[dict[str, Any]], *, regularization: float = 1.0) -> tuple[dict[str, float], float]:
    """A logistic regression of "this candidate contains the gold answer" on the signals; (weights, bias)."""
    from sklearn.linear_model import LogisticRegression

    features = [[c["signals"][name] for name in SIGNALS] for r in rows for c in r["candidates"]]
    labels = [c["positive"] for r in rows for c in r["candidates"]]
    if len(set(labels)) < 2:
        raise ValueError("The tune split has no positive (or no negative) candidate to fit on; sample more.")
    model = LogisticRegression(C=regularization, max_iter=2000).fit(np.array(features), np.array(labels))
    return ({name: round(float(w), 3) for name, w in zip(SIGNALS, model.coef_[0])},
            round(float(model.intercept_[0]), 3))


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
    weights = dict(DEFAULT_WEIGHTS if gate.weights is None else gate.weights)
    report: dict[str, Any] = {
        "pipeline": str(pipeline_path(pipeline)),
        "dataset": str(path),
        "sample": sample,
        "seed": seed,
        "top_k": top_k,
        "configured": {"weights": weights, "bias": gate.bias, "threshold": gate.threshold, "splits": {}},
    }
    for split, rows in splits.items():
        _score(rows, gate)
        report["configured"]["splits"][split] = _figures(rows, gate.threshold)
    if fit_weights:
        fitted, bias = fit(splits["tune"])
        for rows in splits.values():
            _score(rows, AnswerabilityGate(weights=fitted, bias=bias))
        threshold = choose_threshold(splits["tune"], max_false_abstention)
        report["fitted"] = {
            "weights": fitted,
            "bias": bias,
            "threshold": threshold,
            "max_false_abstention": max_false_abstention,
            "splits": {split: _figures(rows, threshold) for split, rows in splits.items()},
        }
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
                 yaml.safe_dump({"threshold": fitted["threshold"], "bias": fitted["bias"],
                                 "weights": fitted["weights"]}, sort_keys=False).rstrip()]
    return "\n".join(rows)
