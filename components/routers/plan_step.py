"""Walks a plan's parts through the answering gates one at a time."""

import time
from typing import Any

from haystack import component

from gatehouse.components.state import State, advance

# What one part's answering sets: cleared before the next part, so nothing of one part leaks into another.
PART_KEYS = ("passages", "chunks_used", "answerability", "answer_candidates", "answer", "citations", "support",
             "citation_coverage", "status", "fallback", "fallback_reason", "error_message")
ANSWERED_STATUSES = ("success", "partial", None)


@component
class PlanStep:
    """
    The loop over a plan's parts in `ask.yml`. Every answered state comes here (from the citation verifier, or the
    fallback of the assembler or the answerability gate):

    - no plan: the state goes on `done` unchanged (a one-part question);
    - a part was being answered (`plan["current"]`): its answer, citations and cited passages are recorded in the part
      (`answered` when it has an answer with citations, else `missing` with the reason);
    - then the next `retrieved` part goes on `part` as the state's question (`query`, `condensed_query`) with that
      part's documents, everything of the previous part's answering cleared; the same assembler, answerability
      gate, generator and verifier answer it;
    - when no part is left, the state goes on `synthesize`.

    Usage:
    ```python
    from gatehouse.components.routers.plan_step import PlanStep
    from gatehouse.components.state import new_state

    plan = {"parts": [{"index": 0, "query": "What is the SLA?", "label": "SLA", "status": "retrieved",
                       "documents": [], "score": 0.8}]}
    PlanStep().run(state=new_state("q", plan=plan))["part"]["query"]   # "What is the SLA?"
    ```
    """

    @staticmethod
    def _record(state: State, part: dict[str, Any]) -> dict[str, Any]:
        citations = list(state.get("citations") or [])
        answered = bool((state.get("answer") or "").strip()) and bool(citations) and not state.get("fallback") \
            and state.get("status") in ANSWERED_STATUSES
        if not answered:
            reason = state.get("fallback_reason") or "no supported answer in the retrieved passages"
            return {**part, "status": "missing", "reason": reason, "documents": []}
        cited = {str(c.get("id")) for c in citations}
        passages = [p for p in state.get("passages") or [] if str(p.meta.get("source_id")) in cited]
        return {**part, "status": "answered", "answer": state["answer"], "citations": citations,
                "passages": passages, "documents": [], "confident": state.get("status") != "partial"}

    @component.output_types(part=State, synthesize=State, done=State)
    def run(self, state: State) -> dict[str, dict[str, Any]]:
        """
        Record the part just answered and hand on the next one.

        :param state: The request state.
        :returns: Exactly one of `part`, `synthesize` or `done`.
        """
        plan = state.get("plan")
        if not plan:
            return {"done": state}
        started = time.perf_counter()
        parts = list(plan["parts"])
        current = plan.get("current")
        if current is not None:
            parts[current] = self._record(state, parts[current])
        following = next((p["index"] for p in parts if p["status"] == "retrieved" and
                          (current is None or p["index"] > current)), None)
        if following is None:
            return {"synthesize": advance(state, stage="plan_step", started=started,
                                          plan={**plan, "parts": parts, "current": None})}
        part = parts[following]
        updates: dict[str, Any] = {key: None for key in PART_KEYS}
        updates.update(
            query=part["query"],
            condensed_query=part["query"],
            documents=list(part["documents"]),
            best_documents=list(part["documents"]),
            quality_score=part["score"],
            citations=[],
            fallback=False,
            plan={**plan, "parts": parts, "current": following},
        )
        return {"part": advance(state, stage="plan_step", started=started, **updates)}
