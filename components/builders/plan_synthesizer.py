"""Puts the answers of a plan's parts together, each with its own citations, and names the parts not found."""

import time
from dataclasses import replace
from typing import Any

from haystack import Document, component

from gatehouse.components.state import FALLBACK_MESSAGE, State, advance, with_validation
from gatehouse.components.citation_markers import DEFAULT_CITATION_PATTERN, rewrite_markers


@component
class PlanSynthesizer:
    """
    The last step of a plan: one paragraph per part, in the plan's order, `"{label}: {answer}"`.

    - an answered part keeps its verified answer; its citations are renumbered across the whole answer (`[S1]` of
      the second part becomes `[S3]` when the first cited two passages; a passage cited by two parts keeps one
      number) and the cited passages are kept for the output guardrails;
    - a part not found says so (`missing_template`), is listed in `validation.confidence_warnings`, and the status
      is `partial`: never `success` with a part missing;
    - when no part was answered the answer is `fallback_message` with status `fallback`.

    Path `synthesize`.

    Usage:
    ```python
    from gatehouse.components.builders.plan_synthesizer import PlanSynthesizer
    from gatehouse.components.state import new_state

    plan = {"parts": [{"index": 0, "label": "SLA", "query": "SLA?", "status": "missing", "score": 0.2}]}
    PlanSynthesizer().run(state=new_state("q", plan=plan))["state"]["status"]   # "fallback"
    ```
    """

    def __init__(
        self,
        *,
        missing_template: str = "{label}: I couldn't find this in the documentation.",
        fallback_message: str = FALLBACK_MESSAGE,
        answer_template: str = "{label}: {answer}",
        citation_pattern: str = DEFAULT_CITATION_PATTERN,
    ) -> None:
        """
        :param missing_template: The paragraph of a part not found (`{label}`, `{query}`).
        :param fallback_message: The answer when no part was found.
        :param answer_template: The paragraph of an answered part (`{label}`, `{query}`, `{answer}`).
        :param citation_pattern: Regex of a citation marker whose group 1 holds the ids.
        """
        self.missing_template = missing_template
        self.fallback_message = fallback_message
        self.answer_template = answer_template
        self.citation_pattern = citation_pattern

    def _renumber(self, parts: list[dict[str, Any]]) -> tuple[list[str], list[dict[str, Any]], list[Document]]:
        """Paragraphs, citations and passages of the answered parts with one numbering for the whole answer."""
        numbers: dict[str, str] = {}
        paragraphs: list[str] = []
        citations: list[dict[str, Any]] = []
        passages: list[Document] = []
        for part in parts:
            if part["status"] != "answered":
                paragraphs.append(self.missing_template.format(label=part["label"], query=part["query"]))
                continue
            local: dict[str, str] = {}
            by_id = {str(p.meta.get("source_id")): p for p in part.get("passages") or []}
            for citation in part["citations"]:
                key = str(citation.get("chunk_id") or citation.get("text"))
                if key not in numbers:
                    numbers[key] = f"S{len(numbers) + 1}"
                    citations.append({**citation, "id": numbers[key]})
                    passage = by_id.get(str(citation["id"]))
                    if passage is not None:
                        passages.append(replace(passage, meta={**passage.meta, "source_id": numbers[key]}))
                local[str(citation["id"])] = numbers[key]
            answer = rewrite_markers(part["answer"], lambda ids, local=local: [local[i] for i in ids if i in local],
                                     self.citation_pattern)
            if "\n" in answer.strip():  # a list, block or code answers under its label, not after it on one line
                answer = "\n\n" + answer.strip()
            paragraphs.append(self.answer_template.format(label=part["label"], query=part["query"], answer=answer))
        return paragraphs, citations, passages

    @component.output_types(state=State)
    def run(self, state: State) -> dict[str, Any]:
        """
        Compose the answer of a plan.

        :param state: The request state with every part of `plan` `answered` or `missing`.
        :returns: `state` with `answer`, `citations`, `passages`, `status` and `kbs` (those the citations come
            from, in order).
        """
        started = time.perf_counter()
        plan = state["plan"]
        parts = [{**p, "status": "missing"} if p["status"] not in ("answered", "missing") else p
                 for p in plan["parts"]]
        missing = [p for p in parts if p["status"] == "missing"]
        plan = {**plan, "parts": parts}
        searched = list(dict.fromkeys(str(kb) for part in parts for kb in part.get("kbs") or []))
        if len(missing) == len(parts):
            new = advance(state, stage="synthesize", started=started, steps=["synthesize"], plan=plan,
                          answer=self.fallback_message, citations=[], passages=[], status="fallback", fallback=True,
                          fallback_reason="no part of the question was found in the documents", kbs=searched)
            return {"state": new}
        paragraphs, citations, passages = self._renumber(parts)
        new = advance(state, stage="synthesize", started=started, steps=["synthesize"], plan=plan,
                      answer="\n\n".join(paragraphs), citations=citations, passages=passages,
                      chunks_used=len(passages), fallback=False,
                      status="partial" if missing or not all(p.get("confident", True) for p in parts
                                                             if p["status"] == "answered") else None,
                      query=plan["question"], condensed_query=plan["question"],
                      kbs=list(dict.fromkeys(str(c["kb"]) for c in citations if c.get("kb"))) or searched,
                      quality_score=min(p["score"] for p in parts if p["status"] == "answered"))
        if missing:
            new = with_validation(new, "confidence_warnings",
                                  "Not found in the documents: " + "; ".join(p["label"] for p in missing) + ".")
        return {"state": new}
