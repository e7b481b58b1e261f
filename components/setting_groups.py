"""
Component settings grouped into one mapping (`compression: {min_tokens: 100}`), and the error a YAML gets that still
sets one of them where it stood before it moved into its group.

A component keeps a group's keys and defaults in a module constant and stores the group with the defaults filled in
(`setting_group`). A component some of whose settings moved inherits `MovedSettings` and lists them in
`MOVED_SETTINGS`: loading a YAML that uses an old name then fails with a ValueError naming the new place, instead of
Haystack's "unexpected keyword argument".

Usage:
```python
from gatehouse.components.setting_groups import setting_group

setting_group("compression", {"min_tokens": 100}, {"min_tokens": 200, "max_sentences": 6})
# {"min_tokens": 100, "max_sentences": 6}
setting_group("compression", {"min_token": 100}, {"min_tokens": 200})   # ValueError naming 'min_token'
```
"""

from copy import deepcopy
from typing import Any, ClassVar

from haystack import default_from_dict


def setting_group(name: str, value: dict[str, Any] | None, defaults: dict[str, Any]) -> dict[str, Any]:
    """
    A group of settings with its defaults filled in.

    :param name: The group's parameter name, for the error message.
    :param value: The mapping given; None takes every default.
    :param defaults: Every key of the group with its default.
    :returns: A new mapping holding every key of `defaults`.
    :raises ValueError: If `value` is not a mapping or has a key the group does not have.
    """
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise ValueError(f"'{name}' must be a mapping of {', '.join(defaults)}; got {type(value).__name__}.")
    unknown = sorted(set(value) - set(defaults))
    if unknown:
        raise ValueError(f"'{name}' has unknown keys {unknown}; use {', '.join(defaults)}.")
    return {**deepcopy(defaults), **value}


class MovedSettings:
    """
    Deserialisation of a component whose settings moved: `MOVED_SETTINGS` maps each old name to its new place
    (`{"compress_min_tokens": "compression.min_tokens"}`). `init_parameters` using an old name are a ValueError naming
    both; others are deserialised as the next base class does (Haystack's default when none does).
    """

    MOVED_SETTINGS: ClassVar[dict[str, str]] = {}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        """Deserialise the component; a setting under its old name is an error naming where it went."""
        moved = [name for name in data.get("init_parameters") or {} if name in cls.MOVED_SETTINGS]
        if moved:
            fixes = "; ".join(f"'{name}' moved to '{cls.MOVED_SETTINGS[name]}'" for name in moved)
            raise ValueError(f"{cls.__name__}: {fixes}. Change these settings in the pipeline YAML.")
        parent = super()
        return parent.from_dict(data) if hasattr(parent, "from_dict") else default_from_dict(cls, data)
