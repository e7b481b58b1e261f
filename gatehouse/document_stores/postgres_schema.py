"""
The schema version of a PostgreSQL store's tables, kept in the database (as `schema` in the chunk table's comment,
with the settings the table was created with), and the migrations from earlier versions, run in place when a store
opens the table.

| version | what changed |
| --- | --- |
| 1 | BM25 from postings (`<table>_postings`, `_terms`, `_totals`): the table's comment says `"bm25": "postings"` |
| 2 | each term's row carries a version that every change of its postings moves (`_terms.version`), for the postings each process caches: `"bm25": "postings-versioned"` |

A table written before the version was kept is read as the version its layout is. A migration runs in one
transaction under the table's advisory lock, so servers starting together migrate once and a failed migration changes
nothing. A table whose layout cannot be migrated in place (the first layouts, BM25 in tsvectors), or that a newer
Gatehouse wrote, is refused in one line naming what to run.

Usage:
```python
from gatehouse.document_stores.postgres_schema import SCHEMA_VERSION, migrate

migrate(connection, "gatehouse_chunks")   # before the store checks the table's settings
```
"""

import json
import logging
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from gatehouse.document_stores.errors import StoreUnavailableError

logger = logging.getLogger("gatehouse.document_stores.postgres")

SCHEMA_VERSION = 2
#: The BM25 layout named in the comments of the tables of each version.
LAYOUTS = {1: "postings", 2: "postings-versioned"}
CALLER = "the server's database tables need an operator's upgrade"


def stored_settings(connection: psycopg.Connection, table: str) -> dict[str, Any] | None:
    """The settings kept as the table's comment (None when it has none Gatehouse wrote)."""
    comment = connection.execute("SELECT obj_description(%s::regclass, 'pg_class')", (table,)).fetchone()[0]
    try:
        stored = json.loads(comment or "")
    except ValueError:
        return None
    return stored if isinstance(stored, dict) else None


def schema_of(stored: dict[str, Any]) -> int:
    """The schema version of a table's settings: as kept, else the version of its BM25 layout (0: an earlier one)."""
    if isinstance(stored.get("schema"), int):
        return stored["schema"]
    return next((version for version, layout in LAYOUTS.items() if stored.get("bm25") == layout), 0)


def _add_term_versions(connection: psycopg.Connection, table: str) -> None:
    """1 -> 2: a version per term's row, 0 for every term (no process holds postings read at another)."""
    connection.execute(sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS version bigint NOT NULL DEFAULT 0").format(
        sql.Identifier(f"{table}_terms")))


#: The migration from each version to the next.
MIGRATIONS: dict[int, Callable[[psycopg.Connection, str], None]] = {1: _add_term_versions}


def migrate(connection: psycopg.Connection, table: str) -> None:
    """
    Bring the tables of `table` (which exists) to `SCHEMA_VERSION` in place, recording it; nothing to do at it.

    :param connection: An autocommit connection to the primary.
    :raises StoreUnavailableError: One line naming what to run, for a table a newer Gatehouse wrote or whose layout
        cannot be migrated in place.
    """
    stored = stored_settings(connection, table)
    if stored is None or stored.get("schema") == SCHEMA_VERSION:
        return  # not Gatehouse's (the store's check says so), or current
    with connection.transaction():
        connection.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (table,))
        stored = stored_settings(connection, table) or {}  # another server may have migrated meanwhile
        version = schema_of(stored)
        if version > SCHEMA_VERSION:
            raise StoreUnavailableError(
                f"the PostgreSQL table {table} has schema version {version}, newer than this Gatehouse's "
                f"{SCHEMA_VERSION}: run pip install --upgrade 'gatehouse[postgres]' on every machine that uses it",
                public=CALLER)
        if version == 0:
            raise StoreUnavailableError(
                f"the PostgreSQL table {table} has an earlier layout than schema version 1 (BM25 "
                f"{stored.get('bm25') or 'in tsvectors'}), which cannot be migrated in place: run gatehouse ingest "
                "with postgres: {table: <a new name>} in the pipelines to write a new table, then drop this one",
                public=CALLER)
        for step in range(version, SCHEMA_VERSION):
            MIGRATIONS[step](connection, table)
        updated = {**stored, "schema": SCHEMA_VERSION, "bm25": LAYOUTS[SCHEMA_VERSION]}
        connection.execute(sql.SQL("COMMENT ON TABLE {} IS {}").format(sql.Identifier(table),
                                                                       sql.Literal(json.dumps(updated))))
    if version < SCHEMA_VERSION:
        logger.info("the PostgreSQL table %s was migrated from schema version %d to %d", table, version,
                    SCHEMA_VERSION)
