"""
The output guardrails of the ask pipeline: the answer is checked before it is returned.

Personal data in the answer is masked (`pii.py`, the rules the input guardrails apply too), except, with
`allow_pii_from_sources`, contact details quoted verbatim from a cited passage (such as the documentation's own support
address); external images are removed; the markup is sanitised with nh3, keeping it markdown (`sanitising.py`); an
answer the citation verifier found unsupported is replaced with the fallback message; hedging language and answers
given without sources raise a warning. The state always goes on `state`.

Soft violations warn (`validation.confidence_warnings`, guardrail action `inject_warning`) and keep the answer; an
unsupported answer is overridden (guardrail action `override:unsupported_answer`).
"""

import time
from collections.abc import Callable
from typing import Any

from haystack import component
from haystack.core.component.types import GreedyVariadic
from haystack.dataclasses import StreamingCallbackT, StreamingChunk

from gatehouse.components.guardrails.document_screen import drop_foreign_images
from gatehouse.components.guardrails.injection import compile_phrase
from gatehouse.components.guardrails.pii import PII_DEFAULTS, PIIDetectors
from gatehouse.components.guardrails.sanitising import DEFAULT_DANGEROUS_ELEMENTS, MarkupSanitiser
from gatehouse.components.setting_groups import MovedSettings, or_default, setting_group
from gatehouse.components.state import FALLBACK_MESSAGE, State, advance, with_validation
from gatehouse.components.validators.verified_reply import Released, VerifiedReply

#: Phrases that raise a confidence warning (`hedge_language:<phrase>`).
DEFAULT_HEDGE_PHRASES: list[str] = ["I think", "maybe", "possibly", "probably", "might be", "not sure", "it seems"]
#: Statuses whose answer is expected to have no sources.
NO_SOURCES_STATUSES = ("fallback", "refused", "error")


