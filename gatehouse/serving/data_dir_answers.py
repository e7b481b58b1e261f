"""
A request the data directory cannot serve now (read-only, full, its database gone) answered with a 503 and the one-line
reason: what the ask, search and index wrappers, the ingest jobs' routes and the knowledge-base routes share.

Usage:
```python
from gatehouse.serving.data_dir_answers import data_dir_unavailable

with data_dir_unavailable():   # a store that met a read-only data directory: 503 instead of its error
    pipeline.run(data)
```
"""

import contextlib
from collections.abc import Iterator

from fastapi import HTTPException

from gatehouse.document_stores.errors import DataDirError, StoreUnavailableError, find_data_dir_error, require_writable_tree
from gatehouse.settings import data_dir


@contextlib.contextmanager
def data_dir_unavailable() -> Iterator[None]:
    """
    Answer a request the data directory cannot serve (read-only, full) with a 503 and the one-line reason, instead of
    the error of the component or store that met it; other errors pass unchanged. A store's database that cannot be
    used is a 503 with `Retry-After` and the caller's line (`StoreUnavailableError.public`: no database user, host,
    port or name); the full line goes to the log, once per outage.

    :raises HTTPException: 503 naming the data directory's problem and what to do.
    """
    try:
        yield
    except HTTPException:
        raise
    except Exception as error:
        cause = find_data_dir_error(error, data_dir())
        if cause is None:
            raise
        if isinstance(cause, StoreUnavailableError):
            from gatehouse.document_stores.postgres_errors import report_outage

            report_outage(cause)
            raise HTTPException(status_code=503, detail=cause.public,
                                headers={"Retry-After": str(cause.retry_after_s)}) from None
        raise HTTPException(status_code=503, detail=str(cause)) from error


def require_writable_data_dir() -> None:
    """
    Refuse a write (an upload, a deletion) before it starts when the data directory cannot be written now (made
    read-only while the server runs), rather than failing halfway.

    :raises HTTPException: 503 naming the read-only data directory and what to do.
    """
    try:
        require_writable_tree(data_dir())
    except DataDirError as error:
        raise HTTPException(status_code=503, detail=str(error)) from error
