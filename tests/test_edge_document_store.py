"""EdgeDocumentStore: the embedded Qdrant shard, against the real engine (and real processes for locking and crashes)."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
from haystack import Document
from haystack.document_stores.errors import DuplicateDocumentError
from haystack.document_stores.types import DuplicatePolicy

from gatehouse.document_stores.edge_document_store import EdgeDocumentStore
from store_contract import check_replace_delete_and_counters, check_write_search_and_delete, chunk
from gatehouse.document_stores.errors import DataDirError

DIM = 3


@pytest.fixture
def store(tmp_path):
    opened = EdgeDocumentStore(path=str(tmp_path / "store"), embedding_dim=DIM)
    yield opened
    opened.close()


def test_init(tmp_path):
    store = EdgeDocumentStore(path=str(tmp_path / "s"), embedding_dim=DIM, k1=0.9, char_ngrams=4)
    assert (store.path, store.embedding_dim, store.k1, store.char_ngrams) == (str(tmp_path / "s"), DIM, 0.9, 4)
    assert store.indexed_fields == ["meta.title", "meta.section", "content"]
    assert json.loads((tmp_path / "s" / "gatehouse.json").read_text())["k1"] == 0.9


def test_init_refuses_a_bad_similarity(tmp_path):
    with pytest.raises(ValueError, match="Unknown similarity 'manhattan'"):
        EdgeDocumentStore(path=str(tmp_path / "s"), similarity="manhattan")


def test_to_dict(store, tmp_path):
    data = store.to_dict()
    assert data["type"] == "gatehouse.document_stores.edge_document_store.EdgeDocumentStore"
    assert data["init_parameters"]["path"] == str(tmp_path / "store")
    assert data["init_parameters"]["embedding_dim"] == DIM


def test_from_dict(store):
    restored = EdgeDocumentStore.from_dict(store.to_dict())
    assert restored.shares_shard(store)


def test_run_write_search_and_filter_by_tenant_and_kb(store):
    store.write_documents([
        chunk("Rotate API keys from the console.", doc_id="faq/keys.md"),
        chunk("Invoices are sent monthly.", kb="billing", doc_id="billing/inv.md", vector=(0.0, 1.0, 0.0)),
        chunk("Acme rotates keys weekly.", tenant="acme", doc_id="acme/faq/keys.md"),
    ])
    public = {"field": "meta.tenant", "operator": "==", "value": "public"}
    words = store.bm25_retrieval("rotating consoles", filters=public, top_k=5)
    assert [d.content for d in words] == ["Rotate API keys from the console."]
    assert words[0].score > 0
    grams = store.bm25_retrieval("rotaton", filters=public, top_k=5, analysis="ngrams")  # a misspelling still matches
    assert grams[0].content == "Rotate API keys from the console."
    dense = store.embedding_retrieval([0.0, 1.0, 0.0], filters=public, top_k=1)
    assert dense[0].meta["kb"] == "billing" and dense[0].score == pytest.approx(1.0)
    both = {"operator": "AND", "conditions": [{"field": "meta.tenant", "operator": "in", "value": ["acme"]},
                                               {"field": "meta.kb", "operator": "!=", "value": "billing"}]}
    assert [d.content for d in store.filter_documents(both)] == ["Acme rotates keys weekly."]
    assert store.metadata_counts(["tenant", "kb"]) == {("public", "faq"): 1, ("public", "billing"): 1,
                                                       ("acme", "faq"): 1}


def test_run_duplicate_policies(store):
    document = chunk("One.")
    store.write_documents([document])
    with pytest.raises(DuplicateDocumentError):
        store.write_documents([document])
    assert store.write_documents([document], policy=DuplicatePolicy.SKIP) == 0
    assert store.write_documents([document], policy=DuplicatePolicy.OVERWRITE) == 1
    assert store.count_documents() == 1


def test_run_replace_delete_and_counters(store):
    check_replace_delete_and_counters(store)


def test_run_write_search_and_delete(store):
    check_write_search_and_delete(store)


def test_run_reopen_keeps_everything(tmp_path):
    folder = tmp_path / "store"
    first = EdgeDocumentStore(path=str(folder), embedding_dim=DIM)
    first.write_documents([chunk("Kept across restarts.")])
    first.close()
    reopened = EdgeDocumentStore(path=str(folder))  # the dimension comes from the shard
    assert reopened.embedding_retrieval([1.0, 0.0, 0.0], top_k=1)[0].content == "Kept across restarts."
    with pytest.raises(DataDirError, match="created with other settings \\(embedding_dim 3\\)"):
        EdgeDocumentStore(path=str(folder), embedding_dim=768)
    reopened.close()


def test_run_a_store_from_before_sentence_vectors_gets_them(tmp_path, caplog):
    from qdrant_edge import UpdateOperation

    first = EdgeDocumentStore(path=str(tmp_path / "s"), embedding_dim=DIM)
    first.write_documents([chunk("Rotate keys monthly.")])
    first._shard.engine.update(UpdateOperation.delete_vector_name("sentences"))  # as an older Gatehouse wrote it
    settings = json.loads((tmp_path / "s" / "gatehouse.json").read_text())
    settings.pop("sentences")
    (tmp_path / "s" / "gatehouse.json").write_text(json.dumps(settings))
    first.close()
    with caplog.at_level("WARNING"):
        reopened = EdgeDocumentStore(path=str(tmp_path / "s"))
    assert "1 chunks written before Gatehouse kept sentence vectors" in caplog.text
    assert "gatehouse ingest --force" in caplog.text
    newer = chunk("Billing is yearly.", doc_id="faq/b.md", vector=(0.0, 1.0, 0.0))
    reopened.write_documents([newer], sentence_embeddings={newer.id: [[1.0, 0.0, 0.0]]})
    hits = reopened.ranked_ids({"dense": "dense"}, [1.0, 0.0, 0.0], "", None, 5)["dense"]
    scores = reopened.similarities([1.0, 0.0, 0.0], [point for point, _, _ in hits])
    assert sorted(best is None for _, best in scores.values()) == [False, True]  # the old chunk has none
    reopened.close()


def test_run_search_groups_follow_every_write(store):
    first = Document(id="k1", content="Rotate keys monthly.", embedding=[1.0, 0.0, 0.0],
                     meta={"kb": "faq", "tenant": "public", "doc_id": "faq/a.md"})
    store.write_documents([first])

    def group():
        return store.ranked_ids({"dense": "dense"}, [1.0, 0.0, 0.0], "", None, 5, group_by="doc_id")["dense"][0][1]

    assert group() == group() == "faq/a.md"  # the second search reads no payload
    store.write_documents([Document(id="k1", content=first.content, embedding=first.embedding,
                                    meta={**first.meta, "doc_id": "faq/moved.md"})], policy=DuplicatePolicy.OVERWRITE)
    assert group() == "faq/moved.md"


def _as_an_older_gatehouse_numbered_it(folder, keep_new_ids=0):
    """Give the folder's chunks UUID point ids and drop `point_ids` from its settings (keeping the first
    `keep_new_ids` chunks under their integer ids too: a renumbering killed between its two updates)."""
    import uuid

    from qdrant_edge import EdgeShard, Point, ScrollRequest, UpdateOperation

    engine = EdgeShard.load(str(folder))
    records, _ = engine.scroll(ScrollRequest(limit=100, with_payload=True, with_vector=True))
    chunks = [record for record in records if record.payload.get("record") == "chunk"]
    engine.update(UpdateOperation.upsert_points([Point(id=str(uuid.uuid4()), vector=record.vector,
                                                       payload=record.payload) for record in chunks]))
    engine.update(UpdateOperation.delete_points([record.id for record in chunks[keep_new_ids:]]))
    engine.flush()
    engine.close()
    settings = json.loads((folder / "gatehouse.json").read_text())
    settings.pop("point_ids")
    (folder / "gatehouse.json").write_text(json.dumps(settings))


@pytest.mark.parametrize("interrupted", [0, 1])
def test_run_a_store_with_uuid_point_ids_is_renumbered_on_opening(tmp_path, interrupted):
    folder = tmp_path / "store"
    first = EdgeDocumentStore(path=str(folder), embedding_dim=DIM)
    written = [chunk("Rotate keys monthly."), chunk("Billing is yearly.", doc_id="faq/b.md", vector=(0.0, 1.0, 0.0))]
    first.write_documents(written, sentence_embeddings={written[0].id: [[1.0, 0.0, 0.0]]})
    before = sorted((d.id, d.content) for d in first.filter_documents())
    first.close()
    _as_an_older_gatehouse_numbered_it(folder, keep_new_ids=interrupted)
    reopened = EdgeDocumentStore(path=str(folder))
    try:
        assert sorted((d.id, d.content) for d in reopened.filter_documents()) == before  # once each, nothing lost
        assert json.loads((folder / "gatehouse.json").read_text())["point_ids"] == "u64"
        hits = reopened.ranked_ids({"dense": "dense", "lexical": "words"}, [1.0, 0.0, 0.0], "rotate keys", None, 5)
        assert all(isinstance(point, int) for found in hits.values() for point, _, _ in found)
        assert reopened.documents_by_point([(hits["lexical"][0][0], 1.0, {})])[0].content == "Rotate keys monthly."
        assert reopened.similarities([1.0, 0.0, 0.0], [hits["lexical"][0][0]])[hits["lexical"][0][0]][1] == (
            pytest.approx(1.0))  # the sentence vectors came along
        reopened.delete_documents([written[1].id])
        assert reopened.count_documents() == 1
    finally:
        reopened.close()


# -- BM25's average length: the true mean of what the store holds, whatever order it was written in ---------------------

SHORT = [chunk(f"Rotate key {i}.", doc_id=f"faq/short{i}.md") for i in range(4)]
LONG = [chunk(f"Rotate the signing key {i} from the console " + "and audit every service that uses it " * 6,
              doc_id=f"faq/long{i}.md") for i in range(4)]


def _bm25(store, query="rotate signing key console"):
    return {d.id: d.score for d in store.bm25_retrieval(query, top_k=20)}


def _avg_len(folder):
    return json.loads((folder / "gatehouse.json").read_text())["avg_len"]


def test_run_the_average_length_follows_what_the_store_holds(tmp_path):
    in_one = EdgeDocumentStore(path=str(tmp_path / "one"), embedding_dim=DIM)
    in_one.write_documents(SHORT + LONG)
    in_two = EdgeDocumentStore(path=str(tmp_path / "two"), embedding_dim=DIM)
    in_two.write_documents(SHORT)
    short_only = _avg_len(tmp_path / "two")
    in_two.write_documents(LONG)  # the mean more than doubles: every chunk is re-encoded
    try:
        assert _avg_len(tmp_path / "two") == _avg_len(tmp_path / "one") != short_only
        assert _bm25(in_two) == pytest.approx(_bm25(in_one))
        assert in_two.embedding_retrieval([1.0, 0.0, 0.0], top_k=1)[0].score == pytest.approx(1.0)  # dense kept
        changed = Document(id=SHORT[0].id, content="Rotate key zero now.", embedding=SHORT[0].embedding,
                           meta=SHORT[0].meta)
        in_two.delete_documents([d.id for d in LONG])
        in_two.replace_documents("faq/short0.md", [changed])
        in_one.delete_by_filter({"field": "meta.doc_id", "operator": "in", "value": [d.meta["doc_id"] for d in LONG]})
        in_one.write_documents([changed], policy=DuplicatePolicy.OVERWRITE)
        stored = in_two._shard.totals
        assert stored == in_one._shard.totals and stored["count"] == 4
        for name, mean in _avg_len(tmp_path / "two").items():
            assert mean == pytest.approx(stored[name] / stored["count"], rel=0.1)
        assert _bm25(in_two, "rotate key") == pytest.approx(_bm25(in_one, "rotate key"), rel=0.05)
    finally:
        in_one.close()
        in_two.close()


def test_run_an_interrupted_reencoding_is_finished_on_opening(tmp_path, monkeypatch):
    monkeypatch.setattr("gatehouse.document_stores.edge_shard.PAGE", 2)  # four pages of two chunks
    folder = tmp_path / "store"
    reference = EdgeDocumentStore(path=str(tmp_path / "reference"), embedding_dim=DIM)
    reference.write_documents(SHORT + LONG)
    store = EdgeDocumentStore(path=str(folder), embedding_dim=DIM)
    store.write_documents(SHORT)
    shard = store._shard
    updates = shard.update

    def crash_after_the_first_page(*operations, totals=None):  # the re-encoding's first page, then a power cut
        updates(*operations, totals=None)
        if totals is None:
            raise SystemExit("killed")
        shard.totals = totals
        shard.rebalance()

    shard.update = crash_after_the_first_page
    with pytest.raises(SystemExit):
        store.write_documents(LONG)
    assert json.loads((folder / "gatehouse.json").read_text())["reencoding"] == ["ngrams", "words"]
    assert len(_bm25(store)) == len(SHORT + LONG)  # searchable meanwhile, two chunks on the new average
    del shard.update
    shard.close()
    reopened = EdgeDocumentStore(path=str(folder))
    try:
        assert json.loads((folder / "gatehouse.json").read_text())["reencoding"] == []
        assert _avg_len(folder) == _avg_len(tmp_path / "reference")
        assert _bm25(reopened) == pytest.approx(_bm25(reference))
    finally:
        reopened.close()
        reference.close()


def test_run_a_store_without_length_totals_counts_them_and_reencodes_on_opening(tmp_path):
    folder = tmp_path / "store"
    reference = EdgeDocumentStore(path=str(tmp_path / "reference"), embedding_dim=DIM)
    reference.write_documents(SHORT + LONG)
    store = EdgeDocumentStore(path=str(folder), embedding_dim=DIM)
    store.write_documents(SHORT + LONG)
    settings = json.loads((folder / "gatehouse.json").read_text())
    store.close()
    settings["avg_len"] = {name: mean / 2 for name, mean in settings["avg_len"].items()}  # an earlier Gatehouse's
    (folder / "gatehouse.json").write_text(json.dumps(settings))  # average: from a first write of short chunks
    from qdrant_edge import EdgeShard, UpdateOperation

    from gatehouse.document_stores.edge_shard import LENGTHS_ID
    engine = EdgeShard.load(str(folder))
    engine.update(UpdateOperation.delete_points([LENGTHS_ID]))
    engine.flush()
    engine.close()
    reopened = EdgeDocumentStore(path=str(folder))
    try:
        assert reopened._shard.totals == reference._shard.totals
        assert _avg_len(folder) == _avg_len(tmp_path / "reference")
        assert _bm25(reopened) == pytest.approx(_bm25(reference))
    finally:
        reopened.close()
        reference.close()


def test_run_a_second_process_is_refused_with_a_clear_message(store, tmp_path):
    code = "from gatehouse.document_stores.edge_document_store import EdgeDocumentStore as S; S(path=__import__('sys').argv[1])"
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "store")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode != 0
    assert f"the data directory {(tmp_path / 'store').resolve()} is in use by another process" in done.stderr


# -- crash consistency: a process killed after each engine update of a replacement or a deletion ----------------------

DRIVER = textwrap.dedent("""
    import os, signal, sys
    from haystack import Document
    from gatehouse.components.writers.index_writer import IndexWriter
    from gatehouse.document_stores.dense_document_store import DenseDocumentStore
    from gatehouse.document_stores.lexical_document_store import LexicalDocumentStore

    folder, action, kill_after = sys.argv[1], sys.argv[2], int(sys.argv[3])
    dense = DenseDocumentStore(path=folder, embedding_dim=3)
    lexical = LexicalDocumentStore(local={"path": folder})
    shard = dense.store._shard

    class KillAfter:  # SIGKILL right after the n-th engine update returns, as a power cut would
        def __init__(self, engine):
            self.engine, self.updates = engine, 0
        def __getattr__(self, name):
            return getattr(self.engine, name)
        def update(self, operation):
            self.engine.update(operation)
            self.updates += 1
            if self.updates == kill_after:
                os.kill(os.getpid(), signal.SIGKILL)

    shard.engine = KillAfter(shard.engine)

    def chunks(version, count):
        return [Document(content=f"{version} part {i} rotate keys", embedding=[1.0, float(i), 0.0],
                         meta={"tenant": "public", "kb": "faq", "doc_id": "public/faq/a.md", "hash": version})
                for i in range(count)]

    writer = IndexWriter(dense_store=dense, lexical_store=lexical)
    if action == "v1":
        writer.run(report={"planned": [{"doc_id": "public/faq/a.md", "source": "a.md"}]}, documents=chunks("v1", 4))
    elif action == "v2":
        writer.run(report={"planned": [{"doc_id": "public/faq/a.md", "source": "a.md"}]}, documents=chunks("v2", 3))
    else:
        lexical.delete_by_filter({"field": "meta.kb", "operator": "==", "value": "faq"})
    shard.close()
