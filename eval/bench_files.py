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

import yaml
from haystack.core.serialization import component_from_dict

from gatehouse.pipelines import pipeline_path

T = TypeVar("T")


def configured_component(pipeline: str | Path, name: str, cls: type[T]) -> T:
    """
    The component `name` of a pipeline YAML, built from its `init_parameters` and warmed up.

    :param pipeline: Pipeline name or YAML path.
    :param name: The component's name in that YAML.
    :param cls: The component class.
    :returns: The component.
    :raises ValueError: If the YAML has no such component.
    """
    data = yaml.safe_load(pipeline_path(pipeline).read_text(encoding="utf-8"))
    spec = (data.get("components") or {}).get(name)
    if not spec:
        raise ValueError(f"{pipeline_path(pipeline)} has no component '{name}'")
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
