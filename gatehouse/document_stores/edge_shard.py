"""
One embedded Qdrant shard (`qdrant-edge-py`) of a folder, opened once per process: the engine, the settings it was
created with, its BM25 encoders, its write lock and the repair of interrupted replacements. Imports neither Haystack
nor a model, so listing what a data folder holds costs a fraction of a second.

The shard holds three kinds of record: `chunk` (payload `id`, `content`, `meta`, and `version` when written by
`replace_documents`; vectors `dense`, `sentences` (the vectors of its sentences, scored by their best match),
`words`, `ngrams`), `kb_generation` (one per tenant and KB: the write counter, moved in the same update as the chunks
it counts) and `bm25_lengths` (one: how many chunks the shard holds and their total length under each analysis, moved
in the same update as the chunks). A chunk's point id is an unsigned 64-bit integer taken from its document id
(`point_id`), which the engine hands back as a Python int; shards written before kept UUIDs and are renumbered when
first opened (`renumber`).

BM25 normalises a chunk's length by the average length of the chunks, which the `words` and `ngrams` vectors are
encoded with (`avg_len` in `gatehouse.json`). When the true average (from `bm25_lengths`) has moved more than `DRIFT`
away from it, the shard re-encodes those vectors of every chunk from its payload (`rebalance`): the average moves
that far only when a share of the stored text comparable to DRIFT has changed, so ingesting stays linear overall.

Usage:
```python
from pathlib import Path
from gatehouse.document_stores.edge_shard import Shard, shard_settings

shard = Shard.at(Path("data/store"), shard_settings())
shard.metadata_counts(["tenant", "kb"])        # {("public", "faq"): 94, ...}
```
"""

import atexit
import hashlib
import json
import logging
import math
import os
import shutil
import stat
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from qdrant_edge import (
    CountRequest,
    Distance,
    EdgeConfig,
    EdgeShard,
    EdgeSparseVectorParams,
    EdgeVectorParams,
    FieldCondition,
    Filter,
    MatchValue,
    Modifier,
    MultiVectorComparator,
    MultiVectorConfig,
    PayloadSchemaType,
    Point,
    PointVectors,
    ScrollRequest,
    SparseVector,
    UpdateOperation,
)

from gatehouse.document_stores.analysis import Analyzer, Bm25Encoder
from gatehouse.document_stores.errors import (
    DATA_DIR_FIX,
    DataDirError,
    DataDirInUseError,
    data_dir_errors,
    require_writable,
)

logger = logging.getLogger(__name__)

FORMAT = 1
POINT_IDS = "u64"  # how chunks are numbered (`point_id`); absent in shards whose chunks have UUIDs
SETTINGS_FILE = "gatehouse.json"
ANALYSES = ("words", "ngrams")
DISTANCES = {"cosine": Distance.Cosine, "dot_product": Distance.Dot, "l2": Distance.Euclid}
INDEXED = {
    "record": PayloadSchemaType.Keyword,
    "meta.tenant": PayloadSchemaType.Keyword,
    "meta.kb": PayloadSchemaType.Keyword,
    "meta.doc_id": PayloadSchemaType.Keyword,
    "version": PayloadSchemaType.Integer,
}
CHUNK = FieldCondition(key="record", match=MatchValue("chunk"))
COUNTER = FieldCondition(key="record", match=MatchValue("kb_generation"))
ID_NAMESPACE = uuid.UUID("6f1c6a52-5e0b-4d38-9b55-2f6f0e8c1a7d")
LENGTHS_ID = str(uuid.uuid5(ID_NAMESPACE, "bm25-lengths"))
PAGE = 1000
GROUPS_KEPT = 500_000  # chunk -> group values kept between writes (`Shard.groups`)
DRIFT = 0.1
MIN_FREE_BYTES = 64 * 2**20


