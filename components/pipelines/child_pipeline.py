"""
ChildPipeline: a pipeline run in a child process, one process per run, within a time budget that grows with the size of
its input files. The index pipeline runs its file-to-chunks part so (`chunker` in `index.yml`: routing,
conversion, cleaning, splitting): the server's requests never wait while a file's text is worked on (Python runs one
thread at a time in a process), and a file whose text takes too long fails alone, with the process that worked on it
and every process it started.

Children are forked from a server process started once (`multiprocessing`'s forkserver) that has already imported
Haystack and the pipeline's component modules, so a run costs a fork, not an interpreter start. What the child's
components log is logged here under their own loggers.

Usage:
```python
from gatehouse.components.pipelines.child_pipeline import ChildPipeline
from gatehouse.pipelines import component_spec, read_spec

chunker = ChildPipeline(**component_spec(read_spec("index"), "chunker")["init_parameters"])
chunker.run(sources=[upload])["documents"]   # the chunks, made in a child process
```
"""

import inspect
import logging
import multiprocessing
import multiprocessing.forkserver
import os
import pickle
import signal
import threading
import traceback
from pathlib import Path
from typing import Any

from haystack import SuperComponent, component, default_from_dict, default_to_dict
from haystack.core.errors import PipelineRuntimeError
from haystack.core.super_component.utils import _delegate_default  # the value of an input the caller left out
from haystack.dataclasses import ByteStream

from gatehouse.components.converters.bounded import time_budget
from gatehouse.pipelines import build_pipeline

_CONTEXT = multiprocessing.get_context("forkserver")
_PRELOAD = threading.Lock()
_preloaded = False


@component
class ChildPipeline(SuperComponent):
    """
    A pipeline (its spec, inline) as one component whose every run happens in a child process. Its inputs and outputs
    are those of Haystack's `SuperComponent` (`input_mapping`, `output_mapping`). A run of files may take
    `timeout_base_s` plus `timeout_s_per_mb` per megabyte for each file, at most `timeout_s` a file; over it, the run
    raises a `ValueError` naming the files and the settings. A component that fails in the child raises here as it
    would in-process (a `PipelineRuntimeError` naming it, with its error as the cause).
    """

    def __init__(
        self, *, spec: dict[str, Any], input_mapping: dict[str, list[str]] | None = None,
        output_mapping: dict[str, str] | None = None, timeout_s: float = 120.0, timeout_base_s: float = 30.0,
        timeout_s_per_mb: float = 30.0,
    ) -> None:
        """
        :param spec: The pipeline's spec (what its YAML holds: `components`, `connections`).
        :param input_mapping: The component's inputs, each to the pipeline inputs it feeds (SuperComponent's).
        :param output_mapping: The pipeline outputs the component gives, each to its output name (SuperComponent's).
        :param timeout_s: Longest run for one file, in seconds.
        :param timeout_base_s: Time for a file of no size, in seconds.
        :param timeout_s_per_mb: Time added per megabyte of a file, in seconds.
        :raises ValueError: When `timeout_s` or `timeout_base_s` is not positive, or `timeout_s_per_mb` negative.
        """
        if min(timeout_s, timeout_base_s) <= 0 or timeout_s_per_mb < 0:
            raise ValueError("ChildPipeline's timeout_s and timeout_base_s must be positive, timeout_s_per_mb not "
                             "negative.")
        self.spec = spec
        self.timeout_s = timeout_s
        self.timeout_base_s = timeout_base_s
        self.timeout_s_per_mb = timeout_s_per_mb
        pipeline = build_pipeline(spec, origin="a ChildPipeline's spec")
        SuperComponent.__init__(self, pipeline=pipeline, input_mapping=input_mapping, output_mapping=output_mapping)

    def to_dict(self) -> dict[str, Any]:
        """Serialise the component by its init parameters, as Haystack's default does."""
        names = [name for name in inspect.signature(type(self).__init__).parameters if name != "self"]
        return default_to_dict(self, **{name: getattr(self, name) for name in names})

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ChildPipeline":
        """Deserialise the component."""
        return default_from_dict(cls, data)

    def warm_up(self) -> None:
        """Start the process children are forked from (its imports take seconds): the first run need not wait."""
        _start_forkserver(self.spec)

    def run(self, **kwargs: Any) -> dict[str, Any]:
        """
        Run the pipeline in a child process.

        :param kwargs: The component's inputs (its `input_mapping`).
        :returns: The component's outputs (its `output_mapping`).
        :raises PipelineRuntimeError: When a component of the pipeline fails (naming it; its error is the cause).
        :raises ValueError: When the run takes longer than its budget or the child process stops.
        """
        inputs = {name: value for name, value in kwargs.items() if value is not _delegate_default}
        data = self._map_explicit_inputs(input_mapping=self.input_mapping, inputs=inputs)
        files = [file for sockets in data.values() for value in sockets.values() for file in _files(value)]
        budget = sum(time_budget(size, base_s=self.timeout_base_s, per_mb_s=self.timeout_s_per_mb,
                                 cap_s=self.timeout_s) for _, size in files) or self.timeout_base_s
        names = ", ".join(name for name, _ in files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
        outcome = _in_child(self.pipeline.to_dict(), data, self._get_include_outputs_from(), budget)
        if outcome[0] == "over time":
            raise ValueError(f"{names or 'the input'}: converting and splitting took over {budget:.0f} s (the "
                             "chunker's timeout_base_s plus timeout_s_per_mb per MB, at most timeout_s a file, in "
                             "index.yml)")
        if outcome[0] == "stopped":
            raise ValueError(f"{names or 'the input'}: the process converting and splitting it stopped "
                             f"(exit code {outcome[1]})")
        if outcome[0] == "failed":
            _, name, kind, error = outcome
            if name is None:
                raise error
            raise PipelineRuntimeError.from_exception(name, kind, error) from error
        return self._map_explicit_outputs(outcome[1], self.output_mapping)


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


def _start_forkserver(spec: dict[str, Any]) -> None:
    """
    Start the forkserver once, importing Haystack and the modules of the spec's components (a child of a later spec
    imports what else it needs).
    """
    global _preloaded
    with _PRELOAD:
        if _preloaded:
            return
        modules = {str(part["type"]).rpartition(".")[0] for part in (spec.get("components") or {}).values()}
        # `__main__` too (multiprocessing's default): a main script loaded there is not run again in each child
        _CONTEXT.set_forkserver_preload(["__main__", "haystack", __name__, *sorted(filter(None, modules))])
        multiprocessing.forkserver.ensure_running()
        _preloaded = True


def _in_child(spec: dict[str, Any], data: dict[str, Any], include: set[str], budget: float) -> tuple:
    """
    Run a pipeline spec in a child process: `("done", outputs)`, `("failed", component name or None, its type,
    error)`, `("over time",)` (the child and its process group killed) or `("stopped", exit code)`.
    """
    _start_forkserver(spec)
    receiving, sending = _CONTEXT.Pipe(duplex=False)
    child = _CONTEXT.Process(target=_child, daemon=True, name="gatehouse-child-pipeline",
                             args=(spec, data, include, sending, logging.getLogger().getEffectiveLevel()))
    child.start()
    sending.close()
    try:
        if not receiving.poll(budget):
            return ("over time",)
        try:
            records, outcome = receiving.recv()
        except (EOFError, OSError):
            child.join(5)
            return ("stopped", child.exitcode)
        for record in records:
            logging.getLogger(record.name).handle(record)
        return outcome
    finally:
        receiving.close()
        _kill(child)


def _kill(child: multiprocessing.process.BaseProcess) -> None:
    """Kill a child and the processes it started (its process group), and wait for it."""
    if child.is_alive():
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):  # not yet a group of its own
            child.kill()
    child.join()


