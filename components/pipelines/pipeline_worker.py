"""
The processes a `ChildPipeline` runs in: a worker (`python -m gatehouse.components.pipelines.pipeline_worker`) imports
Haystack and the component modules it is given once, then runs the pipeline of the spec each request sends, until
its parent closes the pipe. Workers are kept between runs (`take`, `give_back`): a run costs two
messages, not an interpreter start; `start` begins one early, so that it imports and builds the pipeline while its
caller loads. A worker keeps the pipeline it built last and runs it again while the spec it is sent is the same (a
pipeline built from a spec costs more than its run over a small file). A worker whose run goes over its time is killed
with every process it started (its process group) and a crashed one is gone; the next run starts a new worker.

A worker never imports the modules it is told to skip (`skip_modules`): Haystack imports PyTorch when it is installed,
only to name devices, which triples a worker's start time and memory; the chunker converts and splits text and runs
no model.

Usage:
```python
from gatehouse.components.pipelines import pipeline_worker

worker = pipeline_worker.take(skip_modules=["torch"])
outcome = worker.run(spec, {"file_router": {"sources": ["notes.md"]}}, include=set(), budget=30.0)
if outcome[0] in ("done", "failed"):
    pipeline_worker.give_back(worker)
```
"""

import atexit
import importlib
import logging
import os
import pickle
import signal
import subprocess
import sys
import threading
import traceback
from multiprocessing.connection import Connection
from typing import Any

#: Idle workers kept (the longest idle stops first); more run at once when runs overlap.
IDLE_WORKERS = 2

_IDLE: list["PipelineWorker"] = []  # the most recently idle last
_LOCK = threading.Lock()


class PipelineWorker:
    """One worker process, started in a process group of its own; `run` sends it one request."""

    def __init__(self, skip_modules: list[str], modules: list[str] | None = None,
                 spec: dict[str, Any] | None = None) -> None:
        """Start the worker: it imports Haystack and `modules`, and builds the pipeline of `spec`, while the caller goes
        on."""
        self.key = tuple(sorted(skip_modules))
        to_child, self._to_child = os.pipe()
        self._from_child, from_child = os.pipe()
        self.process = subprocess.Popen(
            [sys.executable, "-m", __name__, str(to_child), str(from_child)], pass_fds=(to_child, from_child),
            stdin=subprocess.DEVNULL, process_group=0)
        os.close(to_child)
        os.close(from_child)
        self._sending = Connection(self._to_child, readable=False)
        self._receiving = Connection(self._from_child, writable=False)
        self._sending.send((list(skip_modules), list(modules or []), spec))

    def run(self, spec: dict[str, Any], data: dict[str, Any], include: set[str], budget: float) -> tuple:
        """
        Run the pipeline of `spec` over `data` within `budget` seconds: `("done", outputs)`, `("failed", component
        name or None, its type, error)`, `("over time",)` or `("stopped", exit code)` (the worker killed in the last
        two).
        """
        try:
            self._sending.send((spec, data, include, logging.getLogger().getEffectiveLevel()))
            if not self._receiving.poll(budget):
                self.kill()
                return ("over time",)
            records, outcome = self._receiving.recv()
        except (EOFError, OSError):
            self.kill()
            return ("stopped", self.process.returncode)
        for record in records:
            logging.getLogger(record.name).handle(record)
        return outcome

    def kill(self) -> None:
        """Kill the worker and the processes it started (an idle one has nothing to lose), and wait for it."""
        try:  # the group even when the worker itself is gone: what it started must not outlive it
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            if self.process.poll() is None:
                self.process.kill()
        self.process.wait()
        for connection in (self._sending, self._receiving):
            connection.close()


def take(skip_modules: list[str]) -> PipelineWorker:
    """An idle worker without `skip_modules` that is still running, else a new one."""
    key = tuple(sorted(skip_modules))
    with _LOCK:
        for worker in [worker for worker in reversed(_IDLE) if worker.key == key]:
            _IDLE.remove(worker)
            if worker.process.poll() is None:
                return worker
            worker.kill()  # stopped while idle: reaped
    return PipelineWorker(skip_modules)


