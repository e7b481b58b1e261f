"""
Input and output guardrails of the ask pipeline.

One component class serves both ends of the pipeline, chosen by `stage`:

- `stage="input"` cleans the query, the history and the caller's context (Unicode NFKC, invisible and control
  characters removed, whitespace collapsed), redacts personal data and secrets, and then checks the query for
  prompt injection, disallowed capabilities (writing code, acting in the world) and out-of-scope topics. It emits
  the state on `passed`, or on `blocked` with `answer` and `status` filled in.
- `stage="output"` masks personal data in the answer (except, with `allow_pii_from_sources`, contact details
  quoted verbatim from a cited passage, such as the documentation's own support address), sanitises its HTML with
  nh3 (keeping it markdown), replaces unsupported answers with the fallback message, and warns about hedging
  language and answers given without sources. It always emits on `state`.

Soft violations warn (`validation.confidence_warnings`, guardrail action `inject_warning`) and keep the answer;
hard violations override it (guardrail action `override:<violation>`).

The rules live beside this module: `pii.py` (the PII detectors, their validators, the optional Presidio named
entities and the shared `PIIDetectors`, so both stages apply exactly the same rules), `injection.py` (injection,
capability and topic phrase lists) and `sanitising.py` (nh3 and markdown links).

Phrase lists (`injection_patterns`, `capability_patterns`, `out_of_scope_topics`, `capability_exemptions`,
`hedge_phrases`) take plain phrases, matched case-insensitively as whole words with any whitespace between words,
or regular expressions written with a `re:` prefix (also case-insensitive).
"""

import html
import time
from collections.abc import Callable
from copy import deepcopy
from typing import Any

import nh3
from haystack import component

from gatehouse.components.guardrails.document_screen import drop_foreign_images
from gatehouse.components.guardrails.injection import (
    DEFAULT_CAPABILITY_EXEMPTIONS,
    DEFAULT_CAPABILITY_MESSAGES,
    DEFAULT_CAPABILITY_PATTERNS,
    DEFAULT_INJECTION_PATTERNS,
    DEFAULT_OUT_OF_SCOPE_TOPICS,
    compile_phrase,
)
from gatehouse.components.guardrails.pii import (
    DEFAULT_PII_PATTERNS,
    DEFAULT_PII_PLACEHOLDERS,
    DEFAULT_PRESIDIO_ENTITIES,
    DEFAULT_PRESIDIO_MODEL,
    PII_BACKENDS,
    PII_TYPES,
    PIIDetectors,
    PresidioEntities,
    presidio_analyzer,
)
from gatehouse.components.guardrails.sanitising import (
    DEFAULT_DANGEROUS_ELEMENTS,
    MARKDOWN_VERBATIM,
    SANITIZE_ROUNDS,
    drop_unsafe_links,
)
from gatehouse.components.state import FALLBACK_MESSAGE, State, advance, with_validation

# ---------------------------------------------------------------------------------------------------------------
# Default rule tables (all overridable through init parameters)
# ---------------------------------------------------------------------------------------------------------------

DEFAULT_HEDGE_PHRASES: list[str] = ["I think", "maybe", "possibly", "probably", "might be", "not sure", "it seems"]

DEFAULT_INJECTION_MESSAGE = (
    "I can't follow instructions that try to change how I work. Please ask a question about {corpus_name}."
)
DEFAULT_OUT_OF_SCOPE_MESSAGE = "I can only answer questions about {corpus_name}. I can't help with {topic}."
DEFAULT_REFUSAL_MESSAGE = "I can't help with that request. I can only answer questions about {corpus_name}."
DEFAULT_EMPTY_QUERY_MESSAGE = (
    "The query is empty after removing invisible and control characters. Please ask a question."
)
DEFAULT_QUERY_TOO_LONG_MESSAGE = (
    "The query is {length} characters long, over the limit of {max_query_chars} characters. Please shorten it."
)

STAGES = ("input", "output")
ACTIONS = ("block", "warn")
NO_SOURCES_STATUSES = ("fallback", "refused", "error")
CONTENT_FIELDS = ("query", "history", "context")

# ---------------------------------------------------------------------------------------------------------------
# Validators and shared helpers
# ---------------------------------------------------------------------------------------------------------------


def _or_default(value: Any, default: Any) -> Any:
    """The given value, or a private copy of the module default when it is None."""
    return deepcopy(default) if value is None else value


