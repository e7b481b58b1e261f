"""
`gatehouse bench tiers`: each gate's optional LLM tier against a real OpenAI-compatible server, on the golden set.

Every gate is built from ask.yml (without its answer cache) three ways by patching its `init_parameters`, never
ask.yml itself: `off` (no `chat_generator`, the default), `llm` (with a `chat_generator`: the LLM is asked only when
the cheaper tiers defer, as configured) and `llm_only` (the parameters that make the LLM decide every question):

- intent (`intent`): intent and route accuracy; `llm_only` empties the pattern and keyword lists and sets the
  embedding thresholds above 1, so no cheaper tier is ever confident.
- router (`router`): KB routing accuracy (the chosen KBs joined by "+" equal the gold KB) on the cases with a gold
  KB; `llm_only` switches the evidence tier off and sets `llm.margin` to 2 (every lead is below it).
- judge (`answerability`, and `quality_gate` with `--tiers quality`): the decision against the case's answerable
  label as abstention precision/recall, on the cases whose passages reach the gate in ask.yml as shipped;
  `llm_only` sets the answerability gate's `llm.weight` and the quality gate's `judge.weight` to 1.
- planner (`planner`): whether a question is planned exactly when it has gold parts (`accuracy`), and the share of
  the multi-part cases planned into as many parts as they have gold parts (`parts_accuracy`), over the slice plus
  every multi-part golden case; the LLM is asked only when the rules found no plan and a cue matches (no `llm_only`:
  the rules cannot be emptied).
- rewriter (`rewriter`) and condenser (`condenser`): whether the LLM's query is used (`method: llm`, not
  the rules' fallback) and the context recall (gold sources among the documents retrieved with the query, through
  the routed KBs) of the original question, the rules' query and the LLM's. The retry is the first one
  (`attempt: 1`) after a first search with the question; the condenser runs on the follow-up cases.

Every LLM call is timed and its token usage (the server's `usage`) recorded by `RecordingChatGenerator`, an
`OpenAICompatibleChatGenerator` that keeps a record per call. The slice is stratified by the cases' first tag
(`stratified_slice`), single-part cases only; the planner tier also asks the multi-part cases.

Usage:
```python
from gatehouse.eval.tier_bench import format_table, run_benchmark

print(format_table(run_benchmark(llm_url="http://127.0.0.1:8080/v1", limit=30)))
```
"""

import time
from copy import deepcopy
from pathlib import Path
from typing import Any

import yaml
from gatehouse.components.generators.openai_compatible_generator import OpenAICompatibleChatGenerator
from gatehouse.components.intent.intent_rules import DEFAULT_INTENT_KEYWORDS, DEFAULT_INTENT_PATTERNS
from gatehouse.eval.datasets import GOLDEN_SET, EvalCase, load_golden, stratified_slice
from haystack import component
from haystack.core.serialization import allow_deserialization_module, component_from_dict, import_class_by_name
from haystack.dataclasses import ChatMessage, StreamingCallbackT
from haystack.tools import ToolsType

from gatehouse.llm.server import DEFAULT_URL
from gatehouse.pipelines import ALLOWED_MODULES, pipeline_path, without_answer_cache
from gatehouse.stats import percentile

TIERS = ("intent", "router", "judge", "quality", "rewriter", "condenser", "planner")
DEFAULT_TIERS = ("intent", "router", "judge", "rewriter", "condenser", "planner")
VARIANTS = ("off", "llm", "llm_only")
#: The tiers whose LLM cannot be made to decide everything: `off` and `llm` only.
WITHOUT_LLM_ONLY = ("rewriter", "condenser", "planner")
#: The ask.yml component each tier measures.
COMPONENTS = {"intent": "intent", "router": "router", "judge": "answerability", "quality": "quality_gate",
              "rewriter": "rewriter", "condenser": "condenser", "planner": "planner"}


