"""
The retrieval benchmark: a BEIR-format dataset through the real `index.yml` and `retrieve.yml`.

`gatehouse bench retrieval --dataset DIR --split test --output FILE.json` does, in one run:

1. **Ingest.** Each corpus document is written to `<workdir>/corpus/` as a markdown file (front matter `title`,
   body `text`; the file is named after the BEIR id, so every chunk's `source` names its document) and ingested
   into a dedicated knowledge base through `pipelines/index.yml`, the same path as `gatehouse ingest`. The stores
   and the embedding cache live in `<workdir>/data` (the run's `GATEHOUSE_DATA_DIR`), so a second run re-encodes
   nothing. Unless `reuse_index` is set the knowledge base is emptied first, so the ingestion throughput (docs/s)
   is measured on every run; it is printed next to the bare embedder's throughput on the same texts (the chunks and
   sentences ingest encoded for the first documents) and on one text per document.
2. **Retrieve.** Every judged query of the split runs through the retrieval pipeline (`retrieve.yml` by default),
   asked for `depth` documents; per-query latency P50/P95 is recorded. Two references run over the same index:
   plain BM25 (`eval/pipelines/bm25_reference.yml`) and dense only (`eval/pipelines/dense_reference.yml`). The floor
   under them is encoding the query plus the store's bare dense search.
   With `postgres_url` (the CLI's `--postgres-url`, default `GATEHOUSE_POSTGRES_URL`) steps 1-2 run twice in the
   same run: on the embedded store (`<workdir>/data/store`) and on that PostgreSQL database (the same index.yml and
   retrieve.yml, the store chosen by `GATEHOUSE_POSTGRES_URL`, the same embedding cache).
   The plain-Haystack reference is what a Haystack user builds first: the same chunks in Haystack's
   `InMemoryDocumentStore`, `InMemoryBM25Retriever` and `InMemoryEmbeddingRetriever` joined by
   `DocumentJoiner(join_mode="reciprocal_rank_fusion")`, the query embedded by `SentenceTransformersTextEmbedder` with
   the same model (the chunks' vectors are the same model's, read from the benchmark's embedding cache), each
   retriever taking `2 × depth` chunks (200 at depth 100, as many as Gatehouse's hybrid takes per list).
3. **Score.** Chunk hits become document hits in the pipeline's own order (a document ranks where its first
   chunk does); nDCG@10, recall@100 and MRR@10 come from `gatehouse.eval.metrics_ir`.

Usage:
```python
from gatehouse.eval.retrieval_bench import format_table, run_benchmark

report = run_benchmark("../shared/data/scifact", split="test", workdir="data/bench/scifact")
print(format_table(report))
report["systems"]["gatehouse"]["ndcg@10"]       # the embedded store; report["systems"]["haystack"]: plain Haystack
report = run_benchmark("../shared/data/scifact", postgres_url="postgresql://...")   # + report["postgres"]["systems"]
```
"""

import hashlib
import json
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from haystack import Document, Pipeline
from tqdm import tqdm

from gatehouse import settings
from gatehouse.eval.metrics_ir import evaluate_run
from gatehouse.stats import percentile

REFERENCE_DIR = Path(__file__).resolve().parent / "pipelines"
REFERENCES = {"bm25": REFERENCE_DIR / "bm25_reference.yml", "dense": REFERENCE_DIR / "dense_reference.yml"}
SYSTEM_LABELS = {"bm25": "BM25 (reference)", "dense": "dense only (reference)", "gatehouse": "Gatehouse hybrid",
                 "haystack": "plain Haystack: BM25+dense RRF"}
POSTGRES_URL = "GATEHOUSE_POSTGRES_URL"
METRICS = ("ndcg@10", "recall@100", "mrr@10")


class DatasetError(ValueError):
    """A BEIR dataset folder that cannot be read, with the reason."""


@dataclass
class BeirDataset:
    """One split of a BEIR dataset: the corpus, the split's judged queries and their judgments."""

    name: str
    split: str
    corpus: list[dict[str, str]]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    sliced: bool = field(default=False)


def _read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as error:
                raise DatasetError(f"{path}:{number} is not valid JSON ({error.msg}).") from error


