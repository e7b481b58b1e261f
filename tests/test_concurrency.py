"""
Store-level concurrency with real stores and threads: searches run during an ingest and see whole committed writes,
a write in progress neither blocks a read nor shows in it, and the readers-writer lock lets readers overlap.
"""

import json
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable

import numpy as np
import pytest
from haystack import Document

from gatehouse.components.retrievers.dense_retriever import DenseRetriever
from gatehouse.document_stores.bm25_document_store import BM25DocumentStore
from gatehouse.document_stores.dense_document_store import DenseDocumentStore
from gatehouse.document_stores.locking import ReadWriteLock

BATCHES = 30
BATCH_SIZE = 20
DIM = 8
PUBLIC = {"field": "meta.tenant", "operator": "==", "value": "public"}


def _batch(number: int, *, embedded: bool = False) -> list[Document]:
    rng = np.random.default_rng(number)
    return [
        Document(id=f"{number:04d}{index:028d}", content=f"gateway rotation notes, batch {number} part {index}",
                 embedding=rng.random(DIM).tolist() if embedded else None,
                 meta={"tenant": "public", "batch": number})
        for index in range(BATCH_SIZE)
    ]


def _ingest_and_read(write: Callable[[int], None], reads: list[Callable[[], list[Document]]]) -> dict:
    """
    Write the batches in one thread (dropping every third batch again) while each of `reads` runs in a loop in its
    own thread; return the batch sizes every read saw, the errors, and when writes and reads finished.
    """
    done = threading.Event()
    seen: list[Counter] = []
    errors: list[BaseException] = []
    write_times: list[float] = []
    read_times: list[float] = []

    def writer() -> None:
        try:
            for number in range(BATCHES):
                write(number)
                write_times.append(time.monotonic())
        except BaseException as error:  # noqa: BLE001 - reported by the test
            errors.append(error)
        finally:
            done.set()

    def reader(read: Callable[[], list[Document]]) -> None:
        while not done.is_set():
            try:
                documents = read()
            except BaseException as error:  # noqa: BLE001 - reported by the test
                errors.append(error)
                return
            read_times.append(time.monotonic())
            seen.append(Counter(d.meta["batch"] for d in documents if "batch" in d.meta))

    threads = [threading.Thread(target=reader, args=(read,)) for read in reads]
    threads.append(threading.Thread(target=writer))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    return {"seen": seen, "errors": errors, "write_times": write_times, "read_times": read_times}


def _assert_whole_batches_and_overlap(outcome: dict) -> None:
    assert outcome["errors"] == []
    partial = [counts for counts in outcome["seen"] if any(size != BATCH_SIZE for size in counts.values())]
    assert partial == []  # a read sees a write entirely or not at all
    first, last = outcome["write_times"][0], outcome["write_times"][-1]
    assert any(first < finished < last for finished in outcome["read_times"])  # reads ran between writes


def test_bm25_searches_during_an_ingest_see_whole_committed_writes(tmp_path):
    writer = BM25DocumentStore(path=str(tmp_path))
    words = BM25DocumentStore(path=str(tmp_path))  # the retrieval pipeline's stores read the same file
    grams = BM25DocumentStore(path=str(tmp_path), char_ngrams=3)
    writer.write_documents([Document(id="anchor", content="gateway rotation anchor", meta={"tenant": "public"})])

    def write(number: int) -> None:
        writer.write_documents(_batch(number))
        if number % 3 == 2:
            writer.delete_documents([d.id for d in _batch(number - 1)])

    outcome = _ingest_and_read(write, [
        lambda: words.bm25_retrieval("gateway rotation", top_k=10_000),
        lambda: grams.bm25_retrieval("gateway rotation", top_k=10_000),
        lambda: words.filter_documents({"field": "meta.tenant", "operator": "==", "value": "public"}),
    ])
    _assert_whole_batches_and_overlap(outcome)
    expected = {number for number in range(BATCHES) if number % 3 != 1}
    for store in (writer, words, grams):  # every reader ends on the last committed state
        assert {d.meta["batch"] for d in store.bm25_retrieval("batch", top_k=10_000)} == expected
    assert words.count_documents() == 1 + len(expected) * BATCH_SIZE


