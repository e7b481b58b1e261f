"""The passage screen: text from documents screened before anything is answered from it."""

import time

from haystack import Document, component

from gatehouse.components.guardrails.document_screen import DocumentScreen
from gatehouse.components.state import State, advance, with_validation


def screen_passage(screen: DocumentScreen, passage: Document) -> tuple[Document | None, list[tuple[str, str]]]:
    """
    One passage as the screen leaves it: what `PassageScreen` does to each passage of an ask, and the retrieve
    endpoint to each document it returns.

    :param screen: The screening rules.
    :param passage: A passage or a retrieved chunk.
    :returns: The passage (itself when nothing was found, else a copy with the screened text; None when nothing is
        left of it) and what was found, `(kind, detail)` per removal (see `DocumentScreen.screen`).
    """
    screened = screen.screen(passage.content or "")
    if not screened.found:
        return passage, []
    if not screened.text.strip():
        return None, screened.found
    kept = Document(id=passage.id, content=screened.text, meta=dict(passage.meta or {}), score=passage.score)
    return kept, screened.found


@component
class PassageScreen:
    """
    Screens the passages an answer will be built from, as the input guardrails screen the question: blocks that
    address the assistant ("AI assistant: ignore previous instructions..."), ask the reader to hand credentials to a
    link, address or phone number (or to pay changed bank details), or link to a host spelled in mixed scripts or
    show one address and go to another are removed; images on hosts outside
    `allowed_image_hosts` (beacons that report who read the answer) are dropped; `javascript:`/`data:` link targets
    are cut. Each removal of text is a `boundary_violations` entry naming the passage (`document_instruction:S2`),
    so the answer built from what is left says what was withheld; a removed image is a `guardrail_actions` entry
    (`removed_external_image:S1:host`); a passage left empty is dropped.

    Usage:
    ```python
    screen = PassageScreen()
    out = screen.run(state=State(state, passages=passages))["state"]
    out["passages"]                              # hostile blocks removed
    out["validation"]["boundary_violations"]     # ["document_phishing:S1"]
    ```
    """

    def __init__(
        self,
        *,
        instruction_patterns: list[str] | None = None,
        credential_patterns: list[str] | None = None,
        request_patterns: list[str] | None = None,
        fraud_patterns: list[str] | None = None,
        allowed_image_hosts: list[str] | None = None,
    ) -> None:
        """
        :param instruction_patterns: Phrases (or `re:` expressions) of text aimed at the assistant; None uses the
            input guardrails' injection patterns and those of documents (`DEFAULT_DOCUMENT_INSTRUCTION_PATTERNS`).
        :param credential_patterns: What a phishing block asks for (passwords, card numbers, codes, keys...).
        :param request_patterns: How it asks (send, enter, call, visit...); a block is phishing when it has a
            credential, a request not negated just before it, and a destination (URL, domain, e-mail, phone).
        :param fraud_patterns: Requests that need no credential to do harm (payments to changed bank details, "do not
            call to verify"): with a destination, the block is phishing too.
        :param allowed_image_hosts: Hosts whose images are kept (e.g. your documentation's CDN); images with a
            relative URL are always kept, every other external image is removed.
        """
        self.instruction_patterns = instruction_patterns
        self.credential_patterns = credential_patterns
        self.request_patterns = request_patterns
        self.fraud_patterns = fraud_patterns
        self.allowed_image_hosts = allowed_image_hosts
        self._screen = DocumentScreen(instruction_patterns=instruction_patterns, credential_patterns=credential_patterns,
                                      request_patterns=request_patterns, fraud_patterns=fraud_patterns,
                                      allowed_image_hosts=allowed_image_hosts)

    @component.output_types(state=State)
    def run(self, state: State) -> dict[str, State]:
        """
        Screen `state["passages"]`.

        :param state: The request state; `passages` are the assembled passages (`meta["source_id"]` names them).
        :returns: `state` with the screened passages and a `boundary_violations` entry per kind of removal per
            passage.
        """
        started = time.perf_counter()
        passages: list[Document] = []
        violations: list[str] = []
        actions: list[str] = []
        for index, passage in enumerate(state.get("passages") or []):
            kept, found = screen_passage(self._screen, passage)
            source_id = (passage.meta or {}).get("source_id") or f"#{index + 1}"
            for kind, detail in dict.fromkeys(found):
                if kind == "beacon":
                    actions.append(f"removed_external_image:{source_id}:{detail}")
                elif f"document_{kind}:{source_id}" not in violations:
                    violations.append(f"document_{kind}:{source_id}")
            if kept is not None:
                passages.append(kept)
        new = advance(state, stage="passage_screen", started=started, passages=passages,
                      steps=["screened_passages"] if violations else [])
        if violations:
            new = with_validation(new, "boundary_violations", *violations)
        if actions:
            new = with_validation(new, "guardrail_actions", *actions)
        return {"state": new}