@component
class RecordingChatGenerator(OpenAICompatibleChatGenerator):
    """
    An `OpenAICompatibleChatGenerator` that records every call: its wall time, the server's token usage and the reply.

    Usage:
    ```python
    generator = RecordingChatGenerator(api_base_url="http://127.0.0.1:8080/v1")
    generator.run(messages=[ChatMessage.from_user("Hello")])
    generator.calls   # [{"ms": 812.4, "prompt_tokens": 30, "completion_tokens": 9, "reply": "Hello! ...", "error": None}]
    ```
    """

    def __init__(self, **kwargs: Any) -> None:
        """:param kwargs: `OpenAICompatibleChatGenerator`'s init parameters."""
        OpenAICompatibleChatGenerator.__init__(self, **kwargs)
        self.calls: list[dict[str, Any]] = []

    @component.output_types(replies=list[ChatMessage])
    def run(
        self,
        messages: list[ChatMessage] | str,
        streaming_callback: StreamingCallbackT | None = None,
        generation_kwargs: dict[str, Any] | None = None,
        *,
        tools: ToolsType | None = None,
        tools_strict: bool | None = None,
        deadline: float | None = None,
    ) -> dict[str, list[ChatMessage]]:
        """Generate replies as `OpenAICompatibleChatGenerator.run` does, and record the call."""
        started = time.perf_counter()
        record: dict[str, Any] = {"prompt_tokens": None, "cached_tokens": None, "completion_tokens": None,
                                  "reply": None, "error": None}
        try:
            result = OpenAICompatibleChatGenerator.run(self, messages, streaming_callback=streaming_callback,
                                                       generation_kwargs=generation_kwargs, tools=tools,
                                                       tools_strict=tools_strict, deadline=deadline)
        except Exception as error:
            record["error"] = f"{type(error).__name__}: {error}"
            raise
        finally:
            record["ms"] = round((time.perf_counter() - started) * 1000.0, 1)
            self.calls.append(record)
        replies = result.get("replies") or []
        if replies:
            usage = replies[0].meta.get("usage") or {}
            record.update(prompt_tokens=usage.get("prompt_tokens"), completion_tokens=usage.get("completion_tokens"),
                          cached_tokens=(usage.get("prompt_tokens_details") or {}).get("cached_tokens"),
                          reply=(replies[0].text or "")[:300])
        return result


def chat_generator_spec(llm_url: str, *, model: str | None, timeout: float, max_tokens: int) -> dict[str, Any]:
    """The YAML form of the recording chat generator every LLM tier gets (greedy decoding, no retries)."""
    return {"type": f"{RecordingChatGenerator.__module__}.{RecordingChatGenerator.__name__}",
            "init_parameters": {"api_base_url": llm_url, "model": model, "timeout": timeout, "max_retries": 0,
                                "generation_kwargs": {"temperature": 0.0, "max_tokens": max_tokens}}}


def variant_spec(component_spec: dict[str, Any], tier: str, variant: str,
                 chat_generator: dict[str, Any]) -> dict[str, Any]:
    """
    A copy of one component's YAML entry configured as `variant` of `tier` (see the module docstring).

    :param component_spec: The component's entry in the pipeline YAML (`type`, `init_parameters`).
    :param tier: One of `TIERS`.
    :param variant: One of `VARIANTS`.
    :param chat_generator: The chat generator's YAML entry.
    :returns: The patched entry.
    :raises ValueError: If the tier cannot be forced to ask the LLM on every question (`llm_only` of the rewriter
        and condenser, which always ask it when they run).
    """
    spec = deepcopy(component_spec)
    params = spec.setdefault("init_parameters", {})
    if variant == "off":
        params["chat_generator"] = None
        return spec
    params["chat_generator"] = deepcopy(chat_generator)
    if variant == "llm":
        return spec
    if tier == "intent":
        rules = params["rules"] = dict(params.get("rules") or {})
        for name in ("refuse_patterns", "direct_patterns", "retrieve_patterns", "general_knowledge_patterns",
                     "domain_keywords", "refuse_keywords", "general_keywords"):
            rules[name] = []
        rules["intent_patterns"] = {label: [] for label in rules.get("intent_patterns") or DEFAULT_INTENT_PATTERNS}
        rules["intent_keywords"] = {label: [] for label in rules.get("intent_keywords") or DEFAULT_INTENT_KEYWORDS}
        params["tuning"] = {**(params.get("tuning") or {}), "embedding_threshold": 2.0,
                            "intent_embedding_threshold": 2.0}
    elif tier == "router":
        params["evidence"] = {**(params.get("evidence") or {}), "enabled": False}
        params["llm"] = {**(params.get("llm") or {}), "margin": 2.0}
    elif tier == "judge":
        params["llm"] = {**(params.get("llm") or {}), "weight": 1.0}
    elif tier == "quality":
        params["judge"] = {**(params.get("judge") or {}), "weight": 1.0}
    else:
        raise ValueError(f"the {tier} tier has no llm_only variant")
    return spec


