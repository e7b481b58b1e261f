"""The answer pipeline (`answer.yml`) as one component, run once for a question and once per part of a plan."""

import time
from typing import Any

from haystack import component
from haystack.core.component.types import OutputSocket

from gatehouse.components.pipelines.state_pipeline import StatePipeline
from gatehouse.components.state import State, advance

# What one part's answering sets: cleared before the next part, so nothing of one part leaks into another.
PART_KEYS = ("passages", "chunks_used", "answerability", "answer_candidates", "answer", "citations", "support",
             "citation_coverage", "status", "fallback", "fallback_reason", "error_message")
ANSWERED_STATUSES = ("success", "partial", None)


@component
class AnswerPipeline(StatePipeline):
    """
    The answering of `ask.yml`: `answer.yml` (passage assembly, screening, the answerability gate, the generator and
    the citation verifier) as one component.

    A question is answered once, and leaves on the route its pipeline ends on: `state` (verified), `fallback` (no
    passage to answer from) or `unanswerable` (the passages do not answer). A multi-part plan (`state["plan"]`,
    searched by `SearchPipeline`) has its `retrieved` parts answered one after the other, each as the state's question
    with that part's documents (everything of the previous part's answering cleared), and leaves on `plan`: each
    part `answered` (its answer, citations and cited passages) or `missing` with the reason.

    Usage:
    ```python
    from gatehouse.components.pipelines.answer_pipeline import AnswerPipeline

    answer = AnswerPipeline()
    answer.warm_up()
    outputs = answer.run(state=searched_state)    # one of state, fallback, unanswerable (plan for a plan)
    ```
    """

    def __init__(self, *, pipeline_file: str = "answer", spec: dict[str, Any] | None = None) -> None:
        """
        :param pipeline_file: Name (in the pipelines folder) or path of the answer pipeline YAML.
        :param spec: The pipeline's spec in place of the file's (see `StatePipeline`).
        """
        StatePipeline.__init__(self, pipeline_file=pipeline_file, spec=spec)
        self.__haystack_output__["plan"] = OutputSocket(name="plan", type=State)  # a plan's route, beside the pipeline's

    def run(self, **kwargs: Any) -> dict[str, Any]:
        """
        Answer the state's question, or every retrieved part of its plan.

        :param kwargs: `state`, and the per-request inputs of the pipeline's components (`deadline`, ...).
        :returns: The route the answering ended on, or `plan` for a plan.
        """
        state: State = kwargs["state"]
        plan = state.get("plan")
        if not plan:
            return StatePipeline.run(self, **kwargs)
        parts = list(plan["parts"])
        parts_inputs = {key: value for key, value in kwargs.items() if key != "streaming_callback"}  # sent whole
        for index, part in enumerate(parts):
            if part["status"] != "retrieved":
                continue
            started = time.perf_counter()
            question = advance(state, stage="plan_step", started=started, **{
                **dict.fromkeys(PART_KEYS), "query": part["query"], "condensed_query": part["query"],
                "documents": list(part["documents"]), "best_documents": list(part["documents"]),
                "quality_score": part["score"], "citations": [], "fallback": False,
                "plan": {**plan, "parts": parts, "current": index}})
            state = next(iter(StatePipeline.run(self, **{**parts_inputs, "state": question}).values()))
            parts[index] = _record(state, part)
        return {"plan": advance(state, plan={**plan, "parts": parts, "current": None})}


def _record(state: State, part: dict[str, Any]) -> dict[str, Any]:
    """A part as its answering left it: `answered` with its answer and cited passages, else `missing` and why."""
    citations = list(state.get("citations") or [])
    answered = bool((state.get("answer") or "").strip()) and bool(citations) and not state.get("fallback") \
        and state.get("status") in ANSWERED_STATUSES
    if not answered:
        reason = state.get("fallback_reason") or "no supported answer in the retrieved passages"
        return {**part, "status": "missing", "reason": reason, "documents": []}
    cited = {str(c.get("id")) for c in citations}
    passages = [p for p in state.get("passages") or [] if str(p.meta.get("source_id")) in cited]
    return {**part, "status": "answered", "answer": state["answer"], "citations": citations, "passages": passages,
            "documents": [], "confident": state.get("status") != "partial"}