def load_beir(directory: str | Path, split: str) -> BeirDataset:
    """
    Read a BEIR dataset folder: `corpus.jsonl` (`_id`, `title`, `text`), `queries.jsonl` (`_id`, `text`) and
    `qrels/<split>.tsv` (`query-id`, `corpus-id`, `score`, with a header line).

    :param directory: The dataset folder.
    :param split: The qrels split (`train`, `dev`, `test`).
    :returns: The corpus and the split's judged queries (those with a query text).
    :raises DatasetError: If a file is missing or malformed, naming it.
    """
    folder = Path(directory).expanduser()
    paths = {"corpus": folder / "corpus.jsonl", "queries": folder / "queries.jsonl",
             "qrels": folder / "qrels" / f"{split}.tsv"}
    for label, path in paths.items():
        if not path.is_file():
            available = sorted(p.stem for p in (folder / "qrels").glob("*.tsv")) if label == "qrels" else []
            hint = f" (splits here: {', '.join(available)})" if available else ""
            raise DatasetError(f"No BEIR {label} file at {path}{hint}.")
    corpus = []
    for row in _read_jsonl(paths["corpus"]):
        if "_id" not in row:
            raise DatasetError(f"A corpus record in {paths['corpus']} has no '_id'.")
        corpus.append({"id": str(row["_id"]), "title": str(row.get("title") or ""), "text": str(row.get("text") or "")})
    texts = {str(row["_id"]): str(row.get("text") or "") for row in _read_jsonl(paths["queries"]) if "_id" in row}
    qrels: dict[str, dict[str, int]] = {}
    with paths["qrels"].open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            parts = line.rstrip("\n").split("\t")
            if number == 1 and not parts[-1].lstrip("-").isdigit():
                continue  # the header
            if len(parts) != 3 or not parts[2].lstrip("-").isdigit():
                raise DatasetError(f"{paths['qrels']}:{number}: expected 'query-id<TAB>corpus-id<TAB>score'.")
            qrels.setdefault(parts[0], {})[parts[1]] = int(parts[2])
    qrels = {query: judged for query, judged in qrels.items() if query in texts}
    if not qrels:
        raise DatasetError(f"No query of {paths['qrels']} has a text in {paths['queries']}.")
    return BeirDataset(name=folder.resolve().name, split=split, corpus=corpus,
                       queries={query: texts[query] for query in qrels}, qrels=qrels)


def slice_dataset(dataset: BeirDataset, max_docs: int | None = None, max_queries: int | None = None) -> BeirDataset:
    """
    A deterministic slice: at most `max_queries` judged queries (in qrels order) and at most `max_docs` documents.

    With `max_docs`, queries are taken in order while their relevant documents fit in half of the budget; the rest
    is filled with the other documents in corpus order. Only queries whose relevant documents all made it in are
    kept, so every kept query can be answered from the slice.

    :param dataset: The full dataset.
    :param max_docs: Most documents to keep; None keeps the corpus.
    :param max_queries: Most queries to keep; None keeps them all.
    :returns: The sliced dataset (the input is not changed).
    """
    query_ids = list(dataset.qrels)[:max_queries] if max_queries else list(dataset.qrels)
    corpus = dataset.corpus
    if max_docs is not None and max_docs < len(corpus):
        known = {doc["id"] for doc in corpus}
        chosen: dict[str, None] = {}
        for query in query_ids:
            relevant = [doc for doc, grade in dataset.qrels[query].items() if grade > 0 and doc in known]
            if len(chosen) + len(set(relevant) - set(chosen)) > max_docs // 2:
                break
            chosen.update(dict.fromkeys(relevant))
        for doc in corpus:
            if len(chosen) >= max_docs:
                break
            chosen.setdefault(doc["id"])
        corpus = [doc for doc in corpus if doc["id"] in chosen]
        query_ids = [q for q in query_ids
                     if all(doc in chosen for doc, grade in dataset.qrels[q].items() if grade > 0)]
    if not query_ids:
        raise DatasetError("The slice keeps no judged query: raise max_docs.")
    return BeirDataset(
        name=dataset.name, split=dataset.split, corpus=corpus,
        queries={q: dataset.queries[q] for q in query_ids}, qrels={q: dataset.qrels[q] for q in query_ids},
        sliced=dataset.sliced or corpus is not dataset.corpus or len(query_ids) < len(dataset.qrels),
    )


