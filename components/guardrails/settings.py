"""
The guardrails' settings: a list or mapping setting's default when it is not given, and grouped settings (one
mapping parameter of related settings whose missing keys take their defaults, such as `pii`).

Usage:
```python
from gatehouse.components.guardrails.settings import grouped

grouped("cleaning", {"unicode_form": "NFC"}, {"unicode_form": "NFKC", "strip_categories": ["Cc"]})
# {"unicode_form": "NFC", "strip_categories": ["Cc"]}
```
"""

from copy import deepcopy
from typing import Any


def or_default(value: Any, default: Any) -> Any:
    """The given value, or a private copy of the default when it is None."""
    return deepcopy(default) if value is None else value


def grouped(name: str, given: dict[str, Any] | None, defaults: dict[str, Any]) -> dict[str, Any]:
    """
    A grouped setting with its defaults filled in.

    :param name: The parameter, named in an error.
    :param given: The mapping given; None takes every default.
    :param defaults: Every key of the group and its default.
    :returns: A new mapping with every key of `defaults`.
    :raises ValueError: If `given` is not a mapping or has a key that `defaults` has not.
    """
    given = {} if given is None else given
    if not isinstance(given, dict):
        raise ValueError(f"'{name}' must be a mapping, got {type(given).__name__}.")
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise ValueError(f"'{name}' has unknown keys {unknown}; allowed: {', '.join(defaults)}.")
    return {**deepcopy(defaults), **given}
