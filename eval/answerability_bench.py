"""
`gatehouse bench answerability`: the answerability gate of a pipeline, and the extractive answer it leads to, on SQuAD
2.0 (tune and report articles apart) and on documentation sets of role `tune`.

SQuAD's articles are split in file order (`gatehouse.eval.datasets.squad_articles`): `tune` (1st, 3rd, ...) and `report`
(2nd, 4th, ...). From each split a seeded sample, half unanswerable, spread evenly over its articles
(`squad_sample`). Every question is searched with BM25 over all paragraphs of all articles; its `top_k` paragraphs,
with their BM25 scores, are the passages the gate judges, configured exactly as the pipeline YAML's
`answerability:` component. (The full pipeline retrieves chunks by hybrid search; `gatehouse eval --sets squad2
--squad-sample N --squad-articles report` measures that end to end. This benchmark isolates the gate and is fast
enough to tune on.) A documentation set's questions run through the ask pipeline up to their passages (routing,
retrieval, assembly as in production).

Per question: the gate's evidence (0 when a rule refuses the question: a name no passage names, an answer type
nothing shown holds) and whether the extractive answer of its candidates holds the gold answer. Per split: the AUC of
the evidence for answerable against unanswerable questions, abstention recall and precision and the false
abstention rate at the YAML threshold, the share of answerable questions answered right, and the wrong answers at or
above the success threshold (a share of all questions).

With `fit=True`, the threshold is chosen on the `tune` split (and the documentation sets) as the highest that keeps
the false abstention rate at or below `max_false_abstention`, and the success threshold as the lowest at which the
wrong answers above it stay at or below `max_wrong_success` of the questions (of the documentation sets when given);
the YAML to paste is printed. The report split never informs the fit.

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
import yaml
from haystack import Document
from tqdm import tqdm

from gatehouse.components.answerability.answerability_gate import AnswerabilityGate
from gatehouse.components.generators.extractive_answerer import ExtractiveAnswerer
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


def judged_row(gate: AnswerabilityGate, answerer: ExtractiveAnswerer, question: str, passages: list[Document],
               right: Any) -> dict[str, Any]:
    """
    One question as the gate judges it, whatever the thresholds: its evidence (0 when a rule refuses it) and whether
    the extractive answer of its candidates is right.

    :param right: `right(answer, cited passages) -> bool`, the set's judging rule.
    """
    judged = gate.judge(question, passages)
    answer = answerer.answer(question, passages, judged.candidates) if judged.candidates else None
    cited = [p for p in passages if answer and f"[{p.meta.get('source_id')}]" in answer]
    return {"score": 0.0 if judged.refusal else round(judged.score, 4), "refusal": judged.refusal,
            "shape": judged.record["shape"], "answer": answer,
            "right": bool(answer) and judged.refusal is None and bool(right(answer, cited))}


def _questions(gate: AnswerabilityGate, cases: list[EvalCase], paragraphs: list[Document], top_k: int,
               progress: bool, label: str) -> list[dict[str, Any]]:
    """Retrieve with BM25, then judge each case."""
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize([f"{d.meta['title']}\n{d.content}" for d in paragraphs], stopwords="en",
                                   show_progress=False), show_progress=False)
    answerer = ExtractiveAnswerer()
    rows = []
    for case in tqdm(cases, desc=f"answerability {label}", disable=not progress):
        hits, scores = retriever.retrieve(bm25s.tokenize([case.question], stopwords="en", show_progress=False),
                                          k=min(top_k, len(paragraphs)), show_progress=False)
        passages = [Document(id=paragraphs[i].id, content=paragraphs[i].content,
                             meta={**paragraphs[i].meta, "source_id": f"S{rank + 1}"}, score=float(s))
                    for rank, (i, s) in enumerate(zip(hits[0], scores[0]))]
        gold_source = case.gold_sources[0] if case.gold_sources else None
        row = judged_row(gate, answerer, case.question, passages,
                         lambda answer, cited, gold=case.gold_answer or "": _contains(answer, gold))
        rows.append({"id": case.id, "answerable": case.answerable, "gold": case.gold_answer or "",
                     "gold_retrieved": any(f"{p.meta['kb']}/{p.id}.txt" == gold_source for p in passages), **row})
    return rows


def domain_rows(gate: AnswerabilityGate, names: list[str], workdir: str | Path | None, pipeline: str | Path,
                progress: bool, corpora: str | Path | None = None) -> list[dict[str, Any]]:
    """
    Judged rows of documentation question sets (`eval/sets/domains/`, role `tune` only): each answerable, follow-up
    and unanswerable question, and each answerable part of a multi-part one asked alone, runs through the ask pipeline
    up to its passages (routing, retrieval, assembly as in production, in the domain benchmark's data folder; one the
    planner splits is left out); the answer is right by the domain benchmark's judging rule (the gold answer in it, a
    gold file cited).

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
    answerer = ExtractiveAnswerer()
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
                if not searched or searched.get("plan"):
                    continue  # a question the planner split is judged part by part
                passages = (assembler.run(state=searched).get("passages") or {}).get("passages") or []
                asked = ((result.get("condenser") or {}).get("state") or {}).get("condensed_query") or question

                def right(text: str, cited: list[Document], gold: str | None = answer, also: list[str] = aliases,
                          files: list[str] = sources) -> bool:
                    return domains_bench.answer_correct(text, gold, also) and any(
                        domains_bench._is_gold({"kb": p.meta.get("kb"), "source": p.meta.get("source")}, files)
                        for p in cited)

                rows.append({"id": key, "answerable": bool(answer), "gold": answer or "",
                             "gold_retrieved": any(p.meta.get("source") in sources for p in passages),
                             **judged_row(gate, answerer, asked, passages, right)})
    return rows


