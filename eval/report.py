"""
The evaluation report: `<reports root>/<run id>/` with `results.json`, `summary.md` and `report.html`.

- `results.json`: `metadata` (`run_metadata()`: timestamp, duration, SHA-256 of every pipeline YAML file, package
  versions, dataset versions, judge model), `aggregates` (`gatehouse.eval.metrics.aggregate`), `verdict`
  (`gatehouse.eval.verdict.decide`), `judge` (the judge's estimate and usage, when it ran) and the per-case `records`.
- `summary.md`: the headline numbers per set, the NaN counts and the verdict, short enough for a CI log.
- `report.html`: one self-contained file that opens offline — no scripts, no external styles or fonts; the plots
  are matplotlib PNGs inlined as base64: score trends over the earlier runs on the same datasets (read from the
  other `results.json` files under the reports root), per-metric distributions, confusion matrices, latency per
  stage, the retries histogram, and tables of NaNs, regressions and the cases that need a look. Every text that
  comes from a run (questions are user content) is HTML-escaped.

Usage:
```python
from gatehouse.eval.report import run_metadata, write_report

metadata = run_metadata(datasets={"golden": "3f2a9c1d4e5b"}, judge_model=None, duration_s=84.2)
run_dir = write_report({"metadata": metadata, "aggregates": aggregates, "verdict": verdict, "records": records},
                       reports_root="eval/reports")
```
"""

import base64
import hashlib
import html
import io
import json
import math
import platform
from datetime import UTC, datetime
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

from gatehouse.eval.metrics import (
    abstained,
    citation_problems,
    part_outcomes,
    predicted_route_label,
    refused_before_routing,
    route_label,
    scalars,
)
from gatehouse.eval.verdict import previous_runs, same_set

