"""
Evaluation metrics over the per-case records the runner produces.

A record is one evaluation case after Gatehouse answered it:

```python
{"set": "golden", "id": "faq-01", "question": "...", "tags": [...],
 "gold": {"answer", "sources", "contexts", "kb", "intent", "route", "answerable"},
 "response": {...},                     # the full response contract (answer, citations, metadata, validation, status)
 "retrieved": [{"source": "faq/api-keys.md", "text": "..."}],   # contexts the answer was built from, rank order
 "judge": {"faithfulness": [0.8, None, 0.7], ...}}              # only when the LLM judge ran (gatehouse.eval.judge)
```

Three kinds of numbers come out of it:

- **Ragas metrics that need no LLM**, scored per case with Ragas' own metric classes (`SingleTurnSample` +
  `single_turn_ascore`): `id_based_context_precision` / `id_based_context_recall` (retrieved source keys vs the
  gold sources), `non_llm_context_recall` (retrieved texts vs the gold contexts), `rouge_score`, `bleu_score`,
  `chrf_score`, `non_llm_string_similarity` and `exact_match` (the answer, citation markers removed, vs the gold
  answer of an answerable case). `score_records` writes them into `record["metrics"]`: a float, `None` when the
  metric failed or returned NaN (the reason is in `record["metric_errors"]`), and no key at all when the metric
  does not apply to the case (no gold sources, no gold answer, ...).
- **Gatehouse's own metrics** per set: intent and routing accuracy with confusion matrices, abstention precision
  and recall, the retries histogram, the share of answers with invented citations (must be 0), the share of
  claim sentences supported by their citation, guardrail action counts, status counts and latency P50/P95 per
  stage; over the multi-part cases (`gold.parts`), how many parts were answered or reported missing
  (`multi_part`).
- **Aggregates** (`aggregate`): per set and metric `{mean, sd, n, nan, not_applicable, values}` where `n` counts
  the values the mean is taken over, `nan` the failed ones and `not_applicable` the cases the metric does not
  apply to. A NaN is never averaged in as zero and never silently dropped. Judge metrics (one value per repeat)
  add `repeats`, `repeat_means` and take `sd` over the repeat means (judge variance between runs).

Usage:
```python
from gatehouse.eval.metrics import aggregate, scalars, score_records

records = score_records(records)                    # adds record["metrics"] / record["metric_errors"]
aggregates = aggregate(records)                     # {"golden": {"cases", "ragas", "judge", "gatehouse"}, ...}
scalars(aggregates["golden"])["intent_accuracy"]    # one flat number per metric, as the verdict compares them
```
"""

import math
import re
import statistics
from collections import Counter, defaultdict
from typing import Any

from tqdm import tqdm

from gatehouse.components.citation_markers import find_markers, strip_markers
from gatehouse.components.terms import content_words, singular
from gatehouse.components.text_units import normalize_space, split_units
from gatehouse.stats import percentile

