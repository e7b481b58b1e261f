"""
What the benchmarks share: a component exactly as a pipeline YAML configures it, and the JSON report file.

Usage:
```python
from gatehouse.components.validators.citation_verifier import CitationVerifier
from gatehouse.eval.bench_files import configured_component, write_json_report

verifier = configured_component("ask", "verifier", CitationVerifier)
write_json_report({"figures": 1}, "data/bench/out.json")
```
"""

import json
from pathlib import Path
from typing import Any, TypeVar

from haystack.core.serialization import component_from_dict

from gatehouse.pipelines import component_spec, pipeline_path, read_spec

T = TypeVar("T")


def configured_component(pipeline: str | Path, name: str, cls: type[T]) -> T:
    """
    The component `name` of a pipeline YAML, built from its `init_parameters` and warmed up.

    :param pipeline: Pipeline name or YAML path.
    :param name: The component's name in that YAML, or in one of its sub-pipelines (`answer.verifier`).
    :param cls: The component class.
    :returns: The component.
    :raises ValueError: If the YAML has no such component.
    """
    try:
        spec = component_spec(read_spec(pipeline), name)
    except KeyError:
        raise ValueError(f"{pipeline_path(pipeline)} has no component '{name}' (nor has any of its sub-pipelines)") \
            from None
    component = component_from_dict(cls, spec, name)
    if hasattr(component, "warm_up"):
        component.warm_up()
    return component


def write_json_report(report: dict[str, Any], path: str | Path) -> Path:
    """Write a benchmark report as JSON (creating the folder); returns the file."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return target
