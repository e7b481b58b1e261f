"""
The regression verdict: this run's numbers against the previous run on the same datasets (or a baseline file),
with per-metric thresholds from `eval/thresholds.yml`.

A run is the content of a `results.json` (`gatehouse.eval.report`): `metadata` (with `timestamp`, `datasets`
`{set: version}` and `judge_model`) and `aggregates` (`gatehouse.eval.metrics.aggregate`). Every set is compared with the
most recent earlier run that has the same set at the same version with the same number of cases (so a `--quick`
slice is never compared with a full run), or with the baseline file's set when one is given. Judge metrics are
compared only when both runs used the same judge model. Bounds (`min`/`max`, e.g. `invented_citation_share` must
stay 0) are checked on every run, with or without a baseline.

Usage:
```python
from gatehouse.eval.verdict import decide, format_verdict

verdict = decide(current, reports_root="eval/reports")     # or baseline="eval/baseline/results.json"
print(format_verdict(verdict))
raise SystemExit(1 if verdict["regressed"] else 0)
```
"""

import fnmatch
import json
from pathlib import Path
from typing import Any

import yaml

from gatehouse.eval.metrics import scalars

DEFAULT_THRESHOLDS = Path(__file__).resolve().parent / "thresholds.yml"
DIRECTIONS = ("higher", "lower")
RULE_KEYS = {"direction", "max_drop", "max_drop_relative", "min", "max"}
TOLERANCE = 1e-9


