"""
The claims benchmark: does the citation verifier tell supported claims from contradicted and unrelated ones?

`gatehouse bench claims --split dev --output FILE.json` runs the real `CitationVerifier`, built from the
`verifier:` init_parameters of `pipelines/ask.yml` (so the YAML tuning is what is measured), on SciFact claims
(`claims_<split>.jsonl` and `corpus.jsonl` of a SciFact folder, `../shared/data/scifact` by default):

- Every claim with evidence is answered as `"<claim> [S1]"` with each abstract of its evidence as passage `S1`
  (the title as a heading, then the text); the case's label is that abstract's label, `SUPPORT` or `CONTRADICT`.
- The same claim against an unrelated abstract (a deterministic pick by the claim's id among the abstracts it
  does not cite) is an `unrelated` case.
- Claims without evidence (NEI) against their first cited abstract are reported apart (`nei`), with no target.

A claim is judged supported when every sentence of it is supported (and none contradicted). The report gives,
per label, the number of cases and the share judged supported; dev targets: SUPPORT >= 0.80, CONTRADICT <= 0.30,
unrelated 0.00. Tune on `train`, never on `dev`.

Usage:
```python
from gatehouse.eval.claims_bench import format_table, run_benchmark

report = run_benchmark("../shared/data/scifact", split="train")
print(format_table(report))
report["labels"]["CONTRADICT"]["supported"]
```
"""

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from haystack import Document
from haystack.core.serialization import component_to_dict
from tqdm import tqdm

from gatehouse.components.validators.citation_verifier import CitationVerifier
from gatehouse.components.state import new_state
from gatehouse.eval.bench_files import configured_component
from gatehouse.eval.datasets import data_root
from gatehouse.pipelines import pipeline_path

LABELS = ("SUPPORT", "CONTRADICT", "unrelated", "nei")
TARGETS = {"SUPPORT": (">=", 0.80), "CONTRADICT": ("<=", 0.30), "unrelated": ("<=", 0.0)}


def default_dataset() -> Path:
    """SciFact under the shared data folder (`$GATEHOUSE_EVAL_DATA` or `../shared/data`)."""
    return data_root() / "scifact"


#: The verifier measured by default: ask.yml's settings with the SciFact-tuned lexicon (the benchmark's own file).
SCIFACT_VERIFIER = Path(__file__).resolve().parent / "pipelines" / "scifact_verifier.yml"


def load_verifier(pipeline: str | Path = SCIFACT_VERIFIER, component: str = "verifier") -> CitationVerifier:
    """The citation verifier exactly as a pipeline YAML configures it, warmed up (ValueError if it has none)."""
    return configured_component(pipeline, component, CitationVerifier)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def load_cases(dataset: str | Path, split: str, max_claims: int | None = None) -> list[dict[str, Any]]:
    """
    The benchmark cases of one split: `{"claim_id", "claim", "label", "doc_id", "passage"}`.

    :param dataset: A SciFact folder with `claims_<split>.jsonl` and `corpus.jsonl`.
    :param split: `train`, `dev` (or any split whose claims file carries evidence).
    :param max_claims: Use only the first claims of the file.
    :returns: The cases in file order.
    :raises FileNotFoundError: If a file is missing.
    """
    folder = Path(dataset)
    claims_file, corpus_file = folder / f"claims_{split}.jsonl", folder / "corpus.jsonl"
    for path in (claims_file, corpus_file):
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found")
    claims = _read_jsonl(claims_file)[:max_claims]
    corpus = {str(d["_id"]): d for d in _read_jsonl(corpus_file)}
    doc_ids = sorted(corpus)
    cases = []
    for claim in claims:
        cited = {str(i) for i in claim.get("cited_doc_ids") or []} | set(claim.get("evidence") or {})
        base = {"claim_id": claim["id"], "claim": claim["claim"]}
        if not claim.get("evidence"):
            first = next((str(i) for i in claim.get("cited_doc_ids") or [] if str(i) in corpus), None)
            if first:
                cases.append({**base, "label": "nei", "doc_id": first, "passage": _abstract(corpus[first])})
            continue
        for doc_id, rationales in claim["evidence"].items():
            if doc_id in corpus:
                label = rationales[0]["label"]
                cases.append({**base, "label": label, "doc_id": doc_id, "passage": _abstract(corpus[doc_id])})
        start = int(hashlib.sha256(str(claim["id"]).encode()).hexdigest(), 16) % len(doc_ids)
        other = next(doc_ids[(start + k) % len(doc_ids)] for k in range(len(doc_ids))
                     if doc_ids[(start + k) % len(doc_ids)] not in cited)
        cases.append({**base, "label": "unrelated", "doc_id": other, "passage": _abstract(corpus[other])})
    return cases


