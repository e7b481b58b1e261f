"""
The intent gate's grouped settings (plain Python, not a component): `rules`, `tuning` and `outcomes` of
`gatehouse.components.intent.intent_gate.IntentGate`, their defaults and their checks, and where each setting of a
YAML written before the groups went.
"""

from typing import Any

from gatehouse.components.setting_groups import setting_group
from gatehouse.components.intent.intent_rules import (
    DEFAULT_CODE_REQUEST_PATTERNS,
    DEFAULT_DIRECT_PATTERNS,
    DEFAULT_DOMAIN_KEYWORDS,
    DEFAULT_EXAMPLES,
    DEFAULT_GENERAL_KEYWORDS,
    DEFAULT_GENERAL_KNOWLEDGE_PATTERNS,
    DEFAULT_INTENT_EXAMPLES,
    DEFAULT_INTENT_KEYWORDS,
    DEFAULT_INTENT_PATTERNS,
    DEFAULT_REFUSE_KEYWORDS,
    DEFAULT_REFUSE_PATTERNS,
    DEFAULT_RETRIEVE_PATTERNS,
    ROUTES,
)
from gatehouse.components.tiered_classifier import compile_pattern

#: `rules`: what the tiers match. The route's pattern and keyword lists, `examples` (example queries per route), the
#: intent's `intent_patterns`, `intent_keywords` and `intent_examples` (per intent), and `stopwords` (words that are
#: not content words; None: the built-in English list).
DEFAULT_RULES: dict[str, Any] = {
    "refuse_patterns": DEFAULT_REFUSE_PATTERNS,
    "code_request_patterns": DEFAULT_CODE_REQUEST_PATTERNS,
    "direct_patterns": DEFAULT_DIRECT_PATTERNS,
    "retrieve_patterns": DEFAULT_RETRIEVE_PATTERNS,
    "general_knowledge_patterns": DEFAULT_GENERAL_KNOWLEDGE_PATTERNS,
    "domain_keywords": DEFAULT_DOMAIN_KEYWORDS,
    "refuse_keywords": DEFAULT_REFUSE_KEYWORDS,
    "general_keywords": DEFAULT_GENERAL_KEYWORDS,
    "examples": DEFAULT_EXAMPLES,
    "intent_patterns": DEFAULT_INTENT_PATTERNS,
    "intent_keywords": DEFAULT_INTENT_KEYWORDS,
    "intent_examples": DEFAULT_INTENT_EXAMPLES,
    "stopwords": None,
}
#: The route's lists of regular expressions and of keywords (the intent's rules are mappings per intent).
ROUTE_PATTERN_RULES = (
    "refuse_patterns", "code_request_patterns", "direct_patterns", "retrieve_patterns", "general_knowledge_patterns",
)  # fmt: skip
ROUTE_KEYWORD_RULES = ("domain_keywords", "refuse_keywords", "general_keywords")
#: `tuning`: how confident the embedding and keyword tiers must be. A label's similarity is the mean of its
#: `examples_top_k` best examples; the embedding tiers decide from a threshold with a margin over the second label.
DEFAULT_TUNING: dict[str, float | int] = {
    "embedding_threshold": 0.55,
    "embedding_margin": 0.08,
    "intent_embedding_threshold": 0.6,
    "intent_embedding_margin": 0.05,
    "intent_keyword_margin": 1,
    "examples_top_k": 1,
}
#: `outcomes`: what the gate decides when no tier does, and what a decision implies.
DEFAULT_OUTCOMES: dict[str, Any] = {
    "intent_routes": {"chitchat": "direct", "out_of_scope": "refuse"},
    "intent_route_tiers": ["regex", "keywords", "llm"],
    "default_route": "retrieve",
    "default_intent": "factual",
    "refuse_intent": "out_of_scope",
    "refusal_message": "That is outside what I can help with here. Please ask about the documentation this assistant "
    "covers.",
    "empty_query_route": "direct",
    "empty_query_intent": "clarification",
}
#: Where each setting of a YAML written before the groups went.
MOVED_SETTINGS = {
    name: f"{group}.{name}"
    for group, defaults in (("rules", DEFAULT_RULES), ("tuning", DEFAULT_TUNING), ("outcomes", DEFAULT_OUTCOMES))
    for name in defaults
}


def check_settings(
    rules: dict[str, Any] | None, tuning: dict[str, Any] | None, outcomes: dict[str, Any] | None
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """
    The three groups with their defaults filled in, checked.

    :param rules: The `rules` setting.
    :param tuning: The `tuning` setting.
    :param outcomes: The `outcomes` setting.
    :returns: Copies of `(rules, tuning, outcomes)` holding every key.
    :raises ValueError: If a group has an unknown key, a list is malformed, a pattern does not compile, a number is
        not a number or a route name is unknown.
    """
    rules = setting_group("rules", rules, DEFAULT_RULES)
    lists = [*ROUTE_PATTERN_RULES, *ROUTE_KEYWORD_RULES] + (["stopwords"] if rules["stopwords"] is not None else [])
    for name in lists:
        if isinstance(rules[name], str) or not isinstance(rules[name], (list, tuple)):
            raise ValueError(f"'{name}' must be a list of strings, got {type(rules[name]).__name__}.")
        rules[name] = list(rules[name])
    tuning = setting_group("tuning", tuning, DEFAULT_TUNING)
    for name, value in tuning.items():
        try:
            tuning[name] = type(DEFAULT_TUNING[name])(value)
        except (TypeError, ValueError):
            raise ValueError(f"'tuning.{name}' must be a number, got {value!r}.") from None
    outcomes = setting_group("outcomes", outcomes, DEFAULT_OUTCOMES)
    if not isinstance(outcomes["intent_routes"], dict):
        raise ValueError(f"'intent_routes' must be a mapping of intent to route, got {outcomes['intent_routes']!r}.")
    outcomes["intent_route_tiers"] = list(outcomes["intent_route_tiers"])
    routes = [(name, outcomes[name]) for name in ("default_route", "empty_query_route")]
    for name, route in routes + [(f"intent_routes[{i}]", r) for i, r in outcomes["intent_routes"].items()]:
        if route not in ROUTES:
            raise ValueError(f"'{name}' must be one of {', '.join(ROUTES)}, got {route!r}.")
    unknown = [label for label in rules["examples"] if label not in ROUTES]
    if unknown:
        raise ValueError(f"'examples' keys must be routes ({', '.join(ROUTES)}); unknown: {', '.join(unknown)}.")
    for name in ROUTE_PATTERN_RULES:
        for pattern in rules[name]:
            compile_pattern(pattern, name)
    return rules, tuning, outcomes
