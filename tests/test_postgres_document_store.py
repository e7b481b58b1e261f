"""PostgresDocumentStore against a real PostgreSQL primary and hot standby (the `postgres` fixture), no mocks."""

import json
import logging
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
import traceback
import uuid

import numpy as np
import psycopg
import pytest
from haystack import Document
from haystack.document_stores.errors import DuplicateDocumentError
from haystack.document_stores.types import DuplicatePolicy
from psycopg import sql

from gatehouse.document_stores.edge_document_store import EdgeDocumentStore
from store_contract import check_replace_delete_and_counters, check_write_search_and_delete, chunk
from gatehouse.document_stores.errors import DataDirError, StoreUnavailableError
from gatehouse.document_stores.postgres_document_store import PostgresDocumentStore
from gatehouse.document_stores.postgres_pool import PoolExhaustedError

DIM = 3


@pytest.fixture
def table():
    return f"test_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def store(postgres, table):
    opened = PostgresDocumentStore(url=postgres.primary_url, table=table, embedding_dim=DIM)
    yield opened
    opened.close()


def test_init_validates_its_settings(postgres, table):
    with pytest.raises(ValueError, match="Bad table name"):
        PostgresDocumentStore(url=postgres.primary_url, table="Chunks; DROP TABLE x")
    with pytest.raises(ValueError, match="Bad indexed_fields"):
        PostgresDocumentStore(url=postgres.primary_url, table=table, indexed_fields=["meta.title'--"])
    with pytest.raises(ValueError, match="needs GATEHOUSE_POSTGRES_URL"):
        PostgresDocumentStore(table=table)
    with pytest.raises(ValueError, match="from 1 to 2000 \\(pgvector's HNSW index\\), got 4096"):
        PostgresDocumentStore(url=postgres.primary_url, table=table, embedding_dim=4096)
    with pytest.raises(ValueError, match="pool_size must be a whole number of at least 1, got 0"):
        PostgresDocumentStore(url=postgres.primary_url, table=table, pool_size=0)
    with pytest.raises(ValueError, match="pool_timeout_s must be a positive number of seconds, got -1"):
        PostgresDocumentStore(url=postgres.primary_url, table=table, pool_timeout_s=-1)


def test_init_from_the_environment_and_to_dict(postgres, table, monkeypatch):
    monkeypatch.setenv("GATEHOUSE_POSTGRES_URL", postgres.primary_url)
    monkeypatch.setenv("GATEHOUSE_POSTGRES_MAX_LAG_S", "0.25")
    store = PostgresDocumentStore(table=table, embedding_dim=DIM)
    assert store._max_lag_s == 0.25
    data = store.to_dict()
    assert data["type"] == "gatehouse.document_stores.postgres_document_store.PostgresDocumentStore"
    assert data["init_parameters"] == {"url": None, "table": table, "embedding_dim": DIM,
                                       "indexed_fields": ["meta.title", "meta.section", "content"],
                                       "read_url": None, "max_lag_s": None, "pool_size": None,
                                       "pool_timeout_s": None}
    assert PostgresDocumentStore.from_dict(data).count_documents() == 0
    assert PostgresDocumentStore(table=table, max_lag_s=2)._max_lag_s == 2.0  # YAML's wins over the environment
    monkeypatch.setenv("GATEHOUSE_POSTGRES_MAX_LAG_S", "soon")
    with pytest.raises(ValueError, match="GATEHOUSE_POSTGRES_MAX_LAG_S must be a number of seconds of at least 0, "
                                         "got 'soon'"):
        PostgresDocumentStore(table=table)


def test_a_table_of_other_settings_is_refused_naming_them(store, postgres, table):
    with pytest.raises(ValueError, match=f"table {table} was created with other settings \\(embedding_dim {DIM}\\)"):
        PostgresDocumentStore(url=postgres.primary_url, table=table, embedding_dim=8)


def test_write_search_and_filter_by_tenant_and_kb(store):
    store.write_documents([
        chunk("Rotate API keys from the console.", doc_id="faq/keys.md"),
        chunk("Invoices are sent monthly.", kb="billing", doc_id="billing/inv.md", vector=(0.0, 1.0, 0.0),
              title="Billing"),
        chunk("Acme rotates keys weekly.", tenant="acme", doc_id="acme/faq/keys.md"),
    ])
    public = {"field": "meta.tenant", "operator": "==", "value": "public"}
    words = store.bm25_retrieval("How do I go rotating consoles?", filters=public, top_k=5)  # any word, stemmed
    assert [d.content for d in words] == ["Rotate API keys from the console."]
    assert words[0].score > 0
    grams = store.bm25_retrieval("rotaton", filters=public, top_k=5, analysis="ngrams")  # a misspelling still matches
    assert [d.content for d in grams] == ["Rotate API keys from the console."]
    assert store.bm25_retrieval("billing", filters=public)[0].meta["kb"] == "billing"  # the title is indexed too
    dense = store.embedding_retrieval([0.0, 1.0, 0.0], filters=public, top_k=1)
    assert dense[0].meta["kb"] == "billing" and dense[0].score == pytest.approx(1.0)
    both = {"operator": "AND", "conditions": [{"field": "meta.tenant", "operator": "in", "value": ["acme"]},
                                               {"field": "meta.kb", "operator": "!=", "value": "billing"}]}
    assert [d.content for d in store.filter_documents(both)] == ["Acme rotates keys weekly."]
    tenant_kb = {"operator": "AND", "conditions": [{"field": "meta.tenant", "operator": "in", "value": ["acme"]},
                                                    {"field": "meta.kb", "operator": "in", "value": ["faq"]}]}
    assert [d.content for d in store.embedding_retrieval([1.0, 0.0, 0.0], filters=tenant_kb, top_k=5)] == [
        "Acme rotates keys weekly."]
    assert [d.content for d in store.bm25_retrieval("rotate keys", filters=tenant_kb)] == ["Acme rotates keys weekly."]
    assert store.metadata_counts(["tenant", "kb"]) == {("public", "faq"): 1, ("public", "billing"): 1,
                                                       ("acme", "faq"): 1}
    assert store.bm25_retrieval("the of and", top_k=5) == []  # stopwords only
    assert store.bm25_retrieval("?!", top_k=5) == []
    assert store.embedding_retrieval([1.0, 0.0, 0.0], top_k=0) == []