def file_name(doc_id: str) -> str:
    """The markdown file a corpus document is written to (its BEIR id, percent-encoded)."""
    return quote(doc_id, safe="") + ".md"


def beir_id(chunk: Document) -> str:
    """The BEIR id of the document a retrieved chunk came from (its `source` file name)."""
    source = str(chunk.meta.get("source") or "")
    if not source.endswith(".md"):
        raise ValueError(f"Chunk {chunk.id} has no benchmark source file name (source={source!r}).")
    return unquote(Path(source).name.removesuffix(".md"))


def export_corpus(dataset: BeirDataset, folder: str | Path) -> list[Path]:
    """
    Write each corpus document as `<folder>/<id>.md` with its title as front matter (unchanged files are kept,
    files of documents not in the corpus are removed).

    :param dataset: The dataset.
    :param folder: Where the files go.
    :returns: The files, in corpus order.
    """
    target = Path(folder)
    target.mkdir(parents=True, exist_ok=True)
    paths = []
    for doc in dataset.corpus:
        path = target / file_name(doc["id"])
        text = f"---\ntitle: {json.dumps(doc['title'], ensure_ascii=False)}\n---\n\n{doc['text']}\n"
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
        paths.append(path)
    keep = {path.name for path in paths}
    for stale in target.glob("*.md"):
        if stale.name not in keep:
            stale.unlink()
    return paths


@contextmanager
def environment(name: str, value: str | None) -> Iterator[None]:
    """Set (or, with None, unset) an environment variable for the duration of the block."""
    previous = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = previous


def data_dir(path: Path) -> Any:
    """Point `GATEHOUSE_DATA_DIR` at the benchmark's own folder for the duration of the run."""
    return environment("GATEHOUSE_DATA_DIR", str(path))


def kb_name(dataset: BeirDataset) -> str:
    """The benchmark knowledge base: the dataset's name (slices get their size appended, so none mixes)."""
    base = re.sub(r"[^a-z0-9_-]+", "-", dataset.name.lower()).strip("-_")[:40] or "bench"
    return f"{base}-{len(dataset.corpus)}d" if dataset.sliced else base


def _kb_chunks(writer: Any, kb: str) -> list[Document]:
    """The chunks the lexical store of `index.yml`'s writer holds for a knowledge base (re-read after writes)."""
    return writer.lexical_store.filter_documents({"field": "meta.kb", "operator": "==", "value": kb})


def ingest_dataset(dataset: BeirDataset, workdir: Path, kb: str, *, reuse_index: bool, progress: bool) -> dict[str, Any]:
    """
    Ingest the corpus through `index.yml` and measure it.

    :param dataset: The dataset.
    :param workdir: The benchmark workdir (the corpus is exported to `<workdir>/corpus`).
    :param kb: The knowledge base to ingest into.
    :param reuse_index: Keep what the knowledge base holds (unchanged files are skipped); otherwise it is emptied
        first and everything is written again (embeddings still come from the cache).
    :param progress: Show a progress bar.
    :returns: `documents`, `written`, `chunks`, `skipped_unchanged`, `failed`, `removed_before`, `seconds`,
        `docs_per_s`, `encoded` (texts the embedder had to encode; the rest came from the cache) and
        `max_chunks_per_document`.
    """
    from gatehouse.components.embedders.embedding import EmbeddingBackend
    from gatehouse.ingest import IngestGroup, ingest
    from gatehouse.pipelines import load_pipeline

    files = export_corpus(dataset, workdir / "corpus")
    writer = load_pipeline("index").get_component("writer")
    removed = 0
    if not reuse_index:
        kb_filter = {"field": "meta.kb", "operator": "==", "value": kb}
        removed = writer.lexical_store.delete_by_filter(kb_filter)
        writer.dense_store.delete_by_filter(kb_filter)  # nothing left when both are the local shard
    backend = EmbeddingBackend.get()
    encoded_before = backend.encoded_count
    started = time.perf_counter()
    summary = ingest([IngestGroup(kb=kb, tenant=None, root=workdir / "corpus", files=files)], progress=progress)
    seconds = time.perf_counter() - started
    per_document: dict[str, int] = {}
    for chunk in _kb_chunks(writer, kb):
        per_document[chunk.meta["doc_id"]] = per_document.get(chunk.meta["doc_id"], 0) + 1
    return {
        "documents": len(files),
        "written": summary.documents_written,
        "chunks": sum(per_document.values()),
        "skipped_unchanged": len(summary.skipped),
        "failed": [f"{item['source']}: {item['reason']}" for item in summary.failed],
        "removed_before": removed,
        "seconds": round(seconds, 2),
        "docs_per_s": round(summary.documents_written / seconds, 1) if summary.documents_written else None,
        "encoded": backend.encoded_count - encoded_before,
        "max_chunks_per_document": max(per_document.values(), default=1),
    }