def point_id(document_id: str) -> int:
    """
    The engine's id of a chunk's document id: 64 bits of its SHA-256 (a SHA-256 hex id, as Haystack makes them, keeps
    its first 64 bits). The engine answers integer ids as Python ints, which cost a fraction of a UUID to build.
    """
    if len(document_id) == 64:
        try:
            return int(document_id[:16], 16)
        except ValueError:
            pass
    return int.from_bytes(hashlib.sha256(document_id.encode()).digest()[:8], "big")


def counter_id(tenant: str, kb: str) -> str:
    return str(uuid.uuid5(ID_NAMESPACE, f"kb-generation\x00{tenant}\x00{kb}"))


def kb_of(meta: dict[str, Any]) -> tuple[str, str]:
    return str(meta.get("tenant") or ""), str(meta.get("kb") or "")


def unallocated_bytes(folder: Path) -> int:
    """
    The bytes the files under `folder` may still take on disk: their size beyond the blocks they hold. The engine
    creates its memory-mapped files (segments, write-ahead log) at their full size, sparse, and fills them as it opens
    the shard (it reads them in) and writes.
    """
    total = 0
    for root, _, names in os.walk(folder):
        for name in names:
            try:
                info = os.lstat(os.path.join(root, name))
            except OSError:
                continue  # removed meanwhile
            if stat.S_ISREG(info.st_mode):
                total += max(0, info.st_size - info.st_blocks * 512)
    return total


def require_space(folder: Path) -> None:
    """
    Refuse to open or write the shard without the space it needs: what its files may still take (`unallocated_bytes`)
    and `MIN_FREE_BYTES` to write. The engine fills its files through memory maps, and a full disk under a mapping
    kills the process with SIGBUS instead of raising an error.

    :raises DataDirError: Naming the folder, the space free, the space needed and what to do.
    """
    with data_dir_errors(folder):
        free = shutil.disk_usage(folder).free
        unallocated = unallocated_bytes(folder)
    needed = unallocated + MIN_FREE_BYTES
    if free < needed:
        mib = 2**20
        raise DataDirError(
            f"the disk holding the data directory {folder} has too little free space for the store: {free / mib:.1f} "
            f"MiB free, it needs {math.ceil(needed / mib)} MiB ({math.ceil(unallocated / mib)} MiB that its files "
            f"may still fill, {MIN_FREE_BYTES // mib} MiB to write): free some space {DATA_DIR_FIX}"
        )


def shard_settings(
    *,
    embedding_dim: int | None = None,
    similarity: str | None = None,
    k1: float = 1.2,
    b: float = 0.75,
    stemmer: str | None = "english",
    stopwords: str | list[str] | None = "en",
    token_pattern: str = r"(?u)\b\w\w*\b",
    char_ngrams: int = 3,
    indexed_fields: list[str] | None = None,
) -> dict[str, Any]:
    """
    The settings that decide what a shard stores (its defaults when called without arguments). The dense vector's
    size and similarity are None until a store that knows them (the dense store) opens the shard or a document with an
    embedding is written: a lexical store never fixes them.
    """
    return {"embedding_dim": embedding_dim, "similarity": similarity, "k1": k1, "b": b, "stemmer": stemmer,
            "stopwords": stopwords, "token_pattern": token_pattern, "char_ngrams": char_ngrams,
            "indexed_fields": indexed_fields or ["meta.title", "meta.section", "content"]}


def all_of(*conditions: Any) -> Filter:
    return Filter(must=[condition for condition in conditions if condition is not None])


def mean_length(totals: dict[str, int], name: str) -> float:
    """The average length of the chunks under analysis `name` (1 for none), from length totals."""
    return max(1.0, totals[name] / totals["count"]) if totals["count"] else 1.0