class _Records(logging.Handler):
    """The log records of the child, as plain records that can be sent (message formatted, traceback as text)."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        exc_text = logging.Formatter().formatException(record.exc_info) if record.exc_info else record.exc_text
        self.records.append(logging.makeLogRecord({
            "name": record.name, "levelno": record.levelno, "levelname": record.levelname, "msg": record.getMessage(),
            "exc_text": exc_text, "pathname": record.pathname, "lineno": record.lineno, "funcName": record.funcName,
            "created": record.created, "msecs": record.msecs, "process": record.process}))


def _child(spec: dict[str, Any], data: dict[str, Any], include: set[str], sending: Any, level: int) -> None:
    """The child's work: run the pipeline and send back its log records and its outcome."""
    os.setpgid(0, 0)  # a group of its own: killing it kills the extraction processes its converters start
    records = _Records()
    root = logging.getLogger()
    root.handlers, root.level = [records], level
    try:
        outcome: tuple = ("done", build_pipeline(spec, origin="a ChildPipeline's spec").run(
            data=data, include_outputs_from=include))
    except PipelineRuntimeError as error:
        outcome = ("failed", error.component_name, error.component_type, _sendable(error.__cause__ or error))
    except Exception as error:  # the pipeline could not be built or run: raised again in the parent
        outcome = ("failed", None, None, _sendable(error))
    sending.send((records.records, outcome))
    sending.close()


def _sendable(error: BaseException) -> BaseException:
    """
    The error itself when it can be sent to the parent, else a RuntimeError with its type and message; its traceback
    in the child goes with it as a note.
    """
    trace = "".join(traceback.format_exception(error)).rstrip()
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:  # an error holding what does not pickle
        error = RuntimeError(f"{type(error).__name__}: {error}")
    error.add_note(trace)
    return error