def test_a_vector_of_another_size_is_refused(store):
    with pytest.raises(ValueError, match="The vector has 2 values; the store holds vectors of 3"):
        store.embedding_retrieval([1.0, 0.0])
    with pytest.raises(ValueError, match="The vector has 4 values"):
        store.write_documents([chunk("x", vector=(1.0, 0.0, 0.0, 0.0))])


def test_duplicate_policies(store):
    document = chunk("One.")
    store.write_documents([document])
    with pytest.raises(DuplicateDocumentError):
        store.write_documents([document, chunk("Two.")])
    assert store.count_documents() == 1  # the failed write left nothing
    assert store.write_documents([document], policy=DuplicatePolicy.SKIP) == 0
    assert store.write_documents([document], policy=DuplicatePolicy.OVERWRITE) == 1
    assert store.count_documents() == 1


def test_replace_delete_and_counters(store):
    check_replace_delete_and_counters(store)


def test_write_search_and_delete(store):
    check_write_search_and_delete(store)


def test_delete_documents_moves_only_their_kbs_counters(store):
    store.write_documents([chunk("Public.", doc_id="p"), chunk("Acme.", tenant="acme", doc_id="a")])
    before = store.kb_generations()
    acme = store.filter_documents({"field": "meta.tenant", "operator": "==", "value": "acme"})
    store.delete_documents([acme[0].id, "no-such-id"])
    after = store.kb_generations()
    assert after[("acme", "faq")] > before[("acme", "faq")] and after[("public", "faq")] == before[("public", "faq")]
    assert [d.content for d in store.filter_documents()] == ["Public."]


def test_sentence_vectors_give_the_best_sentence_score(store):
    first, second = chunk("Keys. Invoices."), chunk("Plain.", doc_id="faq/b.md", vector=(0.0, 0.0, 1.0))
    store.replace_documents("faq/a.md", [first], sentence_embeddings={first.id: [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]})
    store.replace_documents("faq/b.md", [second])
    scores = store.similarities([0.0, 1.0, 0.0], [first.id, second.id, "gone"])
    assert scores[first.id] == pytest.approx((0.0, 1.0))
    assert scores[second.id] == (pytest.approx(0.0), None)
    assert set(scores) == {first.id, second.id}


def test_a_document_replaced_concurrently_is_never_seen_half_written(store, postgres, table):
    """Two processes replace one document 30 times each while this one reads: every read sees one whole version."""
    writer = textwrap.dedent(f"""
        import sys
        from haystack import Document
        from gatehouse.document_stores.postgres_document_store import PostgresDocumentStore
        store = PostgresDocumentStore(url={postgres.primary_url!r}, table={table!r}, embedding_dim={DIM})
        for version in range(30):
            chunks = [Document(content=f"{{sys.argv[1]}} v{{version}} part {{part}}", embedding=[1.0, 0.0, 0.0],
                               meta={{"doc_id": "d", "kb": "faq", "tenant": "public"}}) for part in range(5)]
            store.replace_documents("d", chunks)
    """)
    processes = [subprocess.Popen([sys.executable, "-c", writer, name]) for name in ("a", "b")]
    seen = set()
    while any(process.poll() is None for process in processes):
        versions = {d.content.rsplit(" part ", 1)[0] for d in store.filter_documents()}
        assert len(versions) <= 1, versions
        seen |= versions
    assert [process.returncode for process in processes] == [0, 0]
    final = store.filter_documents()
    assert len(final) == 5 and len({d.content.rsplit(" part ", 1)[0] for d in final}) == 1
    assert len(seen) > 1


def test_the_standby_reads_what_the_primary_wrote_and_refuses_writes(store, postgres, table):
    store.write_documents([chunk("Rotate API keys from the console.")])
    postgres.wait_for_standby()
    reader = PostgresDocumentStore(url=postgres.standby_url, table=table, embedding_dim=DIM)
    assert [d.content for d in reader.bm25_retrieval("rotate")] == ["Rotate API keys from the console."]
    assert reader.embedding_retrieval([1.0, 0.0, 0.0], top_k=1)[0].score == pytest.approx(1.0)
    with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        reader.write_documents([chunk("Another.")])
    reader.close()