def build(spec: dict[str, Any], name: str) -> Any:
    """A component from its YAML entry, warmed up (Gatehouse's modules and this one allowlisted, process-wide)."""
    for pattern in [*ALLOWED_MODULES, __name__]:
        allow_deserialization_module(pattern)
    instance = component_from_dict(import_class_by_name(spec["type"]), spec, name)
    if hasattr(instance, "warm_up"):
        instance.warm_up()
    return instance


def new_calls(instance: Any, before: int) -> list[dict[str, Any]]:
    """The LLM calls a component made since its generator had `before` calls."""
    generator = getattr(instance, "chat_generator", None)
    return list(generator.calls[before:]) if generator is not None else []


def call_count(instance: Any) -> int:
    """How many LLM calls a component's generator has made."""
    generator = getattr(instance, "chat_generator", None)
    return len(generator.calls) if generator is not None else 0


def run_gate(instance: Any, state: dict[str, Any]) -> tuple[str, dict[str, Any], list[dict[str, Any]]]:
    """Run a gate on a state: `(output name, new state, LLM calls)`."""
    before = call_count(instance)
    output = instance.run(state=state)
    route, new_state = next(iter(output.items()))
    return route, new_state, new_calls(instance, before)


def context_recall(documents: list[Any], gold_sources: list[str]) -> float | None:
    """
    Share of the gold sources among the documents (`<kb>/<source>`), None without gold sources.

    ```python
    context_recall([Document(content="x", meta={"kb": "faq", "source": "api-keys.md"})], ["faq/api-keys.md"])  # 1.0
    ```
    """
    if not gold_sources:
        return None
    found = {f"{d.meta.get('kb')}/{d.meta.get('source')}" for d in documents}
    return sum(1 for source in gold_sources if source in found) / len(gold_sources)


def score_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """
    The figures of one tier variant from its rows.

    Each row may hold `correct` (bool; accuracy), `route_correct` (bool), `abstain` and `gold_abstain` (bools;
    abstention precision/recall), `recall` (float; mean context recall), `llm_decided` (bool: the LLM's answer was
    used), and `calls` (the LLM calls: `ms`, `prompt_tokens`, `completion_tokens`, `error`).

    ```python
    score_rows([{"correct": True, "calls": [{"ms": 800.0, "prompt_tokens": 90, "completion_tokens": 9}]},
                {"correct": False, "calls": []}])
    # {"n": 2, "accuracy": 0.5, "reached_llm": 1, "llm_calls": 1, "llm_ms_p50": 800.0, ...}
    ```
    """
    calls = [call for row in rows for call in row.get("calls") or []]
    times = [call["ms"] for call in calls if not call.get("error")]
    figures: dict[str, Any] = {"n": len(rows)}
    for key, name in (("correct", "accuracy"), ("route_correct", "route_accuracy"),
                      ("parts_correct", "parts_accuracy")):
        values = [bool(row[key]) for row in rows if row.get(key) is not None]
        figures[name] = round(sum(values) / len(values), 4) if values else None
    labelled = [(bool(row["abstain"]), bool(row["gold_abstain"])) for row in rows
                if row.get("abstain") is not None and row.get("gold_abstain") is not None]
    if labelled:
        tp = sum(1 for predicted, gold in labelled if predicted and gold)
        fp = sum(1 for predicted, gold in labelled if predicted and not gold)
        fn = sum(1 for predicted, gold in labelled if gold and not predicted)
        figures["abstention_precision"] = round(tp / (tp + fp), 4) if tp + fp else None
        figures["abstention_recall"] = round(tp / (tp + fn), 4) if tp + fn else None
        figures["abstention"] = {"tp": tp, "fp": fp, "fn": fn, "tn": len(labelled) - tp - fp - fn}
    recalls = [float(row["recall"]) for row in rows if row.get("recall") is not None]
    if recalls:
        figures["context_recall"] = round(sum(recalls) / len(recalls), 4)
    figures["reached_llm"] = sum(1 for row in rows if row.get("calls"))
    figures["llm_decided"] = sum(1 for row in rows if row.get("llm_decided"))
    figures["llm_calls"] = len(calls)
    figures["llm_errors"] = sum(1 for call in calls if call.get("error"))
    figures["llm_ms_p50"] = round(percentile(times, 0.5), 1) if times else None
    figures["llm_ms_p95"] = round(percentile(times, 0.95), 1) if times else None
    for key in ("prompt_tokens", "cached_tokens", "completion_tokens"):
        counted = [call[key] for call in calls if call.get(key) is not None]
        figures[key] = sum(counted) if counted else None
    return figures