PACKAGES = ("gatehouse", "haystack-ai", "ragas", "hayhooks", "sentence-transformers", "torch")
HEADLINE = (
    ("intent_accuracy", "intent accuracy"),
    ("routing_accuracy", "routing accuracy"),
    ("abstention_precision", "abstention precision"),
    ("abstention_recall", "abstention recall"),
    ("invented_citation_share", "invented citations"),
    ("supported_sentence_share", "supported sentences"),
    ("parts_handled_cases", "multi-part handled"),
    ("id_based_context_recall", "context recall (ID)"),
    ("non_llm_context_recall", "context recall (text)"),
    ("rouge_score", "ROUGE-L"),
    ("faithfulness", "faithfulness"),
    ("answer_relevancy", "response relevancy"),
    ("context_precision_with_reference", "context precision (LLM)"),
    ("latency_p95_ms.total", "P95 total ms"),
)
TREND_METRICS = tuple(name for name, _ in HEADLINE if not name.startswith("latency"))
MAX_CASE_ROWS = 100
STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1200px;color:#1d232a;
line-height:1.4;padding:0 1rem}
h1{font-size:1.6rem}h2{font-size:1.3rem;margin-top:2.2rem;border-bottom:1px solid #d0d7de;padding-bottom:.2rem}
h3{font-size:1.1rem}table{border-collapse:collapse;margin:.6rem 0;font-size:.88rem}
th,td{border:1px solid #d0d7de;padding:.25rem .5rem;text-align:left;vertical-align:top}th{background:#f3f5f7}
td.num{text-align:right;font-variant-numeric:tabular-nums}.pass{color:#1a7f37;font-weight:600}
.fail{color:#cf222e;font-weight:600}.muted{color:#6e7781}img{max-width:100%;height:auto;margin:.4rem 0}
code{background:#f3f5f7;padding:0 .2rem}
"""


def pipeline_hashes(directory: str | Path | None = None) -> dict[str, str]:
    """SHA-256 of every `*.yml` file of the pipelines folder (default `GATEHOUSE_PIPELINES_DIR` or `pipelines/`)."""
    if directory is None:
        from gatehouse.pipelines import pipelines_dir

        directory = pipelines_dir()
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(Path(directory).glob("*.yml"))}


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Installed versions of the packages that shape the results (None when one is not installed)."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = importlib_metadata.version(name)
        except importlib_metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def run_metadata(
    *,
    datasets: dict[str, Any],
    duration_s: float,
    judge_model: str | None = None,
    started: datetime | None = None,
    pipelines_directory: str | Path | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """
    The metadata every run records.

    :param datasets: `{set name: version}` of the sets that ran (the version identifies the data and the slice).
    :param duration_s: How long the run took.
    :param judge_model: The judge model, or None when no judge ran.
    :param started: When the run started (default now, UTC).
    :param pipelines_directory: The pipelines folder whose YAML files are hashed.
    :param extra: More fields to record (e.g. the command line options).
    :returns: `{run_id, timestamp, duration_s, pipelines, packages, python, datasets, judge_model, ...extra}`.
    """
    started = started or datetime.now(UTC)
    return {
        "run_id": started.strftime("%Y%m%d-%H%M%S"),
        "timestamp": started.isoformat(timespec="seconds"),
        "duration_s": round(float(duration_s), 3),
        "pipelines": pipeline_hashes(pipelines_directory),
        "packages": package_versions(),
        "python": platform.python_version(),
        "datasets": dict(datasets),
        "judge_model": judge_model,
        **(extra or {}),
    }


def _json_safe(value: Any) -> Any:
    """Replace non-finite floats by None (JSON has no NaN; None is how the records spell a NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.{digits}f}"
    return str(value)


def _headline_columns(aggregates: dict[str, Any]) -> list[tuple[str, str]]:
    values = {name: scalars(agg) for name, agg in aggregates.items()}
    return [(key, label) for key, label in HEADLINE if any(v.get(key) is not None for v in values.values())]


def _nan_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Every metric with at least one NaN: set, group, metric, counts and the most frequent reasons."""
    rows = []
    records = results.get("records") or []
    for set_name, set_aggregate in results["aggregates"].items():
        for group, errors_key in (("ragas", "metric_errors"), ("judge", "judge_errors")):
            for metric, stats in (set_aggregate.get(group) or {}).items():
                if not stats["nan"]:
                    continue
                reasons: dict[str, int] = {}
                for record in records:
                    if record.get("set") != set_name:
                        continue
                    found = (record.get(errors_key) or {}).get(metric)
                    for reason in found if isinstance(found, list) else [found]:
                        if reason:
                            reasons[reason] = reasons.get(reason, 0) + 1
                top = sorted(reasons.items(), key=lambda item: -item[1])[:3]
                rows.append(
                    {
                        "set": set_name,
                        "group": group,
                        "metric": metric,
                        "n": stats["n"],
                        "nan": stats["nan"],
                        "calls": stats.get("calls", stats["n"] + stats["nan"]),
                        "not_applicable": stats["not_applicable"],
                        "reasons": [f"{count}x {reason}" for reason, count in top],
                    }
                )
    return rows


def _parts_line(parts: dict[str, Any]) -> str:
    """The multi-part metrics of a set in one line (`gatehouse.eval.metrics.multi_part`)."""
    shares = [
        f"{label} {_fmt(parts[key]['mean'])} (n={parts[key]['n']})"
        for key, label in (("parts_answered", "parts answered"), ("parts_reported_missing", "missing parts reported"),
                           ("parts_handled_cases", "cases fully handled"))
    ]
    return "; ".join(shares + [f"false success with a missing part {parts['false_success_with_missing_part']}"])


def render_summary(results: dict[str, Any]) -> str:
    """`summary.md`: headline numbers per set, NaN counts and the verdict."""
    metadata, aggregates = results["metadata"], results["aggregates"]
    verdict = results.get("verdict")
    lines = [
        f"# Gatehouse evaluation {metadata['timestamp']}",
        "",
        f"Duration {metadata['duration_s']:.1f} s; judge: {metadata.get('judge_model') or 'none'}; datasets: "
        + ", ".join(f"{name} ({version})" for name, version in metadata["datasets"].items()),
        "",
    ]
    if verdict is not None:
        state = "REGRESSED" if verdict["regressed"] else "PASS"
        lines.append(
            f"**Verdict: {state}**" + (": " + ", ".join(verdict["regressions"]) if verdict["regressed"] else "")
        )
        lines.append("")
    columns = _headline_columns(aggregates)
    lines.append("| set | cases | " + " | ".join(label for _, label in columns) + " |")
    lines.append("|---|---:|" + "---:|" * len(columns))
    for name, set_aggregate in aggregates.items():
        values = scalars(set_aggregate)
        lines.append(
            f"| {name} | {set_aggregate['cases']} | " + " | ".join(_fmt(values.get(key)) for key, _ in columns) + " |"
        )
    lines.append("")
    for name, set_aggregate in aggregates.items():
        parts = (set_aggregate.get("gatehouse") or {}).get("multi_part")
        if parts and parts["cases"]:
            lines.append(f"Multi-part ({name}, {parts['cases']} cases): " + _parts_line(parts))
            lines.append("")
    nan_rows = _nan_rows(results)
    if nan_rows:
        lines.append(
            "NaN (failed, never averaged in): "
            + "; ".join(f"{row['set']} {row['metric']} {row['nan']}/{row['calls']}" for row in nan_rows)
        )
    else:
        lines.append("NaN: none")
    judge = results.get("judge")
    if judge and judge.get("usage"):
        usage = judge["usage"]
        lines.append(
            f"Judge usage: {usage['requests']} requests, {usage['prompt_tokens']:,} prompt + "
            f"{usage['completion_tokens']:,} completion tokens"
            + (f", ${judge['cost']:.4f}" if judge.get("cost") is not None else "")
            + f" (estimated {judge['estimate']['prompt_tokens']:,} + {judge['estimate']['completion_tokens']:,})"
        )
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------------- plots


def _png(figure: Any) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _img(data: str, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def _trend_plot(set_name: str, history: list[dict[str, Any]]) -> str | None:
    points = [(run["metadata"].get("timestamp", ""), scalars(run["aggregates"][set_name])) for run in history]
    metrics = [m for m in TREND_METRICS if any(values.get(m) is not None for _, values in points)]
    latency = [values.get("latency_p95_ms.total") for _, values in points]
    if not metrics and all(v is None for v in latency):
        return None
    figure = _figure(10, 3.6)
    scores, times = figure.subplots(1, 2, width_ratios=[3, 1])
    x = list(range(len(points)))
    labels = [str(stamp)[:16].replace("T", "\n") for stamp, _ in points]
    for metric in metrics:
        series = [values.get(metric) for _, values in points]
        scores.plot(x, [math.nan if v is None else v for v in series], marker="o", label=metric)
    scores.set_ylim(-0.02, 1.02)
    scores.set_title("scores per run")
    scores.set_xticks(x, labels, fontsize=7)
    if metrics:
        scores.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    times.plot(x, [math.nan if v is None else v for v in latency], marker="o", color="tab:gray")
    times.set_title("P95 total latency (ms)")
    times.set_xticks(x, labels, fontsize=7)
    times.set_ylim(bottom=0)
    return _png(figure)


def _distribution_plot(set_aggregate: dict[str, Any]) -> str | None:
    series = []
    for group in ("ragas", "judge"):
        for metric, stats in (set_aggregate.get(group) or {}).items():
            if stats["values"]:
                series.append((f"{metric} (n={stats['n']}, NaN={stats['nan']})", stats["values"]))
    support = (set_aggregate.get("gatehouse") or {}).get("supported_sentence_share")
    if support and support["values"]:
        series.append((f"supported_sentence_share (n={support['n']})", support["values"]))
    if not series:
        return None
    figure = _figure(10, 0.45 * len(series) + 1.2)
    axes = figure.subplots()
    axes.boxplot([values for _, values in series], orientation="horizontal", widths=0.6)
    axes.set_yticks(range(1, len(series) + 1), [label for label, _ in series], fontsize=8)
    axes.invert_yaxis()
    axes.set_xlim(-0.02, 1.02)
    axes.set_title("per-case scores (NaN excluded and counted)")
    return _png(figure)


def _confusion_plot(matrix: dict[str, Any], title: str) -> str | None:
    labels = matrix.get("labels") or []
    if not labels:
        return None
    size = max(3.5, 0.45 * len(labels) + 2)
    figure = _figure(size + 1, size)
    axes = figure.subplots()
    axes.imshow(matrix["matrix"], cmap="Blues")
    axes.set_xticks(range(len(labels)), labels, rotation=60, ha="right", fontsize=8)
    axes.set_yticks(range(len(labels)), labels, fontsize=8)
    axes.set_xlabel("predicted")
    axes.set_ylabel("gold")
    axes.set_title(title)
    peak = max((max(row) for row in matrix["matrix"]), default=0)
    for i, row in enumerate(matrix["matrix"]):
        for j, count in enumerate(row):
            if count:
                color = "white" if count > peak / 2 else "black"
                axes.text(j, i, str(count), ha="center", va="center", fontsize=8, color=color)
    return _png(figure)


def _latency_plot(latency: dict[str, dict[str, float]]) -> str | None:
    if not latency:
        return None
    stages = list(latency)
    figure = _figure(8, 0.4 * len(stages) + 1.2)
    axes = figure.subplots()
    positions = list(range(len(stages)))
    axes.barh([p - 0.2 for p in positions], [latency[s]["p50"] for s in stages], height=0.4, label="P50")
    axes.barh([p + 0.2 for p in positions], [latency[s]["p95"] for s in stages], height=0.4, label="P95")
    axes.set_yticks(positions, stages, fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel("ms")
    axes.set_title("latency per stage")
    axes.legend(fontsize=8)
    return _png(figure)


def _retries_plot(histogram: dict[str, int]) -> str | None:
    if not histogram:
        return None
    figure = _figure(4, 2.6)
    axes = figure.subplots()
    axes.bar(list(histogram), list(histogram.values()), color="tab:purple")
    axes.set_xlabel("retrieval attempts (0 = no retrieval)")
    axes.set_ylabel("cases")
    axes.set_title("retries")
    return _png(figure)


# ---------------------------------------------------------------------------------------------------- html


def _table(headers: list[str], rows: list[list[Any]], numeric: set[int] | None = None) -> str:
    numeric = numeric or set()
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="num">{html.escape(_fmt(cell))}</td>' if i in numeric else f"<td>{html.escape(_fmt(cell))}</td>"
            for i, cell in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _case_issues(record: dict[str, Any]) -> list[str]:
    gold = record.get("gold") or {}
    response = record.get("response") or {}
    metadata = response.get("metadata") or {}
    issues = []
    if gold.get("intent") and not refused_before_routing(record) and gold["intent"] != metadata.get("intent"):
        issues.append(f"intent {metadata.get('intent')} (gold {gold['intent']})")
    gold_route = gold.get("route") or ("retrieve" if gold.get("kb") else None)
    if gold_route is not None:
        predicted, expected = predicted_route_label(record), route_label(gold_route, gold.get("kb"))
        if predicted != expected:
            issues.append(f"routed {predicted} (gold {expected})")
    if abstained(response) and gold.get("answerable", True):
        issues.append("abstained on an answerable question")
    if not abstained(response) and not gold.get("answerable", True):
        issues.append("answered an unanswerable question")
    issues.extend(citation_problems(record))
    issues.extend(f"part '{o['aspect']}': {o['reason']}" for o in part_outcomes(record) if not o["handled"])
    nan = sorted(record.get("metric_errors") or {})
    nan += sorted(m for m, values in (record.get("judge") or {}).items() if any(v is None for v in values))
    if nan:
        issues.append("NaN: " + ", ".join(nan))
    return issues


def _cases_section(set_name: str, records: list[dict[str, Any]]) -> str:
    flagged = [(record, _case_issues(record)) for record in records if record.get("set") == set_name]
    flagged = [(record, issues) for record, issues in flagged if issues]
    if not flagged:
        return "<p>No case needs a look.</p>"
    rows = [
        [
            record.get("id"),
            (str(record.get("question") or "")[:200]),
            (record.get("response") or {}).get("status"),
            "; ".join(issues),
        ]
        for record, issues in flagged[:MAX_CASE_ROWS]
    ]
    more = len(flagged) - len(rows)
    note = f'<p class="muted">{more} more cases not shown (see results.json).</p>' if more > 0 else ""
    return f"<p>{len(flagged)} cases need a look.</p>" + _table(["id", "question", "status", "issues"], rows) + note


def _run_section(metadata: dict[str, Any], judge: dict[str, Any] | None) -> str:
    rows = [
        ["timestamp", metadata["timestamp"]],
        ["duration (s)", metadata["duration_s"]],
        ["judge model", metadata.get("judge_model") or "none"],
        ["python", metadata.get("python")],
    ]
    rows += [[f"dataset {name}", version] for name, version in metadata["datasets"].items()]
    rows += [[f"pipeline {name}", digest[:16]] for name, digest in metadata["pipelines"].items()]
    rows += [[f"package {name}", version or "not installed"] for name, version in metadata["packages"].items()]
    if judge:
        estimate = judge["estimate"]
        rows.append(
            [
                "judge estimate",
                (
                    f"{estimate['calls']} calls, {estimate['prompt_tokens']:,} prompt + "
                    f"{estimate['completion_tokens']:,} completion tokens, cost {_fmt(estimate['cost'], 4)}"
                ),
            ]
        )
        if judge.get("usage"):
            usage = judge["usage"]
            rows.append(
                [
                    "judge usage",
                    (
                        f"{usage['requests']} requests, {usage['prompt_tokens']:,} prompt + "
                        f"{usage['completion_tokens']:,} completion tokens, cost {_fmt(judge.get('cost'), 4)}"
                    ),
                ]
            )
    return _table(["", ""], rows)


def _verdict_section(verdict: dict[str, Any] | None) -> str:
    if verdict is None:
        return '<p class="muted">No verdict was computed.</p>'
    state = '<span class="fail">REGRESSED</span>' if verdict["regressed"] else '<span class="pass">PASS</span>'
    parts = [f"<p>Verdict: {state}</p>"]
    if verdict["regressions"]:
        parts.append("<p>Regressed: " + html.escape(", ".join(verdict["regressions"])) + "</p>")
    parts += [f'<p class="muted">{html.escape(note)}</p>' for note in verdict["notes"]]
    order = {"regressed": 0, "improved": 1, "ok": 2, "new": 3, "missing": 4}
    checks = sorted(verdict["checks"], key=lambda c: (order.get(c["status"], 5), c["set"], c["metric"]))
    rows = [
        [c["set"], c["metric"], c["previous"], c["current"], c["delta"], c["allowed"], c["status"], c["reason"]]
        for c in checks
    ]
    parts.append(
        _table(
            ["set", "metric", "previous", "current", "delta", "allowed drop", "status", "reason"], rows, {2, 3, 4, 5}
        )
    )
    return "".join(parts)


def _set_section(name: str, set_aggregate: dict[str, Any], results: dict[str, Any], history: list) -> str:
    gatehouse = set_aggregate["gatehouse"]
    parts = [f"<h2>Set {html.escape(name)} ({set_aggregate['cases']} cases)</h2>"]
    trend = _trend_plot(name, history)
    if trend:
        parts.append(f"<h3>Trends over {len(history)} run(s) on this data</h3>" + _img(trend, f"{name} trends"))
    rows = []
    for group in ("ragas", "judge"):
        for metric, stats in (set_aggregate.get(group) or {}).items():
            rows.append([group, metric, stats["mean"], stats["sd"], stats["n"], stats["nan"], stats["not_applicable"]])
    for metric in ("intent_accuracy", "routing_accuracy", "invented_citation_share", "supported_sentence_share"):
        stats = gatehouse[metric]
        rows.append(
            ["gatehouse", metric, stats["mean"], stats["sd"], stats["n"], stats["nan"], stats["not_applicable"]]
        )
    parts.append("<h3>Metrics</h3>")
    parts.append(
        '<p class="muted">Mean and sd over the valid values (judge metrics: sd over the repeat means); n valid, '
        "NaN failed (judge: failed judgements), N/A cases the metric does not apply to.</p>"
    )
    parts.append(_table(["group", "metric", "mean", "sd", "n", "NaN", "N/A"], rows, {2, 3, 4, 5, 6}))
    distribution = _distribution_plot(set_aggregate)
    if distribution:
        parts.append(_img(distribution, f"{name} score distributions"))
    absent = gatehouse["abstention"]
    parts.append("<h3>Abstention, statuses, guardrails</h3>")
    parts.append(
        _table(
            ["precision", "recall", "TP", "FP", "FN", "TN"],
            [[absent["precision"], absent["recall"], absent["tp"], absent["fp"], absent["fn"], absent["tn"]]],
            {0, 1, 2, 3, 4, 5},
        )
    )
    parts.append(_table(["status", "cases"], [[k, v] for k, v in gatehouse["status_counts"].items()], {1}))
    if gatehouse["guardrail_actions"]:
        parts.append(
            _table(["guardrail action", "count"], [[k, v] for k, v in gatehouse["guardrail_actions"].items()], {1})
        )
    multi = gatehouse.get("multi_part")
    if multi and multi["cases"]:
        parts.append(f"<h3>Multi-part questions ({multi['cases']} cases)</h3>")
        parts.append(
            '<p class="muted">An answerable part is answered when its gold facts are in the answer and a passage of '
            "its gold sources is cited; a part no document answers is reported missing when the status is not "
            "success and metadata.plan.missing names it.</p>"
        )
        parts.append(
            _table(
                ["metric", "value", "n"],
                [[key, multi[key]["mean"], multi[key]["n"]]
                 for key in ("parts_answered", "parts_reported_missing", "parts_handled_cases")]
                + [["false_success_with_missing_part", multi["false_success_with_missing_part"], multi["cases"]]],
                {1, 2},
            )
        )
    if gatehouse["invented_citations"]:
        parts.append('<p class="fail">Invented citations:</p>')
        parts.append(
            _table(["case", "problems"], [[k, "; ".join(v)] for k, v in gatehouse["invented_citations"].items()])
        )
    parts.append("<h3>Routing</h3>")
    for key, title in (("intent_confusion", "intent"), ("routing_confusion", "route and knowledge base")):
        plot = _confusion_plot(gatehouse[key], title)
        if plot:
            parts.append(_img(plot, f"{name} {title} confusion matrix"))
    parts.append("<h3>Latency and retries</h3>")
    latency = gatehouse["latency_ms"]
    plot = _latency_plot(latency)
    if plot:
        parts.append(_img(plot, f"{name} latency per stage"))
    parts.append(
        _table(
            ["stage", "P50 ms", "P95 ms", "mean ms", "n"],
            [[stage, s["p50"], s["p95"], s["mean"], s["n"]] for stage, s in latency.items()],
            {1, 2, 3, 4},
        )
    )
    plot = _retries_plot(gatehouse["retries"])
    if plot:
        parts.append(_img(plot, f"{name} retries histogram"))
    parts.append("<h3>Cases that need a look</h3>")
    parts.append(_cases_section(name, results.get("records") or []))
    return "".join(parts)


def render_html(results: dict[str, Any], history: list[dict[str, Any]]) -> str:
    """
    `report.html`: self-contained, no scripts, every run-provided text escaped.

    :param results: This run's results (as written to results.json).
    :param history: Earlier runs (`gatehouse.eval.verdict.previous_runs`), any order; each set's trend uses those with the
        same dataset version and size, plus this run.
    """
    from matplotlib import rc_context

    metadata, aggregates = results["metadata"], results["aggregates"]
    ordered = sorted(history, key=lambda run: str(run["metadata"].get("timestamp") or ""))
    columns = _headline_columns(aggregates)
    headline_rows = [
        [name, agg["cases"], *[scalars(agg).get(key) for key, _ in columns]] for name, agg in aggregates.items()
    ]
    parts = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        f"<title>Gatehouse evaluation {html.escape(metadata['timestamp'])}</title><style>{STYLE}</style></head><body>",
        f"<h1>Gatehouse evaluation {html.escape(metadata['timestamp'])}</h1>",
        "<h2>Headline</h2>",
        _table(["set", "cases", *[label for _, label in columns]], headline_rows, set(range(1, len(columns) + 2))),
        "<h2>Verdict and regressions</h2>",
        _verdict_section(results.get("verdict")),
        "<h2>NaN (failed metrics, never averaged in)</h2>",
    ]
    nan_rows = _nan_rows(results)
    if nan_rows:
        parts.append(
            _table(
                ["set", "group", "metric", "valid", "NaN", "of", "N/A", "most frequent reasons"],
                [
                    [
                        r["set"],
                        r["group"],
                        r["metric"],
                        r["n"],
                        r["nan"],
                        r["calls"],
                        r["not_applicable"],
                        " | ".join(r["reasons"]),
                    ]
                    for r in nan_rows
                ],
                {3, 4, 5, 6},
            )
        )
    else:
        parts.append("<p>No metric failed.</p>")
    current = {"metadata": metadata, "aggregates": aggregates}
    with rc_context({"text.parse_math": False}):
        for name, set_aggregate in aggregates.items():
            same = [run for run in ordered if same_set(current, run, name)] + [current]
            parts.append(_set_section(name, set_aggregate, results, same))
    parts.append("<h2>Run</h2>")
    parts.append(_run_section(metadata, results.get("judge")))
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(
    results: dict[str, Any], reports_root: str | Path, history: list[dict[str, Any]] | None = None
) -> Path:
    """
    Write `results.json`, `summary.md` and `report.html` into `<reports_root>/<run_id>/`.

    :param results: `{"metadata" (run_metadata()), "aggregates", "verdict", "records", optional "judge"}`.
    :param reports_root: The reports folder (earlier runs there feed the trends).
    :param history: The earlier runs (`previous_runs(reports_root)`) when the caller has read them already.
    :returns: The run directory (`<run_id>`, or `<run_id>-2`, ... when that name is taken).
    """
    for key in ("metadata", "aggregates"):
        if key not in results:
            raise ValueError(f"Report results need {key!r} (got {sorted(results)}).")
    root = Path(reports_root)
    history = previous_runs(root) if history is None else history
    run_dir = root / results["metadata"]["run_id"]
    suffix = 2
    while run_dir.exists():
        run_dir = root / f"{results['metadata']['run_id']}-{suffix}"
        suffix += 1
    run_dir.mkdir(parents=True)
    safe = _json_safe(results)
    (run_dir / "results.json").write_text(json.dumps(safe, indent=1, ensure_ascii=False), encoding="utf-8")
    (run_dir / "summary.md").write_text(render_summary(safe), encoding="utf-8")
    (run_dir / "report.html").write_text(render_html(safe, history), encoding="utf-8")
    return run_dir