def embedder_throughput(dataset: BeirDataset, sample: int, kb: str) -> dict[str, Any]:
    """
    The bare embedder (no pipeline, no cache) on the first `sample` corpus documents, twice: on one text per document
    (title and abstract, as a one-vector-per-document index embeds them) and on exactly the texts ingest encoded for
    those documents (each chunk as `index.yml`'s embedder reads it, and each chunk's sentences).

    :returns: `texts`, `seconds`, `docs_per_s` (one text per document) and `ingest_texts` (`texts`, `seconds`,
        `docs_per_s` on the texts ingest encodes).
    """
    from gatehouse.components.embedders.document_embedder import embedded_text
    from gatehouse.components.embedders.embedding import EmbeddingBackend
    from gatehouse.components.sentences import sentence_texts
    from gatehouse.pipelines import load_pipeline

    documents = dataset.corpus[:sample]
    backend = EmbeddingBackend.get(cache_dir="off")
    backend.embed(["warm up the model outside the measurement"] * 8)

    def timed(texts: list[str]) -> dict[str, Any]:
        started = time.perf_counter()
        backend.embed(texts)
        seconds = time.perf_counter() - started
        return {"texts": len(texts), "seconds": round(seconds, 2), "docs_per_s": round(len(documents) / seconds, 1)}

    index = load_pipeline("index")
    embedder, sentences = index.get_component("embedder"), index.get_component("sentence_embedder")
    chosen = {doc["id"] for doc in documents}
    chunks = [chunk for chunk in _kb_chunks(index.get_component("writer"), kb) if beir_id(chunk) in chosen]
    ingest_texts = [embedded_text(chunk, embedder.meta_fields_to_embed, embedder.embedding_separator)
                    for chunk in chunks]
    ingest_texts += [text for chunk in chunks for text in sentence_texts(chunk, sentences.sentences)]
    return {**timed([f"{doc['title']}\n{doc['text']}" for doc in documents]), "ingest_texts": timed(ingest_texts)}


def engine_floor(dataset: BeirDataset, kb: str, depth: int, postgres_url: str | None = None) -> dict[str, Any]:
    """
    The floor under a retrieval pipeline, per query: encoding the query (no cache) and the bare engine search of the
    store (dense, filtered to the knowledge base, ids only: the local shard, or PostgreSQL at `postgres_url`),
    P50/P95 in ms.
    """
    from gatehouse.components.embedders.embedding import EmbeddingBackend
    from gatehouse.document_stores.edge_document_store import EdgeDocumentStore

    backend = EmbeddingBackend.get(cache_dir="off")
    if postgres_url:
        from gatehouse.document_stores.postgres_store_of import postgres_store

        store: Any = postgres_store({"url": postgres_url})
    else:
        store = EdgeDocumentStore()
    kb_filter = {"field": "meta.kb", "operator": "==", "value": kb}
    embed_ms, search_ms = [], []
    for text in dataset.queries.values():
        started = time.perf_counter()
        vector = backend.embed([text])[0].tolist()
        embedded = time.perf_counter()
        store.nearest_ids(vector, filters=kb_filter, top_k=depth)
        embed_ms.append((embedded - started) * 1000)
        search_ms.append((time.perf_counter() - embedded) * 1000)
    total = [a + b for a, b in zip(embed_ms, search_ms, strict=True)]
    if postgres_url:
        store.close()
    return {name: {"p50": round(percentile(values, 0.5), 2), "p95": round(percentile(values, 0.95), 2)}
            for name, values in (("embed_ms", embed_ms), ("search_ms", search_ms), ("total_ms", total))}