# ---------------------------------------------------------------------------------------------------------------
# The component
# ---------------------------------------------------------------------------------------------------------------


@component
class Guardrails:
    """
    Input or output guardrails for the ask pipeline, working on the request state.

    The input stage normalises and redacts the query, the history and the context, then blocks prompt injection,
    disallowed capabilities and out-of-scope topics (outputs `passed` / `blocked`). The output stage masks PII in
    the answer, sanitises its HTML with nh3, replaces unsupported answers with the fallback message and adds
    confidence warnings (output `state`).

    PII is found by regular expressions (secrets, e-mail addresses, IBANs, Luhn-checked cards, national ids, phone
    numbers); `pii_backend="presidio"` adds Presidio's named entities (names, places, ...) on top of them.

    Usage example:
    ```python
    from gatehouse.components.guardrails.guardrails import Guardrails
    from gatehouse.components.state import new_state

    gate = Guardrails(stage="input", corpus_name="the Acme API documentation")
    result = gate.run(state=new_state("Write a python script that calls the API, my email is jo@example.com"))
    result["blocked"]["status"]        # "refused"
    result["blocked"]["answer"]        # "I can explain concepts but cannot write code. ..."
    result["blocked"]["query"]         # "... my email is [EMAIL]"

    checker = Guardrails(stage="output")
    out = checker.run(state={**new_state("q"), "answer": "<b>Maybe</b> use X [S1].", "citations": [{"id": "S1"}]})
    out["state"]["answer"]             # "Maybe use X [S1]."
    out["state"]["validation"]["confidence_warnings"]   # ["hedge_language:maybe"]
    ```
    """

    def __init__(  # noqa: PLR0913
        self,
        *,
        stage: str = "input",
        corpus_name: str = "the documentation",
        max_query_chars: int = 2000,
        pii_detectors: list[str] | None = None,
        pii_patterns: dict[str, list[str]] | None = None,
        national_id_patterns: list[str] | None = None,
        pii_placeholders: dict[str, str] | None = None,
        phone_min_digits: int = 9,
        phone_max_digits: int = 15,
        card_min_digits: int = 13,
        card_max_digits: int = 19,
        pii_backend: str = "regex",
        presidio_entities: list[str] | None = None,
        presidio_score_threshold: float = 0.5,
        presidio_model: str = DEFAULT_PRESIDIO_MODEL,
        presidio_language: str = "en",
        unicode_form: str = "NFKC",
        strip_categories: list[str] | None = None,
        injection_patterns: list[str] | None = None,
        injection_scope: list[str] | None = None,
        injection_message: str = DEFAULT_INJECTION_MESSAGE,
        capability_patterns: dict[str, list[str]] | None = None,
        capability_exemptions: dict[str, list[str]] | None = None,
        capability_messages: dict[str, str] | None = None,
        out_of_scope_topics: dict[str, list[str]] | None = None,
        out_of_scope_message: str = DEFAULT_OUT_OF_SCOPE_MESSAGE,
        refusal_message: str = DEFAULT_REFUSAL_MESSAGE,
        violation_actions: dict[str, str] | None = None,
        empty_query_message: str = DEFAULT_EMPTY_QUERY_MESSAGE,
        query_too_long_message: str = DEFAULT_QUERY_TOO_LONG_MESSAGE,
        sanitize_markup: bool = True,
        dangerous_elements: list[str] | None = None,
        allowed_tags: list[str] | None = None,
        allowed_image_hosts: list[str] | None = None,
        hedge_phrases: list[str] | None = None,
        fallback_message: str = FALLBACK_MESSAGE,
        warn_without_sources: bool = True,
        allow_pii_from_sources: bool = True,
    ) -> None:
        """
        Create the guardrails for one stage.

        :param stage: `"input"` (outputs `passed` / `blocked`) or `"output"` (output `state`).
        :param corpus_name: What the assistant answers about; fills `{corpus_name}` in the messages.
        :param max_query_chars: Longest accepted query, in characters after cleaning.
        :param pii_detectors: Enabled PII detectors, from `secret`, `email`, `iban`, `card`, `national_id`, `phone`
            (all by default). A custom type works too when `pii_patterns` gives its regexes.
        :param pii_patterns: Regexes per PII type; replaces the defaults of the types it names
            (see `DEFAULT_PII_PATTERNS`). A named group `value` limits the redaction to that group.
        :param national_id_patterns: Extra national-id regexes, added to the US SSN pattern.
        :param pii_placeholders: Replacement text per PII type, e.g. `{"email": "[EMAIL]"}`.
        :param phone_min_digits: Fewest digits a phone number match needs (keeps dates and versions out).
        :param phone_max_digits: Most digits a phone number may have (E.164 allows 15).
        :param card_min_digits: Fewest digits of a payment card number.
        :param card_max_digits: Most digits of a payment card number.
        :param pii_backend: `"regex"` (default): the PII detectors above. `"presidio"`: the same detectors, then
            Presidio's named-entity recognition for `presidio_entities` (needs `pip install "gatehouse[presidio]"`;
            loaded by `warm_up`).
        :param presidio_entities: Presidio entity types masked with `pii_backend="presidio"` (default `PERSON`,
            `LOCATION`), e.g. `NRP`, `DATE_TIME`, `IP_ADDRESS`, `URL`; each is masked as `[TYPE]` unless
            `pii_placeholders` names its lower-case type (`{"person": "[NAME]"}`).
        :param presidio_score_threshold: Lowest Presidio score masked (spaCy's entities score 0.85).
        :param presidio_model: The spaCy model Presidio uses: an installed package name or a path. It is never
            downloaded.
        :param presidio_language: The language code of that model.
        :param unicode_form: Unicode normalisation form applied before anything else.
        :param strip_categories: Unicode categories removed from text (default control, format (zero-width, bidi)
            and surrogate characters: `["Cc", "Cf", "Cs"]`); whitespace characters become spaces instead.
        :param injection_patterns: Prompt-injection phrases or `re:` regexes.
        :param injection_scope: Which inputs are scanned for injection: any of `query`, `history`, `context`
            (default only `query`).
        :param injection_message: Answer given when a prompt injection is blocked.
        :param capability_patterns: Capability name -> phrases or `re:` regexes of requests the assistant refuses.
        :param capability_exemptions: Capability name -> phrases or `re:` regexes that exempt a query from that
            capability check (by default how-to questions are not treated as requests to act).
        :param capability_messages: Capability name -> refusal answer; `refusal_message` for names not listed.
        :param out_of_scope_topics: Topic name -> phrases or `re:` regexes of questions outside the corpus.
        :param out_of_scope_message: Refusal for out-of-scope topics; `{corpus_name}` and `{topic}` are filled in.
        :param refusal_message: Refusal for a violation that has no message of its own.
        :param violation_actions: Violation name -> `"block"` (hard, the default) or `"warn"` (soft). Names are
            `prompt_injection`, `capability:<name>` and `out_of_scope:<topic>`.
        :param empty_query_message: Error message for a query that is empty after cleaning.
        :param query_too_long_message: Error message for an over-long query; `{length}` and `{max_query_chars}`
            are filled in.
        :param sanitize_markup: Whether the output stage sanitises the answer's HTML with nh3. The answer stays
            markdown: its text, `[S1]` markers, code (kept verbatim) and links are kept; markdown links whose URL
            scheme nh3 does not allow (`javascript:`, `data:`, ...) lose their target.
        :param dangerous_elements: HTML elements removed together with their content (nh3's `clean_content_tags`).
        :param allowed_tags: HTML tags kept in the answer, with the attributes and URL schemes nh3 allows for them
            (never event handlers, styles or `javascript:` URLs); all other tags are stripped, keeping their text.
            None by default: the answer is markdown, which has its own emphasis, code and links. Allow inline tags
            only (`b`, `i`, `sub`, `sup`, `kbd`, `br`, ...): after a block tag (`div`, `pre`) a markdown renderer
            reads the next lines as raw HTML, code included.
        :param allowed_image_hosts: Hosts whose images (markdown or `<img>`) the output stage keeps in an answer;
            every other image with an absolute URL is removed (a client rendering it would tell that host who read
            the answer), recorded as `removed_external_image:<host>`. Relative image URLs are kept.
        :param hedge_phrases: Phrases that raise a confidence warning in the output stage.
        :param fallback_message: Answer that replaces an answer the citation verifier found unsupported.
        :param warn_without_sources: Whether to warn about a retrieved answer that has no citations.
        :param allow_pii_from_sources: Output stage: leave an e-mail address, phone number, ... in the answer when
            it appears verbatim in a passage the answer cites (`state["passages"]` whose `source_id` is among
            `state["citations"]`), e.g. the documentation's own support address; PII found nowhere in the cited
            passages (from the user, or invented) is still masked. Input PII was redacted before retrieval, so it
            never comes back this way.
        :raises ValueError: If the stage, a detector name, the PII backend, an action or a pattern is invalid, or a
            tag is both allowed and dangerous.
        """
        if stage not in STAGES:
            raise ValueError(f"Unknown stage '{stage}'. Use one of {', '.join(STAGES)}.")
        if pii_backend not in PII_BACKENDS:
            raise ValueError(f"Unknown pii_backend '{pii_backend}'. Use one of {', '.join(PII_BACKENDS)}.")
        self.stage = stage
        self.corpus_name = corpus_name
        self.max_query_chars = max_query_chars
        self.pii_detectors = list(PII_TYPES) if pii_detectors is None else list(pii_detectors)
        self.pii_patterns = pii_patterns
        self.national_id_patterns = list(national_id_patterns or [])
        self.pii_placeholders = pii_placeholders
        self.phone_min_digits = phone_min_digits
        self.phone_max_digits = phone_max_digits
        self.card_min_digits = card_min_digits
        self.card_max_digits = card_max_digits
        self.pii_backend = pii_backend
        self.presidio_entities = _or_default(presidio_entities, DEFAULT_PRESIDIO_ENTITIES)
        self.presidio_score_threshold = presidio_score_threshold
        self.presidio_model = presidio_model
        self.presidio_language = presidio_language
        self.unicode_form = unicode_form
        self.strip_categories = ["Cc", "Cf", "Cs"] if strip_categories is None else list(strip_categories)
        self.injection_patterns = _or_default(injection_patterns, DEFAULT_INJECTION_PATTERNS)
        self.injection_scope = ["query"] if injection_scope is None else list(injection_scope)
        self.injection_message = injection_message
        self.capability_patterns = _or_default(capability_patterns, DEFAULT_CAPABILITY_PATTERNS)
        self.capability_exemptions = _or_default(capability_exemptions, DEFAULT_CAPABILITY_EXEMPTIONS)
        self.capability_messages = _or_default(capability_messages, DEFAULT_CAPABILITY_MESSAGES)
        self.out_of_scope_topics = _or_default(out_of_scope_topics, DEFAULT_OUT_OF_SCOPE_TOPICS)
        self.out_of_scope_message = out_of_scope_message
        self.refusal_message = refusal_message
        self.violation_actions = dict(violation_actions or {})
        self.empty_query_message = empty_query_message
        self.query_too_long_message = query_too_long_message
        self.sanitize_markup = sanitize_markup
        self.dangerous_elements = _or_default(dangerous_elements, DEFAULT_DANGEROUS_ELEMENTS)
        self.allowed_tags = list(allowed_tags or [])
        self.allowed_image_hosts = list(allowed_image_hosts or [])
        self.hedge_phrases = _or_default(hedge_phrases, DEFAULT_HEDGE_PHRASES)
        self.fallback_message = fallback_message
        self.warn_without_sources = warn_without_sources
        self.allow_pii_from_sources = allow_pii_from_sources

        unknown_scope = [field for field in self.injection_scope if field not in CONTENT_FIELDS]
        if unknown_scope:
            raise ValueError(f"Unknown injection_scope {unknown_scope}. Use any of {', '.join(CONTENT_FIELDS)}.")
        bad_actions = {name: act for name, act in self.violation_actions.items() if act not in ACTIONS}
        if bad_actions:
            raise ValueError(f"Invalid violation_actions {bad_actions}. Each action is one of {', '.join(ACTIONS)}.")
        patterns = {kind: list(sources) for kind, sources in DEFAULT_PII_PATTERNS.items()}
        patterns.update({kind: list(sources) for kind, sources in (self.pii_patterns or {}).items()})
        patterns["national_id"] = patterns.get("national_id", []) + self.national_id_patterns
        unknown = [kind for kind in self.pii_detectors if kind not in patterns]
        if unknown:
            raise ValueError(
                f"Unknown PII detectors {unknown}. Use any of {', '.join(PII_TYPES)} "
                "or give their regexes in pii_patterns."
            )
        placeholders = dict(DEFAULT_PII_PLACEHOLDERS)
        placeholders.update(self.pii_placeholders or {})
        self._detectors = PIIDetectors(
            pii_detectors=self.pii_detectors,
            pii_patterns=patterns,
            pii_placeholders=placeholders,
            phone_digits=(phone_min_digits, phone_max_digits),
            card_digits=(card_min_digits, card_max_digits),
            unicode_form=unicode_form,
            strip_categories=self.strip_categories,
        )
        self._injection = [compile_phrase(term) for term in self.injection_patterns]
        self._capabilities = {
            name: [compile_phrase(term) for term in terms] for name, terms in self.capability_patterns.items()
        }
        self._exemptions = {
            name: [compile_phrase(term) for term in terms] for name, terms in self.capability_exemptions.items()
        }
        self._topics = {
            name: [compile_phrase(term) for term in terms] for name, terms in self.out_of_scope_topics.items()
        }
        self._hedges = [(term, compile_phrase(term)) for term in self.hedge_phrases]
        allowed = {tag.lower() for tag in self.allowed_tags}
        self._cleaner = nh3.Cleaner(
            tags=allowed | {"br"}, clean_content_tags={tag.lower() for tag in self.dangerous_elements}
        )
        self._br = "<br>" if "br" in allowed else "\n"

        if stage == "input":
            component.set_output_types(self, passed=State, blocked=State)
        else:
            component.set_output_types(self, state=State)

    # -- serialisation ----------------------------------------------------------------------------------------

    # -- run --------------------------------------------------------------------------------------------------

    def warm_up(self) -> None:
        """
        Load Presidio and its spaCy model when `pii_backend` is `"presidio"` (shared by all guardrails of the process).

        :raises ImportError: If presidio-analyzer or the spaCy model is not installed, naming the pip extra.
        """
        if self.pii_backend != "presidio" or self._detectors.entities is not None:
            return
        self._detectors.entities = PresidioEntities(
            analyzer=presidio_analyzer(self.presidio_model, self.presidio_language),
            language=self.presidio_language,
            entities=self.presidio_entities,
            score_threshold=self.presidio_score_threshold,
        )

    def run(self, state: State) -> dict[str, dict[str, Any]]:
        """
        Apply this stage's guardrails to the request state.

        :param state: The request state (see `gatehouse.components.state`); it is not modified.
        :returns: Input stage: `{"passed": state}` or `{"blocked": state}`; output stage: `{"state": state}`.
        """
        self.warm_up()
        if self.stage == "input":
            return self._run_input(state)
        return self._run_output(state)

    # -- input stage ------------------------------------------------------------------------------------------

    def _fill(self, message: str, **values: Any) -> str:
        """Fill `{name}` placeholders without failing on other braces in a user-written message."""
        values.setdefault("corpus_name", self.corpus_name)
        for key, value in values.items():
            message = message.replace("{" + key + "}", str(value))
        return message

    def _clean_and_redact(self, text: str, *, keep_newlines: bool, found: list[str]) -> str:
        cleaned = self._detectors.clean(text, keep_newlines=keep_newlines)
        redacted, kinds, _ = self._detectors.redact(cleaned)
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
                    turn["content"] = self._clean_and_redact(turn["content"], keep_newlines=True, found=found)
            elif isinstance(turn, str):
                turn = self._clean_and_redact(turn, keep_newlines=True, found=found)
            cleaned.append(turn)
        return cleaned

    def _violations(self, query: str, history: Any, context: Any) -> list[str]:
        """All boundary violations of the cleaned query, in priority order."""
        texts = {"query": query, "context": context if isinstance(context, str) else ""}
        if isinstance(history, list):
            texts["history"] = "\n".join(
                turn.get("content", "") if isinstance(turn, dict) else str(turn)
                for turn in history
                if isinstance(turn, (dict, str))
            )
        violations = []
        scanned = [texts.get(field) or "" for field in self.injection_scope]
        if any(pattern.search(text) for pattern in self._injection for text in scanned):
            violations.append("prompt_injection")
        for name, patterns in self._capabilities.items():
            if any(exempt.search(query) for exempt in self._exemptions.get(name, [])):
                continue
            if any(pattern.search(query) for pattern in patterns):
                violations.append(f"capability:{name}")
        for topic, patterns in self._topics.items():
            if any(pattern.search(query) for pattern in patterns):
                violations.append(f"out_of_scope:{topic}")
        return violations

    def _message_for(self, violation: str) -> str:
        if violation == "prompt_injection":
            return self._fill(self.injection_message)
        kind, _, name = violation.partition(":")
        if kind == "capability" and name in self.capability_messages:
            return self._fill(self.capability_messages[name])
        if kind == "out_of_scope":
            return self._fill(self.out_of_scope_message, topic=name.replace("_", " "))
        return self._fill(self.refusal_message)

    def _run_input(self, state: dict[str, Any]) -> dict[str, dict[str, Any]]:
        started = time.perf_counter()
        raw_query = state.get("query")
        raw_query = raw_query if isinstance(raw_query, str) else ""
        found: list[str] = []
        cleaned_query = self._detectors.clean(raw_query, keep_newlines=False)
        query, kinds, _ = self._detectors.redact(cleaned_query)
        found.extend(kinds)
        history = self._clean_history(state.get("history"), found)
        context = state.get("context")
        if isinstance(context, str):
            context = self._clean_and_redact(context, keep_newlines=True, found=found)

        actions = [f"redacted_pii:{kind}" for kind in found]
        updates: dict[str, Any] = {"query": query, "original_query": query, "history": history, "context": context}

        error = None
        if not cleaned_query:
            error = ("empty_query", self._fill(self.empty_query_message))
        elif len(cleaned_query) > self.max_query_chars:
            error = (
                "query_too_long",
                self._fill(
                    self.query_too_long_message, length=len(cleaned_query), max_query_chars=self.max_query_chars
                ),
            )
        if error is not None:
            name, message = error
            new = advance(
                state,
                stage="input_guardrails",
                started=started,
                steps=[f"input_guardrails_blocked:{name}"],
                status="error",
                error_message=message,
                answer=message,
                citations=[],
                **updates,
            )
            new = with_validation(new, "guardrail_actions", *actions, f"rejected:{name}")
            return {"blocked": new}

        violations = self._violations(query, history, context)
        hard = [v for v in violations if self.violation_actions.get(v, "block") == "block"]
        soft = [v for v in violations if v not in hard]
        if hard:
            first = hard[0]
            new = advance(
                state,
                stage="input_guardrails",
                started=started,
                steps=[f"input_guardrails_blocked:{first}"],
                status="refused",
                answer=self._message_for(first),
                citations=[],
                **updates,
            )
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

    # -- output stage -----------------------------------------------------------------------------------------

    def _sanitize(self, text: str) -> str:
        """
        Sanitise the answer's HTML with nh3, keeping it markdown.

        Sanitising is repeated until it changes nothing, so that markup revealed by one round (an escaped
        `&lt;script&gt;` turned back into text, a link shifted by a removal) is handled by the next; an answer that
        still changes after `SANITIZE_ROUNDS` rounds is returned as escaped HTML.
        """
        for _ in range(SANITIZE_ROUNDS):
            cleaned = self._sanitize_once(text)
            if cleaned == text:
                return text
            text = cleaned
        return drop_unsafe_links(self._cleaner.clean(text))

    def _sanitize_once(self, text: str) -> str:
        """One round: nh3 on everything but code and autolinks, then unsafe link targets removed."""
        pieces, last = [], 0
        for match in MARKDOWN_VERBATIM.finditer(text):
            pieces += [self._clean_html(text[last : match.start()]), match.group(0)]
            last = match.end()
        pieces.append(self._clean_html(text[last:]))
        return drop_unsafe_links("".join(pieces))

    def _clean_html(self, text: str) -> str:
        """nh3's sanitised HTML, unescaped (markdown and plain text need `&`, `<` and `>` as they are), with `<br>`
        as a line break unless it is an allowed tag."""
        return html.unescape(self._cleaner.clean(text).replace("<br>", self._br))

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

    def screen(self, text: str, state: dict[str, Any]) -> tuple[str, list[str]]:
        """
        The output stage's decision on answer text: personal data masked (contact details quoted verbatim from a
        passage the state cites are kept, with `allow_pii_from_sources`) and markup sanitised.

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
            sanitized = self._sanitize(masked)
            if sanitized != masked:
                actions.append("sanitized_markup")
            masked = sanitized
        return masked, actions

    def _run_output(self, state: dict[str, Any]) -> dict[str, dict[str, Any]]:
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
