"""The retrieval benchmark: IR metrics against hand-computed values, BEIR loading and slicing, and real runs through
index.yml and retrieve.yml on a tiny fixture (always) and on a 200-document SciFact slice (when the data is there)."""

import json
import math
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from gatehouse.eval.metrics_ir import evaluate_run, mrr_at_k, ndcg_at_k, per_query, recall_at_k
from gatehouse.eval.retrieval_bench import (
    DatasetError,
    beir_id,
    export_corpus,
    file_name,
    format_table,
    haystack_reference,
    load_beir,
    run_benchmark,
    slice_dataset,
)

PROJECT = Path(__file__).resolve().parents[1]
TINY = Path(__file__).parent / "fixtures" / "beir_tiny"
SCIFACT = PROJECT.parent / "shared" / "data" / "scifact"
GATEHOUSE = str(Path(sys.executable).with_name("gatehouse"))


# -- metrics --------------------------------------------------------------------------------------------------
def test_metrics_hand_computed():
    judgments = {"d1": 1, "d2": 2, "d9": 0}
    ranking = ["d3", "d1", "d2", "d4"]
    dcg = 1 / math.log2(3) + 2 / math.log2(4)
    idcg = 2 / math.log2(2) + 1 / math.log2(3)
    assert ndcg_at_k(ranking, judgments, 10) == pytest.approx(dcg / idcg)
    assert ndcg_at_k(ranking, judgments, 10) == pytest.approx(1.630930 / 2.630930, abs=1e-6)  # 0.619906
    assert ndcg_at_k(ranking, judgments, 2) == pytest.approx((1 / math.log2(3)) / idcg)
    assert recall_at_k(ranking, judgments, 2) == 0.5
    assert recall_at_k(ranking, judgments, 100) == 1.0
    assert mrr_at_k(ranking, judgments, 10) == 0.5
    assert mrr_at_k(ranking, judgments, 1) == 0.0
    assert ndcg_at_k(["d2", "d1"], judgments, 10) == pytest.approx(1.0)


def test_metrics_duplicates_count_once_and_bad_k():
    judgments = {"d1": 1, "d2": 1}
    assert ndcg_at_k(["d1", "d1", "d2"], judgments, 10) == pytest.approx(1.0)
    assert recall_at_k(["d1", "d1"], judgments, 2) == 0.5
    assert ndcg_at_k([], judgments, 10) == 0.0 and mrr_at_k([], judgments, 10) == 0.0
    with pytest.raises(ValueError, match="k must be positive"):
        ndcg_at_k(["d1"], judgments, 0)


def test_evaluate_run_means_over_judged_queries():
    qrels = {"q1": {"a": 1}, "q2": {"b": 1, "c": 1}, "q3": {"x": 0}}  # q3 has no relevant document: not scored
    run = {"q1": ["a"], "q2": ["z", "c"]}
    scores = evaluate_run(run, qrels, recall_k=100)
    q2_ndcg = (1 / math.log2(3)) / (1 + 1 / math.log2(3))
    assert scores["queries"] == 2
    assert scores["ndcg@10"] == pytest.approx((1.0 + q2_ndcg) / 2)
    assert scores["recall@100"] == pytest.approx((1.0 + 0.5) / 2)
    assert scores["mrr@10"] == pytest.approx((1.0 + 0.5) / 2)
    assert per_query({}, qrels)["q1"] == {"ndcg@10": 0.0, "recall@100": 0.0, "mrr@10": 0.0}  # nothing retrieved
    with pytest.raises(ValueError, match="No query"):
        evaluate_run(run, {"q3": {"x": 0}})