def _pipeline_inputs(pipeline: Pipeline, query: str, kb: str, keep_chunks: int, depth: int) -> dict[str, Any]:
    """
    Inputs for a retrieval pipeline: what `RetrievalPipeline` gives it (the query, the knowledge base), plus the
    run-time `top_k` of the stages after retrieval (hybrid search, ranker): `depth` for a stage that ranks documents
    (`group_by` set), `keep_chunks` chunks for the others. Retrievers keep their YAML depth, unless a retriever is the
    pipeline's last stage (the references), which then returns `keep_chunks` chunks.
    """
    from gatehouse.components.retrievers.retrieval_pipeline import retrieval_input_mapping

    mapping = retrieval_input_mapping(pipeline)
    inputs: dict[str, dict[str, Any]] = {}
    for name, value in (("query", query), ("kbs", [kb])):
        for path in mapping.get(name, []):
            component_name, socket = path.split(".", 1)
            inputs.setdefault(component_name, {})[socket] = value
    last = set(pipeline.outputs())
    for name, sockets in pipeline.inputs().items():
        stage = pipeline.get_component(name)
        if "top_k" in sockets and (name in last or not hasattr(stage, "document_store")):
            inputs.setdefault(name, {})["top_k"] = depth if getattr(stage, "group_by", None) else keep_chunks
    return inputs


def run_queries(
    pipeline: Pipeline, dataset: BeirDataset, kb: str, depth: int, keep_chunks: int, label: str = "retrieve",
    progress: bool = True, inputs_of: Any = None,
) -> tuple[dict[str, list[str]], list[float]]:
    """
    Run a retrieval pipeline for every query of the dataset.

    :param pipeline: A loaded retrieval pipeline whose one output carries `documents`.
    :param dataset: The dataset (its queries).
    :param kb: The benchmark knowledge base.
    :param depth: Documents kept per query.
    :param keep_chunks: The run-time `top_k` of the stages after retrieval: enough chunks for `depth` documents.
    :param label: Progress bar label.
    :param progress: Show a progress bar.
    :param inputs_of: The pipeline's inputs for a query text; None gives what `RetrievalPipeline` gives
        (`_pipeline_inputs`).
    :returns: Query id to ranked BEIR document ids (at most `depth`; a document ranks where its first chunk does),
        and per-query latencies in ms.
    :raises ValueError: If the pipeline has no single `documents` output.
    """
    outputs = pipeline.outputs()
    if len(outputs) != 1 or "documents" not in next(iter(outputs.values())):
        raise ValueError(f"The {label} pipeline must have one output with 'documents' (it has {outputs}).")
    pipeline.warm_up()
    run: dict[str, list[str]] = {}
    latencies: list[float] = []
    for query_id, text in tqdm(dataset.queries.items(), desc=label, unit="q", disable=not progress):
        inputs = inputs_of(text) if inputs_of else _pipeline_inputs(pipeline, text, kb, keep_chunks, depth)
        started = time.perf_counter()
        result = pipeline.run(inputs)
        latencies.append((time.perf_counter() - started) * 1000)
        chunks = next(iter(result.values()))["documents"]
        run[query_id] = list(dict.fromkeys(beir_id(chunk) for chunk in chunks))[:depth]
    return run, latencies