def test_bm25_write_in_progress_neither_blocks_nor_shows_in_reads(tmp_path):
    store = BM25DocumentStore(path=str(tmp_path))
    store.write_documents([Document(id="a", content="Rotate API keys from the console.")])
    assert [d.id for d in store.bm25_retrieval("rotate")] == ["a"]
    # Another process writes: its transaction is open (not committed) while this process searches.
    other = sqlite3.connect(store.database_path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    body = json.dumps(Document(id="b", content="Rotate the signing secret yearly.").to_dict(flatten=False))
    other.execute("INSERT INTO documents (id, body) VALUES (?, ?)", ("b", body))
    other.execute("UPDATE state SET value = value + 1 WHERE key = 'generation'")
    fresh = BM25DocumentStore(path=str(tmp_path), char_ngrams=3)
    assert [d.id for d in store.bm25_retrieval("rotate")] == ["a"]
    assert [d.id for d in fresh.filter_documents()] == ["a"]
    assert store.count_documents() == 1
    other.execute("COMMIT")
    other.close()
    assert {d.id for d in store.bm25_retrieval("rotate")} == {"a", "b"}  # the committed write is seen at once
    assert {d.id for d in fresh.bm25_retrieval("rotate")} == {"a", "b"}


@pytest.fixture
def local_qdrant(monkeypatch):
    monkeypatch.delenv("GATEHOUSE_QDRANT_URL", raising=False)


def test_dense_searches_during_an_ingest_see_whole_committed_writes(local_qdrant, tmp_path):
    store = DenseDocumentStore(index="concurrency", embedding_dim=DIM, path=str(tmp_path))
    retriever = DenseRetriever(document_store=store, top_k=1000)
    store.write_documents([Document(id="f" * 32, content="anchor", embedding=[1.0] * DIM, meta={"tenant": "public"})])
    query = np.random.default_rng(99).random(DIM).tolist()

    def write(number: int) -> None:
        store.write_documents(_batch(number, embedded=True))
        if number % 3 == 2:
            store.delete_documents([d.id for d in _batch(number - 1)])

    outcome = _ingest_and_read(write, [
        lambda: retriever.run(query_embedding=query, filters=PUBLIC)["documents"],
        lambda: retriever.run(query_embedding=query, filters=PUBLIC)["documents"],
        lambda: store.filter_documents(PUBLIC),
    ])
    _assert_whole_batches_and_overlap(outcome)
    expected = {number for number in range(BATCHES) if number % 3 != 1}
    assert {d.meta["batch"] for d in store.filter_documents(PUBLIC) if "batch" in d.meta} == expected
    assert store.count_documents() == 1 + len(expected) * BATCH_SIZE


def test_readers_share_the_lock_and_a_writer_waits_for_them():
    lock = ReadWriteLock()
    both_reading = threading.Barrier(2, timeout=30)
    release = threading.Event()
    writer_in = threading.Event()

    def reader() -> None:
        with lock.read():
            both_reading.wait()  # only passes when two readers hold the lock at once
            release.wait(timeout=30)

    def writer() -> None:
        with lock.write():
            writer_in.set()

    readers = [threading.Thread(target=reader) for _ in range(2)]
    for thread in readers:
        thread.start()
    writing = threading.Thread(target=writer)
    writing.start()
    assert not writer_in.wait(timeout=0.2)  # the readers still hold it
    release.set()
    for thread in [*readers, writing]:
        thread.join(timeout=30)
    assert writer_in.is_set()
    assert not both_reading.broken


def test_a_waiting_writer_goes_before_new_readers():
    lock = ReadWriteLock()
    order: list[str] = []
    first_reading, release = threading.Event(), threading.Event()

    def first_reader() -> None:
        with lock.read():
            first_reading.set()
            release.wait(timeout=30)

    def writer() -> None:
        with lock.write():
            order.append("writer")

    def late_reader() -> None:
        with lock.read():
            order.append("reader")

    threads = [threading.Thread(target=first_reader)]
    threads[0].start()
    first_reading.wait(timeout=30)
    threads.append(threading.Thread(target=writer))
    threads[1].start()
    deadline = time.monotonic() + 30
    while not lock._waiting_writers and time.monotonic() < deadline:  # noqa: SLF001 - until the writer queues
        threading.Event().wait(0.001)
    threads.append(threading.Thread(target=late_reader))
    threads[2].start()
    release.set()
    for thread in threads:
        thread.join(timeout=30)
    assert order == ["writer", "reader"]