@component
class OutputGuardrails(MovedSettings):
    """
    Output guardrails for the ask pipeline, working on the request state.

    Masks PII in the answer, removes external images, sanitises its HTML with nh3, replaces an unsupported answer
    with the fallback message and adds confidence warnings. `screen` is the decision on answer text alone, which the
    chat stream applies to each sentence before sending it.

    Usage example:
    ```python
    from gatehouse.components.guardrails.output_guardrails import OutputGuardrails
    from gatehouse.components.state import new_state

    checker = OutputGuardrails()
    out = checker.run(state=[new_state("q", answer="<b>Maybe</b> use X [S1].", citations=[{"id": "S1"}])])
    out["state"]["answer"]             # "Maybe use X [S1]."
    out["state"]["validation"]["confidence_warnings"]   # ["hedge_language:maybe"]
    ```
    """

    moved_settings = {"pii_backend": "pii.backend"}

    def __init__(
        self,
        *,
        pii: dict[str, Any] | None = None,
        allow_pii_from_sources: bool = True,
        sanitize_markup: bool = True,
        allowed_tags: list[str] | None = None,
        dangerous_elements: list[str] | None = None,
        allowed_image_hosts: list[str] | None = None,
        hedge_phrases: list[str] | None = None,
        warn_without_sources: bool = True,
        fallback_message: str = FALLBACK_MESSAGE,
    ) -> None:
        """
        :param pii: The PII rules; missing keys take `pii.PII_DEFAULTS` (`backend`: `"regex"`, the PII detectors, or
            `"presidio"`, them and then Presidio's named entities; `detectors`, `placeholders`, ...).
        :param allow_pii_from_sources: Keep PII quoted verbatim in a passage the answer cites (a support address).
        :param sanitize_markup: Sanitise the answer's HTML with nh3, keeping its markdown, code, links and markers.
        :param allowed_tags: HTML tags kept (inline only: `b`, `i`, `sub`, `sup`, `kbd`, `br`); none by default.
        :param dangerous_elements: HTML elements removed with their content (`sanitising.DEFAULT_DANGEROUS_ELEMENTS`).
        :param allowed_image_hosts: Hosts whose images are kept; other images with an absolute URL are removed.
        :param hedge_phrases: Phrases (or `re:` regexes) that raise a confidence warning (`DEFAULT_HEDGE_PHRASES`).
        :param warn_without_sources: Whether to warn about a retrieved answer that has no citations.
        :param fallback_message: Answer that replaces an answer the citation verifier found unsupported.
        :raises ValueError: If a PII setting or a pattern is invalid, or a tag is both allowed and dangerous.
        """
        self.pii = setting_group("pii", pii, PII_DEFAULTS)
        self.allow_pii_from_sources = allow_pii_from_sources
        self.sanitize_markup = sanitize_markup
        self.allowed_tags = list(allowed_tags or [])
        self.dangerous_elements = or_default(dangerous_elements, DEFAULT_DANGEROUS_ELEMENTS)
        self.allowed_image_hosts = list(allowed_image_hosts or [])
        self.hedge_phrases = or_default(hedge_phrases, DEFAULT_HEDGE_PHRASES)
        self.warn_without_sources = warn_without_sources
        self.fallback_message = fallback_message
        self._detectors = PIIDetectors(self.pii)
        self._sanitiser = MarkupSanitiser(allowed_tags=self.allowed_tags, dangerous_elements=self.dangerous_elements)
        self._hedges = [(phrase, compile_phrase(phrase)) for phrase in self.hedge_phrases]

    def warm_up(self) -> None:
        """
        Load Presidio and its spaCy model when `pii.backend` is `"presidio"` (shared by all guardrails of the process).

        :raises ImportError: If presidio-analyzer or the spaCy model is not installed, naming the pip extra.
        """
        self._detectors.warm_up()

    def screen(self, text: str, state: dict[str, Any]) -> tuple[str, list[str]]:
        """
        The decision on answer text: personal data masked (contact details quoted verbatim from a passage the state
        cites are kept, with `allow_pii_from_sources`), external images removed and markup sanitised.

        `run` applies it to the whole answer; the chat stream applies it to each verified sentence before sending
        it, with the passages cited so far.

        :param text: The answer, or one sentence of it.
        :param state: Where the cited passages are: `passages` and `citations` (`[{"id": "S1"}, ...]`).
        :returns: The screened text and the guardrail actions taken (`redacted_pii:<kind>`, `kept_source_pii:<kind>`,
            `removed_external_image:<host>`, `sanitized_markup`).
        """
        masked, kinds, kept = self._detectors.redact(text, self._quoted_from_sources(state))
        actions = [f"redacted_pii:{kind}" for kind in kinds] + [f"kept_source_pii:{kind}" for kind in kept]
        masked, hosts = drop_foreign_images(masked, {host.casefold() for host in self.allowed_image_hosts})
        actions += [f"removed_external_image:{host}" for host in dict.fromkeys(hosts)]
        if self.sanitize_markup:
            sanitized = self._sanitiser.sanitize(masked)
            if sanitized != masked:
                actions.append("sanitized_markup")
            masked = sanitized
        return masked, actions

    def _stream(self, released: Released, streaming_callback: StreamingCallbackT | None) -> None:
        """Send one verified sentence, screened against the passages it may quote."""
        if streaming_callback is None:
            return
        cited = {"passages": released.passages, "citations": [{"id": source} for source in released.cited]}
        streaming_callback(StreamingChunk(content=released.separator + self.screen(released.text, cited)[0],
                                          meta={"citations": released.citations}))

    @component.output_types(state=State)
    def run(self, state: GreedyVariadic[State], streaming_callback: StreamingCallbackT | None = None) -> dict[str, State]:
        """
        Screen the answer, replace it when unsupported, and add confidence warnings.

        :param state: The request state (see `gatehouse.components.state`) from whichever gate ended the request (an
            answer, a refusal, a cache hit, an error: every end of the ask pipeline comes here); it is not modified.
        :param streaming_callback: Where a streamed answer goes: an answer the model is still writing (a verified
            reply in `reply`) is followed here, and each verified sentence reaches the callback once screened
            (`StreamingChunk.meta["citations"]`), then a last chunk with `finish_reason` "stop" and
            `meta["sentences_dropped"]`; the complete answer is then screened as any answer.
        :returns: `{"state": state}`.
        """
        [state] = state
        self.warm_up()
        reply = state.get("reply")
        if isinstance(reply, VerifiedReply):
            state = reply.follow(lambda released: self._stream(released, streaming_callback))
            if streaming_callback is not None:
                streaming_callback(StreamingChunk(content="", finish_reason="stop",
                                                  meta={"sentences_dropped": reply.dropped}))
        elif reply is not None:  # a reply no verifier followed is never streamed: it is answered whole
            state = reply.follow(lambda text: None)
        started = time.perf_counter()
        answer = state.get("answer")
        answer = answer if isinstance(answer, str) else ("" if answer is None else str(answer))
        warnings: list[str] = []
        updates: dict[str, Any] = {}

        masked, actions = self.screen(answer, state)
        if masked != answer:
            updates["answer"] = masked
        answer = masked
        status = state.get("status")

        support = state.get("support")
        unsupported = isinstance(support, dict) and support.get("supported") is False
        if unsupported and status not in ("refused", "error"):
            updates.update(answer=self.fallback_message, status="fallback", citations=[])
            actions.append("override:unsupported_answer")
        else:
            if status not in ("refused", "error"):
                for phrase, pattern in self._hedges:
                    if pattern.search(answer):
                        warnings.append(f"hedge_language:{phrase.lower()}")
            if (
                self.warn_without_sources
                and state.get("route") == "retrieve"
                and status not in NO_SOURCES_STATUSES
                and answer.strip()
                and not state.get("citations")
            ):
                warnings.append("answer_without_sources")
            if warnings:
                actions.append("inject_warning")

        new = advance(state, stage="output_guardrails", started=started, steps=["output_guardrails"], **updates)
        if warnings:
            new = with_validation(new, "confidence_warnings", *warnings)
        if actions:
            new = with_validation(new, "guardrail_actions", *actions)
        return {"state": new}

    def _quoted_from_sources(self, state: dict[str, Any]) -> Callable[[str], bool] | None:
        """With `allow_pii_from_sources`: whether a value occurs verbatim in a cited passage (whitespace and case
        folded); None when nothing is cited."""
        if not self.allow_pii_from_sources:
            return None
        cited = {str(c.get("id")) for c in state.get("citations") or [] if isinstance(c, dict) and c.get("id")}
        texts = [
            " ".join(str(getattr(p, "content", "") or "").split()).casefold()
            for p in state.get("passages") or []
            if str((getattr(p, "meta", None) or {}).get("source_id")) in cited
        ]
        if not texts:
            return None
        return lambda value: bool(value.strip()) and any(" ".join(value.split()).casefold() in t for t in texts)
