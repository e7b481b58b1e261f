"""
The knowledge-base router's entries (plain Python, not a component): a KB's name and what an entry may say, checked
and normalised the same way for `KBRouter`'s `knowledge_bases` and for the entries stored with a KB's profile.

Usage:
```python
from gatehouse.components.kb_routing.kb_entries import check_entries

check_entries([{"name": "faq", "description": "accounts and billing", "keywords": ["refund*"]}], 0.5)
# [{"name": "faq", "description": "accounts and billing", "threshold": 0.5, "keywords": ["refund*"],
#   "examples": [], "patterns": []}]
```
"""

import re
from typing import Any

from gatehouse.components.kb_profile import ENTRY_KEYS

#: A knowledge base's name: letters, digits, `_`, `-` and `.`.
KB_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
#: The keys an entry may have.
KB_KEYS = set(ENTRY_KEYS)


def check_entries(knowledge_bases: Any, default_threshold: float) -> list[dict[str, Any]]:
    """
    Check the knowledge-base entries and return them normalised (all keys present).

    :param knowledge_bases: The entries: a list of mappings with `name` and optional `description`, `keywords`,
        `examples`, `patterns` and `threshold`.
    :param default_threshold: The threshold of an entry that names none.
    :returns: Per entry `name`, `description` (stripped), `threshold` (a float), `keywords`, `examples`, `patterns`.
    :raises ValueError: Naming the entry and what is wrong with it.
    """
    if not isinstance(knowledge_bases, list):
        raise ValueError(
            "KBRouter's 'knowledge_bases' must be a list of mappings with 'name' and optional 'description', "
            f"'keywords', 'examples', 'patterns' and 'threshold'; got {knowledge_bases!r}."
        )
    normalised: list[dict[str, Any]] = []
    seen: set[str] = set()
    for position, kb in enumerate(knowledge_bases):
        where = f"knowledge_bases[{position}]"
        if not isinstance(kb, dict):
            raise ValueError(f"{where} must be a mapping, got {type(kb).__name__}.")
        name = kb.get("name")
        if not isinstance(name, str) or not KB_NAME.match(name):
            raise ValueError(f"{where} needs a 'name' of letters, digits, '_', '-' or '.', got {name!r}.")
        where = f"knowledge base '{name}'"
        if name in seen:
            raise ValueError(f"{where} is declared twice in 'knowledge_bases'.")
        seen.add(name)
        unknown = sorted(set(kb) - KB_KEYS)
        if unknown:
            raise ValueError(f"{where} has unknown keys {unknown}; allowed: {sorted(KB_KEYS)}.")
        description = kb.get("description", "")
        if not isinstance(description, str):
            raise ValueError(f"{where}: 'description' must be a string, got {type(description).__name__}.")
        lists = {}
        for key in ("keywords", "examples", "patterns"):
            value = kb.get(key) or []
            if isinstance(value, str) or not isinstance(value, list):
                raise ValueError(f"{where}: '{key}' must be a list of strings, got {type(value).__name__}.")
            if not all(isinstance(item, str) and item.strip() for item in value):
                raise ValueError(f"{where}: '{key}' holds an empty or non-string item.")
            lists[key] = list(value)
        if not description.strip() and not lists["examples"] and not lists["keywords"] and not lists["patterns"]:
            raise ValueError(f"{where} needs a 'description', 'examples' or 'keywords' to be routable.")
        threshold = kb.get("threshold", default_threshold)
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 <= threshold <= 1:
            raise ValueError(f"{where}: 'threshold' must be a number between 0 and 1, got {threshold!r}.")
        normalised.append(
            {"name": name, "description": description.strip(), "threshold": float(threshold), **lists}
        )  # url_base is the ingest's business
    return normalised