def haystack_reference(chunks: list[Document], top_k: int) -> Pipeline:
    """
    The hybrid retrieval a Haystack user builds first, over `chunks` (with their `embedding`): Haystack's
    `InMemoryDocumentStore`, `InMemoryBM25Retriever` (its defaults) and `InMemoryEmbeddingRetriever` (cosine),
    `top_k` each, joined by `DocumentJoiner(join_mode="reciprocal_rank_fusion")`; the query embedded by
    `SentenceTransformersTextEmbedder` with the configured embedding model. Inputs: `query_embedder.text`,
    `bm25.query`.

    :param chunks: The documents to search, each with its embedding.
    :param top_k: Chunks taken from each retriever.
    :returns: The pipeline, warmed up.
    """
    from haystack.components.joiners import DocumentJoiner
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever, InMemoryEmbeddingRetriever
    from haystack.document_stores.in_memory import InMemoryDocumentStore
    from haystack_integrations.components.embedders.sentence_transformers import SentenceTransformersTextEmbedder

    store = InMemoryDocumentStore(embedding_similarity_function="cosine")
    store.write_documents(chunks)
    pipeline = Pipeline()
    pipeline.add_component("query_embedder", SentenceTransformersTextEmbedder(model=settings.embedding_model(),
                                                                              progress_bar=False))
    pipeline.add_component("bm25", InMemoryBM25Retriever(store, top_k=top_k))
    pipeline.add_component("dense", InMemoryEmbeddingRetriever(store, top_k=top_k))
    pipeline.add_component("joiner", DocumentJoiner(join_mode="reciprocal_rank_fusion"))
    pipeline.connect("query_embedder.embedding", "dense.query_embedding")
    pipeline.connect("bm25.documents", "joiner.documents")
    pipeline.connect("dense.documents", "joiner.documents")
    pipeline.warm_up()
    return pipeline


def embedded_chunks(writer: Any, kb: str) -> list[Document]:
    """
    The knowledge base's chunks as index.yml stored them, each with the vector its embedder gave it (the same model
    on the same text, from the embedding cache).
    """
    from gatehouse.components.embedders.document_embedder import embedded_text
    from gatehouse.components.embedders.embedding import EmbeddingBackend
    from gatehouse.pipelines import load_pipeline

    embedder = load_pipeline("index").get_component("embedder")
    chunks = _kb_chunks(writer, kb)
    texts = [embedded_text(chunk, embedder.meta_fields_to_embed, embedder.embedding_separator) for chunk in chunks]
    vectors = EmbeddingBackend.get().embed(texts) if texts else []
    return [Document(id=chunk.id, content=chunk.content, meta=dict(chunk.meta), embedding=[float(x) for x in vector])
            for chunk, vector in zip(chunks, vectors, strict=True)]


def _store_runs(dataset: BeirDataset, pipeline: str | Path, kb: str, workdir: Path, depth: int, *, reuse_index: bool,
                references: bool, progress: bool, postgres_url: str | None) -> dict[str, Any]:
    """Ingest into one store (the embedded one, or PostgreSQL at `postgres_url`), run the systems, take the floor."""
    from gatehouse.pipelines import load_pipeline

    with environment(POSTGRES_URL, postgres_url):
        ingest_report = ingest_dataset(dataset, workdir, kb, reuse_index=reuse_index, progress=progress)
        keep_chunks = depth * max(ingest_report["max_chunks_per_document"], 1)
        systems: dict[str, Any] = {}
        pipelines = {"gatehouse": pipeline, **(REFERENCES if references else {})}
        suffix = " (PostgreSQL)" if postgres_url else ""
        for name, source in pipelines.items():
            run, latencies = run_queries(load_pipeline(source), dataset, kb, depth, keep_chunks, label=name + suffix,
                                         progress=progress)
            systems[name] = _system(run, latencies, dataset)
        floor = engine_floor(dataset, kb, depth, postgres_url)
    return {"ingest": ingest_report, "systems": systems, "floor": floor, "keep_chunks": keep_chunks}