def test_an_unreachable_server_is_one_clear_line_without_the_password(table):
    from server_process import free_port

    url = f"postgresql://gatehouse:s3cret@127.0.0.1:{free_port()}/gatehouse"
    with pytest.raises(StoreUnavailableError) as raised:
        PostgresDocumentStore(url=url, table=table)
    message = str(raised.value)
    assert "s3cret" not in message and "\n" not in message
    assert message.startswith(f"the PostgreSQL store at {url.replace('s3cret', '***')} cannot be used (connecting: ")
    assert message.endswith("start the server or point GATEHOUSE_POSTGRES_URL at one that runs")
    assert isinstance(raised.value, DataDirError)  # one line and exit status 2 in the CLI, a 503 when serving
    key_value = f"host=127.0.0.1 port={free_port()} user=gatehouse password=s3cret dbname=gatehouse"
    with pytest.raises(StoreUnavailableError, match="password=\\*\\*\\* dbname") as raised:
        PostgresDocumentStore(url=key_value, table=table)
    assert "s3cret" not in str(raised.value)


#: Passwords a URL's parsers cut (unencoded @ / ? # : or a space) or refuse (a bad percent token), and the URLs libpq
#: quotes whole in its error (a misspelt scheme, an unclosed IPv6 bracket, an unterminated quote).
PASSWORDS = ["Zq9@Vw4Xk2", "Zq9/Vw4Xk2", "Zq9%zzVw4Xk2", "Zq9 Vw4Xk2", "Zq9:Vw@4X@k2Yp", "Zq9?Vw4#Xk2"]
WHOLE_URLS = ["postgresq://gatehouse:Zq9Vw4Xk2@127.0.0.1:{port}/gatehouse",
              "postgresql://gatehouse:Zq9Vw4Xk2@[::1/gatehouse",
              "host=127.0.0.1 port={port} user=gatehouse password='Zq9 Vw4Xk2 dbname=gatehouse"]


def password_cases(port: int) -> list[tuple[str, str]]:
    """(URL, password) for each case, the server at `port` (closed)."""
    return ([(f"postgresql://gatehouse:{password}@127.0.0.1:{port}/gatehouse", password) for password in PASSWORDS]
            + [(url.format(port=port), "Zq9Vw4Xk2") for url in WHOLE_URLS])


def leaked(text: str, password: str) -> list[str]:
    """The password, or the pieces of it (3 characters or more) a parser cut it into, found in `text`."""
    pieces = [password, *re.split(r"[@/?#: %]", password)]
    return [piece for piece in pieces if len(piece) >= 3 and piece in text]


def test_a_malformed_urls_password_is_in_no_error_or_log(postgres, table, caplog):
    """Issue 40, defect 5: what libpq says of a URL it could not parse or use is scrubbed, not only our own text."""
    from server_process import free_port

    caplog.set_level(logging.DEBUG)
    for url, password in password_cases(free_port()):
        with pytest.raises(StoreUnavailableError) as raised:
            PostgresDocumentStore(url=url, table=table)
        shown = "".join(traceback.format_exception(raised.value))  # what a logged traceback would show
        assert not leaked(shown, password), (url, shown)
        assert "\n" not in str(raised.value) and "GATEHOUSE_POSTGRES_URL" in str(raised.value)
        assert not leaked(raised.value.public, password) and "127.0.0.1" not in raised.value.public
    writer = PostgresDocumentStore(url=postgres.primary_url, table=table, embedding_dim=DIM)
    writer.write_documents([chunk("Rotate API keys from the console.")])
    for url, password in password_cases(free_port()):  # a read URL's error is a warning; the search reads the primary
        reader = PostgresDocumentStore(url=postgres.primary_url, table=table, read_url=url)
        assert [d.content for d in reader.bm25_retrieval("rotate")] == ["Rotate API keys from the console."]
    assert "the PostgreSQL read URL" in caplog.text
    for _, password in password_cases(0):
        assert not leaked(caplog.text, password)


def test_a_malformed_urls_password_is_not_printed_by_the_cli(tmp_path, monkeypatch, capsys):
    from gatehouse.cli import main
    from server_process import free_port

    monkeypatch.setenv("GATEHOUSE_DATA_DIR", str(tmp_path / "data"))
    for url, password in password_cases(free_port()):
        monkeypatch.setenv("GATEHOUSE_POSTGRES_URL", url)
        assert main(["kb", "list"]) == 2
        printed = capsys.readouterr()
        assert printed.out == "" and printed.err.startswith("gatehouse: the PostgreSQL store at "), printed
        assert printed.err.count("\n") == 1 and not leaked(printed.err, password), printed.err


def test_a_standby_without_the_table_says_so_in_one_line(postgres, table):
    with pytest.raises(StoreUnavailableError, match="setting up its tables: cannot execute CREATE TABLE in a "
                                                    "read-only transaction"):
        PostgresDocumentStore(url=postgres.standby_url, table=table)


