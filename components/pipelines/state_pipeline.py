"""A pipeline of the pipelines folder as one component that takes and gives the request state."""

from typing import Any

from haystack import Pipeline, SuperComponent, component

from gatehouse.components.pipelines.serialization import InitParameterSerialization
from gatehouse.components.state import State
from gatehouse.pipelines import build_pipeline, load_pipeline


def state_input_mapping(pipeline: Pipeline) -> dict[str, list[str]]:
    """
    The pipeline's open inputs by socket name, every socket of a name fed the same value (`deadline` reaches every
    component that takes one). A joiner of states (the entry of a loop) takes the input `state`; a joiner of anything
    else joins inside the pipeline and takes nothing from outside.
    """
    mapping: dict[str, list[str]] = {}
    for name, sockets in pipeline.inputs().items():
        for socket, info in sockets.items():
            if socket == "value" and info["type"] is not State:
                continue
            mapping.setdefault("state" if socket == "value" else socket, []).append(f"{name}.{socket}")
    return mapping


@component
class StatePipeline(InitParameterSerialization, SuperComponent):
    """
    A pipeline YAML (`search`, `answer`, or a path) as one component: a Haystack SuperComponent whose inputs are the
    pipeline's open inputs by socket name (its entry's `state`, and whatever per-request inputs its components take,
    such as `deadline`) and whose outputs are its components' unconnected outputs (a route that leaves the pipeline).
    It serialises by reference to the file, not as a copy of it, so the sub-pipeline is edited in its own YAML.

    Usage:
    ```python
    from gatehouse.components.pipelines.state_pipeline import StatePipeline
    from gatehouse.components.state import new_state

    search = StatePipeline(pipeline_file="search")
    search.warm_up()
    search.run(state=new_state("How do I rotate an API key?", kbs=["faq"]))["done"]["documents"]
    ```
    """

    def __init__(self, *, pipeline_file: str, spec: dict[str, Any] | None = None) -> None:
        """
        :param pipeline_file: Name (in the pipelines folder) or path of the pipeline YAML.
        :param spec: The pipeline's spec itself, in place of the file's (`gatehouse.pipelines.component_spec` reads a
            file into it to change a setting without writing the file); None reads `pipeline_file`.
        """
        self.pipeline_file = pipeline_file
        self.spec = spec
        pipeline = load_pipeline(pipeline_file) if spec is None else build_pipeline(spec, origin=pipeline_file)
        SuperComponent.__init__(self, pipeline=pipeline, input_mapping=state_input_mapping(pipeline))
        # mandatory even where the entry is a loop's joiner (whose input is optional): the pipeline runs on a state,
        # never on its per-request inputs alone
        component.set_input_type(self, name="state", type=State)

