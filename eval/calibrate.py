"""
`gatehouse calibrate`: per-KB quality-gate thresholds from labelled questions (seed 000, Quick Start step 3).

Every case of a labelled set that should reach retrieval runs through the real ask pipeline; the quality
gate's first-attempt score (`attempt_0_score_X` in the path) is paired with the case's `answerable` label and
grouped by the knowledge base the router chose. For each KB the precision/recall curve of "score >= threshold
means answerable" gives the proposal: the lowest threshold whose precision reaches the target (keeping the most
recall), else the one with the best F1. The change is printed and, with `--write`, applied to the `threshold:` line
of each KB's entry (`kb/<kb>/kb.yml`, comments and layout kept); the next `gatehouse ingest` stores it.

Usage:
```python
from gatehouse.eval.calibrate import calibrate, propose

propose([(0.9, True), (0.7, True), (0.5, False)], current=0.6, target_precision=0.9)   # {"threshold": 0.7, ...}
calibrate(set_name="golden", write=False)     # prints the table and the YAML change
```
"""

import itertools
import re
from pathlib import Path
from typing import Any

from gatehouse.ingest import KB_ENTRY_FILE
from gatehouse.pipelines import pipeline_path
from gatehouse.settings import project_path

SCORE_STEP = re.compile(r"^attempt_0_score_(\d+(?:\.\d+)?)$")


def first_attempt_score(response: dict[str, Any]) -> float | None:
    """The quality gate's score of the first retrieval attempt, from the response path (None if it never ran)."""
    for step in response.get("path") or []:
        match = SCORE_STEP.match(step)
        if match:
            return float(match.group(1))
    return None


def _precision_recall(points: list[tuple[float, bool]], threshold: float) -> tuple[float | None, float | None]:
    passed = [answerable for score, answerable in points if score >= threshold]
    positives = sum(answerable for _, answerable in points)
    precision = sum(passed) / len(passed) if passed else None
    recall = sum(passed) / positives if positives else None
    return precision, recall


def propose(points: list[tuple[float, bool]], *, current: float, target_precision: float) -> dict[str, Any]:
    """
    The threshold for one KB from (score, answerable) points.

    :returns: `{threshold, precision, recall, current_precision, current_recall, reason}`; the threshold stays
        `current` when the points cannot support a change (no answerable or no unanswerable case).
    """
    current_precision, current_recall = _precision_recall(points, current)
    result = {"current_precision": current_precision, "current_recall": current_recall}
    labels = {answerable for _, answerable in points}
    if labels != {True, False}:
        kind = "unanswerable" if True in labels else "answerable"
        return {**result, "threshold": current, "precision": current_precision, "recall": current_recall,
                "reason": f"kept: no {kind} case reached this KB"}
    scores = sorted({score for score, _ in points})
    # Thresholds halfway between neighbouring scores generalise better than a threshold on an observed score.
    candidates = [scores[0]] + [round((low + high) / 2, 3) for low, high in itertools.pairwise(scores)]
    curve = [(t, *_precision_recall(points, t)) for t in candidates]
    meeting = [(t, p, r) for t, p, r in curve if p is not None and p >= target_precision]
    best_recall = max((r for _, _, r in meeting), default=None)
    if meeting and current_precision is not None and current_precision >= target_precision \
            and current_recall == best_recall:
        return {**result, "threshold": current, "precision": current_precision, "recall": current_recall,
                "reason": f"kept: already precision >= {target_precision:.2f} with the most recall"}
    if meeting:
        threshold, precision, recall = max(meeting, key=lambda point: (point[2], -point[0]))
        reason = f"lowest threshold with precision >= {target_precision:.2f}"
    else:
        def f1(point: tuple[float, float | None, float | None]) -> float:
            _, p, r = point
            return 2 * p * r / (p + r) if p and r else 0.0

        threshold, precision, recall = max(curve, key=f1)
        reason = f"no threshold reaches precision {target_precision:.2f}: best F1"
    return {**result, "threshold": threshold, "precision": precision, "recall": recall, "reason": reason}


def write_threshold(entry: Path, threshold: float) -> None:
    """Set `threshold:` in a KB's entry file (`kb/<kb>/kb.yml`), keeping its other text; add it when absent."""
    lines = entry.read_text(encoding="utf-8").splitlines(keepends=True) if entry.is_file() else []
    for index, line in enumerate(lines):
        found = re.match(r"^(threshold:\s*)[\d.]+(.*)$", line.rstrip("\n"))
        if found:
            lines[index] = f"{found.group(1)}{threshold}{found.group(2)}\n"
            break
    else:
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        lines.append(f"threshold: {threshold}\n")
    entry.write_text("".join(lines), encoding="utf-8")


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def calibrate(*, set_name: str = "golden", pipeline: str | Path = "ask", write: bool = False,
              target_precision: float = 0.9) -> int:
    """Run the calibration and print (and with `write`, apply) the proposal; returns the exit code."""
    from gatehouse.eval.datasets import DatasetNotPresent, load_set
    from gatehouse.eval.runner import ask_case, prepare_set

    pipeline = pipeline_path(pipeline)
    try:
        eval_set = load_set(set_name)
    except DatasetNotPresent as missing:
        print(f"gatehouse: {missing}")
        return 2
    loaded = prepare_set(eval_set, pipeline)
    by_kb: dict[str, list[tuple[float, bool]]] = {}
    for case in eval_set.cases:
        if case.gold_route not in (None, "retrieve"):
            continue
        response = ask_case(loaded, eval_set, case)["response"]
        score = first_attempt_score(response)
        if score is not None and response["metadata"].get("kb"):
            by_kb.setdefault(response["metadata"]["kb"], []).append((score, case.answerable))
    router = loaded.get_component("router")
    # The public KBs' entries as the router applies them (ask.yml's, then each KB's kb.yml stored at ingest).
    current = {kb["name"]: float(kb.get("threshold") or router.default_threshold) for kb in router.entries(None).kbs}
    print(f"{'kb':<10} {'n+':>4} {'n-':>4} {'now':>5} {'P':>5} {'R':>5} {'new':>5} {'P':>5} {'R':>5}  why")
    changes: dict[str, float] = {}
    for kb, points in sorted(by_kb.items()):
        if kb not in current:
            continue
        result = propose(points, current=current[kb], target_precision=target_precision)
        positives = sum(answerable for _, answerable in points)
        print(f"{kb:<10} {positives:>4} {len(points) - positives:>4} {current[kb]:>5.2f} "
              f"{_fmt(result['current_precision']):>5} {_fmt(result['current_recall']):>5} "
              f"{result['threshold']:>5.2f} {_fmt(result['precision']):>5} {_fmt(result['recall']):>5}  "
              f"{result['reason']}")
        if result["threshold"] != current[kb]:
            changes[kb] = result["threshold"]
    if not changes:
        print("\nNo change proposed.")
        return 0
    root = project_path("kb")
    print(f"\nProposed change to the KB entries ({root}/<kb>/kb.yml):")
    for kb, threshold in changes.items():
        print(f"  {kb}: threshold {current[kb]} -> {threshold}")
    if write:
        for kb, threshold in changes.items():
            write_threshold(root / kb / KB_ENTRY_FILE, threshold)
        print(f"written to {', '.join(f'{root / kb / KB_ENTRY_FILE}' for kb in changes)}; "
              "run `gatehouse ingest` to apply them")
    else:
        print("Run again with --write to apply it.")
    return 0
