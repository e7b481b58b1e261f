"""The search pipeline (`search.yml`) as one component, run once for a question and once per part of a plan."""

import contextvars
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from haystack import component

from gatehouse.components.pipelines.state_pipeline import StatePipeline
from gatehouse.components.state import State, advance, new_state


@component
class SearchPipeline(StatePipeline):
    """
    The search of `ask.yml`: `search.yml` (retrieval, the quality gate and the rewrite loop) as one component.

    A question is searched once: the output `done` is the pipeline's. A multi-part plan (`state["plan"]` from the
    planner) has every part searched the same way at the same time, one thread per part, each in the caller's tenant
    and explicit `kb` (else every knowledge base the caller may read), with at most `part_retries` rewrites:

    - a part whose search ends below the quality gate's floor is `missing` (nothing is answered from it);
    - every other part is `retrieved` with its documents, score, the knowledge bases they came from and whether it
      was rewritten (`replanned`, `replan_query`).

    Each part's path steps go into the state's path as `part_{index}_{step}`; `plan` gets `wall_ms` (all parts,
    start to end) and `slowest_ms` (the slowest part on its own); the latency stage is `search`.

    Usage:
    ```python
    from gatehouse.components.pipelines.search_pipeline import SearchPipeline
    from gatehouse.components.state import new_state

    search = SearchPipeline()
    search.warm_up()
    plan = {"strategy": "questions", "question": "q", "parts": [
        {"index": 0, "query": "What is the uptime SLA?", "label": "SLA", "status": "planned"},
        {"index": 1, "query": "How do I back up the gateway?", "label": "backups", "status": "planned"}]}
    state = search.run(state=new_state("q", plan=plan))["done"]
    [(part["status"], part["score"]) for part in state["plan"]["parts"]]
    ```
    """

    def __init__(self, *, pipeline_file: str = "search", spec: dict[str, Any] | None = None, max_workers: int = 4,
                 part_retries: int = 1) -> None:
        """
        :param pipeline_file: Name (in the pipelines folder) or path of the search pipeline YAML.
        :param spec: The pipeline's spec in place of the file's (see `StatePipeline`).
        :param max_workers: A plan's parts searched at the same time.
        :param part_retries: Rewrites of a plan's part that its search leaves weak (a question gets the quality
            gate's `max_retries`).
        :raises ValueError: When `max_workers` < 1 or `part_retries` < 0.
        """
        if max_workers < 1:
            raise ValueError(f"max_workers must be at least 1, got {max_workers}.")
        if part_retries < 0:
            raise ValueError(f"part_retries must be 0 or more, got {part_retries}.")
        StatePipeline.__init__(self, pipeline_file=pipeline_file, spec=spec)
        self.max_workers = max_workers
        self.part_retries = part_retries

    def run(self, **kwargs: Any) -> dict[str, Any]:
        """
        Search the state's question, or every part of its plan.

        :param kwargs: `state`, and the per-request inputs of the pipeline's components (`deadline`, ...).
        :returns: `done`: the searched state (a plan's parts with their documents).
        """
        state: State = kwargs["state"]
        plan = state.get("plan")
        if not plan:
            return StatePipeline.run(self, **kwargs)
        started = time.perf_counter()
        parts = plan["parts"]
        with ThreadPoolExecutor(max_workers=min(self.max_workers, len(parts)),
                                thread_name_prefix="gatehouse-search") as pool:
            # each part runs in a copy of the caller's context (its request id in the logs)
            futures = [pool.submit(contextvars.copy_context().run, self._part, part, state, kwargs) for part in parts]
            done = [future.result() for future in futures]
        steps = [step for _, part_steps in done for step in part_steps]
        parts = [part for part, _ in done]
        new_plan = {**plan, "parts": parts, "wall_ms": round((time.perf_counter() - started) * 1000.0, 1),
                    "slowest_ms": max(part["ms"] for part in parts)}
        return {"done": advance(state, stage="search", started=started, steps=steps, plan=new_plan,
                                chunks_retrieved=sum(len(part["documents"]) for part in parts))}

    def _part(self, part: dict[str, Any], state: State, inputs: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """Search one part; its record (with its documents) and its path steps."""
        started = time.perf_counter()
        kb = state.get("kb")
        question = new_state(part["query"], condensed_query=part["query"], tenant=state.get("tenant"), kb=kb,
                             kbs=[kb] if kb else [], path=[])
        searched = StatePipeline.run(self, **{**inputs, "state": question, "max_retries": self.part_retries})["done"]
        documents = list(searched.get("documents") or [])
        missing = bool(searched.get("fallback")) or not documents
        replanned = len(searched.get("attempts") or []) > 1
        record = {
            **part,
            "status": "missing" if missing else "retrieved",
            "score": round(float(searched.get("quality_score") or 0.0), 4),
            "replanned": replanned,
            "replan_query": searched["query"] if replanned else None,
            "documents": [] if missing else documents,
            "kbs": sorted({str(d.meta["kb"]) for d in documents[:5] if d.meta.get("kb")}),
            "ms": round((time.perf_counter() - started) * 1000.0, 1),
        }
        return record, [f"part_{part['index']}_{step}" for step in searched.get("path") or []]
