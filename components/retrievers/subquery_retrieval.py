"""The planner's retrieval: every sub-query searched in parallel, scored by the quality gate, replanned once."""

import contextvars
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict

from gatehouse.components.query.query_rewriter import QueryRewriter
from gatehouse.components.retrievers.retrieval_pipeline import RetrievalPipeline
from gatehouse.components.routers.quality_gate import QualityGate
from gatehouse.components.state import State, advance, new_state


@component
class SubQueryRetrieval:
    """
    Retrieves the parts of a plan (`state["plan"]` from `QueryPlanner`) at the same time, one thread per part:

    1. each sub-query runs through the retrieval pipeline (`pipeline_file`, tenant-pinned like every search: the
       caller's tenant, and the caller's `kb` when one was asked for, else all the tenant's knowledge bases) and
       its documents are scored by `quality_gate` (path `subquery_{i}_score_{s}`);
    2. a part below the gate's threshold is **replanned** once: `rewriter` (the retry rewriter) rewrites that
       sub-query alone, it is searched and scored again and the better attempt is kept (path `replan_{i}`, then the
       new score); the parts that passed are not searched again;
    3. a part whose best score is below the gate's `floor` is `missing` (nothing is answered from it); every other
       part is `retrieved` with its documents, score and the knowledge bases they came from.

    `plan` gets `wall_ms` (all parts, start to end) and `slowest_ms` (the slowest part on its own); the latency
    stage is `subquery_retrieval`.

    Usage:
    ```python
    from gatehouse.components.retrievers.subquery_retrieval import SubQueryRetrieval
    from gatehouse.components.state import new_state

    retrieval = SubQueryRetrieval(pipeline_file="retrieve")
    retrieval.warm_up()
    plan = {"strategy": "questions", "question": "q", "parts": [
        {"index": 0, "query": "What is the uptime SLA?", "label": "SLA", "status": "planned"},
        {"index": 1, "query": "How do I back up the gateway?", "label": "backups", "status": "planned"}]}
    state = retrieval.run(state=new_state("q", plan=plan))["state"]
    [(p["status"], p["score"]) for p in state["plan"]["parts"]]
    ```
    """

    def __init__(
        self,
        *,
        pipeline_file: str = "retrieve",
        quality_gate: QualityGate | None = None,
        rewriter: QueryRewriter | None = None,
        replan: bool = True,
        max_workers: int = 4,
    ) -> None:
        """
        :param pipeline_file: The retrieval pipeline (name in `pipelines/` or a YAML path), as `RetrievalPipeline`.
        :param quality_gate: Scores each part's documents (its threshold, floor and weights); None uses
            `QualityGate()`. Its `max_retries` is not used: a part is replanned at most once.
        :param rewriter: Rewrites a part that failed the gate; None uses `QueryRewriter()`.
        :param replan: False keeps the first attempt of every part.
        :param max_workers: Parts searched at the same time.
        :raises ValueError: When `max_workers` < 1.
        """
        if max_workers < 1:
            raise ValueError("max_workers must be >= 1.")
        self.pipeline_file = pipeline_file
        self.quality_gate = quality_gate or QualityGate()
        self.rewriter = rewriter or QueryRewriter()
        self.replan = replan
        self.max_workers = max_workers
        self._retrieval = RetrievalPipeline(pipeline_file=pipeline_file)

    def warm_up(self) -> None:
        """Load the retrieval pipeline's models and stores, and the gate's and rewriter's embedders."""
        self._retrieval.warm_up()
        self.quality_gate.warm_up()
        self.rewriter.warm_up()

    def _search(self, query: str, state: State) -> list[Document]:
        kbs = [state["kb"]] if state.get("kb") else None
        return self._retrieval.run(query=query, tenant=state.get("tenant"), kbs=kbs)["documents"]

    def _part(self, part: dict[str, Any], state: State) -> dict[str, Any]:
        """Search, score and (once) replan one part; the part's record with its documents."""
        started = time.perf_counter()
        query = part["query"]
        sub: State = new_state(query, condensed_query=query, tenant=state.get("tenant"), kb=state.get("kb"),
                               path=[])
        route, gated = next(iter(self.quality_gate.run(state={**sub, "documents": self._search(query, state)})
                                 .items()))
        steps = [f"subquery_{part['index']}_score_{gated['quality_score']:.2f}"]
        replan_query = None
        if route != "passed" and self.replan:
            retry = self.rewriter.run(state={**gated, "attempt": 1})["state"]
            replan_query = retry["query"]
            route, gated = next(iter(self.quality_gate.run(
                state={**retry, "attempt": 1, "documents": self._search(replan_query, state)}).items()))
            steps += [f"replan_{part['index']}", f"subquery_{part['index']}_score_{gated['quality_score']:.2f}"]
        if route == "passed":
            documents, score = list(gated["documents"]), float(gated["quality_score"])
        else:
            documents, score = list(gated.get("best_documents") or []), float(gated["best_score"])
        missing = score < self.quality_gate.floor or not documents
        return {
            **part,
            "status": "missing" if missing else "retrieved",
            "score": round(score, 4),
            "replanned": replan_query is not None,
            "replan_query": replan_query,
            "documents": [] if missing else documents,
            "kbs": sorted({str(d.meta["kb"]) for d in documents[:5] if d.meta.get("kb")}),
            "steps": steps,
            "ms": round((time.perf_counter() - started) * 1000.0, 1),
        }

    @component.output_types(state=State)
    def run(self, state: State) -> dict[str, Any]:
        """
        Retrieve every part of the plan.

        :param state: The request state with `plan` (its `parts`' `query`), `tenant` and `kb`.
        :returns: `state` with each part's `status` (`retrieved` or `missing`), `score`, `documents`, `kbs`,
            `replanned`, and the plan's `wall_ms` and `slowest_ms`.
        """
        started = time.perf_counter()
        plan = state["plan"]
        parts = plan["parts"]
        with ThreadPoolExecutor(max_workers=min(self.max_workers, len(parts)),
                                thread_name_prefix="gatehouse-subquery") as pool:
            # each part runs in a copy of the caller's context (request id, time budget)
            futures = [pool.submit(contextvars.copy_context().run, self._part, part, state) for part in parts]
            done = [future.result() for future in futures]
        wall_ms = round((time.perf_counter() - started) * 1000.0, 1)
        steps = [step for part in done for step in part.pop("steps")]
        new_plan = {**plan, "parts": done, "wall_ms": wall_ms, "slowest_ms": max(part["ms"] for part in done)}
        return {"state": advance(state, stage="subquery_retrieval", started=started, steps=steps, plan=new_plan,
                                 chunks_retrieved=sum(len(part["documents"]) for part in done))}

    def to_dict(self) -> dict[str, Any]:
        """Serialise the component."""
        return default_to_dict(
            self,
            pipeline_file=self.pipeline_file,
            quality_gate=self.quality_gate.to_dict(),
            rewriter=self.rewriter.to_dict(),
            replan=self.replan,
            max_workers=self.max_workers,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SubQueryRetrieval":
        """Deserialise the component (the nested gate and rewriter are `{type, init_parameters}` mappings)."""
        parameters = dict(data.get("init_parameters", {}))
        if isinstance(parameters.get("quality_gate"), dict):
            parameters["quality_gate"] = QualityGate.from_dict(parameters["quality_gate"])
        if isinstance(parameters.get("rewriter"), dict):
            parameters["rewriter"] = QueryRewriter.from_dict(parameters["rewriter"])
        return default_from_dict(cls, {**data, "init_parameters": parameters})