def golden_slice(limit: int | None) -> list[EvalCase]:
    """The single-part golden cases, `limit` of them stratified by first tag (None or 0: all)."""
    cases = [case for case in load_golden(GOLDEN_SET).cases if not case.gold_parts]
    return stratified_slice(cases, limit=limit or None, stratum=lambda c: c.tags[0] if c.tags else "",
                            key=lambda c: c.id)


def _case_state(case: EvalCase) -> dict[str, Any]:
    from gatehouse.components.state import new_state

    return new_state(case.question, tenant=case.tenant, history=list(case.history))


def run_benchmark(
    *,
    llm_url: str = DEFAULT_URL,
    model: str | None = None,
    limit: int | None = 30,
    tiers: list[str] | tuple[str, ...] = DEFAULT_TIERS,
    pipeline: str | Path = "ask",
    timeout: float = 300.0,
    max_tokens: int = 48,
) -> dict[str, Any]:
    """
    Measure each tier off, with its LLM and with its LLM only, on a stratified golden slice.

    :param llm_url: The OpenAI-compatible server's base URL.
    :param model: The model name sent (None: `GATEHOUSE_LLM_MODEL`, else `local-model`).
    :param limit: Single-part golden cases (stratified by first tag); None or 0: all.
    :param tiers: Which of `TIERS` to measure.
    :param pipeline: The ask pipeline (name or YAML) whose gates are patched.
    :param timeout: Per-call timeout in seconds.
    :param max_tokens: The most tokens a reply may have.
    :returns: The report: per tier and variant the figures of `score_rows`, and the per-case rows.
    :raises ValueError: If a tier is unknown.
    """
    from gatehouse.components.retrievers.retrieval_pipeline import RetrievalPipeline
    from gatehouse.eval.runner import work_dir

    from gatehouse.ingest import ingest, sample_groups
    from gatehouse.pipelines import component_spec, load_pipeline

    unknown = [tier for tier in tiers if tier not in TIERS]
    if unknown:
        raise ValueError(f"tiers: unknown {', '.join(unknown)}; choose from {', '.join(TIERS)}")
    ingest(sample_groups(), progress=False)
    path = pipeline_path(pipeline)
    spec = without_answer_cache(yaml.safe_load(path.read_text(encoding="utf-8")))
    generator = chat_generator_spec(llm_url, model=model, timeout=timeout, max_tokens=max_tokens)

    def variants(tier: str, names: tuple[str, ...] = VARIANTS) -> dict[str, Any]:
        name = COMPONENTS[tier]
        return {variant: build(variant_spec(component_spec(spec, name), tier, variant, generator), name)
                for variant in names}

    base_file = work_dir() / f"tier-bench-{path.stem}.yml"
    base_file.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    base = load_pipeline(base_file)
    base.warm_up()
    retrieval = RetrievalPipeline(pipeline_file=component_spec(spec, "retrieval")["init_parameters"]["pipeline_file"])
    assembler = base.get_component("answer").pipeline.get_component("assembler")
    retrieval.warm_up()
    cases = golden_slice(limit)
    if "planner" in tiers:
        cases += [case for case in load_golden(GOLDEN_SET).cases if case.gold_parts]
    router_off = build(variant_spec(component_spec(spec, "router"), "router", "off", generator), "router")
    gates = {tier: variants(tier, ("off", "llm") if tier in WITHOUT_LLM_ONLY else VARIANTS) for tier in tiers}
    rows: dict[str, dict[str, list[dict[str, Any]]]] = {tier: {v: [] for v in gates[tier]} for tier in tiers}

    # The gates' inputs from ask.yml as shipped: the condensed state, the passages reaching the answerability gate,
    # the routed state and the first search's documents. Then one tier and variant at a time over every case (a
    # server keeping its last prompt reuses a gate's fixed instructions, as it would serving that gate alone).
    inputs, guarded = [], []
    for case in cases:
        result = base.run({"intake": {"query": case.question, "tenant": case.tenant, "history": case.history}},
                          include_outputs_from={"condenser", "search"})
        if "condenser" not in result:  # refused by the input guardrails: no gate after them ran
            guarded.append(case.id)
            continue
        condensed = result["condenser"]["state"]
        routed = router_off.run(state=condensed)["routed"] if case.gold_kb else None
        first = (retrieval.run(query=condensed["query"], tenant=case.tenant, kbs=routed["kbs"])["documents"]
                 if routed else [])
        searched = (result.get("search") or {}).get("done")  # the passages reaching the answerability gate
        passages = assembler.run(state=searched).get("passages") if searched and not searched.get("plan") else None
        inputs.append((case, condensed, passages, routed, first))
    for tier, by_variant in gates.items():
        for variant, gate in by_variant.items():
            for case, condensed, passages, routed, first in inputs:
                row: dict[str, Any] = {"id": case.id}
                if case.gold_parts and tier != "planner":
                    continue
                if tier == "planner":
                    _, out, row["calls"] = run_gate(gate, condensed)
                    parts = (out.get("plan") or {}).get("parts") or []
                    row.update(correct=bool(parts) == bool(case.gold_parts), predicted=len(parts),
                               llm_decided=bool(parts) and out["plan"]["strategy"] == "llm")
                    if case.gold_parts:
                        row["parts_correct"] = len(parts) == len(case.gold_parts)
                elif tier == "intent":
                    _, out, row["calls"] = run_gate(gate, condensed)
                    if case.gold_intent:
                        row["correct"] = out["intent"] == case.gold_intent
                    if case.gold_route:
                        row["route_correct"] = out["route"] == case.gold_route
                    row.update(predicted=f"{out['route']}/{out['intent']}",
                               llm_decided="llm" in (out["intent_tier"], out["decision_tier"]))
                elif tier == "router":
                    if not case.gold_kb:
                        continue
                    _, out, row["calls"] = run_gate(gate, condensed)
                    row.update(correct="+".join(out["kbs"]) == case.gold_kb, predicted="+".join(out["kbs"]),
                               llm_decided=out["route_reason"] == "llm")
                elif tier == "judge":
                    if passages is None:
                        continue
                    name, out, row["calls"] = run_gate(gate, passages)
                    row.update(abstain=name == "unanswerable", gold_abstain=not case.answerable,
                               llm_decided=bool(row["calls"]) and not any(
                                   "answerability: LLM" in w for w in out["validation"]["confidence_warnings"]))
                    row["correct"] = row["abstain"] == row["gold_abstain"]
                elif tier == "quality":
                    if routed is None:
                        continue
                    _, out, row["calls"] = run_gate(gate, {**routed, "documents": first, "attempt": 0})
                    row.update(abstain=out["quality_score"] < out["threshold"], gold_abstain=not case.answerable,
                               llm_decided=out["quality_signals"].get("llm") is not None, score=out["quality_score"])
                    row["correct"] = row["abstain"] == row["gold_abstain"]
                elif tier == "rewriter":
                    if routed is None or not case.gold_sources:
                        continue
                    attempt = {**routed, "documents": first, "attempt": 1,
                               "attempts": [{"attempt": 0, "query": condensed["query"], "score": None}]}
                    _, out, row["calls"] = run_gate(gate, attempt)
                    rewrite = out["rewrites"][-1]
                    documents = retrieval.run(query=out["query"], tenant=case.tenant, kbs=routed["kbs"])["documents"]
                    row.update(query=out["query"], llm_decided=rewrite["method"] == "llm",
                               recall=context_recall(documents, case.gold_sources),
                               first_recall=context_recall(first, case.gold_sources))
                else:  # condenser
                    if not case.history:
                        continue
                    _, out, row["calls"] = run_gate(gate, _case_state(case))
                    row.update(query=out["query"], llm_decided=bool(row["calls"]) and not any(
                        "LLM condense failed" in w for w in out["validation"]["confidence_warnings"]))
                    if case.gold_sources:
                        kbs = router_off.run(state=out)["routed"]["kbs"]
                        documents = retrieval.run(query=out["query"], tenant=case.tenant, kbs=kbs)["documents"]
                        row["recall"] = context_recall(documents, case.gold_sources)
                rows[tier][variant].append(row)

    figures = {tier: {variant: score_rows(items) for variant, items in by_variant.items()}
               for tier, by_variant in rows.items()}
    if "rewriter" in figures:  # the first search's recall, before any rewrite
        first_recalls = [row["first_recall"] for row in rows["rewriter"]["off"] if row["first_recall"] is not None]
        figures["rewriter"]["first_search_recall"] = (
            round(sum(first_recalls) / len(first_recalls), 4) if first_recalls else None)
    return {"pipeline": str(path), "llm_url": llm_url, "model": model, "cases": len(cases), "guarded": guarded,
            "tiers": list(tiers),
            "figures": figures, "rows": rows}


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)


