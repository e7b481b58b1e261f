"""
Settings grouped into one mapping parameter (plain Python, not a component): a group's defaults, and a clear error
for a YAML written before a setting moved into its group.
"""

from copy import deepcopy
from typing import Any, ClassVar


def with_defaults(value: dict[str, Any] | None, defaults: dict[str, Any], name: str) -> dict[str, Any]:
    """
    A copy of a group of settings with every key it leaves out at its default.

    :param value: The group as given (None: every default).
    :param defaults: Every key of the group with its default, in the group's order.
    :param name: The init parameter, for error messages.
    :returns: A deep copy: the defaults, overridden by `value`.
    :raises ValueError: If `value` is not a mapping or names a key the group does not have.
    """
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise ValueError(f"'{name}' must be a mapping of setting to value, got {type(value).__name__}.")
    unknown = [key for key in value if key not in defaults]
    if unknown:
        raise ValueError(f"'{name}' has no setting {', '.join(map(repr, unknown))}; it takes {', '.join(defaults)}.")
    return deepcopy({**defaults, **value})


class MovedSettings:
    """
    A serialisation mixin: `from_dict` rejects a setting that an older YAML names and that now lives elsewhere,
    naming its new place. List the moves in `moved_settings` (`{"old_name": "group.key"}`) and put the mixin before
    the serialisation base that provides `from_dict`:

    ```python
    class DirectAnswerer(MovedSettings, ChatGeneratorSerialization):
        moved_settings = {"max_exponent": "limits.max_exponent"}
    ```
    """

    moved_settings: ClassVar[dict[str, str]] = {}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        """
        Deserialise the component.

        :raises ValueError: If `data` sets a setting that moved, naming the old and the new place.
        """
        parameters = data.get("init_parameters") or {}
        moved = [f"'{old}' is now '{new}'" for old, new in cls.moved_settings.items() if old in parameters]
        if moved:
            raise ValueError(f"{cls.__name__} settings moved; change them in the YAML: {'; '.join(moved)}.")
        return super().from_dict(data)  # type: ignore[misc]
