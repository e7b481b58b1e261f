"""
The request state that travels through `ask.yml`.

Every gate of the ask pipeline takes one `state: dict` and emits it (a new dict, never the input mutated)
on exactly one of its named routes. Keeping one typed-by-convention state object makes the path, the
attempts and the per-stage latency trivial to record, and lets a branch end anywhere and still build a
complete response.

Keys (all optional unless noted):

- `query` (str, required): the current query; rewritten on retries, redacted by the input guardrails.
- `original_query` (str): the user's question after input guardrails (redacted, normalised).
- `tenant` (str): the tenant whose documents may be retrieved; `"public"` when none is given.
- `kb` (str | None): a knowledge base the caller asked for explicitly.
- `mode` (str): `full-corpus` | `constrained-context` | `hybrid`.
- `context` (str | None): caller-provided text for the constrained and hybrid modes.
- `history` (list[dict]): earlier turns, `{"role": ..., "content": ...}`.
- `intent` (str), `route` (str: `retrieve` | `direct` | `refuse`).
- `condensed_query` (str): the standalone question the condenser made of a follow-up.
- `kbs` (list[str]): the knowledge bases chosen by the router; `threshold` (float): their quality threshold;
  `route_scores` (dict[str, float]): the router's score per candidate KB; `route_evidence` (dict[str, float]): the
  best document score per KB when the evidence tier searched; `route_reason` (str): which tier decided;
  `prefetched_documents` (dict | None): `{query, kbs, documents}` of the evidence search, which the retrieval
  stage takes as the first attempt's retrieval (and clears).
- `filters` (dict): Haystack metadata filters for retrieval (always include the tenant).
- `attempt` (int): retrieval attempt number, 0-based; `attempts` (list[dict]): `{"query", "score"}` per attempt.
- `documents` (list[Document]): the retrieved documents of the latest attempt.
- `quality_score` (float), `fallback` (bool): set by the quality gate.
- `passages` (list[Document]): what the generator sees, each with `meta["source_id"]` like `"S1"`.
- `answerability` (dict): the answerability gate's `score`, `threshold`, `missing_terms`, `missing_entities` and
  `best` candidate with its signals; `answer_candidates` (list[dict]): the ranked candidate sentences
  (`source_id`, `passage`, `unit`, `text`, `score`, `span`) the answerer starts from.
- `answer` (str), `citations` (list[dict]), `status` (str), `error_message` (str | None).
- `path` (list[str]): ordered steps taken, e.g. `start`, `route_to_faq`, `attempt_0_score_0.41`.
- `latency_ms` (dict[str, float]): milliseconds per stage, summed when a stage runs more than once.
- `validation` (dict[str, list[str]]): `boundary_violations`, `confidence_warnings`, `guardrail_actions`,
  `unsupported_sentences`.
"""

import time
from copy import deepcopy
from typing import Any

VALIDATION_KEYS = ("boundary_violations", "confidence_warnings", "guardrail_actions", "unsupported_sentences")
PUBLIC_TENANT = "public"


def new_state(query: str, **fields: Any) -> dict[str, Any]:
    """
    Build a fresh state for `query` with empty path, latency and validation records.

    :param query: The user's question.
    :param fields: Any other state keys to set.
    :returns: A new state dictionary.
    """
    state: dict[str, Any] = {
        "query": query,
        "original_query": query,
        "tenant": PUBLIC_TENANT,
        "kb": None,
        "mode": "full-corpus",
        "context": None,
        "history": [],
        "attempt": 0,
        "attempts": [],
        "path": ["start"],
        "latency_ms": {},
        "validation": {key: [] for key in VALIDATION_KEYS},
    }
    state.update(fields)
    return state


def advance(
    state: dict[str, Any],
    *,
    stage: str | None = None,
    started: float | None = None,
    steps: list[str] | None = None,
    **updates: Any,
) -> dict[str, Any]:
    """
    Return a copy of `state` with `updates` applied, `steps` appended to the path and the stage's time added.

    The input state is never modified: lists and dictionaries that this function extends are copied.

    :param state: The incoming state.
    :param stage: Stage name under which to record latency.
    :param started: `time.perf_counter()` value taken when the stage started.
    :param steps: Path entries to append.
    :param updates: Keys to set on the new state.
    :returns: The new state.
    """
    new = dict(state)
    new["path"] = list(state.get("path", [])) + list(steps or [])
    new["latency_ms"] = dict(state.get("latency_ms", {}))
    if stage is not None and started is not None:
        elapsed = (time.perf_counter() - started) * 1000.0
        new["latency_ms"][stage] = round(new["latency_ms"].get(stage, 0.0) + elapsed, 3)
    new.update(updates)
    return new


def with_validation(state: dict[str, Any], key: str, *items: str) -> dict[str, Any]:
    """
    Return a copy of `state` with `items` appended to `validation[key]`.

    :param state: The incoming state.
    :param key: One of `boundary_violations`, `confidence_warnings`, `guardrail_actions`, `unsupported_sentences`.
    :param items: Messages to record.
    :returns: The new state.
    :raises ValueError: If `key` is not a validation key.
    """
    if key not in VALIDATION_KEYS:
        raise ValueError(f"Unknown validation key '{key}'. Use one of {', '.join(VALIDATION_KEYS)}.")
    new = dict(state)
    validation = deepcopy(state.get("validation") or {k: [] for k in VALIDATION_KEYS})
    validation.setdefault(key, []).extend(items)
    new["validation"] = validation
    return new