# -- dataset --------------------------------------------------------------------------------------------------
def test_load_beir_fixture():
    dataset = load_beir(TINY, "test")
    assert dataset.name == "beir_tiny" and dataset.split == "test"
    assert len(dataset.corpus) == 6 and dataset.corpus[4] == {
        "id": "PMC/5 x", "title": "Physical activity and depressive symptoms in adolescents",
        "text": dataset.corpus[4]["text"]}
    assert sorted(dataset.qrels) == ["q1", "q2", "q3"]  # q7 has no query text, q9 no judgment
    assert dataset.qrels["q3"] == {"d4": 1, "PMC/5 x": 1, "d6": 0}
    assert dataset.queries["q2"].startswith("Staying awake")


def test_load_beir_errors_name_the_problem(tmp_path):
    with pytest.raises(DatasetError, match=r"qrels file .*dev.tsv \(splits here: test, train\)"):
        load_beir(TINY, "dev")
    with pytest.raises(DatasetError, match="No BEIR corpus file"):
        load_beir(tmp_path, "test")
    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text('{"_id": "a", "text": "x"}\n')
    (tmp_path / "queries.jsonl").write_text('{"_id": "q", "text": "y"}\n')
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq\ta\n")
    with pytest.raises(DatasetError, match=r"test.tsv:2: expected"):
        load_beir(tmp_path, "test")
    (tmp_path / "corpus.jsonl").write_text("{not json\n")
    with pytest.raises(DatasetError, match=r"corpus.jsonl:1 is not valid JSON"):
        load_beir(tmp_path, "test")


def test_slice_dataset_keeps_answerable_queries():
    dataset = load_beir(TINY, "test")
    sliced = slice_dataset(dataset, max_docs=4)
    # half the budget (2 documents) for relevant ones: q1 (d1) and q2 (d3) fit, q3 (two more) does not
    assert [doc["id"] for doc in sliced.corpus] == ["d1", "d2", "d3", "d4"]
    assert list(sliced.qrels) == ["q1", "q2"] and sliced.sliced
    assert list(slice_dataset(dataset, max_queries=1).qrels) == ["q1"]
    assert not slice_dataset(dataset).sliced and len(slice_dataset(dataset).corpus) == 6
    assert [doc["id"] for doc in slice_dataset(dataset, max_docs=1).corpus] == ["d1"]
    only_q2 = replace(dataset, queries={"q2": dataset.queries["q2"]}, qrels={"q2": dataset.qrels["q2"]})
    with pytest.raises(DatasetError, match="keeps no judged query"):
        slice_dataset(only_q2, max_docs=1)  # d1 is the only document, q2 needs d3


def test_export_corpus_round_trips_ids(tmp_path):
    from haystack import Document

    dataset = load_beir(TINY, "test")
    (tmp_path / "stale.md").write_text("old")
    paths = export_corpus(dataset, tmp_path)
    assert [p.name for p in paths][4] == file_name("PMC/5 x") == "PMC%2F5%20x.md"
    assert not (tmp_path / "stale.md").exists()
    text = paths[0].read_text()
    assert text.startswith('---\ntitle: "Vitamin D supplementation and bone mineral density"\n---\n\nIn a randomised')
    before = paths[0].stat().st_mtime_ns
    export_corpus(dataset, tmp_path)
    assert paths[0].stat().st_mtime_ns == before  # unchanged files are not rewritten
    assert beir_id(Document(content="x", meta={"source": "PMC%2F5%20x.md"})) == "PMC/5 x"
    with pytest.raises(ValueError, match="no benchmark source"):
        beir_id(Document(content="x", meta={"source": "notes.txt"}))


def test_workdir_inside_the_repository_is_refused():
    with pytest.raises(ValueError, match="inside Gatehouse.s own files"):
        run_benchmark(TINY, workdir=PROJECT / "eval" / "bench-data")
    with pytest.raises(ValueError, match="depth must be at least 100"):
        run_benchmark(TINY, workdir=PROJECT / "data" / "x", depth=10)