def _figures(rows: list[dict[str, Any]], threshold: float, success_threshold: float | None) -> dict[str, Any]:
    answerable = [r for r in rows if r["answerable"]]
    unanswerable = [r for r in rows if not r["answerable"]]
    abstained = [r for r in rows if r["refusal"] or r["score"] < threshold]

    def share(part: int, whole: int) -> float | None:
        return round(part / whole, 3) if whole else None

    success = success_threshold if success_threshold is not None else threshold
    return {
        "questions": len(rows),
        "answerable": len(answerable),
        "unanswerable": len(unanswerable),
        "auc": None if (a := _auc([r["score"] for r in answerable], [r["score"] for r in unanswerable])) is None
        else round(a, 3),
        "threshold": threshold,
        "abstention_recall": share(sum(not r["answerable"] for r in abstained), len(unanswerable)),
        "abstention_precision": share(sum(not r["answerable"] for r in abstained), len(abstained)),
        "false_abstention_rate": share(sum(r["answerable"] for r in abstained), len(answerable)),
        "gold_retrieved": share(sum(r["gold_retrieved"] for r in answerable), len(answerable)),
        "answered_right": share(sum(r["right"] and r not in abstained for r in answerable), len(answerable)),
        "wrong_success": share(sum(r not in abstained and r["score"] >= success and not r["right"] for r in rows),
                               len(rows)),
    }


def choose_success_threshold(rows: list[dict[str, Any]], max_wrong_success: float) -> float:
    """
    The lowest evidence at which an answer may be a `success`: at or above it, questions answered wrongly (unanswerable
    ones included) are at most `max_wrong_success` of all questions.
    """
    for threshold in sorted({r["score"] for r in rows if not r["refusal"]}):
        wrong = sum(1 for r in rows if not r["refusal"] and r["score"] >= threshold and not r["right"])
        if wrong <= max_wrong_success * len(rows):
            return threshold
    return 1.0


def choose_threshold(rows: list[dict[str, Any]], max_false_abstention: float) -> float:
    """The highest threshold (most abstention) whose false abstention rate stays at or below the limit."""
    answerable = sorted(r["score"] for r in rows if r["answerable"])
    if not answerable:
        raise ValueError("No answerable question to choose a threshold on.")
    allowed = int(max_false_abstention * len(answerable))  # answerable questions that may fall below
    return round(int(answerable[allowed] * 1000) / 1000, 3)


