"""A language model's reply verified sentence by sentence while it is written (the citation verifier's streaming)."""

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from haystack import Document

from gatehouse.components.state import State
from gatehouse.components.text_units import Unit

if TYPE_CHECKING:  # the verifier makes its VerifiedReply; this module only calls it
    from gatehouse.components.validators.citation_verifier import CitationVerifier

logger = logging.getLogger(__name__)

#: A unit that may still be the start of a citation marker (`[S`, `(S2`): the unit before it may not be complete.
_MARKER_START = re.compile(r"^[\[(]")


@dataclass(frozen=True)
class Released:
    """
    A verified sentence to send: the whitespace from the text sent before it (`separator`), the sentence (`text`) and
    its citations; `passages` and `cited` (the ids cited so far) are what the output guardrails screen it against.
    """

    separator: str
    text: str
    citations: list[dict[str, Any]]
    passages: list[Document]
    cited: list[str]


class VerifiedReply:
    """
    What the citation verifier hands on for a reply the model is still to write (`ReplyStream`): following it asks the
    model, and each sentence of the reply is released once the model has written the next one and only if it passes
    the decision the verifier makes for the whole answer (`sentence_verdicts` / `keeps`, invalid markers removed). A
    sentence that fails is never released. Sentences the whole answer keeps only when some claim is supported
    (connective text, headings), and claims while the share of supported claims so far is below the verifier's
    `support.min_ratio` (the answer would fall back), wait until that holds. Following returns the state the
    verifier gives the complete answer, as it would have without streaming.

    Usage:
    ```python
    verified = verifier.run(state=state_with_a_reply_stream)["state"]["reply"]
    final = verified.follow(lambda released: print(released.separator + released.text))
    final["answer"], verified.released, verified.dropped
    ```
    """

    def __init__(self, verifier: "CitationVerifier", state: State) -> None:
        """
        :param verifier: The citation verifier that verifies the reply.
        :param state: The generator's state with the reply in `reply` and the `passages` it may cite.
        """
        self.verifier = verifier
        self.state = state
        self.released = 0
        self.dropped = 0
        self._passages = list(state.get("passages") or [])
        self._question = str(state.get("condensed_query") or state.get("original_query") or state.get("query") or "")
        skip = ["fallback"] if verifier.skip_statuses is None else verifier.skip_statuses
        self._verify = bool(self._passages) and state.get("status") not in skip
        self._send: Callable[[Released], None] = lambda released: None
        self._decided = 0  # units of the reply decided so far
        self._cursor = 0  # where the last decided unit ends in the reply
        self._gaps: list[str] = []  # the whitespace around units dropped since the last kept one
        self._pending: list[tuple[str, str, list[dict[str, Any]]]] = []  # kept, waiting for the support condition
        self._claims = 0
        self._supported = 0
        self._cited: list[str] = []
        self._open = True

    def follow(self, send: Callable[[Released], None]) -> State:
        """
        Ask the model through the reply stream and release the verified sentences to `send` as they are written.

        :param send: Called with each `Released` sentence.
        :returns: The verified state of the complete answer.
        """
        self._send = send
        answered = self.state["reply"].follow(self._grew)
        written = answered.get("generator") == "llm" and not answered.get("fallback") and answered.get("answer")
        if written:
            units = self._units(answered["answer"])
            self._decide(answered["answer"], units, len(units))
        self._open = False
        return self.verifier.run(state=answered)["state"]

    def _grew(self, text: str) -> None:
        """Decide the units the model has finished: all but the last (and the one before a possible marker)."""
        units = self._units(text)
        complete = len(units) - 1
        if units and _MARKER_START.match(units[-1].text):
            complete -= 1
        self._decide(text, units, complete)

    def _units(self, text: str) -> list[Unit]:
        return self.verifier.units(text) if self._open else []

    def _decide(self, text: str, units: list[Unit], complete: int) -> None:
        try:
            for unit in units[self._decided : complete]:
                if not self._decide_unit(text, unit):
                    self._open = False  # the reply was split differently once it grew: the final answer says it all
                    return
                self._decided += 1
        except Exception:  # a failing check releases nothing more; the answer is verified whole all the same
            logger.exception("Verifying a streamed sentence failed; the answer is sent when it is complete")
            self._open = False

    def _decide_unit(self, text: str, unit: Unit) -> bool:
        words = unit.text.split()
        found = re.compile(r"\s*".join(re.escape(word) for word in words)).search(text, self._cursor)
        if found is None:
            return False
        gap, body = text[self._cursor : found.start()], found.group(0)
        self._cursor = found.end()
        verdicts = self.verifier.sentence_verdicts([unit], self._passages, self._question) if self._verify else []
        if verdicts and not verdicts[0]["connective"]:
            self._claims += 1
            self._supported += bool(verdicts[0]["supported"])
        if verdicts and not self.verifier.keeps(verdicts[0]):
            self.dropped += 1
            self._gaps.append(gap)
            return True
        if verdicts and "reattributed_from" in verdicts[0]:  # the marker of the passage that says it
            body = verdicts[0]["unit"]
        cleaned = self.verifier.clean_markers(body, self._passages)
        citations = self.verifier.citations_of(cleaned, self._passages, verdicts) if self._verify else []
        self._cited += [c["id"] for c in citations if c["id"] not in self._cited]
        separator = _closed_up([*self._gaps, gap]) if self._gaps else gap
        self._gaps = []
        self._pending.append((separator, cleaned, citations))
        if not self._verify or (self._supported
                                and self._supported / self._claims >= self.verifier.support["min_ratio"]):
            self._release()
        return True

    def _release(self) -> None:
        for separator, text, citations in self._pending:
            self._send(Released(separator="" if not self.released else separator, text=text, citations=citations,
                                passages=self._passages, cited=list(self._cited)))
            self.released += 1
        self._pending = []


def _closed_up(gaps: list[str]) -> str:
    """
    The whitespace the citation verifier leaves between two kept units when the units between them are removed
    (`gaps` is the whitespace before, between and after them): each removed unit with the spaces and tabs beside it
    becomes one space, one after the other; then lines are trimmed and blank lines close up to one.
    """
    joined = "\x00".join(gaps)
    while "\x00" in joined:
        joined = re.sub(r"[ \t]*\x00[ \t]*", " ", joined, count=1)
    lines = joined.split("\n")
    if len(lines) > 1:
        joined = "\n".join([lines[0].rstrip(" \t"), *("" for _ in lines[1:-1]), lines[-1].lstrip(" \t")])
    return re.sub(r"\n{3,}", "\n\n", joined)
