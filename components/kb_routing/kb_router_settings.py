"""
The knowledge-base router's grouped settings (plain Python, not a component): `scoring`, `evidence` and `llm` with
their defaults, how they are checked, and where the settings of a YAML written before the groups went.

Usage:
```python
from gatehouse.components.kb_routing.kb_router_settings import check_settings

scoring, evidence, llm = check_settings({"keyword_weight": 0.5}, {"enabled": True}, None, max_kbs=2)
scoring["embedding_weight"], evidence["lead_below"], llm["margin"]    # (0.7, 0.3, 0.1)
```
"""

from typing import Any

from gatehouse.components.setting_groups import setting_group

DEFAULT_LLM_PROMPT = """Select the knowledge base that can answer the question.

Knowledge bases:
{knowledge_bases}

Reply with the name of the best knowledge base only. Name two, separated by a comma, only when the question \
clearly needs both.

Question: {query}"""

#: The `scoring` settings and their defaults: the weights of the lexical and the embedding score in the combined score,
#: how many keyword hits one matching pattern counts as, the saturation of the lexical score (`hits / (hits +
#: keyword_saturation)`), how many best-matching texts of a KB are averaged, the best score below which the router is
#: unsure, and the embedding model and its cache (None: the configured defaults; `"off"` disables the cache).
SCORING_DEFAULTS: dict[str, Any] = {
    "keyword_weight": 0.3, "embedding_weight": 0.7, "pattern_weight": 2.0, "keyword_saturation": 2.0,
    "embedding_top_k": 2, "min_route_score": 0.2, "embedding_model": None, "cache_dir": None,
}
#: The `evidence` settings and their defaults: whether the tier runs, the share of the best KB's best document score
#: within which other KBs are added, and the lead below which the tier runs.
EVIDENCE_DEFAULTS: dict[str, Any] = {"enabled": False, "margin": 0.05, "lead_below": 0.3}
#: Evidence settings of earlier versions: the evidence is now the first search attempt of `search.yml`.
RETIRED_EVIDENCE_KEYS = ("pipeline", "top_k")
#: The `llm` settings and their defaults: the lead below which the LLM is asked, and its prompt.
LLM_DEFAULTS: dict[str, Any] = {"margin": 0.1, "prompt": DEFAULT_LLM_PROMPT}

#: Where the settings that moved into a group went (old name -> new place).
MOVED_SETTINGS: dict[str, str] = {
    **{name: f"scoring.{name}" for name in SCORING_DEFAULTS},
    **{f"llm_{name}": f"llm.{name}" for name in LLM_DEFAULTS},
}


def check_settings(
    scoring: dict[str, Any] | None, evidence: dict[str, Any] | None, llm: dict[str, Any] | None, *, max_kbs: int
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """
    The three groups with their defaults filled in and their numbers as numbers, checked with `max_kbs`.

    :param scoring: The `scoring` setting.
    :param evidence: The `evidence` setting.
    :param llm: The `llm` setting.
    :param max_kbs: The most KBs a query is routed to.
    :returns: Copies of `(scoring, evidence, llm)` holding every key.
    :raises ValueError: On a group that is not a mapping or has an unknown key, or a number out of range.
    """
    if int(max_kbs) < 1:
        raise ValueError(f"'max_kbs' must be at least 1, got {max_kbs}.")
    evidence = _evidence_settings(evidence)
    scoring = _numbers("scoring", setting_group("scoring", scoring, SCORING_DEFAULTS), SCORING_DEFAULTS)
    if scoring["keyword_saturation"] <= 0:
        raise ValueError(f"'scoring.keyword_saturation' must be positive, got {scoring['keyword_saturation']}.")
    weights = scoring["keyword_weight"], scoring["embedding_weight"]
    if min(weights) < 0 or sum(weights) <= 0:
        raise ValueError("'scoring.keyword_weight' and 'scoring.embedding_weight' must be non-negative and not both "
                         "zero.")
    llm = _numbers("llm", setting_group("llm", llm, LLM_DEFAULTS), LLM_DEFAULTS)
    return scoring, evidence, llm


def _numbers(group: str, settings: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """The group's settings with those whose default is a number as numbers of the default's type."""
    for name, default in defaults.items():
        if isinstance(default, (int, float)) and not isinstance(default, bool):
            try:
                settings[name] = type(default)(settings[name])
            except (TypeError, ValueError):
                raise ValueError(f"'{group}.{name}' must be a number, got {settings[name]!r}.") from None
    return settings


def _evidence_settings(evidence: Any) -> dict[str, Any]:
    """The evidence settings with their defaults filled in."""
    if evidence is None:
        evidence = {}
    if not isinstance(evidence, dict):
        raise ValueError(f"'evidence' must be a mapping, got {type(evidence).__name__}.")
    retired = sorted(set(evidence) & set(RETIRED_EVIDENCE_KEYS))
    if retired:
        raise ValueError(
            f"'evidence' no longer takes {retired}: the evidence is the first attempt of the search pipeline "
            "(pipelines/search.yml), which searches the candidate knowledge bases as any attempt does. Remove them."
        )
    unknown = sorted(set(evidence) - set(EVIDENCE_DEFAULTS))
    if unknown:
        raise ValueError(f"'evidence' has unknown keys {unknown}; allowed: {sorted(EVIDENCE_DEFAULTS)}.")
    settings = {**EVIDENCE_DEFAULTS, **evidence}
    if not isinstance(settings["enabled"], bool):
        raise ValueError(f"'evidence.enabled' must be true or false, got {settings['enabled']!r}.")
    for key in ("margin", "lead_below"):
        value = settings[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"'evidence.{key}' must be a non-negative number, got {value!r}.")
        settings[key] = float(value)
    return settings
