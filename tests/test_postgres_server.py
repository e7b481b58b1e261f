"""The test PostgreSQL cluster (tests/postgres_server.py): a primary with the extensions, a streaming hot standby."""

import os

import psycopg
import pytest


def test_primary_has_the_extensions_and_runs_unprivileged(postgres):
    with psycopg.connect(postgres.primary_url) as connection:
        extensions = dict(connection.execute("SELECT extname, extversion FROM pg_extension").fetchall())
        assert {"vector", "pg_trgm"} <= set(extensions)
        assert connection.execute("SELECT pg_is_in_recovery()").fetchone() == (False,)
        assert connection.execute("SELECT inet_server_addr()::text").fetchone() == ("127.0.0.1/32",)
        # read while the connection is open: its server process exits when the connection closes
        owner = os.stat(f"/proc/{connection.info.backend_pid}").st_uid
    assert owner != 0  # PostgreSQL runs as an unprivileged user, also when the tests run as root


def test_standby_streams_the_primarys_writes_and_refuses_its_own(postgres):
    with psycopg.connect(postgres.primary_url, autocommit=True) as connection:
        connection.execute("CREATE TABLE streamed (id int PRIMARY KEY, v vector(3))")
        connection.execute("INSERT INTO streamed VALUES (1, '[1,2,3]')")
    postgres.wait_for_standby()
    with psycopg.connect(postgres.standby_url, autocommit=True) as connection:
        assert connection.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
        assert connection.execute("SELECT v::text FROM streamed").fetchall() == [("[1,2,3]",)]
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            connection.execute("INSERT INTO streamed VALUES (2, '[0,0,0]')")
    with psycopg.connect(postgres.primary_url, autocommit=True) as connection:
        connection.execute("DROP TABLE streamed")


def test_start_up_steps_are_timed(postgres):
    steps = ("initdb", "primary_start", "database_and_extensions", "pg_basebackup", "standby_start")
    assert list(postgres.timings) == [*steps, "total"]
    assert postgres.timings["total"] == pytest.approx(sum(postgres.timings[step] for step in steps), abs=0.01)
