"""
The input guardrails of the ask pipeline: the request is checked before anything is searched.

The query, the history and the caller's context are cleaned (Unicode NFKC, invisible and control characters removed,
whitespace collapsed) and their personal data and secrets redacted (`pii.py`, the rules the output guardrails apply
too); then the query is checked for prompt injection, disallowed capabilities (acting in the world) and out-of-scope
topics (`injection.py`). The state goes on `passed`, or on `blocked` with `answer` and `status` filled in.

Soft violations warn (`validation.confidence_warnings`, guardrail action `inject_warning`) and pass; hard violations
block (guardrail action `override:<violation>`).

Phrase lists (`injection.patterns`, a capability's `patterns` and `exemptions`, `out_of_scope_topics`) take plain
phrases, matched case-insensitively as whole words with any whitespace between words, or regular expressions written
with a `re:` prefix (also case-insensitive).
"""

import re
import time
import unicodedata
from typing import Any

from haystack import component

from gatehouse.components.guardrails.injection import (
    DEFAULT_INJECTION_PATTERNS,
    DEFAULT_OUT_OF_SCOPE_TOPICS,
    BoundaryRules,
    capability_settings,
)
from gatehouse.components.guardrails.pii import PII_DEFAULTS, PIIDetectors
from gatehouse.components.setting_groups import MovedSettings, or_default, setting_group
from gatehouse.components.state import State, advance, with_validation

#: The `cleaning` setting: the Unicode normalisation form applied before anything else, and the Unicode categories
#: removed from text (control, format (zero-width, bidi) and surrogate characters); whitespace becomes spaces instead.
CLEANING_DEFAULTS: dict[str, Any] = {"unicode_form": "NFKC", "strip_categories": ["Cc", "Cf", "Cs"]}
#: The `injection` setting: prompt-injection phrases, and which inputs are scanned for them.
INJECTION_DEFAULTS: dict[str, Any] = {"patterns": DEFAULT_INJECTION_PATTERNS, "scope": ["query"]}
#: The `messages` setting: the answers of a blocked request. `{corpus_name}` is filled in everywhere, `{topic}` in
#: `out_of_scope`, `{length}` and `{max_query_chars}` in `query_too_long`; `refusal` answers a violation that has no
#: message of its own (a capability without a `message`).
MESSAGE_DEFAULTS: dict[str, str] = {
    "injection": (
        "I can't follow instructions that try to change how I work. Please ask a question about {corpus_name}."
    ),
    "out_of_scope": "I can only answer questions about {corpus_name}. I can't help with {topic}.",
    "refusal": "I can't help with that request. I can only answer questions about {corpus_name}.",
    "empty_query": "The query is empty after removing invisible and control characters. Please ask a question.",
    "query_too_long": (
        "The query is {length} characters long, over the limit of {max_query_chars} characters. Please shorten it."
    ),
}


def clean(text: str, cleaning: dict[str, Any], *, keep_newlines: bool) -> str:
    """Normalise Unicode, drop control and invisible characters, collapse whitespace (`cleaning` settings)."""
    text = unicodedata.normalize(cleaning["unicode_form"], text)
    strip = set(cleaning["strip_categories"])
    out = []
    for char in text:
        if char == "\n" and keep_newlines:
            out.append("\n")
        elif char.isspace():
            out.append(" ")
        elif unicodedata.category(char) in strip:
            continue
        else:
            out.append(char)
    text = "".join(out)
    if keep_newlines:
        text = re.sub(r"[ ]+", " ", text)
        text = re.sub(r" ?\n ?", "\n", text)
        text = re.sub(r"\n{3,}", "\n\n", text)
        return text.strip()
    return re.sub(r" +", " ", text).strip()