def format_table(report: dict[str, Any]) -> str:
    """The report as a markdown table: one line per tier and variant."""
    guarded = report.get("guarded") or []
    title = (f"LLM tiers on {report['cases']} golden cases ({Path(report['pipeline']).name}, "
             f"server {report['llm_url']}); {len(guarded)} refused by the input guardrails before any gate "
             f"are left out{': ' + ', '.join(guarded) if guarded else ''}")
    header = ("| tier | variant | n | accuracy | route / parts acc. | abst. P | abst. R | ctx recall | reached LLM "
              "| LLM used | calls (err) | LLM ms P50 | P95 | prompt tok (cached) | compl. tok |")
    lines = [title, "", header,
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for tier, by_variant in report["figures"].items():
        for variant, f in by_variant.items():
            if not isinstance(f, dict):
                continue
            lines.append(
                f"| {tier} | {variant} | {f['n']} | {_cell(f['accuracy'])} "
                f"| {_cell(f['route_accuracy'] if f['route_accuracy'] is not None else f['parts_accuracy'])} "
                f"| {_cell(f.get('abstention_precision'))} | {_cell(f.get('abstention_recall'))} "
                f"| {_cell(f.get('context_recall'))} | {f['reached_llm']} | {f['llm_decided']} "
                f"| {f['llm_calls']} ({f['llm_errors']}) | {_cell(f['llm_ms_p50'])} | {_cell(f['llm_ms_p95'])} "
                f"| {_cell(f['prompt_tokens'])} ({_cell(f['cached_tokens'])}) | {_cell(f['completion_tokens'])} |")
    if "rewriter" in report["figures"]:
        lines.append(f"\nrewriter: context recall of the first search (before any rewrite) "
                     f"{_cell(report['figures']['rewriter'].get('first_search_recall'))}")
    return "\n".join(lines)

