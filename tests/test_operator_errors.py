"""
Operator errors of the data directory: read-only or full is one line naming the cause and the fix, exit status 2, no
traceback. (A data directory held by a running server: `test_serve_concurrency.py`.)
"""

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from gatehouse.document_stores.errors import (
    DataDirError,
    data_dir_errors,
    find_data_dir_error,
    require_writable_tree,
)

QUESTION = "How do I rotate an API key?"


def _gatehouse(*args: str, data: Path, prefix: list[str] | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "GATEHOUSE_DATA_DIR": str(data)}
    return subprocess.run([*(prefix or []), sys.executable, "-m", "gatehouse.cli", *args], env=env,
                          capture_output=True, text=True, timeout=600, check=False)


def _assert_one_line(done: subprocess.CompletedProcess, *fragments: str) -> None:
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("gatehouse: ")
    assert "Traceback" not in done.stderr
    for fragment in fragments:
        assert fragment in done.stderr


def _without_root_override() -> list[str]:
    """Root writes anywhere: run the command without the capabilities that bypass file permissions."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: a read-only folder cannot be simulated")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner", "--"]


def test_a_read_only_data_dir_is_one_line_and_status_2(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    data.chmod(0o555)
    try:
        done = _gatehouse("ask", QUESTION, data=data, prefix=_without_root_override())
    finally:
        data.chmod(0o755)
    _assert_one_line(done, f"the data directory {data}", "is read-only", "make it writable",
                     "GATEHOUSE_DATA_DIR")
    assert done.stdout == ""


def _small_disk() -> None:
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-r", "-m", "true"], check=False).returncode:
        pytest.skip("no user namespaces here to mount a small tmpfs as a full disk")


def test_a_full_disk_is_one_line_and_status_2(tmp_path):
    _small_disk()
    data = tmp_path / "data"
    data.mkdir()
    mount = ["unshare", "-r", "-m", "sh", "-c", 'mount -t tmpfs -o size=64k tmpfs "$0" && exec "$@"', str(data)]
    done = _gatehouse("ask", QUESTION, data=data, prefix=mount)  # creates the store (`kb list` only reads one)
    _assert_one_line(done, f"the disk holding the data directory {data}", "has too little free space for the store",
                     "free some space")
    assert done.stdout == ""


def test_a_nearly_full_disk_is_one_line_and_status_2_not_a_bus_error(tmp_path):
    """The store's files are sparse and the engine fills them through memory maps as it opens: 66 MiB free was a
    SIGBUS (exit 135, nothing printed)."""
    _small_disk()
    roomy, small = tmp_path / "roomy", tmp_path / "small"
    assert _gatehouse("ask", QUESTION, data=roomy).returncode == 0  # a store made where there is room
    small.mkdir()
    used = subprocess.run(["du", "-sk", str(roomy)], capture_output=True, text=True, check=True).stdout.split()[0]
    copy_and_run = ('mount -t tmpfs -o size="$1" tmpfs "$0" && cp -a --sparse=always "$2/." "$0/" && shift 2 '
                    '&& exec "$@"')
    mount = ["unshare", "-r", "-m", "sh", "-c", copy_and_run, str(small), f"{int(used) + 66 * 1024}k", str(roomy)]
    done = _gatehouse("ask", QUESTION, data=small, prefix=mount)
    _assert_one_line(done, f"the disk holding the data directory {small}", "has too little free space for the store",
                     "MiB free, it needs", "MiB that its files may still fill", "free some space")
    free = float(done.stderr.split("store: ")[1].split(" MiB free")[0])
    assert 60 < free < 67
    assert done.stdout == ""


def test_sqlite_errors_of_a_read_only_or_full_store_are_data_dir_errors(tmp_path):
    path = tmp_path / "store.sqlite"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE t (body BLOB)")
    read_only = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    with pytest.raises(DataDirError, match=f"the data directory {tmp_path} is read-only"), data_dir_errors(tmp_path):
        read_only.execute("INSERT INTO t VALUES (x'00')")
    full = sqlite3.connect(path)
    full.execute(f"PRAGMA max_page_count = {full.execute('PRAGMA page_count').fetchone()[0]}")
    with pytest.raises(DataDirError, match="is full") as raised, data_dir_errors(tmp_path):
        full.execute("INSERT INTO t VALUES (?)", (b"x" * 100_000,))
    assert isinstance(raised.value.__cause__, sqlite3.OperationalError)


def _immutable(*paths: Path) -> None:
    """Make files and folders immutable (root on a file system with the attribute): even open files take no writes."""
    if os.geteuid() != 0 or shutil.which("chattr") is None:
        pytest.skip("only root can make a folder read-only under a process's open files (chattr +i)")
    if subprocess.run(["chattr", "+i", *map(str, paths)], capture_output=True, check=False).returncode:
        pytest.skip("this file system has no immutable attribute")


def test_a_write_to_an_open_database_whose_folder_turned_read_only_is_a_data_dir_error(tmp_path):
    folder = tmp_path / "store"
    folder.mkdir()
    connection = sqlite3.connect(folder / "store.sqlite", isolation_level=None)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("CREATE TABLE t (body BLOB)")
    wal = folder / "store.sqlite-wal"
    _immutable(folder, wal)  # SQLite then fails to append to the WAL it holds open: "disk I/O error"
    try:
        with pytest.raises(DataDirError, match=f"the data directory {folder} is read-only"), data_dir_errors(folder):
            connection.execute("INSERT INTO t VALUES (x'00')")
    finally:
        subprocess.run(["chattr", "-i", str(folder), str(wal)], check=True)
        connection.close()


def test_the_data_dir_is_checked_for_writes_file_by_file(tmp_path):
    data = tmp_path / "data"
    (data / "store").mkdir(parents=True)
    (data / "store" / "edge_config.json").write_bytes(b"")
    require_writable_tree(data)
    require_writable_tree(tmp_path / "not-yet")  # the stores create it
    (data / "store" / "edge_config.json").chmod(0o444)
    try:
        done = subprocess.run([*_without_root_override(), sys.executable, "-c",
                               "import sys; from pathlib import Path; "
                               "from gatehouse.document_stores.errors import require_writable_tree; "
                               "require_writable_tree(Path(sys.argv[1]))", str(data)],
                              capture_output=True, text=True, timeout=60, check=False)
    finally:
        (data / "store" / "edge_config.json").chmod(0o644)
    assert done.returncode == 1
    assert f"DataDirError: the data directory {data} is read-only (not every file in it can be written)" in done.stderr


def test_other_errors_pass_unchanged(tmp_path):
    with pytest.raises(sqlite3.OperationalError, match="no such table"), data_dir_errors(tmp_path):
        sqlite3.connect(tmp_path / "x.sqlite").execute("SELECT * FROM missing")
    with pytest.raises(FileNotFoundError), data_dir_errors(tmp_path):
        (tmp_path / "missing.txt").read_text()


def test_the_operator_error_is_found_behind_a_pipeline_error(tmp_path):
    try:
        try:
            with data_dir_errors(tmp_path):
                raise OSError(28, "No space left on device")
        except DataDirError as store_error:
            raise RuntimeError("The following component failed to run: writer") from store_error
    except RuntimeError as pipeline_error:
        found = find_data_dir_error(pipeline_error, tmp_path)
    assert isinstance(found, DataDirError) and "is full (No space left on device)" in str(found)
    elsewhere = PermissionError(13, "Permission denied", str(tmp_path.parent / "my-notes.txt"))
    assert find_data_dir_error(elsewhere, tmp_path) is None  # a user's own file is not the data directory
    inside = PermissionError(13, "Permission denied", str(tmp_path / "embedding_cache" / "cache.sqlite"))
    assert "is read-only" in str(find_data_dir_error(inside, tmp_path))
