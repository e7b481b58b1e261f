"""
Grouped settings (plain Python, not a component): a mapping parameter of related tuning knobs, such as a rule
set's word lists, whose keys a YAML may give in part; the keys left out keep their defaults.

Usage:
```python
from gatehouse.components.settings import grouped_settings

grouped_settings("grammar", {"pronouns": ["it"]}, {"pronouns": None, "definite_article": "the"})
# {"pronouns": ["it"], "definite_article": "the"}
```
"""

from collections.abc import Mapping
from typing import Any


def grouped_settings(parameter: str, value: Mapping[str, Any] | None, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """
    The settings of a mapping parameter: its defaults, updated with the keys it gives.

    :param parameter: The parameter's name, for the error message.
    :param value: The mapping as given (None: every default).
    :param defaults: Every key the parameter knows, with its default.
    :returns: A new dictionary with every key of `defaults`.
    :raises ValueError: If `value` is not a mapping or has a key `defaults` does not know.
    """
    if value is None:
        return dict(defaults)
    if not isinstance(value, Mapping):
        raise ValueError(f"{parameter} must be a mapping of settings, got {type(value).__name__}.")
    unknown = sorted(set(value) - set(defaults))
    if unknown:
        raise ValueError(f"{parameter} has unknown keys {unknown}; use {', '.join(defaults)}.")
    return {**defaults, **value}
