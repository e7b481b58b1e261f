"""
Haystack metadata filters as Qdrant filters of the embedded engine (`qdrant_edge`).

A field names a payload key as it is stored: `meta.<key>`, `content` or `id`. Supported operators: `==`, `!=`, `in`,
`not in`, `>`, `>=`, `<`, `<=` and the logical `AND`, `OR`, `NOT` (true when not all of its conditions hold, as in
Haystack). `== None` matches a missing, null or empty value.

Usage:
```python
from gatehouse.document_stores.edge_filters import edge_filter

edge_filter({"operator": "AND", "conditions": [
    {"field": "meta.tenant", "operator": "in", "value": ["acme", "public"]},
    {"field": "meta.kb", "operator": "==", "value": "faq"},
]})
```
"""

from typing import Any

from qdrant_edge import FieldCondition, Filter, IsEmptyCondition, MatchAny, MatchValue, RangeFloat

RANGES = {">": "gt", ">=": "gte", "<": "lt", "<=": "lte"}


class FilterError(ValueError):
    """A filter the store cannot express."""


def edge_filter(filters: dict[str, Any] | None) -> Filter | None:
    """The engine filter equivalent to Haystack `filters` (None for no filter)."""
    if not filters:
        return None
    condition = _condition(filters)
    return condition if isinstance(condition, Filter) else Filter(must=[condition])


def _condition(node: dict[str, Any]) -> Any:
    if not isinstance(node, dict) or "operator" not in node:
        raise FilterError(f"Not a Haystack filter: {node!r}.")
    operator = node["operator"]
    if "conditions" in node:
        conditions = [_condition(child) for child in node["conditions"]]
        if operator == "AND":
            return Filter(must=conditions)
        if operator == "OR":
            return Filter(should=conditions)
        if operator == "NOT":
            return Filter(must_not=[Filter(must=conditions)])
        raise FilterError(f"Unknown logical operator '{operator}': use AND, OR or NOT.")
    if "field" not in node or "value" not in node:
        raise FilterError(f"A comparison needs 'field', 'operator' and 'value': {node!r}.")
    return _comparison(str(node["field"]), operator, node["value"])


def _match(value: Any) -> MatchValue:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, (str, int, bool)):
        raise FilterError(f"Cannot match the value {value!r}: use a string, an integer or a boolean.")
    return MatchValue(value)


def _values(value: Any) -> list[Any]:
    if not isinstance(value, list) or not all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in value):
        raise FilterError(f"'in' and 'not in' need a list of strings or integers, got {value!r}.")
    return value


def _comparison(key: str, operator: str, value: Any) -> Any:
    if operator == "==":
        return IsEmptyCondition(key) if value is None else FieldCondition(key=key, match=_match(value))
    if operator == "!=":
        inner = IsEmptyCondition(key) if value is None else FieldCondition(key=key, match=_match(value))
        return Filter(must_not=[inner])
    if operator == "in":
        return FieldCondition(key=key, match=MatchAny(_values(value)))
    if operator == "not in":
        return Filter(must_not=[FieldCondition(key=key, match=MatchAny(_values(value)))])
    if operator in RANGES:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise FilterError(f"'{operator}' needs a number, got {value!r}.")
        return FieldCondition(key=key, range=RangeFloat(**{RANGES[operator]: float(value)}))
    raise FilterError(f"Unknown comparison operator '{operator}'.")