# -- real runs --------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_cli_then_cached_rerun_on_the_tiny_fixture(tmp_path, monkeypatch):
    monkeypatch.delenv("GATEHOUSE_EMBEDDING_CACHE")  # the benchmark's own cache, in its workdir
    workdir, output = tmp_path / "work", tmp_path / "out" / "report.json"
    result = subprocess.run(
        [GATEHOUSE, "bench", "retrieval", "--dataset", str(TINY), "--split", "test", "--workdir", str(workdir),
         "--output", str(output), "--embedder-sample", "6", "--quiet"],
        cwd=PROJECT, env={**os.environ, "GATEHOUSE_DATA_DIR": str(tmp_path / "data")},
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    for label in ("BM25 (reference)", "dense only (reference)", "Gatehouse hybrid", "ingest (index.yml)",
                  "plain Haystack: BM25+dense RRF", "InMemory BM25 + embedding retrievers, RRF joiner",
                  "bare embedder", "ingest / bare embedder: x", "nDCG@10", "R@100", "MRR@10", "P50 ms", "P95 ms"):
        assert label in result.stdout
    report = json.loads(output.read_text())
    assert report["dataset"]["queries"] == 3 and report["ingest"]["written"] == 6
    assert report["ingest"]["encoded"] == 6  # one chunk per document, all new
    gatehouse = report["systems"]["gatehouse"]
    assert set(gatehouse) >= {"ndcg@10", "recall@100", "mrr@10", "latency_ms"}
    # six distinct topics: every system puts the relevant documents first
    for system in report["systems"].values():
        assert (system["ndcg@10"], system["recall@100"], system["mrr@10"]) == (1.0, 1.0, 1.0)

    again = run_benchmark(TINY, split="test", workdir=workdir, embedder_sample=0, progress=False)
    assert again["ingest"]["written"] == 6 and again["ingest"]["removed_before"] == 6  # re-ingested...
    assert again["ingest"]["encoded"] == 0  # ...from the embedding cache on disk
    assert again["embedder"] is None
    assert again["systems"]["gatehouse"]["ndcg@10"] == 1.0
    assert set(again["systems"]) == {"gatehouse", "bm25", "dense", "haystack"} and "postgres" not in again
    reused = run_benchmark(TINY, split="test", workdir=workdir, embedder_sample=0, reuse_index=True,
                           references=False, progress=False)
    assert reused["ingest"]["written"] == 0 and reused["ingest"]["skipped_unchanged"] == 6
    assert set(reused["systems"]) == {"gatehouse"}
    assert "reused, 6 documents unchanged" in format_table(reused)


@pytest.mark.slow
@pytest.mark.skipif(not (SCIFACT / "corpus.jsonl").is_file(), reason=f"BEIR SciFact not found at {SCIFACT}")
def test_scifact_slice_smoke(tmp_path, monkeypatch):
    monkeypatch.delenv("GATEHOUSE_EMBEDDING_CACHE")  # cold: the slice's chunks and sentences are encoded
    report = run_benchmark(SCIFACT, split="test", workdir=tmp_path / "scifact", max_docs=200, max_queries=40,
                           embedder_sample=16, progress=False)
    assert report["dataset"]["documents"] == 200 and report["dataset"]["sliced"]
    assert report["kb"] == "scifact-200d"
    assert report["ingest"]["written"] == 200 and report["ingest"]["chunks"] >= 200
    assert report["ingest"]["encoded"] > report["ingest"]["chunks"]  # chunks and their sentences, cold cache
    bare = report["embedder"]
    assert bare["texts"] == 16 and bare["ingest_texts"]["texts"] > 16  # the chunks and sentences of 16 documents
    assert 20 <= report["dataset"]["queries"] <= 40
    for system in report["systems"].values():
        assert 0.5 < system["ndcg@10"] <= 1.0 and 0.5 < system["recall@100"] <= 1.0
    hybrid = report["systems"]["gatehouse"]
    assert hybrid["ndcg@10"] >= max(report["systems"]["bm25"]["ndcg@10"], report["systems"]["dense"]["ndcg@10"]) - 0.02


def test_the_plain_haystack_reference_is_haystacks_in_memory_hybrid_with_the_same_model():
    from haystack import Document
    from haystack.components.joiners import DocumentJoiner
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever, InMemoryEmbeddingRetriever

    from gatehouse.components.embedders.embedding import EmbeddingBackend

    texts = {"keys": "Rotate an API key from the console; the old key stops working after a day.",
             "refunds": "Annual plans are refunded pro rata for the unused months.",
             "sso": "Single sign-on works with SAML identity providers.",
             "exports": "Audit logs can be exported as JSON lines to a storage bucket."}
    vectors = EmbeddingBackend.get(cache_dir="off").embed(list(texts.values()))
    chunks = [Document(id=name, content=text, meta={"source": f"{name}.md"}, embedding=[float(x) for x in vector])
              for (name, text), vector in zip(texts.items(), vectors, strict=True)]
    pipeline = haystack_reference(chunks, top_k=3)
    kinds = {name: type(pipeline.get_component(name)) for name in ("bm25", "dense", "joiner")}
    assert kinds == {"bm25": InMemoryBM25Retriever, "dense": InMemoryEmbeddingRetriever, "joiner": DocumentJoiner}
    assert pipeline.get_component("joiner").join_mode.value == "reciprocal_rank_fusion"
    for query, expected in (("How do I rotate my API key?", "keys"), ("Can I get my money back for a yearly plan?",
                                                                        "refunds")):
        found = pipeline.run({"query_embedder": {"text": query}, "bm25": {"query": query}})["joiner"]["documents"]
        assert found[0].id == expected and len(found) <= 4  # each retriever's top 3, fused
        assert [d.score for d in found] == sorted((d.score for d in found), reverse=True)
    # the query embedder is Haystack's, with the same model as Gatehouse's: the same vector
    embedded = pipeline.get_component("query_embedder").run(text=texts["sso"])["embedding"]
    assert embedded == pytest.approx(chunks[2].embedding, abs=1e-5)


@pytest.mark.slow
def test_the_embedded_store_and_postgresql_side_by_side_in_one_run(tmp_path, monkeypatch, postgres):
    monkeypatch.delenv("GATEHOUSE_EMBEDDING_CACHE")
    monkeypatch.setenv("GATEHOUSE_POSTGRES_URL", "postgresql://nobody@127.0.0.1:1/none")  # unused: the option wins
    url = postgres.new_database().replace("postgresql://postgres@", "postgresql://postgres:hunter2@")  # trust auth
    report = run_benchmark(TINY, split="test", workdir=tmp_path / "work", embedder_sample=0, progress=False,
                           postgres_url=url)
    assert report["ingest"]["written"] == 6 and report["postgres"]["ingest"]["written"] == 6
    assert report["postgres"]["ingest"]["encoded"] == 0  # the embedded store's run filled the embedding cache
    assert set(report["postgres"]["systems"]) == {"gatehouse", "bm25", "dense"}
    for system in [*report["systems"].values(), *report["postgres"]["systems"].values()]:
        assert (system["ndcg@10"], system["recall@100"], system["mrr@10"]) == (1.0, 1.0, 1.0)
    assert "hunter2" not in json.dumps(report) and "***" in report["postgres"]["url"]
    table = format_table(report)
    assert "embedded store (local shard)" in table and f"PostgreSQL ({report['postgres']['url']})" in table
    assert "ingest (index.yml), embedded store: 6 documents" in table
    assert "ingest (index.yml), PostgreSQL: 6 documents" in table
    assert table.count("floor: embed + bare search") == 2
    import psycopg

    with psycopg.connect(url) as connection:  # the PostgreSQL run wrote there, and the local run did not
        assert connection.execute("SELECT count(*) FROM gatehouse_chunks").fetchone()[0] == 6