def test_a_lost_connection_is_one_clear_error_then_the_store_reconnects(store, postgres):
    store.write_documents([chunk("Rotate API keys from the console.")])
    with psycopg.connect(postgres.primary_url, autocommit=True) as admin:  # as a server restart would
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'gatehouse' "
                      "AND pid <> pg_backend_pid()")
    with pytest.raises(StoreUnavailableError, match="cannot be used \\(searching: "):
        store.bm25_retrieval("rotate")
    assert [d.content for d in store.bm25_retrieval("rotate")] == ["Rotate API keys from the console."]


def test_bm25_ranks_as_the_local_shard_does(store, tmp_path):
    texts = ["Rotate API keys from the console.", "Keys rotate every month; rotating them twice is refused.",
             "Invoices are sent monthly and refunds take five days.", "Single sign-on uses SAML or OIDC.",
             "A refund of an annual plan is prorated.", "The console lists every key with its last use."]
    documents = [chunk(text, doc_id=f"d{number}", title="Account") for number, text in enumerate(texts)]
    local = EdgeDocumentStore(path=str(tmp_path / "store"), embedding_dim=DIM)
    local.write_documents(documents)
    store.write_documents(documents)
    for query in ("rotate keys", "monthly refunds", "singel sign-on", "the console key"):
        for analysis in ("words", "ngrams"):
            expected = local.bm25_retrieval(query, top_k=10, analysis=analysis)
            found = store.bm25_retrieval(query, top_k=10, analysis=analysis)
            assert [d.id for d in found] == [d.id for d in expected], (query, analysis)
            assert [d.score for d in found] == pytest.approx([d.score for d in expected], rel=1e-3), (query, analysis)
    local.close()


def _backends(postgres, port: int, database: str, application_name: str | None = None) -> int:
    """How many server processes serve `database` on the server at `port` (from another database's connection)."""
    named = f" AND application_name = '{application_name}'" if application_name else ""
    return int(postgres.sql(port, f"SELECT count(*) FROM pg_stat_activity WHERE datname = '{database}'{named}",
                            database="postgres"))


def _no_backends_left(postgres, port: int, database: str) -> None:
    """Wait until the set-up connections the stores closed have left the server (it ends them asynchronously)."""
    deadline = time.monotonic() + 30
    while _backends(postgres, port, database):
        assert time.monotonic() < deadline, "set-up connections are still open after 30 s"
        time.sleep(0.05)