@component
class InputGuardrails(MovedSettings):
    """
    Input guardrails for the ask pipeline, working on the request state.

    Normalises and redacts the query, the history and the context, then blocks prompt injection, disallowed
    capabilities and out-of-scope topics. PII is found by regular expressions (secrets, e-mail addresses, IBANs,
    Luhn-checked cards, national ids, phone numbers); `pii={"backend": "presidio"}` adds Presidio's named entities
    (names, places, ...) on top of them.

    Usage example:
    ```python
    from gatehouse.components.guardrails.input_guardrails import InputGuardrails
    from gatehouse.components.state import new_state

    gate = InputGuardrails(corpus_name="the Acme API documentation")
    result = gate.run(state=new_state("Send an email to my manager about the outage, I am jo@example.com"))
    result["blocked"]["status"]        # "refused"
    result["blocked"]["answer"]        # "I can answer questions about the Acme API documentation, but I cannot ..."
    result["blocked"]["query"]         # "Send an email to my manager about the outage, I am [EMAIL]"
    ```
    """

    moved_settings = {"pii_backend": "pii.backend"}

    def __init__(
        self,
        *,
        corpus_name: str = "the documentation",
        max_query_chars: int = 2000,
        pii: dict[str, Any] | None = None,
        cleaning: dict[str, Any] | None = None,
        injection: dict[str, Any] | None = None,
        capabilities: dict[str, dict[str, Any]] | None = None,
        out_of_scope_topics: dict[str, list[str]] | None = None,
        violation_actions: dict[str, str] | None = None,
        messages: dict[str, str] | None = None,
    ) -> None:
        """
        :param corpus_name: What the assistant answers about; fills `{corpus_name}` in the messages.
        :param max_query_chars: Longest accepted query, in characters after cleaning.
        :param pii: The PII rules; missing keys take `pii.PII_DEFAULTS` (`backend`: `"regex"`, the PII detectors, or
            `"presidio"`, them and then Presidio's named entities; `detectors`, `placeholders`, ...).
        :param cleaning: `unicode_form` and `strip_categories`; missing keys take `CLEANING_DEFAULTS`.
        :param injection: `patterns` (phrases) and `scope` (any of `query`, `history`, `context`; default `query`).
        :param capabilities: Name -> `patterns` of requests refused, `exemptions`, `message` (`capability_settings`).
        :param out_of_scope_topics: Topic name -> phrases of questions outside the corpus.
        :param violation_actions: `prompt_injection`, `capability:<name>`, `out_of_scope:<topic>` -> `block` or `warn`.
        :param messages: The answers of a blocked request; missing keys take `MESSAGE_DEFAULTS`.
        :raises ValueError: If a setting is unknown or invalid (backend, detector, scope, action or pattern).
        """
        self.corpus_name = corpus_name
        self.max_query_chars = max_query_chars
        self.pii = setting_group("pii", pii, PII_DEFAULTS)
        self.cleaning = setting_group("cleaning", cleaning, CLEANING_DEFAULTS)
        self.injection = setting_group("injection", injection, INJECTION_DEFAULTS)
        self.capabilities = capability_settings(capabilities)
        self.out_of_scope_topics = or_default(out_of_scope_topics, DEFAULT_OUT_OF_SCOPE_TOPICS)
        self.violation_actions = dict(violation_actions or {})
        self.messages = setting_group("messages", messages, MESSAGE_DEFAULTS)
        self._detectors = PIIDetectors(self.pii)
        self._rules = BoundaryRules(injection=self.injection, capabilities=self.capabilities,
                                    topics=self.out_of_scope_topics, actions=self.violation_actions)

    def warm_up(self) -> None:
        """
        Load Presidio and its spaCy model when `pii.backend` is `"presidio"` (shared by all guardrails of the process).

        :raises ImportError: If presidio-analyzer or the spaCy model is not installed, naming the pip extra.
        """
        self._detectors.warm_up()

    @component.output_types(passed=State, blocked=State)
    def run(self, state: State) -> dict[str, State]:
        """
        Clean and redact the request, then block it or pass it on.

        :param state: The request state (see `gatehouse.components.state`); it is not modified.
        :returns: `{"passed": state}`, or `{"blocked": state}` with `answer` and `status` (`refused`, or `error` for
            an empty or over-long query).
        """
        self.warm_up()
        started = time.perf_counter()
        raw_query = state.get("query")
        found: list[str] = []
        cleaned_query = clean(raw_query if isinstance(raw_query, str) else "", self.cleaning, keep_newlines=False)
        query, kinds, _ = self._detectors.redact(cleaned_query)
        found.extend(kinds)
        history = self._clean_history(state.get("history"), found)
        context = state.get("context")
        if isinstance(context, str):
            context = self._clean_and_redact(context, found)

        actions = [f"redacted_pii:{kind}" for kind in found]
        updates: dict[str, Any] = {"query": query, "original_query": query, "history": history, "context": context}

        error = None
        if not cleaned_query:
            error = ("empty_query", self._fill(self.messages["empty_query"]))
        elif len(cleaned_query) > self.max_query_chars:
            error = ("query_too_long", self._fill(self.messages["query_too_long"], length=len(cleaned_query),
                                                  max_query_chars=self.max_query_chars))
        if error is not None:
            name, message = error
            new = self._blocked(state, started, name, status="error", error_message=message, answer=message, **updates)
            return {"blocked": with_validation(new, "guardrail_actions", *actions, f"rejected:{name}")}

        violations = self._rules.violations(query, history, context)
        hard = [violation for violation in violations if self._rules.blocks(violation)]
        soft = [violation for violation in violations if violation not in hard]
        if hard:
            first = hard[0]
            new = self._blocked(state, started, first, status="refused", answer=self._message_for(first), **updates)
            new = with_validation(new, "boundary_violations", *violations)
            new = with_validation(new, "guardrail_actions", *actions, f"override:{first}")
            if soft:
                new = with_validation(new, "confidence_warnings", *soft)
            return {"blocked": new}

        new = advance(state, stage="input_guardrails", started=started, steps=["input_guardrails"], **updates)
        if soft:
            new = with_validation(new, "boundary_violations", *soft)
            new = with_validation(new, "confidence_warnings", *soft)
            actions.append("inject_warning")
        if actions:
            new = with_validation(new, "guardrail_actions", *actions)
        return {"passed": new}

    @staticmethod
    def _blocked(state: State, started: float, name: str, **updates: Any) -> State:
        """The state of a request blocked for `name` (a violation or an error): `updates`, and no citations."""
        return advance(state, stage="input_guardrails", started=started, steps=[f"input_guardrails_blocked:{name}"],
                       citations=[], **updates)

    def _fill(self, message: str, **values: Any) -> str:
        """Fill `{name}` placeholders without failing on other braces in a user-written message."""
        values.setdefault("corpus_name", self.corpus_name)
        for key, value in values.items():
            message = message.replace("{" + key + "}", str(value))
        return message

    def _message_for(self, violation: str) -> str:
        """The answer of a request blocked for `violation`."""
        if violation == "prompt_injection":
            return self._fill(self.messages["injection"])
        kind, _, name = violation.partition(":")
        if kind == "capability" and self.capabilities[name]["message"]:
            return self._fill(self.capabilities[name]["message"])
        if kind == "out_of_scope":
            return self._fill(self.messages["out_of_scope"], topic=name.replace("_", " "))
        return self._fill(self.messages["refusal"])

    def _clean_and_redact(self, text: str, found: list[str]) -> str:
        """Multi-line text cleaned and redacted, the kinds of PII it held added to `found`."""
        redacted, kinds, _ = self._detectors.redact(clean(text, self.cleaning, keep_newlines=True))
        found.extend(kind for kind in kinds if kind not in found)
        return redacted

    def _clean_history(self, history: Any, found: list[str]) -> Any:
        if not isinstance(history, list):
            return history
        cleaned = []
        for turn in history:
            if isinstance(turn, dict):
                turn = dict(turn)
                if isinstance(turn.get("content"), str):
                    turn["content"] = self._clean_and_redact(turn["content"], found)
            elif isinstance(turn, str):
                turn = self._clean_and_redact(turn, found)
            cleaned.append(turn)
        return cleaned
