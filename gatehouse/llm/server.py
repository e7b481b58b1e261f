"""
llama.cpp's OpenAI-compatible server (`/v1/chat/completions`, `/v1/models`, `/health`) on a GGUF model, run in this
process through xllamacpp's prebuilt bindings (`pip install "gatehouse[llm]"`), bound to 127.0.0.1 only.
"""

import os
import signal
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gatehouse import THREAD_DEFAULTS_SET

HOST = "127.0.0.1"
DEFAULT_PORT = 8080
DEFAULT_CONTEXT = 4096
DEFAULT_URL = f"http://{HOST}:{DEFAULT_PORT}/v1"


def default_threads(cores: int | None = None, load: float | None = None) -> int:
    """
    The threads to serve with: the cores the machine is not busy with (its one-minute load average), at least one.

    llama.cpp's threads meet at a barrier after every layer, so one thread the scheduler sets aside stalls the others:
    on a machine busy with other work, two threads on two cores generate several times slower than one. On an idle
    machine every core is used.

    :param cores: The machine's cores; None: `os.cpu_count()`.
    :param load: The one-minute load average; None: `os.getloadavg()`'s.
    """
    cores = cores or os.cpu_count() or 1
    load = os.getloadavg()[0] if load is None else load
    return max(1, min(cores, cores - round(load)))


@contextmanager
def native_thread_environment() -> Iterator[None]:
    """
    The environment without the OpenMP defaults importing gatehouse set for torch (`gatehouse.THREAD_DEFAULTS_SET`),
    restored on leaving: llama.cpp's OpenMP library reads them when it is loaded, and its threads, which meet after
    every layer, generate markedly slower when they sleep between steps than when they wait awake (`gatehouse llm
    serve` loads no torch first, so the library is llama.cpp's own). A value the caller set is kept.
    """
    taken = {key: os.environ.pop(key) for key in THREAD_DEFAULTS_SET if key in os.environ}
    try:
        yield
    finally:
        os.environ.update(taken)


class ServeError(RuntimeError):
    """The server could not start; the message says why in one line."""


def server_params(model_path: Path, *, alias: str, port: int, threads: int, context: int, verbose: bool) -> Any:
    """
    xllamacpp's `CommonParams` for one model served on `127.0.0.1:port`.

    :param model_path: The GGUF file.
    :param alias: The model name clients see in `/v1/models` (any name is accepted in requests).
    :param port: The port.
    :param threads: CPU threads for generation and for prompt processing.
    :param context: Context window in tokens (prompt and answer together).
    :param verbose: llama.cpp's informational log on stderr (otherwise errors only).
    :raises ServeError: If xllamacpp is not installed.
    """
    try:
        with native_thread_environment():
            import xllamacpp
    except ImportError as error:
        raise ServeError('xllamacpp is not installed: pip install "gatehouse[llm]"') from error
    params = xllamacpp.CommonParams()
    params.model.path = str(model_path)
    params.model_alias = {alias}
    params.hostnames = [HOST]
    params.port = port
    params.n_ctx = context
    params.n_parallel = 1
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.ui = False
    params.verbosity = 3 if verbose else 1
    return params


def start_server(
    model_path: Path,
    *,
    alias: str,
    port: int = DEFAULT_PORT,
    threads: int | None = None,
    context: int = DEFAULT_CONTEXT,
    verbose: bool = False,
) -> Any:
    """
    Load the model and start serving it; the server runs on its own threads until the returned object is deleted.

    :param model_path: The GGUF file.
    :param alias: The served model name.
    :param port: Port on 127.0.0.1.
    :param threads: CPU threads; None: `default_threads()`.
    :param context: Context window in tokens.
    :param verbose: llama.cpp's informational log on stderr.
    :returns: The running `xllamacpp.Server`.
    :raises ServeError: If the model file is missing, the port is taken, or llama.cpp cannot load the model.
    """
    if not Path(model_path).is_file():
        raise ServeError(f"no model file at {model_path}")
    if (threads is not None and threads < 1) or context < 256:
        raise ServeError("threads must be at least 1 and the context at least 256 tokens")
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a closed server's TIME_WAIT is no obstacle
        try:
            probe.bind((HOST, port))
        except OSError as error:
            raise ServeError(f"cannot listen on {HOST}:{port}: {error.strerror}") from error
    params = server_params(model_path, alias=alias, port=port, threads=threads or default_threads(),
                           context=context, verbose=verbose)
    import xllamacpp

    try:
        return xllamacpp.Server(params)
    except RuntimeError as error:
        raise ServeError(f"llama.cpp could not serve {model_path} (see its log above): {error}") from error


def wait_for_signal() -> None:
    """Block until SIGINT (Ctrl-C) or SIGTERM; the server stops with the process."""
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not stop.wait(1.0):
            pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