""")


def _drive(folder, action, kill_after=0):
    return subprocess.run([sys.executable, "-c", DRIVER, str(folder), action, str(kill_after)], capture_output=True,
                          text=True, timeout=120)


@pytest.fixture(scope="module")
def written_once(tmp_path_factory):
    base = tmp_path_factory.mktemp("crash") / "base"
    done = _drive(base, "v1")
    assert done.returncode == 0, done.stderr
    return base


@pytest.mark.parametrize(("action", "kill_after"), [("v2", 1), ("v2", 2), ("delete", 1), ("delete", 2)])
def test_run_a_kill_after_any_step_leaves_one_whole_version(written_once, tmp_path, action, kill_after):
    folder = tmp_path / "store"
    shutil.copytree(written_once, folder)
    done = _drive(folder, action, kill_after)
    assert done.returncode == -9, done.stderr  # killed, not finished
    store = EdgeDocumentStore(path=str(folder))  # opening repairs what the kill left
    try:
        listed = store.filter_documents()
        versions = {d.meta["hash"] for d in listed}
        assert len(versions) <= 1, f"both versions after a kill: {sorted(versions)}"
        expected = {"v1": 4, "v2": 3}
        if versions:
            assert len(listed) == expected[versions.pop()]  # a whole version, never part of one
        searchable = {d.id for d in store.bm25_retrieval("rotate keys", top_k=50)}
        searchable |= {d.id for d in store.embedding_retrieval([1.0, 1.0, 0.0], top_k=50)}
        assert searchable == {d.id for d in listed}  # what search finds, listing and deletion see
        assert sum(store.metadata_counts(["kb"]).values()) == len(listed)
        if action == "v2" and kill_after == 1:  # the new version was written: it is the one kept
            assert {d.meta["hash"] for d in listed} == {"v2"}
    finally:
        store.close()
    assert os.listdir(folder)


def test_run_a_data_folder_of_an_older_gatehouse_is_moved_into_the_shard(tmp_path, monkeypatch):
    from qdrant_client import QdrantClient, models

    old = QdrantClient(path=str(tmp_path / "qdrant"))  # the layout qdrant-haystack wrote in local mode
    old.create_collection("gatehouse", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    kept = [chunk("Rotate API keys from the console.", doc_id="faq/keys.md"), chunk("Invoices are monthly.")]
    old.upsert("gatehouse", points=[
        models.PointStruct(id=i, vector=d.embedding, payload={"id": d.id, "content": d.content, "meta": d.meta})
        for i, d in enumerate(kept)
    ])
    old.close()
    monkeypatch.setenv("GATEHOUSE_DATA_DIR", str(tmp_path))
    store = EdgeDocumentStore(embedding_dim=DIM)
    try:
        assert sorted(d.id for d in store.filter_documents()) == sorted(d.id for d in kept)
        assert store.bm25_retrieval("console", top_k=1)[0].id == kept[0].id
        assert store.embedding_retrieval([1.0, 0.0, 0.0], top_k=2)[0].score == pytest.approx(1.0)
    finally:
        store.close()
    assert (tmp_path / "qdrant" / "collection" / "gatehouse").is_dir()  # the old folder is left as it was
    assert not (tmp_path / "store.migrating").exists()
