"""
Operator errors of the stores' data directory: held by another process, read-only, or full.

The stores raise a `DataDirError` whose message is one line naming the cause and the fix; the command line prints it
and exits with status 2 instead of showing the traceback of the library that failed.

Usage:
```python
from gatehouse.document_stores.errors import DataDirError, data_dir_errors, find_data_dir_error

with data_dir_errors(folder):          # an OSError or SQLite error of a read-only or full disk becomes a DataDirError
    connection.execute("INSERT ...")

try:
    pipeline.run(data)
except Exception as error:
    cause = find_data_dir_error(error, folder)  # the operator error behind a PipelineRuntimeError, or None
```
"""

import contextlib
import errno
import logging
import os
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

READ_ONLY_ERRNOS = {errno.EROFS, errno.EACCES, errno.EPERM}
FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
DATA_DIR_FIX = "or point GATEHOUSE_DATA_DIR at another folder"


class DataDirError(RuntimeError):
    """The data directory cannot be used as it is; the message names the cause and the fix in one line."""


class DataDirInUseError(DataDirError):
    """Another process (usually a running `gatehouse serve`) holds the local store of the data directory."""

    def __init__(self, folder: Path) -> None:
        super().__init__(
            f"the data directory {folder} is in use by another process, most likely a running `gatehouse serve`: "
            f"ask through its REST API (POST /ask/run, /retrieve/run, /index/run) or stop it first, {DATA_DIR_FIX}"
        )


class StoreUnavailableError(DataDirError):
    """
    The store's database cannot be used (unreachable, refusing, or lacking an extension): one line naming the server
    (without its password), the cause and the fix, answered like a data directory problem (exit status 2, HTTP 503).

    `public` is what an API caller is told instead (nothing of the database's user, host, port or name), `outage` the
    server it names when the error is one of an outage that ends when the server is used again (else None), and
    `retry_after_s` when a caller may try again (a 503's `Retry-After`).
    """

    retry_after_s = 5

    def __init__(self, message: str, *, public: str = "the store cannot be used right now; try again shortly",
                 outage: str | None = None) -> None:
        super().__init__(message)
        self.public, self.outage = public, outage


def _read_only(folder: Path, detail: str) -> DataDirError:
    return DataDirError(f"the data directory {folder} is read-only ({detail}): make it writable for this user "
                        f"{DATA_DIR_FIX}")


def full_disk(folder: Path, detail: str) -> DataDirError:
    """The error of a data directory whose disk is full."""
    return DataDirError(f"the disk holding the data directory {folder} is full ({detail}): free some space "
                        f"{DATA_DIR_FIX}")


def data_dir_error(error: BaseException, folder: Path) -> DataDirError | None:
    """
    The operator error behind a failed read or write of a store's files, if it is one.

    :param error: What the file system or SQLite raised.
    :param folder: The store's folder, named in the message.
    :returns: A `DataDirError` for a read-only or full disk, else None (a bug or another failure: let it raise).
    """
    if isinstance(error, OSError) and error.errno in READ_ONLY_ERRNOS:
        return _read_only(folder, error.strerror or str(error))
    if isinstance(error, OSError) and error.errno in FULL_ERRNOS:
        return full_disk(folder, error.strerror or str(error))
    if isinstance(error, sqlite3.OperationalError):
        code = (error.sqlite_errorcode or 0) & 0xFF  # the primary result code
        if code in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PERM):
            return _read_only(folder, str(error))
        if code == sqlite3.SQLITE_IOERR and not os.access(folder, os.W_OK):  # made read-only under an open database
            return _read_only(folder, str(error))
        if code == sqlite3.SQLITE_FULL:
            return full_disk(folder, str(error))
    return None


@contextlib.contextmanager
def data_dir_errors(folder: Path) -> Iterator[None]:
    """
    Turn an OSError or SQLite error of a read-only or full disk raised in the block into a `DataDirError`.

    :param folder: The store's folder, named in the message.
    :raises DataDirError: For a read-only or full disk (other errors pass unchanged).
    """
    try:
        yield
    except (OSError, sqlite3.Error) as error:
        translated = data_dir_error(error, folder)
        if translated is None:
            raise
        raise translated from error


def require_writable(folder: Path) -> None:
    """
    Create `folder` if needed and check that files can be created in it, so a store opening on a read-only data
    directory says so when its pipeline loads rather than at its first write.

    :param folder: The store's folder.
    :raises DataDirError: When it cannot be created or written to.
    """
    with data_dir_errors(folder):
        folder.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()


def require_writable_tree(folder: Path) -> None:
    """
    Check that the data directory and every folder and file in it can be written now, so that a write on a data
    directory made read-only while a server runs is refused before it starts rather than failing halfway.

    :param folder: The data directory (nothing to check while it does not exist: the stores create it).
    :raises DataDirError: Naming the first folder or file that cannot be written.
    """
    if not folder.exists():
        return
    for path in (folder, *sorted(folder.rglob("*"))):
        if not os.access(path, os.W_OK):
            logger.warning("%s cannot be written: the data directory is read-only", path)
            raise _read_only(folder, "not every file in it can be written")


def _inside(filename: Any, folder: Path) -> bool:
    return isinstance(filename, str | Path) and Path(filename).resolve().is_relative_to(folder.resolve())


def find_data_dir_error(error: BaseException, folder: Path) -> DataDirError | None:
    """
    The operator error in an exception's chain (`__cause__`, `__context__`; a pipeline wraps what a component raised).

    That is a `DataDirError` a store raised, or else an error of another file of the data directory (a cache) that
    `data_dir_error` recognises: an OSError on a file inside `folder`, or a SQLite error (every SQLite file Gatehouse
    writes is in the data directory).

    :param error: The exception caught.
    :param folder: The data directory, named in the message of an error no store translated.
    :returns: The operator error, or None (not one: let it raise).
    """
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in chain:  # exceptions compare by identity
        chain.append(current)
        current = current.__cause__ or current.__context__
    for link in chain:
        if isinstance(link, DataDirError):
            return link
    for link in chain:
        if isinstance(link, sqlite3.Error) or (isinstance(link, OSError) and _inside(link.filename, folder)):
            translated = data_dir_error(link, folder)
            if translated is not None:
                return translated
    return None