def _system(run: dict[str, list[str]], latencies: list[float], dataset: BeirDataset) -> dict[str, Any]:
    scores = evaluate_run(run, dataset.qrels)
    return {
        **{name: round(scores[name], 4) for name in METRICS},
        "queries": scores["queries"],
        "latency_ms": {"p50": round(percentile(latencies, 0.5), 1), "p95": round(percentile(latencies, 0.95), 1)},
    }


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def run_benchmark(
    dataset_dir: str | Path,
    *,
    split: str = "test",
    workdir: str | Path | None = None,
    pipeline: str | Path = "retrieve",
    depth: int = 100,
    reuse_index: bool = False,
    max_docs: int | None = None,
    max_queries: int | None = None,
    embedder_sample: int = 256,
    references: bool = True,
    progress: bool = True,
    postgres_url: str | None = None,
) -> dict[str, Any]:
    """
    Run the whole benchmark (see the module docstring).

    :param dataset_dir: A BEIR dataset folder.
    :param split: The qrels split to score.
    :param workdir: Where the exported corpus and the benchmark's stores and embedding cache go; None uses
        `<GATEHOUSE_DATA_DIR>/bench/<dataset>`.
    :param pipeline: The retrieval pipeline under test (name in the pipelines folder or YAML path).
    :param depth: Documents retrieved per query (at least 100 for recall@100).
    :param reuse_index: Keep the knowledge base from the last run (unchanged files are skipped) instead of
        re-ingesting it.
    :param max_docs: Benchmark a slice of at most this many documents (see `slice_dataset`).
    :param max_queries: Score at most this many queries.
    :param embedder_sample: Texts the bare embedder's throughput is measured on (0 skips it).
    :param references: Also run the BM25 and dense-only references (per store) and the plain-Haystack reference.
    :param progress: Show progress bars.
    :param postgres_url: Also ingest into and search this PostgreSQL database (its `gatehouse_chunks` table), in the
        same run; None runs the embedded store only (whatever `GATEHOUSE_POSTGRES_URL` says).
    :returns: The report: `dataset`, `ingest`, `embedder`, `systems` (`gatehouse`, `bm25`, `dense` on the embedded
        store, `haystack`: the plain-Haystack reference), `floor`, `postgres` (`url` without its password, `ingest`,
        `systems`, `floor`; with `postgres_url`), `config`.
    :raises DatasetError: If the dataset cannot be read.
    """
    from gatehouse.pipelines import load_pipeline, pipeline_path, pipelines_dir

    if depth < 100:
        raise ValueError(f"depth must be at least 100 to score recall@100 (got {depth}).")
    dataset = slice_dataset(load_beir(dataset_dir, split), max_docs=max_docs, max_queries=max_queries)
    work = Path(workdir).expanduser() if workdir else settings.data_dir() / "bench" / dataset.name
    work = work.resolve()
    shipped = settings.bundled_dir()
    if work.is_relative_to(shipped) and not work.is_relative_to(shipped / "data"):
        raise ValueError(f"The benchmark workdir {work} would be inside Gatehouse's own files: use a folder under data/.")
    kb = kb_name(dataset)
    postgres = None
    with data_dir(work / "data"):
        local = _store_runs(dataset, pipeline, kb, work, depth, reuse_index=reuse_index, references=references,
                            progress=progress, postgres_url=None)
        systems = local["systems"]
        with environment(POSTGRES_URL, None):
            embedder = embedder_throughput(dataset, embedder_sample, kb) if embedder_sample > 0 else None
            if references:
                writer = load_pipeline("index").get_component("writer")
                reference = haystack_reference(embedded_chunks(writer, kb), 2 * depth)
                run, latencies = run_queries(
                    reference, dataset, kb, depth, 2 * depth, label="haystack", progress=progress,
                    inputs_of=lambda text: {"query_embedder": {"text": text}, "bm25": {"query": text}})
                systems["haystack"] = _system(run, latencies, dataset)
        if postgres_url:
            from gatehouse.document_stores.postgres_errors import shown

            postgres = {"url": shown(postgres_url),
                        **_store_runs(dataset, pipeline, kb, work, depth, reuse_index=reuse_index,
                                      references=references, progress=progress, postgres_url=postgres_url)}
            postgres.pop("keep_chunks")
    retrieve_path = pipeline_path(pipeline)
    report = {
        "dataset": {"name": dataset.name, "path": str(Path(dataset_dir).resolve()), "split": split,
                    "documents": len(dataset.corpus), "queries": len(dataset.queries), "sliced": dataset.sliced},
        "kb": kb,
        "workdir": str(work),
        "depth": depth,
        "ingest": local["ingest"],
        "embedder": embedder,
        "systems": systems,
        "floor": local["floor"],
        "config": {"retrieve": str(retrieve_path), "retrieve_sha": _sha(retrieve_path.resolve()),
                   "index_sha": _sha(pipelines_dir() / "index.yml")},
    }
    if postgres is not None:
        report["postgres"] = postgres
    return report