def run_benchmark(
    dataset: str | Path | None = None,
    *,
    pipeline: str | Path = "ask",
    sample: int = 300,
    seed: int = 0,
    top_k: int = 5,
    fit: bool = False,
    max_false_abstention: float = 0.15,
    domains: list[str] | None = None,
    domains_workdir: str | Path | None = None,
    max_wrong_success: float = 0.04,
    progress: bool = True,
) -> dict[str, Any]:
    """
    Score the pipeline's answerability gate on the tune and report splits (and, with `fit`, thresholds chosen on tune).

    :param dataset: SQuAD 2.0 dev JSON (default: under the shared data folder).
    :param pipeline: Pipeline name or YAML whose `answerability:` gate is measured.
    :param sample: Questions per split (half unanswerable).
    :param seed: Sampling seed.
    :param top_k: Paragraphs retrieved per question.
    :param fit: Choose the threshold and the success threshold on the tune split (and `domains`).
    :param max_false_abstention: With `fit`: the largest false abstention rate the chosen threshold allows on tune.
    :param domains: Documentation sets of role `tune` (`eval/sets/domains/`) that join the tune split, and on which
        the success threshold is chosen.
    :param domains_workdir: The domain benchmark's workdir holding their ingested corpora.
    :param max_wrong_success: With `fit`: the largest share of questions answered wrongly at or above the success
        threshold.
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
    if domains:
        splits["domains"] = domain_rows(gate, domains, domains_workdir, pipeline, progress)
    report: dict[str, Any] = {
        "pipeline": str(pipeline_path(pipeline)),
        "dataset": str(path),
        "sample": sample,
        "seed": seed,
        "top_k": top_k,
        "configured": {"threshold": gate.threshold, "success_threshold": gate.success_threshold,
                       "splits": {split: _figures(rows, gate.threshold, gate.success_threshold)
                                  for split, rows in splits.items()}},
        "rows": splits,
    }
    if fit:
        tune = splits["tune"] + splits.get("domains", [])
        threshold = choose_threshold(tune, max_false_abstention)
        success = max(threshold, choose_success_threshold(splits.get("domains") or splits["tune"], max_wrong_success))
        report["fitted"] = {
            "threshold": threshold,
            "success_threshold": success,
            "max_false_abstention": max_false_abstention,
            "max_wrong_success": max_wrong_success,
            "splits": {split: _figures(rows, threshold, success) for split, rows in splits.items()},
        }
    return report


_COLUMNS = ("questions", "auc", "threshold", "abstention_recall", "abstention_precision", "false_abstention_rate",
            "gold_retrieved", "answered_right", "wrong_success")


def format_table(report: dict[str, Any]) -> str:
    """The report as markdown tables (as configured, then with the thresholds chosen on tune), and their YAML."""
    rows = [f"Answerability gate of {Path(report['pipeline']).name} on SQuAD 2.0 (sample {report['sample']} per "
            f"split, seed {report['seed']}, BM25 top {report['top_k']} paragraphs) and the documentation tune sets",
            ""]
    for model in ("configured", "fitted"):
        if model not in report:
            continue
        rows += [f"{model} (success threshold {report[model]['success_threshold']}):", "",
                 "| split | " + " | ".join(_COLUMNS) + " |", "|---" * (len(_COLUMNS) + 1) + "|"]
        for split, figures in report[model]["splits"].items():
            rows.append(f"| {split} | " + " | ".join("—" if figures[c] is None else str(figures[c])
                                                     for c in _COLUMNS) + " |")
        rows.append("")
    if "fitted" in report:
        fitted = report["fitted"]
        rows += ["chosen on tune; paste under answerability.init_parameters:", "",
                 yaml.safe_dump({"threshold": fitted["threshold"], "success_threshold": fitted["success_threshold"]},
                                sort_keys=False).rstrip()]
    return "\n".join(rows)
