"""
Store-level concurrency with real stores and threads: searches run during an ingest and see whole committed writes,
a write in progress neither blocks a read nor shows in it, and writes through different stores of one folder (they
share one shard) run one at a time.
"""

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from haystack import Document

from gatehouse.components.retrievers.dense_retriever import DenseRetriever
from gatehouse.document_stores.dense_document_store import DenseDocumentStore
from gatehouse.document_stores.edge_document_store import EdgeDocumentStore
from gatehouse.document_stores.lexical_document_store import LexicalDocumentStore

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


@pytest.fixture
def local_store(monkeypatch):
    """The local shard, whatever servers the environment names."""
    monkeypatch.delenv("GATEHOUSE_QDRANT_URL", raising=False)
    monkeypatch.delenv("GATEHOUSE_ELASTICSEARCH_URL", raising=False)


def test_bm25_searches_during_an_ingest_see_whole_committed_writes(local_store, tmp_path):
    writer = EdgeDocumentStore(path=str(tmp_path))
    words = LexicalDocumentStore(local={"path": str(tmp_path)})  # the retrieval pipeline's stores share the shard
    grams = LexicalDocumentStore(analysis="ngrams", local={"path": str(tmp_path)})
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
    for store in (words, grams):  # every reader ends on the last committed state
        assert {d.meta["batch"] for d in store.bm25_retrieval("batch", top_k=10_000)} == expected
    assert {d.meta["batch"] for d in writer.bm25_retrieval("batch", top_k=10_000)} == expected
    assert words.count_documents() == 1 + len(expected) * BATCH_SIZE


class _HeldEngine:
    """The shard's engine, with each update held until `release` is set (a write in progress)."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self.updating = threading.Event()
        self.release = threading.Event()

    def update(self, operation: Any) -> Any:
        self.updating.set()
        self.release.wait(timeout=30)
        return self._engine.update(operation)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


def test_bm25_write_in_progress_neither_blocks_nor_shows_in_reads(local_store, tmp_path, monkeypatch):
    store = LexicalDocumentStore(local={"path": str(tmp_path)})
    store.write_documents([Document(id="a", content="Rotate API keys from the console.", meta={"kb": "faq"})])
    assert [d.id for d in store.bm25_retrieval("rotate")] == ["a"]
    counters = store.kb_generations()
    shard = store.store._shard  # noqa: SLF001 - the one open shard of the folder
    held = _HeldEngine(shard.engine)
    monkeypatch.setattr(shard, "engine", held)
    # Another store of the folder (the index pipeline's writer) writes: its update is under way while this one reads.
    writer = EdgeDocumentStore(path=str(tmp_path))
    writing = threading.Thread(target=writer.write_documents, args=(
        [Document(id="b", content="Rotate the signing secret yearly.", meta={"kb": "faq"})],))
    writing.start()
    try:
        assert held.updating.wait(timeout=30)
        started = time.monotonic()
        fresh = LexicalDocumentStore(analysis="ngrams", local={"path": str(tmp_path)})  # opened meanwhile
        assert [d.id for d in store.bm25_retrieval("rotate")] == ["a"]
        assert [d.id for d in fresh.filter_documents()] == ["a"]
        assert [d.id for d in fresh.bm25_retrieval("rotating")] == ["a"]
        assert store.count_documents() == 1
        assert store.kb_generations() == counters
        assert time.monotonic() - started < 10  # the reads did not wait for the write
        assert writing.is_alive()  # ...which was still under way
    finally:
        held.release.set()
        writing.join(timeout=60)
    assert {d.id for d in store.bm25_retrieval("rotate")} == {"a", "b"}  # the finished write is seen at once
    assert {d.id for d in fresh.bm25_retrieval("rotate")} == {"a", "b"}
    assert store.kb_generations()[("", "faq")] > counters[("", "faq")]


def test_writes_through_stores_of_one_folder_run_one_at_a_time(local_store, tmp_path):
    dense = DenseDocumentStore(embedding_dim=DIM, path=str(tmp_path))
    lexical = LexicalDocumentStore(local={"path": str(tmp_path)})
    edge = EdgeDocumentStore(path=str(tmp_path))
    doc_id = "public/faq/rotation.md"
    versions = [[Document(id=f"v{version}-{part}", content=f"rotation version {version} part {part}",
                          embedding=np.random.default_rng(version).random(DIM).tolist(),
                          meta={"tenant": "public", "kb": "faq", "doc_id": doc_id, "batch": version})
                 for part in range(version % 4 + 1)] for version in range(40)]
    errors: list[BaseException] = []

    def run(work: Callable[[], None]) -> None:
        try:
            work()
        except BaseException as error:  # noqa: BLE001 - reported by the test
            errors.append(error)

    def replace_even() -> None:
        for version in versions[0::2]:
            edge.replace_documents(doc_id, version)

    def replace_odd() -> None:
        for version in versions[1::2]:
            edge.replace_documents(doc_id, version)

    def write_batches() -> None:
        for number in range(BATCHES):
            (dense if number % 2 else lexical).write_documents(_batch(number, embedded=True))

    threads = [threading.Thread(target=run, args=(work,)) for work in (replace_even, replace_odd, write_batches)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert errors == []
    chunks = edge.filter_documents({"field": "meta.doc_id", "operator": "==", "value": doc_id})
    assert len({d.meta["batch"] for d in chunks}) == 1  # one whole version of the document, never a mix
    assert len(chunks) == chunks[0].meta["batch"] % 4 + 1
    assert dense.count_documents() == BATCHES * BATCH_SIZE + len(chunks)
    batches = Counter(d.meta["batch"] for d in lexical.filter_documents(PUBLIC) if "doc_id" not in d.meta)
    assert batches == dict.fromkeys(range(BATCHES), BATCH_SIZE)


def test_dense_searches_during_an_ingest_see_whole_committed_writes(local_store, tmp_path):
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