class Shard:
    """One open shard folder of this process: the engine, its settings, encoders and the write lock."""

    _open: ClassVar[dict[Path, "Shard"]] = {}
    _open_lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def at(cls, folder: Path, wanted: dict[str, Any]) -> "Shard":
        """The shard of `folder` (opened, or created with `wanted` settings, on first use in this process)."""
        folder = folder.expanduser().resolve()
        with cls._open_lock:
            shard = cls._open.get(folder)
            if shard is None:
                shard = cls(folder, wanted)
                cls._open[folder] = shard
        shard.check(wanted)
        return shard

    def __init__(self, folder: Path, wanted: dict[str, Any]) -> None:
        self.folder = folder
        require_writable(folder)
        require_space(folder)
        settings_file = folder / SETTINGS_FILE
        with data_dir_errors(folder):
            existing = (folder / "edge_config.json").is_file()
            try:
                if existing:
                    self.engine = EdgeShard.load(str(folder))
                else:
                    self.engine = EdgeShard.create(str(folder), self._config(wanted))
            except Exception as error:
                if "WouldBlock" in str(error) or "lock" in str(error).lower():
                    raise DataDirInUseError(folder) from error
                raise
            if not existing or not settings_file.is_file():
                for field, schema in INDEXED.items():
                    self.engine.update(UpdateOperation.create_field_index(field, schema))
                settings_file.write_text(json.dumps({"format": FORMAT, **wanted, "avg_len": {}, "point_ids": POINT_IDS,
                                                     "sentences": wanted["embedding_dim"] is not None}, indent=2))
        atexit.register(self.close)
        stored = json.loads(settings_file.read_text())
        if stored.get("format") != FORMAT:
            raise DataDirError(f"the store in {folder} has format {stored.get('format')}, this Gatehouse reads "
                               f"format {FORMAT}: move the folder away and ingest your documents again")
        self.settings = {key: stored[key] for key in shard_settings()}
        self.avg_len: dict[str, float] = dict(stored.get("avg_len") or {})
        self.reencoding: list[str] = list(stored.get("reencoding") or [])
        analysis = self.settings
        self.encoders = {
            name: Bm25Encoder(
                Analyzer(
                    token_pattern=analysis["token_pattern"],
                    stopwords=analysis["stopwords"],
                    stemmer=analysis["stemmer"],
                    char_ngrams=analysis["char_ngrams"] if name == "ngrams" else None,
                ),
                k1=analysis["k1"],
                b=analysis["b"],
            )
            for name in ANALYSES
        }
        self.write_lock = threading.Lock()
        self.generation = 0  # this process's write counter: the one process that holds the shard sees every write
        self._last_version = 0
        self._cached: dict[Any, tuple[int, Any]] = {}
        self._groups: dict[str, tuple[int, dict[Any, Any]]] = {}
        if self.settings["embedding_dim"] is not None and not stored.get("sentences"):
            self._add_sentences()
        if stored.get("point_ids") != POINT_IDS:
            self.renumber()
        self.repair()
        with self.write_lock:
            self.totals = self._stored_totals()
            self.rebalance()

    @staticmethod
    def _config(wanted: dict[str, Any]) -> EdgeConfig:
        dense = {}
        if wanted["embedding_dim"] is not None:
            distance = DISTANCES[wanted["similarity"] or "cosine"]
            dense = {"dense": EdgeVectorParams(size=wanted["embedding_dim"], distance=distance),
                     "sentences": EdgeVectorParams(size=wanted["embedding_dim"], distance=distance,
                                                   multivector_config=MultiVectorConfig(MultiVectorComparator.MaxSim))}
        return EdgeConfig(
            vectors=dense,
            sparse_vectors={name: EdgeSparseVectorParams(modifier=Modifier.Idf) for name in ANALYSES},
        )

    def add_dense(self, embedding_dim: int, similarity: str | None) -> None:
        """Give the shard its dense vector (size and similarity), unless it has one already."""
        with self.write_lock:
            if self.settings["embedding_dim"] is not None:
                return
            similarity = similarity or "cosine"
            self.update(UpdateOperation.create_dense_vector("dense", embedding_dim, DISTANCES[similarity]))
            self.settings.update(embedding_dim=embedding_dim, similarity=similarity)
            self._persist(embedding_dim=embedding_dim, similarity=similarity)
            self._add_sentences()

    def _add_sentences(self) -> None:
        """
        Give the shard its sentence vectors (one multivector per chunk, scored by its best sentence). A shard written
        before they existed gets the vector; its chunks are found as before but scored by their chunk vector only
        until they are ingested again, which a warning says.
        """
        settings = self.settings
        self.engine.update(UpdateOperation.create_dense_vector(
            "sentences", settings["embedding_dim"], DISTANCES[settings["similarity"] or "cosine"],
            MultiVectorConfig(MultiVectorComparator.MaxSim)))
        self._persist(sentences=True)
        with data_dir_errors(self.folder):
            chunks = self.engine.count(CountRequest(filter=all_of(CHUNK)))
        if chunks:
            logger.warning("The store in %s holds %d chunks written before Gatehouse kept sentence vectors: they are "
                           "scored by their chunk vector only until `gatehouse ingest --force` writes them again",
                           self.folder, chunks)

    def _persist(self, **values: Any) -> None:
        """Update settings in `gatehouse.json` (written beside it, then renamed over it: a crash keeps one whole)."""
        settings_file = self.folder / SETTINGS_FILE
        stored = json.loads(settings_file.read_text())
        stored.update(values)
        with data_dir_errors(self.folder):
            staged = settings_file.with_suffix(".json.tmp")
            staged.write_text(json.dumps(stored, indent=2))
            staged.replace(settings_file)

    def check(self, wanted: dict[str, Any]) -> None:
        """
        Refuse settings other than those the shard was created with (its vectors were computed under them); a
        setting left at its default takes the shard's (a lexical store need not repeat the dense vector size).
        """
        if wanted["embedding_dim"] is not None and self.settings["embedding_dim"] is None:
            self.add_dense(wanted["embedding_dim"], wanted["similarity"])
        defaults = shard_settings()
        changed = sorted(key for key in wanted if wanted[key] != defaults[key] and wanted[key] != self.settings[key])
        if changed:
            raise DataDirError(
                f"the store in {self.folder} was created with other settings "
                f"({', '.join(f'{key} {self.settings[key]!r}' for key in changed)}): use those, or move the folder "
                f"away and ingest your documents again"
            )

    def close(self) -> None:
        """Flush and close the shard (at exit)."""
        with self.write_lock:
            engine = self.__dict__.pop("engine", None)
            if engine is not None:
                with data_dir_errors(self.folder):
                    engine.flush()
                    engine.close()
            self._open.pop(self.folder, None)

    def next_version(self) -> int:
        """A number larger than any this process or an earlier one gave (a write's version, a counter value)."""
        self._last_version = max(self._last_version + 1, time.time_ns())
        return self._last_version

    def update(self, *operations: UpdateOperation, totals: dict[str, int] | None = None) -> None:
        """
        Apply operations in order (the caller holds `write_lock`).

        :param totals: The length totals that the operations write (`lengths_point`), the shard's once they are
            applied; the BM25 vectors are re-encoded if their average moved too far.
        """
        require_space(self.folder)
        with data_dir_errors(self.folder):
            for operation in operations:
                self.engine.update(operation)
        self.generation += 1
        if totals is not None:
            self.totals = totals
            self.rebalance()

    def cached(self, key: Any, compute: Any) -> Any:
        """`compute()`, kept until the next write of this process."""
        hit = self._cached.get(key)
        if hit is not None and hit[0] == self.generation:
            return hit[1]
        generation = self.generation
        value = compute()
        self._cached[key] = (generation, value)
        return value

    def groups(self, field: str, point_ids: set[Any]) -> dict[Any, Any]:
        """
        Each chunk's value of the metadata `field` (e.g. `doc_id`), for grouping search hits without reading their
        payloads in the search: values are kept until the next write of this process (at most `GROUPS_KEPT` of
        them), so a search reads only the chunks it has not seen since.
        """
        generation, known = self._groups.get(field, (None, {}))
        if generation != self.generation or len(known) > GROUPS_KEPT:
            known = {}
            self._groups[field] = (self.generation, known)
        missing = [point for point in point_ids if point not in known]
        if missing:
            with data_dir_errors(self.folder):
                records = self.engine.retrieve(missing, [f"meta.{field}"], False)
            known.update({record.id: (record.payload.get("meta") or {}).get(field) for record in records})
        return known

    def scroll(self, filter_: Filter, payload: bool | list[str] = True) -> Iterator[Any]:
        """Every record matching `filter_`, page by page."""
        offset = None
        while True:
            with data_dir_errors(self.folder):
                records, offset = self.engine.scroll(
                    ScrollRequest(offset=offset, limit=PAGE, filter=filter_, with_payload=payload, with_vector=False)
                )
            yield from records
            if offset is None:
                return

    def metadata_counts(self, fields: list[str]) -> dict[tuple[Any, ...], int]:
        """How many chunks hold each combination of values of the metadata `fields`, counted once per write."""

        def count() -> dict[tuple[Any, ...], int]:
            counts: Counter[tuple[Any, ...]] = Counter()
            for record in self.scroll(all_of(CHUNK), [f"meta.{field}" for field in fields]):
                meta = record.payload.get("meta") or {}
                counts[tuple(meta.get(field) for field in fields)] += 1
            return dict(counts)

        return dict(self.cached(("counts", tuple(fields)), count))

    def kb_generations(self) -> dict[tuple[str, str], int]:
        """The write counter of every (tenant, kb) ever written."""

        def read() -> dict[tuple[str, str], int]:
            return {(str(r.payload["tenant"]), str(r.payload["kb"])): int(r.payload["value"])
                    for r in self.scroll(all_of(COUNTER))}

        return dict(self.cached("kb_generations", read))

    def indexed_text(self, payload: dict[str, Any]) -> str:
        """The text that a chunk's BM25 vectors cover (its `indexed_fields`), from its payload (`content`, `meta`)."""
        meta = payload.get("meta") or {}
        values = [payload.get("content") if field == "content" else meta.get(field.removeprefix("meta."))
                  for field in self.settings["indexed_fields"]]
        return "\n".join(str(value) for value in values if value)

    def vectors(self, text: str, analyses: tuple[str, ...] = ANALYSES) -> dict[str, SparseVector]:
        """The BM25 vectors of a chunk's indexed text under `analyses` (none for one that finds no term)."""
        vectors = {}
        for name in analyses:
            indices, values = self.encoders[name].document(text, self.avg_len[name])
            if indices:
                vectors[name] = SparseVector(indices=indices, values=values)
        return vectors

    def tally(self, added: list[str], removed: list[str]) -> dict[str, int]:
        """
        The length totals after writing chunks of the `added` indexed texts and removing those of `removed`; a new
        store's first write fixes the average lengths its vectors are encoded with (persisted with the settings).
        """
        totals = dict(self.totals)
        for texts, sign in ((added, 1), (removed, -1)):
            totals["count"] += sign * len(texts)
            for name in ANALYSES:
                totals[name] += sign * sum(self.encoders[name].length(text) for text in texts)
        missing = [name for name in ANALYSES if name not in self.avg_len]
        if missing and totals["count"]:
            self.avg_len.update({name: mean_length(totals, name) for name in missing})
            self._persist(avg_len=self.avg_len)
        return totals

    @staticmethod
    def lengths_point(totals: dict[str, int]) -> Point:
        """The record of the length totals, to write in the same update as the chunks that make them."""
        return Point(id=LENGTHS_ID, vector={}, payload={"record": "bm25_lengths", **totals})

    def _stored_totals(self) -> dict[str, int]:
        """
        The length totals the shard holds; counted from the chunks (and written) when there are none (a store of an
        earlier Gatehouse) or they count other chunks than the shard has (a crash between a deletion's two updates).
        """
        with data_dir_errors(self.folder):
            stored = self.engine.retrieve([LENGTHS_ID], with_payload=True, with_vector=False)
            count = self.engine.count(CountRequest(exact=True, filter=all_of(CHUNK)))
        if stored and stored[0].payload.get("count") == count:
            return {key: int(stored[0].payload[key]) for key in ("count", *ANALYSES)}
        self.totals = dict.fromkeys(("count", *ANALYSES), 0)
        chunks = self.scroll(all_of(CHUNK), ["content", "meta"])
        totals = self.tally([self.indexed_text(record.payload) for record in chunks], [])
        self.update(UpdateOperation.upsert_points([self.lengths_point(totals)]))
        return totals

    def rebalance(self) -> None:
        """
        Re-encode the BM25 vectors of every chunk, page by page, for each analysis whose average length moved more
        than `DRIFT` from the one they were encoded with (the caller holds `write_lock`). The analyses and their new
        average are persisted first and cleared last: a crash in between leaves a searchable store with some chunks
        on the old average, and the next opening finishes the job.
        """
        if not self.totals["count"]:
            return
        means = {name: mean_length(self.totals, name) for name in self.avg_len}
        drifted = {name: mean for name, mean in means.items()
                   if abs(mean - self.avg_len[name]) > DRIFT * self.avg_len[name]}
        names = tuple(sorted({*self.reencoding, *drifted}))
        if not names:
            return
        logger.info("Re-encoding the BM25 vectors (%s) of %d chunks: average length %s -> %s", ", ".join(names),
                    self.totals["count"], {name: self.avg_len[name] for name in names},
                    {name: drifted.get(name, self.avg_len[name]) for name in names})
        self.avg_len.update(drifted)
        self.reencoding = list(names)
        self._persist(avg_len=self.avg_len, reencoding=self.reencoding)
        page: list[PointVectors] = []
        for record in self.scroll(all_of(CHUNK), ["content", "meta"]):
            vectors = self.vectors(self.indexed_text(record.payload), names)
            if vectors:
                page.append(PointVectors(id=record.id, vector=vectors))
            if len(page) == PAGE:
                self.update(UpdateOperation.update_vectors(page))
                page = []
        if page:
            self.update(UpdateOperation.update_vectors(page))
        self.reencoding = []
        self._persist(reencoding=[])

    def renumber(self) -> None:
        """
        Give every chunk that still has a UUID its integer id (`point_id`), page by page: each page is written under
        the new ids, then its old ids are deleted. A crash in between leaves a page under both ids until the next
        opening, which does the same again (the rewrite is idempotent) and then records that the shard is done.
        """
        with data_dir_errors(self.folder):
            count = self.engine.count(CountRequest(exact=True, filter=all_of(CHUNK)))
        if count:
            logger.info("Renumbering the %d chunks of %s (a one-off for stores written before integer ids)", count,
                        self.folder)
        old = [record.id for record in self.scroll(all_of(CHUNK), payload=False) if not isinstance(record.id, int)]
        with self.write_lock:
            for start in range(0, len(old), PAGE):
                with data_dir_errors(self.folder):
                    records = self.engine.retrieve(old[start : start + PAGE], with_payload=True, with_vector=True)
                self.update(
                    UpdateOperation.upsert_points([Point(id=point_id(str(record.payload["id"])), vector=record.vector,
                                                         payload=record.payload) for record in records]),
                    UpdateOperation.delete_points([record.id for record in records]),
                )
            self._persist(point_ids=POINT_IDS)

    def repair(self) -> None:
        """Remove the older version of every document that an interrupted replacement left with two."""
        versions: dict[str, set[int]] = defaultdict(set)
        for record in self.scroll(all_of(CHUNK, FieldCondition(key="version", is_empty=False)),
                                  ["meta.doc_id", "version"]):
            doc_id = (record.payload.get("meta") or {}).get("doc_id")
            if doc_id is not None:
                versions[str(doc_id)].add(int(record.payload["version"]))
        for doc_id, seen in versions.items():
            if len(seen) > 1:
                logger.warning("Document %s was left with %d versions by an interrupted ingest: keeping the newest",
                               doc_id, len(seen))
                with self.write_lock:
                    self.update(UpdateOperation.delete_points_by_filter(all_of(
                        CHUNK, FieldCondition(key="meta.doc_id", match=MatchValue(doc_id)),
                        Filter(must_not=[FieldCondition(key="version", match=MatchValue(max(seen)))]),
                    )))