def test_many_threads_over_several_store_objects_share_one_bounded_pool(postgres):
    """40 threads search through four store objects (two tables): never more than pool_size connections, all answer."""
    url, size = postgres.new_database(), 4
    database = url.rsplit("/", 1)[1]
    tables = [f"test_{uuid.uuid4().hex[:12]}" for _ in range(2)]
    stores = [PostgresDocumentStore(url=url, table=tables[number % 2], embedding_dim=DIM, pool_size=size)
              for number in range(4)]
    for table_store in stores[:2]:
        table_store.write_documents([chunk("Rotate API keys from the console.", doc_id="keys"),
                                     chunk("Refunds take five days.", doc_id="refunds", vector=(0.0, 1.0, 0.0))])
    stores[0].close()  # the pool's idle connections: the count below starts from none
    _no_backends_left(postgres, postgres.primary_port, database)
    peak, done, failures = [0], threading.Event(), []

    def watch() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _backends(postgres, postgres.primary_port, database))

    def search(number: int) -> None:
        store = stores[number % len(stores)]
        try:
            for _ in range(5):
                assert [d.content for d in store.bm25_retrieval("rotating keys", top_k=1)] == [
                    "Rotate API keys from the console."]
                assert store.bm25_retrieval("refnds", top_k=1, analysis="ngrams")[0].meta["doc_id"] == "refunds"
                assert store.embedding_retrieval([0.0, 1.0, 0.0], top_k=1)[0].meta["doc_id"] == "refunds"
                assert set(store.kb_generations()) == {("public", "faq")}
        except Exception as error:  # reported below with the thread's number
            failures.append((number, repr(error)))

    watcher = threading.Thread(target=watch)
    watcher.start()
    threads = [threading.Thread(target=search, args=(number,)) for number in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    watcher.join()
    assert failures == []
    assert 1 <= peak[0] <= size, peak[0]
    assert stores[0].pool is stores[3].pool and stores[0].pool.peak <= size
    assert _backends(postgres, postgres.primary_port, database) <= size  # the idle ones stay open for the next calls


def test_an_exhausted_pool_waits_then_fails_in_one_line(postgres, table):
    url = postgres.new_database()
    store = PostgresDocumentStore(url=url, table=table, embedding_dim=DIM, pool_size=1, pool_timeout_s=0.2)
    store.write_documents([chunk("Rotate API keys from the console.")])
    with store.pool.connection(timeout=10, doing="holding the only connection"):
        with pytest.raises(PoolExhaustedError) as raised:
            store.bm25_retrieval("rotate")
    message = str(raised.value)
    assert message == (f"the PostgreSQL store at {url} is busy (searching): this process's 1 pooled connection(s) "
                       "stayed in use for 0.2 s; raise postgres.pool_size or GATEHOUSE_POSTGRES_POOL_SIZE (processes "
                       "× pool size must stay under the server's max_connections) or postgres.pool_timeout_s")
    assert isinstance(raised.value, StoreUnavailableError) and isinstance(raised.value, DataDirError)  # a 503
    assert [d.content for d in store.bm25_retrieval("rotate")] == ["Rotate API keys from the console."]
    larger = PostgresDocumentStore(url=url, table=table, embedding_dim=DIM, pool_size=2, pool_timeout_s=0.2)
    assert larger.pool is store.pool and store.pool.size == 2  # the largest size asked for in the process wins
    with store.pool.connection(timeout=10, doing="holding one connection"):
        assert [d.content for d in store.bm25_retrieval("rotate")] == ["Rotate API keys from the console."]


def test_a_restart_fails_one_call_then_the_pool_reconnects(postgres, table):
    """Every idle pooled connection died with the server's backends: one call fails, the next opens a new one."""
    url = postgres.new_database()
    database = url.rsplit("/", 1)[1]
    store = PostgresDocumentStore(url=url, table=table, embedding_dim=DIM, pool_size=4)
    store.write_documents([chunk("Rotate API keys from the console.")])
    held = [store.pool.get(10, "test") for _ in range(3)]
    for connection in held:
        store.pool.put(connection)
    postgres.sql(postgres.primary_port, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
                 f"datname = '{database}'", database="postgres")
    with pytest.raises(StoreUnavailableError, match="cannot be used \\(searching: ") as raised:
        store.bm25_retrieval("rotate")
    assert "\n" not in str(raised.value)
    for _ in range(3):
        assert [d.content for d in store.bm25_retrieval("rotate")] == ["Rotate API keys from the console."]


def test_searches_on_the_read_url_share_a_bounded_pool_too(postgres, table):
    url = postgres.new_database()
    database = url.rsplit("/", 1)[1]
    read_url = url.replace(f":{postgres.primary_port}/", f":{postgres.standby_port}/")
    writer = PostgresDocumentStore(url=url, table=table, embedding_dim=DIM)
    writer.write_documents([chunk("Rotate API keys from the console.")])
    postgres.wait_for_standby()
    stores = [PostgresDocumentStore(url=url, table=table, embedding_dim=DIM, read_url=read_url, pool_size=2)
              for _ in range(3)]
    results: list[list[str]] = []

    def search(store: PostgresDocumentStore) -> None:
        results.append([d.content for d in store.bm25_retrieval("rotate")])

    threads = [threading.Thread(target=search, args=(stores[number % 3],)) for number in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [["Rotate API keys from the console."]] * 12
    assert 1 <= _backends(postgres, postgres.standby_port, database, "gatehouse-reader") <= 2
    assert stores[0]._reader_pool() is stores[2]._reader_pool() and stores[0]._reader_pool().peak <= 2


def _ranked(store, query, analysis, filters=None):
    """The BM25 hits as (id, score), equal scores (to 6 digits) in id order: the stores break ties differently."""
    hits = store.bm25_retrieval(query, filters=filters, top_k=20, analysis=analysis)
    return sorted(((d.id, d.score) for d in hits), key=lambda hit: (-round(hit[1], 6), hit[0]))


def _totals(store: PostgresDocumentStore) -> dict:
    """The store's BM25 totals row (read in a transaction of its own)."""
    with store._transaction("reading") as cursor:
        return store._lock_totals(cursor)


def test_bm25_stays_the_local_shards_through_writes_drift_replacements_and_deletions(store, tmp_path):
    """
    Gap 2 of the notes: the same chunks written the same way to both stores rank alike (scores to 1e-5, ties in id
    order) and are encoded with the same average lengths, through a first write, a drift that re-encodes, a
    replacement and deletions. The shard's IDF keeps counting deleted chunks until its engine compacts them, so after
    a deletion PostgreSQL is compared with a new shard holding the chunks that remain.
    """
    short = ["Rotate API keys.", "Invoices monthly.", "Refunds take days.", "SAML sign-on.", "Keys expire."]
    long = ["Rotating an API key from the console revokes the old key after a grace period of one day; the new key "
            "is shown once, so store it in a secret manager before closing the dialog.",
            "Monthly invoices list every seat and every add-on; annual plans are invoiced once, and a refund of an "
            "annual plan is prorated to the unused months of the term.",
            "Single sign-on with SAML or OIDC needs an identity provider that sends the user's e-mail address; "
            "groups map to roles when the provider sends them as an attribute.",
            "Audit logs keep every key rotation, every sign-in and every change of a role for a year, and can be "
            "exported as JSON lines to a storage bucket the account owns."]
    queries = ["rotate api keys", "refund annual plan", "singel sign-on with saml", "the console key", "audit log"]
    filters = {"field": "meta.kb", "operator": "==", "value": "faq"}

    def same(local: EdgeDocumentStore) -> None:
        for query in queries:
            for analysis in ("words", "ngrams"):
                for where in (None, filters):
                    expected, found = _ranked(local, query, analysis, where), _ranked(store, query, analysis, where)
                    assert [i for i, _ in found] == [i for i, _ in expected], (query, analysis, where)
                    assert [s for _, s in found] == pytest.approx([s for _, s in expected], rel=1e-5)
        totals = _totals(store)
        assert totals["avg"] == pytest.approx(local._shard.avg_len, rel=1e-12)  # the same encoding averages

    local = EdgeDocumentStore(path=str(tmp_path / "store"), embedding_dim=DIM)
    first = [chunk(text, doc_id=f"s{n}", kb="faq" if n % 2 else "billing") for n, text in enumerate(short)]
    for written in (local, store):
        written.write_documents(first)  # fixes the averages (short chunks)
    same(local)
    averages = _totals(store)["avg"]
    second = [chunk(text, doc_id=f"l{n}") for n, text in enumerate(long)]
    for written in (local, store):
        written.write_documents(second)  # the average drifts: every weight is re-encoded
    assert _totals(store)["avg"]["words"] > 1.5 * averages["words"]
    same(local)
    local.close()

    replacement = [chunk("Keys rotate weekly now; the console shows the next rotation.", doc_id="l0")]
    store.replace_documents("l0", replacement)
    store.delete_documents([first[1].id])
    store.delete_by_filter({"field": "meta.kb", "operator": "==", "value": "billing"})
    remaining = [doc for doc in first if doc.meta["kb"] == "faq" and doc.id != first[1].id] + second[1:] + replacement
    assert sorted(doc.id for doc in store.filter_documents()) == sorted(doc.id for doc in remaining)
    fresh = EdgeDocumentStore(path=str(tmp_path / "fresh"), embedding_dim=DIM)
    fresh.write_documents(remaining)
    same(fresh)  # PostgreSQL's statistics are those of the chunks it holds (its averages re-encoded on the way)
    fresh.close()


def test_the_document_frequencies_follow_every_write(store):
    store.write_documents([chunk("alpha beta", doc_id="a", title=""), chunk("alpha gamma", doc_id="b", title="")])
    store.replace_documents("b", [chunk("gamma delta", doc_id="b", title="")])
    with store._transaction("test") as cursor:
        rows = cursor.execute(f"SELECT term, df FROM {store.table}_terms WHERE analysis = 0 AND df > 0").fetchall()
        counted = cursor.execute(f"SELECT term, count(*) FROM {store.table}_postings WHERE analysis = 0 "
                                 "GROUP BY term").fetchall()
        totals = cursor.execute(f"SELECT chunks, words FROM {store.table}_totals").fetchone()
    assert sorted(rows) == sorted(counted) and len(rows) == 4  # alpha 1, beta 1, gamma 1, delta 1
    assert totals == (2, 4)
    store.delete_by_filter({"field": "meta.doc_id", "operator": "in", "value": ["a", "b"]})
    with store._transaction("test") as cursor:
        assert cursor.execute(f"SELECT count(*) FROM {store.table}_terms WHERE df <> 0").fetchone()[0] == 0
        assert cursor.execute(f"SELECT count(*) FROM {store.table}_postings").fetchone()[0] == 0
        assert cursor.execute(f"SELECT chunks, words, ngrams FROM {store.table}_totals").fetchone() == (0, 0, 0)


def test_ranked_ids_match_the_single_searches_and_the_cached_postings_follow_writes(store, tmp_path):
    import gatehouse.document_stores.postgres_document_store as module

    texts = [f"Report {n}: key rotation {'and refunds ' * (n % 3)}for team {n % 4}, region {n % 5}."
             for n in range(40)]
    documents = [chunk(text, doc_id=f"doc{n % 10}", vector=(1.0, n / 40, 0.5)) for n, text in enumerate(texts)]
    # the only chunks of tenant acme score last: its top 2 are found after several rounds of candidates
    documents += [chunk(f"Minutes {n} of the weekly meeting of the platform group about hiring, budgets, offices, "
                        "travel, laptops, holidays and the new key.", doc_id=f"acme{n}", tenant="acme", title="Notes")
                  for n in range(3)]
    store.write_documents(documents)
    searches = {"dense": "dense", "lexical": "words", "ngrams": "ngrams"}
    filters = {"field": "meta.tenant", "operator": "in", "value": ["public"]}
    cache = store._postings_cache()
    whole = store.ranked_ids(searches, [1.0, 0.3, 0.5], "refunds of key rotaton", filters, 12, group_by="doc_id")
    assert cache._size > 0  # the terms' postings are held now
    again = store.ranked_ids(searches, [1.0, 0.3, 0.5], "refunds of key rotaton", filters, 12, group_by="doc_id")
    assert again == whole  # from the cache: the same hits, the same scores to the bit
    assert [hit[0] for hit in whole["dense"]] == [d.id for d in store.embedding_retrieval([1.0, 0.3, 0.5], filters, 12)]
    local = EdgeDocumentStore(path=str(tmp_path / "store"), embedding_dim=DIM)
    local.write_documents(documents)
    for name, analysis in (("lexical", "words"), ("ngrams", "ngrams")):
        expected = store.bm25_retrieval("refunds of key rotaton", filters, 12, analysis=analysis)
        assert [hit[0] for hit in whole[name]] == [d.id for d in expected]
        assert [hit[1] for hit in whole[name]] == [d.meta["doc_id"] for d in expected]
        acme = {"field": "meta.tenant", "operator": "==", "value": "acme"}
        found, expected = (_ranked(one, "refunds of key rotaton", analysis, acme) for one in (store, local))
        assert [i for i, _ in found] == [i for i, _ in expected] and len(found) == 3
        assert [s for _, s in found] == pytest.approx([s for _, s in expected], rel=1e-5)
        assert len(store.bm25_retrieval("refunds of key rotaton", acme, 2, analysis=analysis)) == 2
        every = store.bm25_retrieval("refunds of key rotaton", None, 100, analysis=analysis)
        assert {d.meta["tenant"] for d in every[-3:]} == {"acme"} and len(every) == 43  # found in the last round
    local.close()
    assert len(whole["ngrams"]) == 12 and all(hit[2] > 0 for hit in whole["lexical"])
    lists, similar = store.ranked_ids_and_similarities(searches, [1.0, 0.3, 0.5], "refunds of key rotaton", filters,
                                                       12, group_by="doc_id")
    assert lists == whole
    union = {hit[0] for hits in lists.values() for hit in hits}
    assert similar == pytest.approx(store.similarities([1.0, 0.3, 0.5], list(union)))
    # the same chunk written again: the same terms and frequencies, a new row; the held postings are stale
    best = whole["lexical"][0]
    again = next(doc for doc in documents if doc.id == best[0])
    store.replace_documents(best[1], [doc for doc in documents if doc.meta["doc_id"] == best[1]])
    after = store.ranked_ids(searches, [1.0, 0.3, 0.5], "refunds of key rotaton", filters, 12, group_by="doc_id")
    assert after["lexical"] == whole["lexical"] and after["ngrams"] == whole["ngrams"], again.id
    module._POSTINGS.clear()  # a process that holds nothing reads the same
    assert store.ranked_ids(searches, [1.0, 0.3, 0.5], "refunds of key rotaton", filters, 12,
                            group_by="doc_id") == after
    with pytest.raises(ValueError, match="Unknown search 'sparse'"):
        store.ranked_ids({"x": "sparse"}, [1.0, 0.0, 0.0], "key", None, 5)


def test_the_postings_cache_keeps_at_most_its_limit():
    from gatehouse.document_stores.postgres_document_store import _PostingsCache

    cache = _PostingsCache(limit=5)
    lists = {term: (np.arange(3, dtype=np.int64), np.ones(3, dtype=np.float32)) for term in range(3)}
    for term, held in lists.items():
        cache.put(0, term, 7, *held)
    held = cache.held(0, [0, 1, 2])
    assert list(held) == [2] and held[2][0] == 7  # the oldest went first: 3 postings left of 9
    cache.put(0, 2, 8, *lists[0])
    assert held[2][0] == 7 and cache.held(0, [2])[2][0] == 8  # what a search took stays as it took it
    cache.put(0, 9, 1, np.arange(6, dtype=np.int64), np.ones(6, dtype=np.float32))  # larger than the limit
    assert list(cache.held(0, [2, 9])) == [2] and cache._size == 3


def test_documents_by_point_keeps_the_order_adds_meta_and_skips_deleted_ids(store):
    documents = [chunk("one", doc_id="a"), chunk("two", doc_id="b"), chunk("three", doc_id="c")]
    store.write_documents(documents)
    store.delete_documents([documents[1].id])
    found = store.documents_by_point([(documents[2].id, 0.9, {"dense_rank": 1}), (documents[1].id, 0.5, {}),
                                      (documents[0].id, 0.1, {"lexical_score": 2.0})])
    assert [(d.content, d.score) for d in found] == [("three", 0.9), ("one", 0.1)]
    assert found[0].meta["dense_rank"] == 1 and found[0].meta["doc_id"] == "c"
    assert found[1].meta["lexical_score"] == 2.0


def _comment(postgres, table: str, **changes) -> dict:
    """Rewrite the table's settings comment with `changes` (None removes a key); returns what was there."""
    with psycopg.connect(postgres.primary_url, autocommit=True) as admin:
        comment = json.loads(admin.execute("SELECT obj_description(%s::regclass, 'pg_class')", (table,)).fetchone()[0])
        rewritten = {key: value for key, value in {**comment, **changes}.items() if value is not None}
        admin.execute(sql.SQL("COMMENT ON TABLE {} IS {}").format(sql.Identifier(table),
                                                                  sql.Literal(json.dumps(rewritten))))
    return comment


def test_a_table_of_schema_version_1_is_migrated_in_place(store, postgres, table, caplog):
    caplog.set_level(logging.INFO, logger="gatehouse.document_stores.postgres")
    store.write_documents([chunk("Rotate API keys from the console.")])
    with psycopg.connect(postgres.primary_url, autocommit=True) as admin:  # as the tables of schema version 1 were
        admin.execute(sql.SQL("ALTER TABLE {} DROP COLUMN version").format(sql.Identifier(f"{table}_terms")))
    assert _comment(postgres, table, bm25="postings", schema=None)["schema"] == 2
    upgraded = PostgresDocumentStore(url=postgres.primary_url, table=table, embedding_dim=DIM)
    assert _comment(postgres, table)["schema"] == 2 and _comment(postgres, table)["bm25"] == "postings-versioned"
    assert [d.content for d in upgraded.bm25_retrieval("rotate")] == ["Rotate API keys from the console."]
    upgraded.write_documents([chunk("Rotate keys monthly.", doc_id="faq/b.md")])
    assert len(upgraded.bm25_retrieval("rotate")) == 2
    assert f"the PostgreSQL table {table} was migrated from schema version 1 to 2" in caplog.text
    _comment(postgres, table, schema=None)  # a table written before the version was kept: recorded, nothing to run
    PostgresDocumentStore(url=postgres.primary_url, table=table, embedding_dim=DIM)
    assert _comment(postgres, table)["schema"] == 2 and caplog.text.count("was migrated") == 1
    upgraded.close()


def test_a_table_that_cannot_be_migrated_says_what_to_run(store, postgres, table):
    _comment(postgres, table, schema=3)
    with pytest.raises(StoreUnavailableError, match=f"the PostgreSQL table {table} has schema version 3, newer than "
                                                    "this Gatehouse's 2: run pip install --upgrade "
                                                    "'gatehouse\\[postgres\\]' on every machine that uses it"):
        PostgresDocumentStore(url=postgres.primary_url, table=table, embedding_dim=DIM)
    _comment(postgres, table, schema=None, bm25=None)  # as the first tables were made (BM25 in tsvectors)
    with pytest.raises(StoreUnavailableError) as raised:
        PostgresDocumentStore(url=postgres.primary_url, table=table, embedding_dim=DIM)
    assert str(raised.value) == (
        f"the PostgreSQL table {table} has an earlier layout than schema version 1 (BM25 in tsvectors), which cannot "
        "be migrated in place: run gatehouse ingest with postgres: {table: <a new name>} in the pipelines to write a "
        "new table, then drop this one")
    assert "schema" not in _comment(postgres, table)  # nothing changed


def _metric(name: str, **labels: str) -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_standby_lag_costs_one_wait_per_episode_then_the_primary_answers_until_it_catches_up(postgres, table, caplog,
                                                                                           monkeypatch):
    from gatehouse.document_stores import postgres_standby

    monkeypatch.setattr(postgres_standby, "LAG_RECHECK_S", 0.5)
    caplog.set_level(logging.INFO, logger="gatehouse.document_stores.postgres")
    url = postgres.new_database()
    database = url.rsplit("/", 1)[1]
    read_url = url.replace(f":{postgres.primary_port}/", f":{postgres.standby_port}/")
    store = PostgresDocumentStore(url=url, table=table, embedding_dim=DIM, read_url=read_url, max_lag_s=0.3)
    store.write_documents([chunk("Rotate API keys from the console.", doc_id="faq/rotate.md")])
    postgres.wait_for_standby()
    lists = {"dense": "dense", "words": "words", "ngrams": "ngrams"}  # a hybrid search: three lists at once
    assert store.ranked_ids(lists, [1.0, 0.0, 0.0], "rotate keys", None, 5)["words"]
    counted = ("gatehouse_postgres_standby_waits_total", "gatehouse_postgres_standby_lag_episodes_total")
    before = {name: _metric(name) for name in counted}
    primary_reads = _metric("gatehouse_postgres_primary_reads_total", reason="lag")
    postgres.sql(postgres.standby_port, "SELECT pg_wal_replay_pause()")
    try:
        store.write_documents([chunk("Revoke a key from its menu.", doc_id="faq/revoke.md", vector=(0.0, 1.0, 0.0))])
        seconds = []
        for _ in range(12):
            started = time.perf_counter()
            found = store.ranked_ids(lists, [0.0, 1.0, 0.0], "revoke key", None, 5)
            seconds.append(time.perf_counter() - started)
            assert found["dense"][0][0] == found["words"][0][0]  # the new chunk: read from the primary
        with store._reader_pool().connection(5, "checking readiness") as connection:
            assert store._standby().ready(connection, 0.3) == "the standby lags behind the primary"
    finally:
        postgres.sql(postgres.standby_port, "SELECT pg_wal_replay_resume()")
    after = {name: _metric(name) for name in counted}
    assert after == {name: before[name] + 1 for name in counted}  # one wait, for the first search, in one episode
    assert _metric("gatehouse_postgres_primary_reads_total", reason="lag") - primary_reads >= 3 * 12 - 3
    p95 = sorted(seconds)[int(0.95 * len(seconds)) - 1]
    print(f"standby lag: search P95 {p95 * 1000:.0f} ms, slowest {max(seconds) * 1000:.0f} ms (max_lag_s 300 ms)")
    assert max(seconds) < 0.3 + 5.0  # a hang guard: the first search waited 0.3 s, the others not at all
    postgres.wait_for_standby()
    time.sleep(0.6)  # the episode's recheck time: the next search looks at the standby again and reads it
    primary_reads = _metric("gatehouse_postgres_primary_reads_total", reason="lag")
    assert store.ranked_ids(lists, [0.0, 1.0, 0.0], "revoke key", None, 5)["words"]
    assert _metric("gatehouse_postgres_primary_reads_total", reason="lag") == primary_reads  # the standby answered
    assert _metric("gatehouse_postgres_standby_waits_total") == after[counted[0]]
    assert _backends(postgres, postgres.standby_port, database, "gatehouse-reader") >= 1
    episodes = [record.getMessage() for record in caplog.records if "read URL" in record.getMessage()]
    assert len(episodes) == 2, episodes
    assert "stayed behind the primary for max_lag_s (0.3 s): searches read the primary" in episodes[0]
    assert episodes[1].endswith("has caught up: searches read it again")
    assert "postgresql://postgres@127.0.0.1:" in episodes[0]
    store.close()
