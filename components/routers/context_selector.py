"""Chooses the retrieval scope from the context mode (seed 003's Context Selection Agent)."""

import time
from typing import Any

from haystack import Document, component

from gatehouse.components.state import State, advance, with_validation

INVALID_BEHAVIOURS = ("reject", "fallback_to_full_corpus")


@component
class ContextSelector:
    """
    Routes by `state["mode"]`:

    - `full-corpus` -> `retrieve`.
    - `constrained-context` -> `constrained`, with the caller's context as the only document: nothing is retrieved.
    - `hybrid` -> `retrieve`, with the caller's context kept in `state["context_documents"]` to join the retrieved ones.

    A context shorter than `min_context_chars` is rejected (`invalid`, status `error`, a message that says why)
    or, with `invalid_context: fallback_to_full_corpus`, the request searches the knowledge bases instead and a
    warning says so.

    Usage:
    ```python
    from gatehouse.components.routers.context_selector import ContextSelector
    from gatehouse.components.state import new_state

    out = ContextSelector().run(state=new_state("What does it say?", mode="constrained-context",
                                                context="Refunds are issued within 14 days of a request..."))
    out["constrained"]["documents"][0].meta["source"]   # "user-context"
    ```
    """

    def __init__(
        self,
        *,
        min_context_chars: int = 50,
        invalid_context: str = "reject",
        context_source_name: str = "user-context",
        context_title: str = "Your selected text",
    ) -> None:
        """
        :param min_context_chars: Shortest usable context.
        :param invalid_context: `reject` or `fallback_to_full_corpus`.
        :param context_source_name: `source` metadata of the context document.
        :param context_title: Display title of citations into the context.
        """
        if invalid_context not in INVALID_BEHAVIOURS:
            raise ValueError(f"invalid_context must be one of: {', '.join(INVALID_BEHAVIOURS)}.")
        self.min_context_chars = min_context_chars
        self.invalid_context = invalid_context
        self.context_source_name = context_source_name
        self.context_title = context_title

    def _context_document(self, state: dict[str, Any]) -> Document:
        return Document(
            content=state["context"].strip(),
            meta={
                "source": self.context_source_name,
                "title": self.context_title,
                "kb": None,
                "tenant": state.get("tenant"),
                "doc_id": self.context_source_name,
                "section": None,
                "section_id": None,
                "url": None,
            },
        )

    @component.output_types(retrieve=State, constrained=State, invalid=State)
    def run(self, state: State) -> dict[str, Any]:
        """
        Route the request by its mode.

        :param state: The request state.
        :returns: Exactly one of `retrieve`, `constrained` or `invalid`.
        """
        started = time.perf_counter()
        mode = state.get("mode", "full-corpus")
        if mode == "full-corpus":
            return {"retrieve": advance(state, stage="context_selection", started=started)}
        context = (state.get("context") or "").strip()
        if len(context) < self.min_context_chars:
            reason = (
                f"The {mode} mode needs a context of at least {self.min_context_chars} characters "
                f"(got {len(context)})."
            )
            if self.invalid_context == "fallback_to_full_corpus":
                warned = with_validation(state, "confidence_warnings", reason + " Searched the knowledge bases instead.")
                return {
                    "retrieve": advance(
                        warned, stage="context_selection", started=started, steps=["context_invalid_full_corpus"],
                        mode="full-corpus",
                    )
                }
            return {
                "invalid": advance(
                    state, stage="context_selection", started=started, steps=["context_invalid"],
                    status="error", error_message=reason, answer="",
                )
            }
        document = self._context_document(state)
        if mode == "constrained-context":
            return {
                "constrained": advance(
                    state, stage="context_selection", started=started, steps=["constrained_context"],
                    documents=[document], kbs=[], quality_score=None,
                )
            }
        return {
            "retrieve": advance(
                state, stage="context_selection", started=started, steps=["hybrid_context"],
                context_documents=[document],
            )
        }