RAGAS_METRICS = (
    "id_based_context_precision",
    "id_based_context_recall",
    "non_llm_context_recall",
    "rouge_score",
    "bleu_score",
    "chrf_score",
    "non_llm_string_similarity",
    "exact_match",
)
ANSWER_METRICS = ("rouge_score", "bleu_score", "chrf_score", "non_llm_string_similarity", "exact_match")
ABSTAIN_STATUSES = ("fallback", "refused")
ANSWERED_STATUSES = ("success", "partial")
NONE_LABEL = "(none)"
LATENCY_PERCENTILES = (50, 95)
#: Share of a missing part's aspect words an entry of `metadata.plan.missing` must contain to report that part.
MISSING_ASPECT_OVERLAP = 0.5
_DASHES = str.maketrans(dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d", "-"))


def error_reason(error: BaseException, limit: int = 300) -> str:
    """A one-line reason for a failed metric: the exception type and message, markup and line breaks removed."""
    message = " ".join(re.sub(r"</?[a-z_]+(?: [^>]*)?>", " ", str(error)).split())
    return f"{type(error).__name__}: {message}"[:limit]


def _ragas_metrics() -> dict[str, Any]:
    """Ragas' non-LLM metric instances by name (imported here: importing ragas takes seconds).

    The ID-based and non-LLM context metrics exist only as `SingleTurnMetric`s in Ragas 0.4.3 (not in
    `ragas.metrics.collections`), so every non-LLM metric is used through the same `single_turn_ascore` API.
    Ragas' `BleuScore` splits texts at ". " and pairs the sentences as parallel streams, so for multi-sentence
    texts it scores the first response sentence against the reference sentences; it is reported as Ragas computes
    it.
    """
    from ragas.metrics._bleu_score import BleuScore
    from ragas.metrics._chrf_score import ChrfScore
    from ragas.metrics._context_precision import IDBasedContextPrecision
    from ragas.metrics._context_recall import IDBasedContextRecall, NonLLMContextRecall
    from ragas.metrics._rouge_score import RougeScore
    from ragas.metrics._string import ExactMatch, NonLLMStringSimilarity

    metrics = [
        IDBasedContextPrecision(),
        IDBasedContextRecall(),
        NonLLMContextRecall(),
        RougeScore(),
        BleuScore(),
        ChrfScore(),
        NonLLMStringSimilarity(),
        ExactMatch(),
    ]
    return {metric.name: metric for metric in metrics}


def clean_answer(answer: str | None) -> str:
    """The answer as compared with a gold answer: citation markers removed, whitespace collapsed."""
    return normalize_space(strip_markers(answer or ""))


def fact_text(text: str | None) -> str:
    """
    A text as gold facts are looked up in it: lower-cased, unicode dashes as "-", backticks (markdown code) removed,
    whitespace collapsed. A fact occurs in a text when `fact_text(fact) in fact_text(text)`.

    ```python
    fact_text("Costs $49 \u2013 billed `monthly`")   # 'costs $49 - billed monthly'
    ```
    """
    return normalize_space((text or "").translate(_DASHES).replace("`", "").lower())


def aspect_words(text: str | None) -> set[str]:
    """
    The content words of a part's aspect (or of a sub-query): lower-cased tokens without Gatehouse's stopwords,
    plurals reduced to the singular by a simple suffix rule (`policies` -> `policy`, `hours` -> `hour`).

    ```python
    aspect_words("Enterprise support hours")   # {'enterprise', 'support', 'hour'}
    ```
    """
    return {singular(word) for word in content_words(text or "", stemmed=False)}


def _gold(record: dict[str, Any]) -> dict[str, Any]:
    return record.get("gold") or {}


def _response(record: dict[str, Any]) -> dict[str, Any]:
    return record.get("response") or {}


def _metadata(record: dict[str, Any]) -> dict[str, Any]:
    return _response(record).get("metadata") or {}


def case_samples(record: dict[str, Any]) -> dict[str, Any]:
    """
    The Ragas samples of one record, by metric name; a metric that does not apply to the case is absent.

    - ID-based context precision: gold sources and at least one retrieved context (precision of nothing is
      undefined). ID-based context recall: gold sources (nothing retrieved recalls 0).
    - Non-LLM context recall: gold contexts.
    - Answer metrics: an answerable case with a non-empty gold answer.

    :param record: A per-case record.
    :returns: `{metric name: SingleTurnSample}`.
    """
    from ragas.dataset_schema import SingleTurnSample

    gold = _gold(record)
    retrieved = list(record.get("retrieved") or [])
    retrieved_ids = [str(item.get("source")) for item in retrieved]
    samples: dict[str, Any] = {}
    gold_sources = [str(source) for source in gold.get("sources") or []]
    if gold_sources:
        ids = SingleTurnSample(retrieved_context_ids=retrieved_ids, reference_context_ids=gold_sources)
        samples["id_based_context_recall"] = ids
        if retrieved_ids:
            samples["id_based_context_precision"] = ids
    gold_contexts = [str(text) for text in gold.get("contexts") or []]
    if gold_contexts:
        samples["non_llm_context_recall"] = SingleTurnSample(
            retrieved_contexts=[str(item.get("text") or "") for item in retrieved], reference_contexts=gold_contexts
        )
    gold_answer = (gold.get("answer") or "").strip()
    if gold.get("answerable", True) and gold_answer:
        answer = SingleTurnSample(reference=gold_answer, response=clean_answer(_response(record).get("answer")))
        for name in ANSWER_METRICS:
            samples[name] = answer
    return samples


async def _score_case(record: dict[str, Any], metrics: dict[str, Any]) -> tuple[dict[str, float | None], dict]:
    scores: dict[str, float | None] = {}
    errors: dict[str, str] = {}
    for name, sample in case_samples(record).items():
        if name == "non_llm_context_recall" and not sample.retrieved_contexts:
            scores[name] = 0.0  # nothing retrieved recalls nothing (Ragas' max() over no contexts would raise)
            continue
        try:
            value = float(await metrics[name].single_turn_ascore(sample))
        except Exception as error:  # noqa: BLE001 - any failure of a metric is a counted NaN, never a crash
            scores[name] = None
            errors[name] = error_reason(error)
            continue
        if math.isfinite(value):
            scores[name] = value
        else:
            scores[name] = None
            errors[name] = "returned NaN"
    return scores, errors


def score_records(
    records: list[dict[str, Any]], *, metrics: dict[str, Any] | None = None, progress: bool = False
) -> list[dict[str, Any]]:
    """
    Score every record with the non-LLM Ragas metrics.

    :param records: Per-case records.
    :param metrics: Ragas metric instances by name (`RAGAS_METRICS` names), e.g. `{"rouge_score":
        RougeScore(rouge_type="rouge1")}` to replace a default; None uses the defaults.
    :param progress: Show a progress bar.
    :returns: New records with `metrics` (`{name: float | None}`, applicable metrics only) and `metric_errors`
        (`{name: reason}` for the NaN ones).
    """
    from ragas.async_utils import run

    unknown = sorted(set(metrics or {}) - set(RAGAS_METRICS))
    if unknown:
        raise ValueError(f"Unknown Ragas metrics {unknown}; choose from {', '.join(RAGAS_METRICS)}.")
    metrics = {**_ragas_metrics(), **(metrics or {})}

    async def score_all() -> list[tuple[dict, dict]]:
        return [
            await _score_case(record, metrics)
            for record in tqdm(records, desc="ragas metrics", unit="case", disable=not progress)
        ]

    results = run(score_all)
    return [
        {**record, "metrics": scores, "metric_errors": errors} for record, (scores, errors) in zip(records, results)
    ]


def _is_value(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def summarize(values: list[float | None], not_applicable: int = 0) -> dict[str, Any]:
    """
    Aggregate per-case values of one metric.

    :param values: One entry per applicable case; None (or a NaN float) is a failed case.
    :param not_applicable: The number of cases the metric does not apply to.
    :returns: `{mean, sd, n, nan, not_applicable, values}`: mean and sample standard deviation over the `n` valid
        values (None when there are none, sd None below two values), `nan` failed cases, `values` the valid ones.
    """
    valid = [float(v) for v in values if _is_value(v)]
    return {
        "mean": statistics.fmean(valid) if valid else None,
        "sd": statistics.stdev(valid) if len(valid) >= 2 else None,
        "n": len(valid),
        "nan": len(values) - len(valid),
        "not_applicable": int(not_applicable),
        "values": valid,
    }


def summarize_repeats(per_case: list[list[float | None]], not_applicable: int = 0) -> dict[str, Any]:
    """
    Aggregate a judge metric scored several times per case.

    :param per_case: One list per applicable case with one value per repeat (None = NaN / failed judgement).
    :param not_applicable: The number of cases the metric does not apply to.
    :returns: `summarize()` over the per-case means of the valid repeats (`n` cases with at least one valid repeat,
        `values` their means, `case_sd` their spread), with `sd` replaced by the standard deviation of the repeat
        means (the judge's variance between runs), and `nan` the number of failed judgements (case x repeat),
        `nan_cases` the cases without any valid repeat, `calls` all judgements, `repeats`, `repeat_means`.
    """
    case_means = []
    for values in per_case:
        valid = [float(v) for v in values if _is_value(v)]
        case_means.append(statistics.fmean(valid) if valid else None)
    result = summarize(case_means, not_applicable)
    repeats = max((len(values) for values in per_case), default=0)
    repeat_means = []
    for index in range(repeats):
        valid = [float(v[index]) for v in per_case if index < len(v) and _is_value(v[index])]
        repeat_means.append(statistics.fmean(valid) if valid else None)
    valid_repeat_means = [m for m in repeat_means if m is not None]
    result.update(
        case_sd=result["sd"],
        sd=statistics.stdev(valid_repeat_means) if len(valid_repeat_means) >= 2 else None,
        nan_cases=result["nan"],
        nan=sum(1 for values in per_case for v in values if not _is_value(v)),
        calls=sum(len(values) for values in per_case),
        repeats=repeats,
        repeat_means=repeat_means,
    )
    return result


def _ratio(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


def confusion(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """
    A confusion matrix of (gold, predicted) label pairs.

    :param pairs: The labelled cases.
    :returns: `{labels, matrix}`: the sorted union of labels, and `matrix[i][j]` = cases with gold `labels[i]`
        predicted as `labels[j]`.
    """
    labels = sorted({label for pair in pairs for label in pair})
    index = {label: i for i, label in enumerate(labels)}
    matrix = [[0] * len(labels) for _ in labels]
    for gold, predicted in pairs:
        matrix[index[gold]][index[predicted]] += 1
    return {"labels": labels, "matrix": matrix}


def _accuracy(pairs: list[tuple[str, str]], not_applicable: int) -> dict[str, Any]:
    return summarize([1.0 if gold == predicted else 0.0 for gold, predicted in pairs], not_applicable)


def refused_before_routing(record: dict[str, Any]) -> bool:
    """Whether the input guardrails refused the request before the intent gate ran (status refused, no route)."""
    return _response(record).get("status") == "refused" and not _metadata(record).get("route")


def intent_accuracy(records: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """
    Intent accuracy over the cases with a gold intent that reached the intent gate, and the confusion matrix.

    Cases the input guardrails refused before the intent gate (`refused_before_routing`) were never classified
    and count as not applicable; any other missing prediction is the label "(none)".

    :returns: (`summarize()` of 1/0 per case, `confusion()`).
    """
    pairs = [
        (str(_gold(r)["intent"]), str(_metadata(r).get("intent") or NONE_LABEL))
        for r in records
        if _gold(r).get("intent") and not refused_before_routing(r)
    ]
    return _accuracy(pairs, len(records) - len(pairs)), confusion(pairs)


def route_label(route: str | None, kb: str | None) -> str:
    """The routing label of a decision: `retrieve:<kb>` for retrieval (several KBs join with "+"), else the route."""
    if route == "retrieve":
        return f"retrieve:{kb or NONE_LABEL}"
    return route or NONE_LABEL


def predicted_route_label(record: dict[str, Any]) -> str:
    """The routing label of a response (`route_label`), `refuse` for a request refused before routing."""
    if refused_before_routing(record):
        return "refuse"
    metadata = _metadata(record)
    return route_label(metadata.get("route"), metadata.get("kb"))


def routing_accuracy(records: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """
    Routing accuracy (route and knowledge base together) and its confusion matrix.

    A case with a gold route, or with only a gold KB (then the gold route is `retrieve`), is labelled
    `route_label(route, kb)`; it is correct when the response's `route_label(metadata.route, metadata.kb)` is equal.
    A request the input guardrails refused before routing (`refused_before_routing`) was routed to `refuse`.

    :returns: (`summarize()` of 1/0 per case, `confusion()`).
    """
    pairs = []
    for record in records:
        gold = _gold(record)
        gold_route = gold.get("route") or ("retrieve" if gold.get("kb") else None)
        if gold_route is None:
            continue
        pairs.append((route_label(gold_route, gold.get("kb")), predicted_route_label(record)))
    return _accuracy(pairs, len(records) - len(pairs)), confusion(pairs)


def abstained(response: dict[str, Any]) -> bool:
    """Whether Gatehouse abstained: a status in `ABSTAIN_STATUSES` (fallback, refused) or the route `refuse`."""
    return response.get("status") in ABSTAIN_STATUSES or (response.get("metadata") or {}).get("route") == "refuse"


def abstention(records: list[dict[str, Any]]) -> dict[str, Any]:
    """
    Abstention precision and recall: predicted abstain = `abstained()`, gold abstain = the case is not answerable.

    :returns: `{precision, recall, tp, fp, fn, tn}`; precision (recall) is None without predicted (gold) abstentions.
    """
    counts = Counter()
    for record in records:
        predicted = abstained(_response(record))
        gold = not _gold(record).get("answerable", True)
        counts[("t" if predicted == gold else "f") + ("p" if predicted else "n")] += 1
    tp, fp, fn, tn = counts["tp"], counts["fp"], counts["fn"], counts["tn"]
    return {"precision": _ratio(tp, tp + fp), "recall": _ratio(tp, tp + fn),
            "false_abstention_rate": _ratio(fp, fp + tn), "tp": tp, "fp": fp, "fn": fn, "tn": tn}


def _normalised(text: str) -> str:
    return " ".join(re.findall(r"\w+", (text or "").lower()))


def first_sentence(answer: str) -> str:
    """The first sentence (or list item) of an answer, without citation markers."""
    units = [u for u in split_units(answer or "") if u.kind in ("sentence", "item")]
    return strip_markers(units[0].text) if units else strip_markers(answer or "")


def answer_quality(records: list[dict[str, Any]]) -> dict[str, Any]:
    """
    How answers read, over the answerable cases with a gold answer and over every answered case.

    :returns: `first_sentence_hit` (share of answerable cases whose answer's first sentence contains the gold answer,
        compared as lower-cased words; an abstention counts as a miss), `answered` (share of those cases answered)
        and `words_p50` (median words of answered responses, markers excluded), with their counts.
    """
    hits = answered = gold_cases = 0
    lengths = []
    for record in records:
        response = _response(record)
        answer = str(response.get("answer") or "")
        is_answered = not abstained(response)
        if is_answered:
            lengths.append(len(strip_markers(answer).split()))
        gold = _gold(record)
        if not gold.get("answerable", True) or not gold.get("answer"):
            continue
        gold_cases += 1
        if is_answered:
            answered += 1
            if _normalised(gold["answer"]) in _normalised(first_sentence(answer)):
                hits += 1
    return {"first_sentence_hit": _ratio(hits, gold_cases), "answered": _ratio(answered, gold_cases),
            "words_p50": percentile(lengths, 0.5) if lengths else None, "n": gold_cases, "answered_n": len(lengths)}


def citation_problems(record: dict[str, Any]) -> list[str]:
    """
    The invented citations of one answer: a citation whose id has no `[S#]` marker in the answer, an `[S#]` marker
    without a citation, or a citation whose `<kb>/<source>` is not among the retrieved contexts.

    :returns: One line per problem; empty when every citation is real.
    """
    response = _response(record)
    markers = {marker_id for _, _, ids in find_markers(response.get("answer") or "") for marker_id in ids}
    citations = list(response.get("citations") or [])
    retrieved = {str(item.get("source")) for item in record.get("retrieved") or []}
    problems = []
    cited_ids = set()
    for citation in citations:
        citation_id = str(citation.get("id") or "").upper()
        cited_ids.add(citation_id)
        if citation_id not in markers:
            problems.append(f"citation {citation_id} has no [{citation_id}] marker in the answer")
        key = f"{citation.get('kb')}/{citation.get('source')}"
        if key not in retrieved:
            problems.append(f"citation {citation_id} cites {key}, which was not retrieved")
    problems.extend(f"marker [{marker}] has no citation" for marker in sorted(markers - cited_ids))
    return problems


def invented_citations(records: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """
    The share of citing answers (answers with citations or `[S#]` markers) that invent a citation.

    :returns: (`summarize()` of 1/0 per citing answer — its mean is the share, which must be 0 —,
        `{case id: problems}` of the offending cases).
    """
    values, offenders = [], {}
    for record in records:
        response = _response(record)
        if not response.get("citations") and not find_markers(response.get("answer") or ""):
            continue
        problems = citation_problems(record)
        values.append(1.0 if problems else 0.0)
        if problems:
            offenders[str(record.get("id"))] = problems
    return summarize(values, len(records) - len(values)), offenders


def sentence_support(record: dict[str, Any]) -> tuple[int, int] | None:
    """
    Supported and total claim sentences of one answer.

    Claims are the answer's sentences that carry an `[S#]` marker, plus the sentences the citation verifier
    reported in `validation.unsupported_sentences` that are no longer in the answer (an answer replaced by the
    fallback message, or uncited claims). A marked sentence is supported unless it is reported unsupported.

    :returns: `(supported, claims)`, or None when the answer makes no cited or unsupported claim.
    """
    response = _response(record)
    unsupported = [normalize_space(s) for s in (response.get("validation") or {}).get("unsupported_sentences") or []]
    marked = [
        normalize_space(strip_markers(unit.text))
        for unit in split_units(response.get("answer") or "")
        if unit.kind != "heading" and find_markers(unit.text)
    ]
    unsupported_set, marked_set = set(unsupported), set(marked)
    claims = len(marked) + sum(1 for sentence in unsupported if sentence not in marked_set)
    if not claims:
        return None
    return sum(1 for sentence in marked if sentence not in unsupported_set), claims


def supported_sentences(records: list[dict[str, Any]]) -> dict[str, Any]:
    """
    The share of claim sentences supported by their citation (`sentence_support()`).

    :returns: `summarize()` of the per-answer shares, plus `supported` and `claims` summed over the answers,
        `micro` = supported / claims over all sentences, `reattributed` (supported sentences whose citation the
        verifier pointed at another passage, `reattributed_citation:` actions) and `micro_as_cited` = the share
        supported by the passage the generator itself cited.
    """
    supports = [sentence_support(record) for record in records]
    counted = [s for s in supports if s is not None]
    result = summarize([supported / claims for supported, claims in counted], len(records) - len(counted))
    supported_total = sum(s for s, _ in counted)
    claims_total = sum(c for _, c in counted)
    reattributed = sum(
        1 for record, support in zip(records, supports) if support is not None
        for action in (_response(record).get("validation") or {}).get("guardrail_actions") or []
        if str(action).startswith("reattributed_citation:")
    )
    result.update(supported=supported_total, claims=claims_total, micro=_ratio(supported_total, claims_total),
                  reattributed=reattributed, micro_as_cited=_ratio(supported_total - reattributed, claims_total))
    return result


def part_outcomes(record: dict[str, Any]) -> list[dict[str, Any]]:
    """
    How each gold part of a multi-part case (`gold.parts`) fared.

    An answerable part is handled (answered) when every one of its facts occurs in the answer (`fact_text`, citation
    markers removed) and a citation of the response is a passage of one of its sources (`<kb>/<source>`). An
    unanswerable part is handled (reported missing) when the status is not `success` and an entry of
    `metadata.plan.missing` contains at least `MISSING_ASPECT_OVERLAP` of the part's `aspect_words`.

    ```python
    part_outcomes({"gold": {"parts": [{"aspect": "Team price", "facts": ["$49"], "sources": ["product/pricing.md"],
                                       "answerable": True}]},
                   "response": {"answer": "$49 a month. [S1]", "status": "success",
                                "citations": [{"id": "S1", "kb": "product", "source": "pricing.md"}]}})
    # [{'aspect': 'Team price', 'answerable': True, 'handled': True, 'reason': None}]
    ```

    :returns: One `{aspect, answerable, handled, reason}` per part; `reason` says why an unhandled part failed.
    """
    response = _response(record)
    answer = fact_text(clean_answer(response.get("answer")))
    cited = {f"{c.get('kb')}/{c.get('source')}" for c in response.get("citations") or []}
    plan = _metadata(record).get("plan") or {}
    reported = [aspect_words(str(entry)) for entry in plan.get("missing") or []]
    outcomes = []
    for part in _gold(record).get("parts") or []:
        reasons = []
        if part.get("answerable", True):
            absent = [fact for fact in part.get("facts") or [] if fact_text(fact) not in answer]
            if absent:
                reasons.append("facts not in the answer: " + ", ".join(absent))
            if not cited & set(part.get("sources") or []):
                reasons.append("no citation of " + ", ".join(part.get("sources") or []))
        else:
            if response.get("status") == "success":
                reasons.append("status success")
            words = aspect_words(part.get("aspect"))
            if not any(words and len(words & entry) / len(words) >= MISSING_ASPECT_OVERLAP for entry in reported):
                reasons.append("not in metadata.plan.missing")
        outcomes.append({"aspect": part.get("aspect"), "answerable": part.get("answerable", True),
                         "handled": not reasons, "reason": "; ".join(reasons) or None})
    return outcomes


def multi_part(records: list[dict[str, Any]]) -> dict[str, Any]:
    """
    The multi-part metrics over the cases with gold parts (`part_outcomes`); other cases are not applicable.

    :returns: `parts_answered` (`summarize()` of 1/0 per answerable part), `parts_reported_missing` (per
        unanswerable part), `parts_handled_cases` (per case: every part answered or reported missing),
        `false_success_with_missing_part` (cases with an unanswerable part and status `success`), `cases` (cases
        with parts) and `unhandled` (`{case id: ["<aspect>: <reason>", ...]}`).
    """
    answered, missing, handled = [], [], []
    false_success, unhandled = 0, {}
    for record in records:
        outcomes = part_outcomes(record)
        if not outcomes:
            continue
        answered += [1.0 if o["handled"] else 0.0 for o in outcomes if o["answerable"]]
        missing += [1.0 if o["handled"] else 0.0 for o in outcomes if not o["answerable"]]
        handled.append(1.0 if all(o["handled"] for o in outcomes) else 0.0)
        if any(not o["answerable"] for o in outcomes) and _response(record).get("status") == "success":
            false_success += 1
        failed = [f"{o['aspect']}: {o['reason']}" for o in outcomes if not o["handled"]]
        if failed:
            unhandled[str(record.get("id"))] = failed
    return {
        "parts_answered": summarize(answered),
        "parts_reported_missing": summarize(missing),
        "parts_handled_cases": summarize(handled, len(records) - len(handled)),
        "false_success_with_missing_part": false_success,
        "cases": len(handled),
        "unhandled": unhandled,
    }


def retries_histogram(records: list[dict[str, Any]]) -> dict[str, int]:
    """Cases per number of retrieval attempts (`metadata.attempts`; 0 = no retrieval), keys as strings."""
    counts = Counter(int(_metadata(record).get("attempts") or 0) for record in records)
    return {str(attempts): counts[attempts] for attempts in sorted(counts)}


def guardrail_actions(records: list[dict[str, Any]]) -> dict[str, int]:
    """Guardrail actions by kind (`redacted_pii:email` counts as `redacted_pii`) over all cases."""
    counts = Counter(
        str(action).split(":", 1)[0]
        for record in records
        for action in (_response(record).get("validation") or {}).get("guardrail_actions") or []
    )
    return dict(sorted(counts.items()))


def status_counts(records: list[dict[str, Any]]) -> dict[str, int]:
    """Cases per response status."""
    return dict(sorted(Counter(str(_response(record).get("status")) for record in records).items()))


def latency(records: list[dict[str, Any]]) -> dict[str, dict[str, float | int]]:
    """
    Latency per stage (`metadata.latency_ms`, including `total`): `{stage: {p50, p95, mean, n}}` in milliseconds,
    percentiles with linear interpolation between the closest ranks; stages in the order they first appear
    (pipeline order), `total` last.
    """
    by_stage: dict[str, list[float]] = defaultdict(list)
    for record in records:
        for stage, ms in (_metadata(record).get("latency_ms") or {}).items():
            if _is_value(ms):
                by_stage[stage].append(float(ms))
    result = {}
    for stage in sorted(by_stage, key=lambda s: s == "total"):  # pipeline order (first seen), total last
        values = by_stage[stage]
        stats: dict[str, float | int] = {f"p{p}": percentile(values, p / 100) for p in LATENCY_PERCENTILES}
        stats.update(mean=sum(values) / len(values), n=len(values))
        result[stage] = stats
    return result


def gatehouse_metrics(records: list[dict[str, Any]]) -> dict[str, Any]:
    """
    Gatehouse's own metrics over the records of one set.

    :returns: `intent_accuracy`, `intent_confusion`, `routing_accuracy`, `routing_confusion`, `abstention`,
        `answer_quality`, `retries`, `invented_citation_share`, `invented_citations` (offending cases), `supported_sentence_share`,
        `guardrail_actions`, `status_counts`, `latency_ms`, `multi_part`.
    """
    intent, intent_matrix = intent_accuracy(records)
    routing, routing_matrix = routing_accuracy(records)
    invented, offenders = invented_citations(records)
    return {
        "intent_accuracy": intent,
        "intent_confusion": intent_matrix,
        "routing_accuracy": routing,
        "routing_confusion": routing_matrix,
        "abstention": abstention(records),
        "answer_quality": answer_quality(records),
        "retries": retries_histogram(records),
        "invented_citation_share": invented,
        "invented_citations": offenders,
        "supported_sentence_share": supported_sentences(records),
        "guardrail_actions": guardrail_actions(records),
        "status_counts": status_counts(records),
        "latency_ms": latency(records),
        "multi_part": multi_part(records),
    }


def ragas_aggregates(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """`summarize()` per non-LLM Ragas metric of scored records (`score_records`); absent = not applicable."""
    result = {}
    for name in RAGAS_METRICS:
        values = [record["metrics"][name] for record in records if name in (record.get("metrics") or {})]
        result[name] = summarize(values, len(records) - len(values))
    return result


def judge_aggregates(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """`summarize_repeats()` per judge metric found in the records' `judge` entries; absent = not applicable."""
    names = sorted({name for record in records for name in (record.get("judge") or {})})
    result = {}
    for name in names:
        per_case = [list(record["judge"][name]) for record in records if name in (record.get("judge") or {})]
        result[name] = summarize_repeats(per_case, len(records) - len(per_case))
    return result


def aggregate(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """
    Aggregate scored records per set.

    :param records: Records of one or more sets, scored by `score_records` (and the judge, when it ran).
    :returns: `{set name: {"cases", "ragas", "judge", "gatehouse"}}` in the order the sets first appear.
    """
    by_set: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_set.setdefault(str(record.get("set")), []).append(record)
    return {
        name: {
            "cases": len(set_records),
            "ragas": ragas_aggregates(set_records),
            "judge": judge_aggregates(set_records),
            "gatehouse": gatehouse_metrics(set_records),
        }
        for name, set_records in by_set.items()
    }


def scalars(set_aggregate: dict[str, Any]) -> dict[str, float | None]:
    """
    One number per metric of a set's aggregate, the names the thresholds and trends use.

    Ragas and judge metrics by their name (the mean) plus `nan_share.<name>` (failed / applicable judgements);
    `intent_accuracy`, `routing_accuracy`, `abstention_precision`, `abstention_recall`, `false_abstention_rate`,
    `first_sentence_hit`, `answer_words_p50`, `invented_citation_share`,
    `supported_sentence_share`, `mean_attempts` (over the cases that retrieved), `latency_p50_ms.<stage>` /
    `latency_p95_ms.<stage>`, and over the multi-part cases `parts_answered`, `parts_reported_missing`,
    `parts_handled_cases` and `false_success_with_missing_part` (None without such cases).
    None means not measurable in this run (no applicable case).
    """
    result: dict[str, float | None] = {}
    for group in ("ragas", "judge"):
        for name, stats in (set_aggregate.get(group) or {}).items():
            result[name] = stats["mean"]
            attempts = stats.get("calls", stats["n"] + stats["nan"])
            result[f"nan_share.{name}"] = _ratio(stats["nan"], attempts)
    gatehouse = set_aggregate.get("gatehouse") or {}
    for name in ("intent_accuracy", "routing_accuracy", "invented_citation_share", "supported_sentence_share"):
        if name in gatehouse:
            result[name] = gatehouse[name]["mean"]
    if "abstention" in gatehouse:
        result["abstention_precision"] = gatehouse["abstention"]["precision"]
        result["abstention_recall"] = gatehouse["abstention"]["recall"]
        result["false_abstention_rate"] = gatehouse["abstention"].get("false_abstention_rate")
    if "answer_quality" in gatehouse:
        result["first_sentence_hit"] = gatehouse["answer_quality"]["first_sentence_hit"]
        result["answer_words_p50"] = gatehouse["answer_quality"]["words_p50"]
    if "retries" in gatehouse:
        retrieving = {int(k): v for k, v in gatehouse["retries"].items() if int(k) > 0}
        result["mean_attempts"] = _ratio(sum(k * v for k, v in retrieving.items()), sum(retrieving.values()))
    for stage, stats in (gatehouse.get("latency_ms") or {}).items():
        for p in LATENCY_PERCENTILES:
            result[f"latency_p{p}_ms.{stage}"] = stats[f"p{p}"]
    parts = gatehouse.get("multi_part")
    if parts:
        for name in ("parts_answered", "parts_reported_missing", "parts_handled_cases"):
            result[name] = parts[name]["mean"]
        result["false_success_with_missing_part"] = (
            parts["false_success_with_missing_part"] if parts["cases"] else None
        )
    return result
