"""Builds Gatehouse's response contract from the final state."""

import time
from typing import Any

from haystack import component

from gatehouse.components.state import VALIDATION_KEYS, State

FINAL_STATUSES = ("error", "refused", "fallback")
#: What a `partial` answer from the documents says last, so that a reader who sees no status (a chat client) knows.
DEFAULT_PARTIAL_NOTICE = ("Note: this may not fully answer your question; it is what the documentation says closest "
                          "to it.")
CITATION_KEYS = ("id", "text", "section", "url", "chunk_id", "source", "kb", "confidence", "snippet", "quote")


@component
class ResponseBuilder:
    """
    Turns the state into the response every client gets (CLI `--json`, REST, evaluation):

    `answer`, `citations[]` (`id`, `text`, `section`, `url`, `chunk_id`, `source`, `kb`, `confidence`, `snippet`,
    `quote`),
    `metadata` (`mode`, `intent`, `kb`, `chunks_retrieved`, `chunks_used`, `attempts`, `quality_score`,
    `generator`, `plan` (only for a question the planner split: `strategy`, `subqueries` each with `query`, `label`,
    `kbs`, `score`, `status` answered | missing, `replanned` and the `citations` of its paragraph, `missing` (the
    sub-queries not found), `wall_ms` and `slowest_ms` of their parallel retrieval), `usage` (the language model's
    `prompt_tokens`, `completion_tokens` and `total_tokens` for the request, None when no model ran), `latency_ms`
    per stage and `total`), `validation` (`boundary_violations`, `confidence_warnings`,
    `guardrail_actions`, `unsupported_sentences`), `status` (`success` | `partial` | `fallback` | `refused` |
    `error`), `error_message` and `path`. With the answer cache on, `metadata.cache` tells what it did (`status` hit,
    with `age_s`, `match` and `similarity`; miss, with `stored`; or skipped, with a `reason`).

    A `partial` answer with citations says so in its words: `partial_notice` is its last paragraph, wherever it is
    read (the CLI, REST, a chat client that shows no status; a streamed answer sends it after the sentences).

    Usage:
    ```python
    from gatehouse.components.builders.response_builder import ResponseBuilder

    response = ResponseBuilder().run(state=final_state)["response"]
    response["status"], response["path"]
    ```
    """

    def __init__(self, *, require_citations_for_success: bool = True,
                 partial_notice: str = DEFAULT_PARTIAL_NOTICE) -> None:
        """
        :param require_citations_for_success: A retrieved answer without citations is `partial`, not `success`.
        :param partial_notice: The last paragraph of a `partial` answer with citations ("" leaves it out).
        """
        self.require_citations_for_success = require_citations_for_success
        self.partial_notice = partial_notice

    def _status(self, state: dict[str, Any], citations: list[dict[str, Any]], validation: dict[str, list]) -> str:
        status = state.get("status")
        if status in FINAL_STATUSES:
            return status
        if not (state.get("answer") or "").strip():
            return "error"
        if state.get("route") != "retrieve" and state.get("mode") != "constrained-context":
            return status or "success"
        if status == "partial" or validation.get("unsupported_sentences"):
            return "partial"
        if self.require_citations_for_success and not citations:
            return "partial"
        return "success"

    @component.output_types(response=dict)
    def run(self, state: State) -> dict[str, Any]:
        """
        Build the response.

        :param state: The final state of the ask pipeline.
        :returns: `response`, a JSON-serialisable dictionary.
        """
        latency = {stage: round(ms, 1) for stage, ms in (state.get("latency_ms") or {}).items()}
        if state.get("started") is not None:
            latency["total"] = round((time.perf_counter() - state["started"]) * 1000.0, 1)
        validation = {key: list((state.get("validation") or {}).get(key, [])) for key in VALIDATION_KEYS}
        citations = [
            {key: citation.get(key) for key in CITATION_KEYS} for citation in state.get("citations") or []
        ]
        kbs = state.get("kbs") or ([state["kb"]] if state.get("kb") else [])
        status = self._status(state, citations, validation)
        quality = state.get("quality_score")
        answer = state.get("answer") or ""
        if status == "partial" and citations and self.partial_notice and not answer.endswith(self.partial_notice):
            answer = f"{answer}\n\n{self.partial_notice}"
        response = {
            "answer": answer,
            "citations": citations,
            "metadata": {
                "mode": state.get("mode"),
                "intent": state.get("intent"),
                "route": state.get("route"),
                "kb": "+".join(kbs) if kbs else None,
                "tenant": state.get("tenant"),
                "chunks_retrieved": int(state.get("chunks_retrieved") or 0),
                "chunks_used": int(state.get("chunks_used") or 0),
                "attempts": len(state.get("attempts") or []),
                "quality_score": round(float(quality), 4) if quality is not None else None,
                "generator": state.get("generator"),
                "usage": dict(state["usage"]) if state.get("usage") else None,
                "latency_ms": latency,
            },
            "validation": validation,
            "status": status,
            "error_message": state.get("error_message") if status == "error" else None,
            "path": list(state.get("path") or []),
        }
        if state.get("plan"):
            response["metadata"]["plan"] = _plan_summary(state["plan"], citations)
        if state.get("cache"):
            response["metadata"]["cache"] = dict(state["cache"])
        return {"response": response}


def _plan_summary(plan: dict[str, Any], citations: list[dict[str, Any]]) -> dict[str, Any]:
    """What the response tells of a plan (no documents: they are in `citations`)."""
    numbers = {str(c.get("chunk_id") or c.get("text")): c["id"] for c in citations}
    parts = plan.get("parts") or []
    return {
        "strategy": plan.get("strategy"),
        "subqueries": [
            {
                "query": part["query"],
                "label": part.get("label"),
                "kbs": list(part.get("kbs") or []),
                "score": part.get("score"),
                "status": "answered" if part.get("status") == "answered" else "missing",
                "replanned": bool(part.get("replanned")),
                "citations": [numbers[key] for key in (str(c.get("chunk_id") or c.get("text"))
                                                      for c in part.get("citations") or []) if key in numbers],
            }
            for part in parts
        ],
        "missing": [part["query"] for part in parts if part.get("status") != "answered"],
        "wall_ms": plan.get("wall_ms"),
        "slowest_ms": plan.get("slowest_ms"),
    }
