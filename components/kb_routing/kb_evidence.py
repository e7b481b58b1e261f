"""Chooses among the knowledge bases the router could not tell apart, by what the first search found in each."""

import time
from typing import Any

from haystack import component

from gatehouse.components.state import State, advance


@component
class KBEvidence:
    """
    The router's evidence tier, after the search's first attempt: when `KBRouter` could not tell the candidate
    knowledge bases apart, it routes to all of them and leaves `route_pending` in the state; the first attempt
    searches them as any attempt does, and this step keeps the KB holding the best-scoring document and those whose
    best document scores within the pending `margin` (a share of the best) of it, up to `max_kbs`. The attempt's
    documents are narrowed to those KBs (the caller's own context stays), and `kbs`, `threshold`, `route_evidence`
    (each KB's best score relative to the best KB's) and `route_reason` (`evidence`) are set. When nothing scores,
    the router's own choice stands. A state with nothing pending goes on unchanged.

    Usage:
    ```python
    from haystack import Document
    from gatehouse.components.kb_routing.kb_evidence import KBEvidence
    from gatehouse.components.state import new_state

    pending = {"candidates": ["faq", "ops"], "margin": 0.05, "max_kbs": 2, "thresholds": {"faq": 0.6, "ops": 0.5},
               "default": {"kbs": ["faq"], "reason": "low_confidence", "threshold": 0.6}}
    documents = [Document(content="a", score=0.9, meta={"kb": "ops"}), Document(content="b", score=0.4,
                                                                               meta={"kb": "faq"})]
    state = KBEvidence().run(state=new_state("q", route_pending=pending, documents=documents))["state"]
    state["kbs"], state["route_evidence"]    # (["ops"], {"ops": 1.0, "faq": 0.4444})
    ```
    """

    @component.output_types(state=State)
    def run(self, state: State) -> dict[str, Any]:
        """
        Choose the knowledge bases by the attempt's documents.

        :param state: The state after the first attempt's retrieval (`documents`, `route_pending`).
        :returns: `state` routed (`route_pending` cleared).
        """
        pending = state.get("route_pending")
        if not pending:
            return {"state": state}
        started = time.perf_counter()
        candidates = set(pending["candidates"])
        best: dict[str, float] = {}
        for document in state.get("documents") or []:
            kb = document.meta.get("kb")
            if kb in candidates:
                best[kb] = max(best.get(kb, 0.0), float(document.score or 0.0))
        top = max(best.values(), default=0.0)
        evidence = {name: round(value / top, 4) for name, value in sorted(best.items(), key=lambda item: -item[1])} \
            if top > 0.0 else {}
        if evidence:
            kbs = [name for name, value in evidence.items() if 1.0 - value <= pending["margin"]][: pending["max_kbs"]]
            reason, threshold = "evidence", min(pending["thresholds"][name] for name in kbs)
        else:
            kbs, reason, threshold = pending["default"]["kbs"], pending["default"]["reason"], pending["default"]["threshold"]
        documents = [d for d in state.get("documents") or [] if d.meta.get("kb") in kbs or d.meta.get("kb") is None]
        return {"state": advance(
            state, stage="kb_router", started=started, steps=[f"route_to_{'+'.join(kbs) or 'all'}"], kbs=list(kbs),
            threshold=threshold, route_evidence=evidence, route_reason=reason, route_pending=None,
            documents=documents, chunks_retrieved=len(documents),
        )}
