"""
Settings a component takes as one mapping parameter (a group of related tuning knobs, as `KBRouter`'s `evidence`):
the defaults filled in, an unknown key refused, and a YAML that still names a setting by its place before it moved
into a group refused with the new place.

Usage:
```python
from gatehouse.components.setting_groups import setting_group

setting_group("judge", {"weight": 0.3}, {"weight": 0.5, "max_context_chars": 4000})
# {"weight": 0.3, "max_context_chars": 4000}
```
"""

from collections.abc import Mapping
from typing import Any, ClassVar

from haystack import default_from_dict


def setting_group(name: str, given: Mapping[str, Any] | None, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """
    A group's complete settings: the given ones over the defaults.

    :param name: The component parameter holding the group (named in errors).
    :param given: The settings set (None: all defaults).
    :param defaults: Every setting of the group with its default.
    :returns: A new dictionary with every setting of `defaults`.
    :raises ValueError: If `given` is not a mapping or names a setting the group does not have.
    """
    given = {} if given is None else given
    if not isinstance(given, Mapping):
        raise ValueError(f"'{name}' must be a mapping of settings, got {type(given).__name__}.")
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise ValueError(f"'{name}' has no setting {', '.join(map(str, unknown))}; its settings are "
                         f"{', '.join(defaults)}.")
    return {**defaults, **given}


class MovedSettingError(ValueError):
    """Init parameters that use a setting's name from before it was renamed or moved into a group."""


class MovedSettings:
    """
    Base of a component some of whose settings were renamed or moved into a group: `from_dict` (how a pipeline YAML
    is loaded) refuses init parameters that still use an old name, with a `MovedSettingError` (a ValueError) naming
    the old and the new setting. `moved_settings` maps each old name to its new place (`{"cue_window": "contradictions.cue_window"}`).
    """

    moved_settings: ClassVar[dict[str, str]] = {}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        """
        Deserialise the component (with the next base's `from_dict`, else Haystack's default).

        :param data: The component's dictionary, `init_parameters` as a YAML writes them.
        :returns: The component.
        :raises MovedSettingError: If `init_parameters` uses a setting's old name.
        """
        parameters = data.get("init_parameters") or {}
        moved = [f"`{old}` is now `{new}`" for old, new in cls.moved_settings.items() if old in parameters]
        if moved:
            raise MovedSettingError(f"{cls.__name__} settings have moved: {'; '.join(moved)}. Change the init_parameters "
                             f"of the YAML accordingly.")
        parent = super()
        return parent.from_dict(data) if hasattr(parent, "from_dict") else default_from_dict(cls, data)
