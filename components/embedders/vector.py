"""
An embedding that a pipeline hands from component to component as itself.

Usage:
```python
from gatehouse.components.embedders.vector import Vector

vector = Vector([0.6, 0.8])
len(vector), vector[1], list(vector)   # (2, 0.8, [0.6, 0.8]): a read-only sequence of floats
```
"""

from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np


class Vector(Sequence[float]):
    """
    A read-only float32 vector that Haystack passes between components without copying it.

    A pipeline deep-copies every component's inputs, and a list is copied element by element with a type check on each
    float: for a 384-dimension query vector that costs more than the search it feeds. A `Vector` cannot be changed
    in place, so its copy is itself. It is a `Sequence[float]`: `list(vector)` and `np.asarray(vector)` give the
    values.
    """

    __slots__ = ("_values",)

    def __init__(self, values: Sequence[float] | np.ndarray) -> None:
        """
        :param values: The floats (copied, as float32).
        """
        array = np.array(values, dtype=np.float32).reshape(-1)
        array.flags.writeable = False
        self._values = array

    def __len__(self) -> int:
        return len(self._values)

    @overload
    def __getitem__(self, index: int) -> float: ...

    @overload
    def __getitem__(self, index: slice) -> list[float]: ...

    def __getitem__(self, index: int | slice) -> float | list[float]:
        return self._values[index].tolist()

    def __iter__(self) -> Iterator[float]:
        return iter(self._values.tolist())

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if copy or (dtype is not None and np.dtype(dtype) != self._values.dtype):
            return np.array(self._values, dtype=dtype)
        return self._values

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Vector):
            return np.array_equal(self._values, other._values)
        return isinstance(other, Sequence) and list(self) == list(other)

    def __hash__(self) -> int:
        return hash(self._values.tobytes())

    def __repr__(self) -> str:
        return f"Vector({len(self)} floats)"

    def __deepcopy__(self, memo: dict[int, Any]) -> "Vector":
        return self

    def __copy__(self) -> "Vector":
        return self

    def tolist(self) -> list[float]:
        """The values as a list of Python floats."""
        return self._values.tolist()

    def to_dict(self) -> dict[str, Any]:
        """Serialise (pipeline snapshots)."""
        return {"values": self.tolist()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Vector":
        """Deserialise."""
        return cls(data["values"])
