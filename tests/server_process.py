"""Real server processes on free loopback ports (`gatehouse serve`, llama.cpp) for the end-to-end tests."""

import contextlib
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx


def reachable(url: str | None) -> bool:
    """Whether a server the tester configured (Qdrant, Elasticsearch) answers at `url` (any HTTP status counts)."""
    if not url:
        return False
    try:
        urllib.request.urlopen(url, timeout=3)  # noqa: S310 - a URL the tester configured
        return True
    except urllib.error.HTTPError:
        return True  # the server answered (e.g. 401): it is up
    except (OSError, ValueError):
        return False


def free_port() -> int:
    """A loopback port nobody listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


#: Runs the command line with an audit hook that writes every attempt to reach a host that is not this machine (a name
#: resolved or a socket connected) to the file named by its first argument.
AUDITED = """
import sys
log = sys.argv.pop(1)
LOCAL = ("127.0.0.1", "::1", "localhost", "0.0.0.0", "", None)
def hook(event, args):
    if event in ("socket.connect", "socket.getaddrinfo"):
        address = args[1] if event == "socket.connect" else args
        host = address[0] if isinstance(address, tuple) and address else None
        if isinstance(address, tuple) and host not in LOCAL and not str(host).startswith("127."):
            with open(log, "a") as f:
                f.write(f"{event} {address[:2]}\\n")
sys.addaudithook(hook)
from gatehouse.cli import main
sys.exit(main(sys.argv[1:]))
"""


@contextlib.contextmanager
def running_server(manifest: Path, *, env: dict[str, str], workdir: Path, pipelines: int,
                   audit: Path | None = None, prefix: list[str] | None = None) -> Iterator[str]:
    """
    Run `gatehouse serve` with a manifest until the block ends.

    :param manifest: The serving manifest.
    :param env: The server's environment (its data directory, its key variables).
    :param workdir: The server's working directory; its log is `server.log` there.
    :param pipelines: How many pipelines are deployed once the server has started.
    :param audit: A file that gets a line per attempt the server makes to reach another machine.
    :param prefix: A command the server runs under (`setpriv ... --`).
    :returns: (yields) The server's base URL.
    """
    port = free_port()
    log_path = workdir / "server.log"
    start = [sys.executable, "-c", AUDITED, str(audit)] if audit else [sys.executable, "-m", "gatehouse.cli"]
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [*(prefix or []), *start, "serve", "--port", str(port), "--manifest", str(manifest)],
            env=env, stdout=log, stderr=subprocess.STDOUT, cwd=workdir,
        )
        url = f"http://127.0.0.1:{port}"
        with serving(process, lambda: len(httpx.get(f"{url}/status", timeout=2).json()["pipelines"]) == pipelines,
                     seconds=180, log=log_path):
            yield url


@contextlib.contextmanager
def serving(process: subprocess.Popen, ready: Callable[[], bool], *, seconds: float, log: Path | None = None
            ) -> Iterator[None]:
    """
    Wait until `ready()` is true (an HTTP error counts as not yet), run the block, then stop the process.

    :param process: The started server process.
    :param ready: Probes the server.
    :param seconds: How long it may take to start.
    :param log: The server's log, shown if it exits early.
    """
    try:
        deadline = time.monotonic() + seconds
        while True:
            assert process.poll() is None, log.read_text() if log else "the server exited"
            try:
                if ready():
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, f"the server did not start in {seconds:.0f} s"
            time.sleep(0.5)
        yield
    finally:
        process.terminate()
        process.wait(timeout=30)