def _system_lines(systems: dict[str, Any], floor: dict[str, Any] | None, names: tuple[str, ...]) -> list[str]:
    """The table rows of `names` among `systems`, then the floor under the hybrid's P50."""
    lines = []
    for name in names:
        if name not in systems:
            continue
        system = systems[name]
        lines.append(
            f"{SYSTEM_LABELS[name]:<31}{system['ndcg@10']:>9.4f}{system['recall@100']:>9.4f}{system['mrr@10']:>9.4f}"
            f"{system['latency_ms']['p50']:>9.1f}{system['latency_ms']['p95']:>9.1f}"
        )
    if floor and "gatehouse" in systems:
        p50 = systems["gatehouse"]["latency_ms"]["p50"]
        lines.append(
            f"{'floor: embed + bare search':<31}{'':>27}{floor['total_ms']['p50']:>9.1f}{floor['total_ms']['p95']:>9.1f}"
            f"   (embed {floor['embed_ms']['p50']:.1f} + search {floor['search_ms']['p50']:.2f} ms P50; hybrid P50 "
            f"= x{p50 / max(floor['total_ms']['p50'], 1e-9):.1f} the floor)"
        )
    return lines


def _ingest_line(ingest: dict[str, Any], store: str) -> str:
    if ingest["written"]:
        return (f"ingest (index.yml){store}: {ingest['written']} documents, {ingest['chunks']} chunks in "
                f"{ingest['seconds']} s = {ingest['docs_per_s']} docs/s; {ingest['encoded']} texts encoded, the rest "
                "from the embedding cache")
    return f"ingest (index.yml){store}: reused, {ingest['skipped_unchanged']} documents unchanged"


def format_table(report: dict[str, Any]) -> str:
    """The report as the table the command prints."""
    data = report["dataset"]
    postgres = report.get("postgres")
    lines = [
        (f"BEIR {data['name']} · split {data['split']} · {data['queries']} queries · {data['documents']} documents"
         f"{' (slice)' if data['sliced'] else ''} · depth {report['depth']}"),
        "",
        f"{'system':<31}{'nDCG@10':>9}{'R@100':>9}{'MRR@10':>9}{'P50 ms':>9}{'P95 ms':>9}",
    ]
    if postgres:
        lines.append("embedded store (local shard)")
    lines += _system_lines(report["systems"], report.get("floor"), ("bm25", "dense", "gatehouse"))
    if postgres:
        lines.append(f"PostgreSQL ({postgres['url']})")
        lines += _system_lines(postgres["systems"], postgres.get("floor"), ("bm25", "dense", "gatehouse"))
    if "haystack" in report["systems"]:
        lines.append("reference a Haystack user builds first (InMemory BM25 + embedding retrievers, RRF joiner)")
        lines += _system_lines(report["systems"], None, ("haystack",))
    ingest = report["ingest"]
    lines.append("")
    lines.append(_ingest_line(ingest, ", embedded store" if postgres else ""))
    if postgres:
        lines.append(_ingest_line(postgres["ingest"], ", PostgreSQL"))
    if report.get("embedder"):
        embedder = report["embedder"]
        same = embedder["ingest_texts"]
        lines.append(f"bare embedder (no pipeline, no cache), first {embedder['texts']} documents: "
                     f"{same['docs_per_s']} docs/s on the {same['texts']} texts ingest encodes for them (chunks and "
                     f"their sentences); {embedder['docs_per_s']} docs/s on one text per document")
        if ingest["written"] and ingest["docs_per_s"]:
            lines.append(f"ingest / bare embedder: x{ingest['docs_per_s'] / same['docs_per_s']:.2f} on the same texts; "
                         f"x{ingest['docs_per_s'] / embedder['docs_per_s']:.2f} against one text per document")
    return "\n".join(lines)