def _abstract(document: dict[str, Any]) -> str:
    title = str(document.get("title") or "").strip()
    return f"# {title}\n\n{document['text']}" if title else str(document["text"])


def judge(verifier: CitationVerifier, claim: str, passage: str) -> dict[str, Any]:
    """
    Verify `"<claim> [S1]"` against one passage.

    :returns: `{"supported", "contradicted", "score", "cues"}` over the claim's sentences.
    """
    document = Document(content=passage, meta={"source_id": "S1", "source": "abstract"})
    # The claim is the answer, not the question: a question's own negation is a premise the verifier sets aside.
    state = new_state("Is it supported?", passages=[document], answer=f"{claim} [S1]", status="success",
                      route="retrieve")
    scores = [s for s in verifier.run(state=state)["state"]["support"]["scores"] if not s["connective"]]
    return {
        "supported": bool(scores) and all(s["supported"] for s in scores),
        "contradicted": any(s["contradicted"] for s in scores),
        "score": min((s["score"] for s in scores), default=0.0),
        "cues": [c for s in scores for c in s["cues"]],
    }


def run_benchmark(
    dataset: str | Path | None = None,
    *,
    split: str = "dev",
    pipeline: str | Path = SCIFACT_VERIFIER,
    max_claims: int | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """
    Judge every case of a split with the pipeline's verifier.

    :param dataset: SciFact folder; None uses `default_dataset()`.
    :param split: Claims split (`train` to tune, `dev` to report).
    :param pipeline: Pipeline name or YAML whose `verifier:` is measured.
    :param max_claims: Only the first claims of the split.
    :param progress: Show a progress bar.
    :returns: The report: `labels` (per label: `cases`, `supported`, `contradicted`, `mean_score`), `targets`,
        `cases` (one record per case) and the run's settings.
    """
    folder = Path(dataset) if dataset else default_dataset()
    cases = load_cases(folder, split, max_claims)
    verifier = load_verifier(pipeline)
    started = time.perf_counter()
    records = []
    for case in tqdm(cases, desc=f"claims {split}", disable=not progress):
        verdict = judge(verifier, case["claim"], case["passage"])
        records.append({k: case[k] for k in ("claim_id", "label", "doc_id")} | verdict)
    labels = {}
    for label in LABELS:
        group = [r for r in records if r["label"] == label]
        if group:
            labels[label] = {
                "cases": len(group),
                "supported": round(sum(r["supported"] for r in group) / len(group), 4),
                "contradicted": round(sum(r["contradicted"] for r in group) / len(group), 4),
                "mean_score": round(sum(r["score"] for r in group) / len(group), 4),
            }
    targets = {
        label: {"target": f"{op} {value:.2f}", "met": (labels[label]["supported"] >= value if op == ">="
                                                      else labels[label]["supported"] <= value)}
        for label, (op, value) in TARGETS.items() if label in labels
    }
    return {
        "dataset": str(folder),
        "split": split,
        "pipeline": str(pipeline_path(pipeline)),
        "verifier": component_to_dict(verifier, "verifier")["init_parameters"],
        "seconds": round(time.perf_counter() - started, 1),
        "labels": labels,
        "targets": targets,
        "cases": records,
    }


def format_table(report: dict[str, Any]) -> str:
    """The report as a markdown table: one row per label."""
    rows = [
        f"SciFact claims, split {report['split']} (verifier of {Path(report['pipeline']).name})",
        "",
        "| label | cases | judged supported | contradicted | mean score | target |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for label, stats in report["labels"].items():
        target = report["targets"].get(label)
        verdict = f"{target['target']} ({'met' if target['met'] else 'missed'})" if target else "—"
        rows.append(f"| {label} | {stats['cases']} | {stats['supported']:.3f} | {stats['contradicted']:.3f} | "
                    f"{stats['mean_score']:.3f} | {verdict} |")
    return "\n".join(rows)
