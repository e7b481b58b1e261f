"""
ChildPipeline: a pipeline run in a worker process, within a time budget that grows with the size of its input files.
The index pipeline runs its file-to-chunks part so (`chunker` in `index.yml`: routing, conversion, cleaning,
splitting): the server's requests never wait while a file's text is worked on (Python runs one thread at a time in a
process), and a file whose text takes too long fails alone, with the process that worked on it and every process it
started.

The worker has imported the pipeline's components once and is kept for the next run (`pipeline_worker`), so a run
costs two messages, not an interpreter start; after a run over time or a crash the next run starts a new worker. It
never imports `skip_modules` (index.yml: PyTorch, which Haystack imports only to name devices). What the worker's
components log is logged here under their own loggers.

Usage:
```python
from gatehouse.components.pipelines.child_pipeline import ChildPipeline
from gatehouse.pipelines import component_spec, read_spec

chunker = ChildPipeline(**component_spec(read_spec("index"), "chunker")["init_parameters"])
chunker.run(sources=[upload])["documents"]   # the chunks, made in a worker process
```
"""

from pathlib import Path
from typing import Any

from haystack import SuperComponent, component
from haystack.core.errors import PipelineRuntimeError
from haystack.core.super_component.utils import _delegate_default  # the value of an input the caller left out
from haystack.dataclasses import ByteStream

from gatehouse.components.converters.bounded import time_budget
from gatehouse.components.pipelines import pipeline_worker
from gatehouse.components.pipelines.serialization import InitParameterSerialization
from gatehouse.pipelines import build_pipeline


@component
class ChildPipeline(InitParameterSerialization, SuperComponent):
    """
    A pipeline (its spec, inline) as one component whose every run happens in a worker process. Its inputs and outputs
    are those of Haystack's `SuperComponent` (`input_mapping`, `output_mapping`). A run of files may take
    `timeout_base_s` plus `timeout_s_per_mb` per megabyte for each file, at most `timeout_s` a file; over it, the run
    raises a `ValueError` naming the files and the settings. A component that fails in the worker raises here as it
    would in-process (a `PipelineRuntimeError` naming it, with its error as the cause).
    """

    def __init__(
        self, *, spec: dict[str, Any], input_mapping: dict[str, list[str]] | None = None,
        output_mapping: dict[str, str] | None = None, timeout_s: float = 120.0, timeout_base_s: float = 30.0,
        timeout_s_per_mb: float = 30.0, skip_modules: list[str] | None = None,
    ) -> None:
        """
        :param spec: The pipeline's spec (what its YAML holds: `components`, `connections`).
        :param input_mapping: The component's inputs, each to the pipeline inputs it feeds (SuperComponent's).
        :param output_mapping: The pipeline outputs the component gives, each to its output name (SuperComponent's).
        :param timeout_s: Longest run for one file, in seconds.
        :param timeout_base_s: Time for a file of no size, in seconds.
        :param timeout_s_per_mb: Time added per megabyte of a file, in seconds.
        :param skip_modules: Modules the worker never imports (an import of one fails there as if it were not
            installed): `[torch]` for a pipeline that runs no model, whose worker then starts in a third of the time.
        :raises ValueError: When `timeout_s` or `timeout_base_s` is not positive, or `timeout_s_per_mb` negative.
        """
        if min(timeout_s, timeout_base_s) <= 0 or timeout_s_per_mb < 0:
            raise ValueError("ChildPipeline's timeout_s and timeout_base_s must be positive, timeout_s_per_mb not "
                             "negative.")
        self.spec = spec
        self.timeout_s = timeout_s
        self.timeout_base_s = timeout_base_s
        self.timeout_s_per_mb = timeout_s_per_mb
        self.skip_modules = skip_modules or []
        pipeline = build_pipeline(spec, origin="a ChildPipeline's spec")
        SuperComponent.__init__(self, pipeline=pipeline, input_mapping=input_mapping, output_mapping=output_mapping)

    def warm_up(self) -> None:
        """Start a worker (its imports take a second or more): the first run need not wait for them."""
        pipeline_worker.start(self.skip_modules, _modules(self.spec), self.spec)

    def run(self, **kwargs: Any) -> dict[str, Any]:
        """
        Run the pipeline in a worker process.

        :param kwargs: The component's inputs (its `input_mapping`).
        :returns: The component's outputs (its `output_mapping`).
        :raises PipelineRuntimeError: When a component of the pipeline fails (naming it; its error is the cause).
        :raises ValueError: When the run takes longer than its budget or the worker process stops.
        """
        inputs = {name: value for name, value in kwargs.items() if value is not _delegate_default}
        data = self._map_explicit_inputs(input_mapping=self.input_mapping, inputs=inputs)
        files = [file for sockets in data.values() for value in sockets.values() for file in _files(value)]
        budget = sum(time_budget(size, base_s=self.timeout_base_s, per_mb_s=self.timeout_s_per_mb,
                                 cap_s=self.timeout_s) for _, size in files) or self.timeout_base_s
        names = ", ".join(name for name, _ in files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
        worker = pipeline_worker.take(self.skip_modules)
        outcome = worker.run(self.pipeline.to_dict(), data, self._get_include_outputs_from(), budget)  # as it is now
        if outcome[0] == "over time":
            raise ValueError(f"{names or 'the input'}: converting and splitting took over {budget:.0f} s (the "
                             "chunker's timeout_base_s plus timeout_s_per_mb per MB, at most timeout_s a file, in "
                             "index.yml)")
        if outcome[0] == "stopped":
            raise ValueError(f"{names or 'the input'}: the process converting and splitting it stopped "
                             f"(exit code {outcome[1]})")
        pipeline_worker.give_back(worker)
        if outcome[0] == "failed":
            _, name, kind, error = outcome
            if name is None:
                raise error
            raise PipelineRuntimeError.from_exception(name, kind, error) from error
        return self._map_explicit_outputs(outcome[1], self.output_mapping)


def start_workers(spec: dict[str, Any]) -> None:
    """
    Start a worker for each `ChildPipeline` of a pipeline spec before the pipeline is built: the workers import their
    components and build their pipelines while it loads (`warm_up` would start them only when it first runs).
    """
    for part in (spec.get("components") or {}).values():
        if part.get("type") == f"{__name__}.ChildPipeline":
            parameters = part.get("init_parameters") or {}
            pipeline_worker.start(parameters.get("skip_modules") or [], _modules(parameters.get("spec") or {}),
                                  parameters.get("spec"))


def _modules(spec: dict[str, Any]) -> list[str]:
    """The modules of a spec's components."""
    return sorted({str(part.get("type")).rpartition(".")[0] for part in (spec.get("components") or {}).values()})


def _files(value: Any) -> list[tuple[str, int]]:
    """The files (name, size in bytes) an input value holds: uploads and paths, alone or in a list."""
    if isinstance(value, (list, tuple)):
        return [file for item in value for file in _files(item)]
    if isinstance(value, ByteStream):
        meta = value.meta or {}
        name = meta.get("source") or meta.get("file_name") or meta.get("file_path") or "a file"
        return [(str(name), len(value.data))]
    if isinstance(value, (str, Path)) and Path(value).is_file():
        return [(Path(value).name, Path(value).stat().st_size)]
    return []
