"""
Settings a component takes as one mapping parameter (a group of related tuning knobs) (plain Python, not a
component): the group's defaults filled in, an unknown key refused, and a YAML that still names a setting where it
stood before it moved into a group refused with its new place.

Usage:
```python
from gatehouse.components.setting_groups import setting_group

setting_group("limits", {"max_exponent": 10}, {"max_exponent": 1000, "max_result_digits": 100})
# {"max_exponent": 10, "max_result_digits": 100}
```
"""

import logging
from copy import deepcopy
from typing import Any, ClassVar

from haystack import default_from_dict

logger = logging.getLogger(__name__)


def setting_group(name: str, given: dict[str, Any] | None, defaults: dict[str, Any]) -> dict[str, Any]:
    """
    A group's complete settings: the given ones over the defaults.

    :param name: The component parameter holding the group (named in errors).
    :param given: The settings set (None: every default).
    :param defaults: Every setting of the group with its default, in the group's order.
    :returns: A deep copy: the defaults, overridden by `given`.
    :raises ValueError: If `given` is not a mapping or names a setting the group does not have.
    """
    if given is None:
        given = {}
    if not isinstance(given, dict):
        raise ValueError(f"'{name}' must be a mapping of setting to value, got {type(given).__name__}.")
    unknown = [key for key in given if key not in defaults]
    if unknown:
        raise ValueError(f"'{name}' has no setting {', '.join(map(repr, unknown))}; it takes {', '.join(defaults)}.")
    return deepcopy({**defaults, **given})


def or_default(value: Any, default: Any) -> Any:
    """A list or mapping setting as given, or a private copy of its default when it is None."""
    return deepcopy(default) if value is None else value


class MovedSettingError(ValueError):
    """Init parameters that name a setting where it stood before it moved into a group."""


class MovedSettings:
    """
    A serialisation mixin: `from_dict` (how a pipeline YAML is loaded) refuses init parameters that still name a
    setting that moved, with a `MovedSettingError` naming the old and the new place, and leaves out a retired setting
    (one the component no longer takes) with a one-line warning saying why. List the moves in `moved_settings`
    (`{"old_name": "group.key"}`) and the retired settings in `retired_settings` (`{"name": "why"}`), and put the
    mixin before the base that provides `from_dict` (without one, Haystack's default deserialisation is used):

    ```python
    class DirectAnswerer(MovedSettings, ChatGeneratorSerialization):
        moved_settings = {"max_exponent": "limits.max_exponent"}
    ```
    """

    moved_settings: ClassVar[dict[str, str]] = {}
    retired_settings: ClassVar[dict[str, str]] = {}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        """
        Deserialise the component.

        :raises MovedSettingError: If `data` sets a setting that moved, naming the old and the new place.
        """
        parameters = data.get("init_parameters") or {}
        moved = [f"'{old}' is now '{new}'" for old, new in cls.moved_settings.items() if old in parameters]
        if moved:
            raise MovedSettingError(f"{cls.__name__} settings moved; change them in the YAML: {'; '.join(moved)}.")
        retired = [name for name in cls.retired_settings if name in parameters]
        if retired:
            for name in retired:
                logger.warning("%s no longer takes '%s' (%s): left out; remove it from the YAML.", cls.__name__, name,
                               cls.retired_settings[name])
            data = {**data, "init_parameters": {k: v for k, v in parameters.items() if k not in retired}}
        parent = super()
        return parent.from_dict(data) if hasattr(parent, "from_dict") else default_from_dict(cls, data)