def load_thresholds(path: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """
    Read and check a thresholds file.

    :param path: The YAML file; None reads `eval/thresholds.yml`.
    :returns: `{metric name or pattern: rule}` in file order.
    :raises ValueError: naming the file and the metric when a rule is malformed.
    """
    path = Path(path) if path is not None else DEFAULT_THRESHOLDS
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise ValueError(f"Cannot read thresholds file {path}: {error}") from error
    metrics = (data or {}).get("metrics") if isinstance(data, dict) else None
    if not isinstance(metrics, dict):
        raise ValueError(f"{path}: expected a mapping under 'metrics:'.")
    for name, rule in metrics.items():
        if not isinstance(rule, dict):
            raise ValueError(
                f"{path}: metric {name!r} must map to a rule such as {{direction: higher, max_drop: 0.02}}."
            )
        unknown = set(rule) - RULE_KEYS
        if unknown:
            raise ValueError(f"{path}: metric {name!r} has unknown keys {sorted(unknown)}; use {sorted(RULE_KEYS)}.")
        if rule.get("direction") not in DIRECTIONS:
            raise ValueError(
                f"{path}: metric {name!r} needs direction: higher or lower, got {rule.get('direction')!r}."
            )
        for key in ("max_drop", "max_drop_relative", "min", "max"):
            value = rule.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise ValueError(f"{path}: metric {name!r} {key} must be a number, got {value!r}.")
            if key.startswith("max_drop") and value is not None and value < 0:
                raise ValueError(f"{path}: metric {name!r} {key} must not be negative, got {value}.")
    return dict(metrics)


def rule_for(metric: str, thresholds: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The rule of a metric: its exact entry, else the first pattern that matches it, else None."""
    if metric in thresholds:
        return thresholds[metric]
    for pattern, rule in thresholds.items():
        if fnmatch.fnmatchcase(metric, pattern):
            return rule
    return None


def allowed_drop(rule: dict[str, Any], previous: float) -> float:
    """The worsening a rule allows from `previous`: the larger of `max_drop` and `max_drop_relative` x |previous|."""
    allowances = [float(rule["max_drop"])] if rule.get("max_drop") is not None else []
    if rule.get("max_drop_relative") is not None:
        allowances.append(float(rule["max_drop_relative"]) * abs(previous))
    return max(allowances) if allowances else 0.0


def check(metric: str, current: float | None, previous: float | None, rule: dict[str, Any]) -> dict[str, Any]:
    """
    Check one metric against its rule.

    :returns: `{metric, current, previous, delta, allowed, direction, status, reason}`; status is `regressed`
        (worse than allowed, or outside `min`/`max`), `improved`, `ok`, `new` (no previous value) or `missing`
        (no current value).
    """
    direction = rule["direction"]
    result: dict[str, Any] = {
        "metric": metric,
        "current": current,
        "previous": previous,
        "delta": None if current is None or previous is None else current - previous,
        "allowed": None,
        "direction": direction,
        "status": "ok",
        "reason": "",
    }
    if current is None:
        result.update(status="missing", reason="not measured in this run")
        return result
    if rule.get("min") is not None and current < rule["min"] - TOLERANCE:
        result.update(status="regressed", reason=f"{current:.4g} is below the minimum {rule['min']}")
        return result
    if rule.get("max") is not None and current > rule["max"] + TOLERANCE:
        result.update(status="regressed", reason=f"{current:.4g} is above the maximum {rule['max']}")
        return result
    if previous is None:
        result.update(status="new", reason="no previous value")
        return result
    allowed = allowed_drop(rule, previous)
    worsening = previous - current if direction == "higher" else current - previous
    result["allowed"] = allowed
    if worsening > allowed + TOLERANCE:
        result.update(
            status="regressed",
            reason=f"{previous:.4g} -> {current:.4g}, worse by {worsening:.4g} (allowed {allowed:.4g}, "
            f"{direction} is better)",
        )
    elif worsening < -TOLERANCE:
        result.update(status="improved", reason=f"{previous:.4g} -> {current:.4g}")
    return result


def read_run(path: str | Path) -> dict[str, Any]:
    """
    A run's `metadata` and `aggregates` from a `results.json` (or a run directory holding one).

    :raises ValueError: when the file is missing or not a results file.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "results.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ValueError(f"Cannot read run results {path}: {error}") from error
    if not isinstance(data, dict) or "metadata" not in data or "aggregates" not in data:
        raise ValueError(f"{path} is not a Gatehouse results file (needs 'metadata' and 'aggregates').")
    return {"path": str(path), "metadata": data["metadata"], "aggregates": data["aggregates"]}


def previous_runs(reports_root: str | Path, exclude: str | Path | None = None) -> list[dict[str, Any]]:
    """
    The runs under a reports root (`<root>/<run>/results.json`), newest first by `metadata.timestamp`.

    :param reports_root: The reports directory.
    :param exclude: A run directory (or its results.json) to leave out, e.g. the current run.
    """
    root = Path(reports_root)
    if not root.is_dir():
        return []
    excluded = Path(exclude).resolve() if exclude is not None else None
    runs = []
    for results in root.glob("*/results.json"):
        if excluded is not None and excluded in (results.resolve(), results.parent.resolve()):
            continue
        try:
            runs.append(read_run(results))
        except ValueError:
            continue  # a half-written or foreign file is not a run to compare with
    return sorted(runs, key=lambda run: str(run["metadata"].get("timestamp") or ""), reverse=True)


def same_set(current: dict[str, Any], other: dict[str, Any], name: str) -> bool:
    """Whether `other` ran set `name` at the same version (`metadata.datasets`) with the same number of cases."""
    if name not in other["aggregates"]:
        return False
    same_version = (current["metadata"].get("datasets") or {}).get(name) == (
        other["metadata"].get("datasets") or {}
    ).get(name)
    return same_version and current["aggregates"][name].get("cases") == other["aggregates"][name].get("cases")


def _judge_names(set_aggregate: dict[str, Any]) -> set[str]:
    names = set(set_aggregate.get("judge") or {})
    return names | {f"nan_share.{name}" for name in names}


def decide(
    current: dict[str, Any],
    *,
    reports_root: str | Path | None = None,
    baseline: str | Path | None = None,
    thresholds: dict[str, dict[str, Any]] | str | Path | None = None,
    history: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """
    The verdict of a run.

    :param current: `{"metadata", "aggregates"}` of this run.
    :param reports_root: Where earlier runs are (ignored when `baseline` is given).
    :param baseline: A results.json (or run directory) to compare with instead of the previous run.
    :param thresholds: Rules (`load_thresholds()` output) or a thresholds file; None reads `eval/thresholds.yml`.
    :param history: The earlier runs (`previous_runs(reports_root)`) when the caller has read them already.
    :returns: `{regressed, regressions, checks, baselines, notes}`: `regressions` names every regressed metric as
        `"<set>: <metric>"`, `checks` lists one result of `check()` per set and thresholded metric (with `set`),
        `baselines` the run each set was compared with (None when there was none).
    """
    rules = thresholds if isinstance(thresholds, dict) else load_thresholds(thresholds)
    if baseline is not None:
        candidates = [read_run(baseline)]
    elif reports_root is not None:
        candidates = previous_runs(reports_root) if history is None else history
    else:
        candidates = []
    checks: list[dict[str, Any]] = []
    baselines: dict[str, Any] = {}
    notes: list[str] = []
    for name, set_aggregate in current["aggregates"].items():
        previous = next((run for run in candidates if same_set(current, run, name)), None)
        if previous is None:
            where = f"baseline {candidates[0]['path']}" if baseline is not None else "earlier runs"
            notes.append(f"{name}: no run with the same dataset version and size in {where}; only bounds are checked")
        baselines[name] = (
            None if previous is None else {"path": previous["path"], "timestamp": previous["metadata"].get("timestamp")}
        )
        now = scalars(set_aggregate)
        before = scalars(previous["aggregates"][name]) if previous is not None else {}
        same_judge = previous is not None and previous["metadata"].get("judge_model") == current["metadata"].get(
            "judge_model"
        )
        judge_names = _judge_names(set_aggregate)
        if previous is not None and judge_names and not same_judge:
            notes.append(f"{name}: judge model changed, judge metrics are not compared with the previous run")
        for metric in sorted(set(now) | set(before)):
            rule = rule_for(metric, rules)
            if rule is None:
                continue
            comparable = metric not in judge_names or same_judge
            result = check(metric, now.get(metric), before.get(metric) if comparable else None, rule)
            checks.append({"set": name, **result})
    regressions = [f"{c['set']}: {c['metric']}" for c in checks if c["status"] == "regressed"]
    return {
        "regressed": bool(regressions),
        "regressions": regressions,
        "checks": checks,
        "baselines": baselines,
        "notes": notes,
    }


def format_verdict(verdict: dict[str, Any]) -> str:
    """The verdict in a few lines: PASS or REGRESSED with the metrics that regressed and why."""
    if not verdict["regressed"]:
        compared = sum(1 for c in verdict["checks"] if c["previous"] is not None)
        lines = [f"Verdict: PASS ({len(verdict['checks'])} checks, {compared} against an earlier run)"]
    else:
        lines = [f"Verdict: REGRESSED ({len(verdict['regressions'])} metric(s))"]
        lines += [
            f"  {c['set']}: {c['metric']}: {c['reason']}" for c in verdict["checks"] if c["status"] == "regressed"
        ]
    lines += [f"  note: {note}" for note in verdict["notes"]]
    return "\n".join(lines)