def give_back(worker: PipelineWorker) -> None:
    """Keep a worker whose run ended for the next run (the longest idle stops when over `IDLE_WORKERS` are idle)."""
    with _LOCK:
        _IDLE.append(worker)
        over = _IDLE[:-IDLE_WORKERS]
        del _IDLE[:-IDLE_WORKERS]
    for stale in over:
        stale.kill()


def start(skip_modules: list[str], modules: list[str], spec: dict[str, Any] | None = None) -> None:
    """
    Start a worker that imports `modules` and builds the pipeline of `spec` unless one without `skip_modules` is idle
    already: the next run need not wait for its imports, nor, when it sends the same spec, for the build.
    """
    key = tuple(sorted(skip_modules))
    with _LOCK:
        if any(worker.key == key for worker in _IDLE):
            return
    give_back(PipelineWorker(skip_modules, modules, spec))


@atexit.register
def stop_idle() -> None:
    """Stop the idle workers (the process exits)."""
    with _LOCK:
        idle = list(_IDLE)
        _IDLE.clear()
    for worker in idle:
        worker.kill()


# -- the worker ------------------------------------------------------------------------------------------------------
class _Records(logging.Handler):
    """The log records of a run, as plain records that can be sent (message formatted, traceback as text)."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        exc_text = logging.Formatter().formatException(record.exc_info) if record.exc_info else record.exc_text
        self.records.append(logging.makeLogRecord({
            "name": record.name, "levelno": record.levelno, "levelname": record.levelname, "msg": record.getMessage(),
            "exc_text": exc_text, "pathname": record.pathname, "lineno": record.lineno, "funcName": record.funcName,
            "created": record.created, "msecs": record.msecs, "process": record.process}))


def _sendable(error: BaseException) -> BaseException:
    """
    The error itself when it can be sent to the parent, else a RuntimeError with its type and message; its traceback
    in the worker goes with it as a note.
    """
    trace = "".join(traceback.format_exception(error)).rstrip()
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:  # an error holding what does not pickle
        error = RuntimeError(f"{type(error).__name__}: {error}")
    error.add_note(trace)
    return error


def _serve(receiving: Connection, sending: Connection) -> None:
    """
    Import Haystack and the modules named and build the spec given, then run each request until the parent closes the
    pipe: a request whose spec is that of the pipeline built last runs it again.
    """
    skip_modules, modules, first_spec = receiving.recv()
    for name in skip_modules:
        sys.modules[name] = None  # an import of it raises ImportError, which Haystack's optional imports allow
    from haystack.core.errors import PipelineRuntimeError

    from gatehouse.pipelines import build_pipeline

    for module in modules:
        try:
            importlib.import_module(module)
        except Exception:  # noqa: S112 - the run that builds a pipeline of it reports it
            continue
    built: tuple[dict[str, Any], Any] | None = None  # the spec (as a built pipeline gives it) and its pipeline
    if first_spec is not None:
        logging.getLogger().handlers = [_Records()]  # dropped: the parent logs the same when it builds the spec
        try:
            pipeline = build_pipeline(first_spec, origin="a ChildPipeline's spec")
            built = (pipeline.to_dict(), pipeline)
        except Exception:  # noqa: S110 - the run that builds it reports it
            pass
    while True:
        try:
            spec, data, include, level = receiving.recv()
        except EOFError:
            return
        records = _Records()
        root = logging.getLogger()
        root.handlers, root.level = [records], level
        try:
            if built is None or built[0] != spec:
                built = (spec, build_pipeline(spec, origin="a ChildPipeline's spec"))
            outcome: tuple = ("done", built[1].run(data=data, include_outputs_from=include))
        except PipelineRuntimeError as error:
            outcome = ("failed", error.component_name, error.component_type, _sendable(error.__cause__ or error))
        except Exception as error:  # the pipeline could not be built or run: raised again in the parent
            outcome = ("failed", None, None, _sendable(error))
        sending.send((records.records, outcome))


def main() -> None:
    """The worker's entry: `python -m gatehouse.components.pipelines.pipeline_worker READ_FD WRITE_FD`."""
    receiving = Connection(int(sys.argv[1]), writable=False)
    sending = Connection(int(sys.argv[2]), readable=False)
    try:
        _serve(receiving, sending)
    except (EOFError, BrokenPipeError):  # the parent went away
        return


if __name__ == "__main__":
    main()
