"""Haystack's default serialisation for a pipeline wrapped as one component, in place of SuperComponent's own."""

import inspect
from typing import Any

from haystack import default_from_dict, default_to_dict


class InitParameterSerialization:
    """
    Serialise a SuperComponent by its init parameters (each read from the attribute of the same name), as Haystack's
    default does, instead of SuperComponent's copy of the wrapped pipeline: a pipeline file stays a reference and an
    inline spec stays the spec it was given.

    Usage:
    ```python
    @component
    class StatePipeline(InitParameterSerialization, SuperComponent): ...
    ```
    """

    def to_dict(self) -> dict[str, Any]:
        """Serialise the component by its init parameters."""
        names = [name for name in inspect.signature(type(self).__init__).parameters if name != "self"]
        return default_to_dict(self, **{name: getattr(self, name) for name in names})

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        """Deserialise the component."""
        return default_from_dict(cls, data)
