"""
The one generic Hayhooks pipeline wrapper of Gatehouse.

`gatehouse serve` copies this file into `<deploy dir>/<name>/pipeline_wrapper.py` for every pipeline named in
`hayhooks.yml`, next to a `gatehouse.yml` that says which YAML pipeline it serves and as what kind (ask,
retrieve, index). Hayhooks loads it like any wrapper, so the same directory also works with plain `hayhooks run`.
"""

from pathlib import Path

from gatehouse.serving.wrappers import wrapper_class

PipelineWrapper = wrapper_class(Path(__file__).with_name("gatehouse.yml"))
