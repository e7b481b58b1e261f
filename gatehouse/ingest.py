"""
Ingesting files into knowledge bases through `pipelines/index.yml`. `ingest` runs the pipeline over up to
`BATCH_FILES` files (and `BATCH_BYTES` of them) at a time, so the embedder encodes their chunks and sentences in full
batches, and reports file by file; when a run raises, its files go through again one per run, so a file whose
conversion, splitting or embedding raises fails alone.

Usage:
```python
from gatehouse.ingest import FileOutcome, ingest, ingest_file, path_groups

summary = ingest(path_groups(["docs/"], kb="handbook", tenant=None))      # "[3/12] docs/leave.md written (4 chunks)"
report = ingest_file(pipeline, "docs/leave.md", kb="handbook")             # one file's writer report
FileOutcome.of(report).describe()                                          # "written (4 chunks)"
```
"""

import logging
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from haystack import Pipeline
from haystack.core.errors import PipelineRuntimeError
from haystack.dataclasses import ByteStream

from gatehouse.settings import data_dir, project_path
from gatehouse.components.pipelines.child_pipeline import start_workers
from gatehouse.components.state import PUBLIC_TENANT
from gatehouse.components.writers.ingest_planner import upload_name
from gatehouse.document_stores.errors import find_data_dir_error
from gatehouse.knowledge_bases import KnowledgeBaseCatalogue, StoredDocument
from gatehouse.pipelines import build_pipeline, pipeline_path, read_spec

logger = logging.getLogger(__name__)


#: A KB folder's own entry (description, keywords, examples, threshold, url_base): read at ingest, never a document.
KB_ENTRY_FILE = "kb.yml"
BATCH_FILES = 64  # files per pipeline run: their chunks and sentences are encoded in full batches
BATCH_BYTES = 2_000_000  # ...unless they are this large together: progress still advances on big files


@dataclass
class IngestGroup:
    """
    Files of one knowledge base of one tenant, named relative to `root`; `entry` is the KB's own entry (its folder's
    `kb.yml`, None when it has none, `False` when the group is single files and leaves the stored entry alone).
    """

    kb: str
    tenant: str | None
    root: Path
    files: list[Path] = field(default_factory=list)
    url_base: str | None = None
    entry: dict[str, Any] | None | bool = False


def read_entry(folder: Path) -> dict[str, Any] | None:
    """
    A KB folder's entry (`kb.yml`), checked, or None when the folder has none.

    :raises ValueError: When the file is not a mapping of the known keys (`description`, `keywords`, `examples`,
        `patterns`, `threshold`, `url_base`).
    """
    path = folder / KB_ENTRY_FILE
    if not path.is_file():
        return None
    from gatehouse.components.kb_profile import check_entry

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise ValueError(f"{path}: not valid YAML ({str(error).splitlines()[0]})") from error
    return check_entry(data, where=str(path))


def _documents_of(folder: Path) -> list[Path]:
    return [p for p in files_under(folder) if p != folder / KB_ENTRY_FILE]


@dataclass
class IngestSummary:
    """What an ingest run did."""

    documents_written: int = 0
    chunks_written: int = 0
    skipped: list[dict[str, Any]] = field(default_factory=list)
    failed: list[dict[str, Any]] = field(default_factory=list)
    written: list[dict[str, Any]] = field(default_factory=list)
    pruned: list[StoredDocument] | None = None  # None when pruning was not asked for

    def add(self, report: dict[str, Any]) -> None:
        """Merge one pipeline run's report."""
        self.documents_written += report["totals"]["documents_written"]
        self.chunks_written += report["totals"]["chunks_written"]
        self.skipped.extend(report.get("skipped", []))
        self.failed.extend(report.get("failed", []))
        owner = {"tenant": report.get("tenant") or PUBLIC_TENANT, "kb": report.get("kb")}
        self.written.extend({**owner, **item} for item in report.get("written", []))

    def as_dict(self) -> dict[str, Any]:
        """The summary as a JSON-serialisable dict (with the pruned document ids when pruning was asked for)."""
        summary: dict[str, Any] = {
            "documents_written": self.documents_written,
            "chunks_written": self.chunks_written,
            "skipped": len(self.skipped),
            "failed": self.failed,
        }
        if self.pruned is not None:
            summary["pruned"] = [document.doc_id for document in self.pruned]
        return summary


def files_under(path: Path) -> list[Path]:
    """The files a path stands for: a folder's files (hidden ones left out), sorted; a file itself."""
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
    return [path]


def sample_groups(root: Path | None = None) -> list[IngestGroup]:
    """
    The sample knowledge bases: `kb/<kb>/` for the public tenant, `kb/tenants/<tenant>/<kb>/` for private ones.

    :param root: The sample folder; default `./kb` when you have your own (`gatehouse init`), else the shipped one.
    :returns: One group per (tenant, kb).
    """
    root = root or project_path("kb")
    folders = [(None, d) for d in sorted(root.iterdir()) if d.is_dir() and d.name != "tenants"]
    tenants = root / "tenants"
    if tenants.is_dir():
        folders += [(tenant_dir.name, kb_dir) for tenant_dir in sorted(d for d in tenants.iterdir() if d.is_dir())
                    for kb_dir in sorted(d for d in tenant_dir.iterdir() if d.is_dir())]
    return [folder_group(folder, kb=folder.name, tenant=tenant) for tenant, folder in folders]


def folder_group(folder: Path, *, kb: str, tenant: str | None, url_base: str | None = None) -> IngestGroup:
    """
    A folder as one KB: its files (sub-folders included, named relative to it) and its `kb.yml` entry; `url_base`
    (else the entry's) links the files.
    """
    entry = read_entry(folder)
    return IngestGroup(kb=kb, tenant=tenant, root=folder, files=_documents_of(folder), entry=entry,
                       url_base=url_base or (entry or {}).get("url_base"))


def path_groups(paths: list[str], kb: str, tenant: str | None, url_base: str | None = None) -> list[IngestGroup]:
    """
    Groups for user-given paths: a folder's files are named relative to the folder (its `kb.yml` is the KB's entry),
    a file by its name.

    :param paths: Files or folders.
    :param kb: The knowledge base to ingest into.
    :param tenant: The owning tenant.
    :param url_base: The KB's URL base (see `IngestPlanner`); None takes a folder's `kb.yml` `url_base`, if any.
    """
    groups: dict[Path, IngestGroup] = {}
    for raw in paths:
        path = Path(raw).expanduser().resolve()
        if path.is_dir():
            groups[path] = folder_group(path, kb=kb, tenant=tenant, url_base=url_base)
            continue
        group = groups.setdefault(path.parent, IngestGroup(kb=kb, tenant=tenant, root=path.parent, url_base=url_base))
        group.files.append(path)
    return list(groups.values())


def prune(groups: list[IngestGroup], *, catalogue: KnowledgeBaseCatalogue) -> list[StoredDocument]:
    """
    Delete the documents whose source file is gone: those of the groups' (tenant, kb) pairs whose source names no
    file under any root of that pair's groups.

    :param groups: The ingested groups.
    :param catalogue: The stores the groups were ingested into.
    :returns: The deleted documents.
    """
    roots: dict[tuple[str, str], list[Path]] = defaultdict(list)
    for group in groups:
        roots[(group.tenant or PUBLIC_TENANT, group.kb)].append(group.root)
    gone = [
        document
        for (tenant, kb), folders in roots.items()
        for document in catalogue.documents(tenants=[tenant], kb=kb)
        if not any((folder / document.source).is_file() for folder in folders)
    ]
    catalogue.delete_documents(gone)
    return gone


@dataclass(frozen=True)
class FileOutcome:
    """What ingesting one file did: `written` (with its chunks), `skipped` (unchanged) or `failed` (with a reason)."""

    source: str
    status: Literal["written", "skipped", "failed"]
    chunks: int = 0
    reason: str | None = None

    @classmethod
    def of(cls, report: dict[str, Any]) -> "FileOutcome":
        """
        The outcome of the one file of a report of `ingest_file`.

        :param report: The writer's report of a run over one file.
        :returns: Its outcome.
        """
        for item in report.get("written", []):
            return cls(source=item["source"], status="written", chunks=item["chunks"])
        for item in report.get("skipped", []):
            return cls(source=item["source"], status="skipped", reason="unchanged")
        item = report["failed"][0]
        return cls(source=item["source"], status="failed", reason=item.get("reason"))

    def describe(self) -> str:
        """`written (14 chunks)`, `skipped (unchanged)` or `failed: <reason>`."""
        if self.status == "written":
            return f"written ({self.chunks} chunk{'' if self.chunks == 1 else 's'})"
        if self.status == "skipped":
            return f"skipped ({self.reason})"
        return f"failed: {self.reason}"


def _source_name(source: str | Path | ByteStream, root: Path | None) -> str:
    """A file's name as `IngestPlanner` stores it: an upload's file name, a path relative to `root` or its name."""
    if isinstance(source, ByteStream):
        return upload_name(str(source.meta.get("file_name") or "")) or "upload"
    path = Path(source).resolve()
    return path.relative_to(root).as_posix() if root and path.is_relative_to(root) else path.name


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def ingest_file(
    pipeline: Pipeline,
    source: str | Path | ByteStream,
    *,
    kb: str,
    tenant: str | None = None,
    root: str | Path | None = None,
    force: bool = False,
    url_base: str | None = None,
) -> dict[str, Any]:
    """
    Run the index pipeline over one file. A component that raises on it fails this file alone, with a one-line
    reason; the traceback goes to the log at level info (a server's log; the command line prints the reason only).

    :param pipeline: The index pipeline (`planner` in, `writer.report` out).
    :param source: The file: a path or an upload (a ByteStream with `meta["file_name"]`).
    :param kb: The knowledge base.
    :param tenant: The owning tenant; None is the public tenant.
    :param root: Folder that a path is named relative to (its file name otherwise).
    :param force: Rewrite the file even if it did not change.
    :param url_base: The KB's URL base (see `IngestPlanner`).
    :returns: The writer's report (`written`, `skipped`, `failed`, `totals`) of this one file.
    :raises PipelineRuntimeError: When the failure is not the file's: the planner refused the run (a bad knowledge
        base or tenant name) or the data directory cannot be used (in use, read-only, full).
    """
    root_path = Path(root).resolve() if root is not None else None
    try:
        run = {"sources": [source], "kb": kb, "tenant": tenant, "root": None if root_path is None else str(root_path),
               "force": force, "url_base": url_base}
        return pipeline.run({"planner": run})["writer"]["report"]
    except PipelineRuntimeError as error:
        if error.component_name == "planner" or find_data_dir_error(error, data_dir()) is not None:
            raise
        name = _source_name(source, root_path)
        logger.info("indexing %s into %s failed in the %s component", name, kb, error.component_name, exc_info=True)
        reason = f"{error.component_name} failed: {_first_line(error.__cause__ or error)}"
        return {
            "kb": kb,
            "tenant": tenant or PUBLIC_TENANT,
            "written": [],
            "skipped": [],
            "failed": [{"source": name, "reason": reason}],
            "totals": {"documents_written": 0, "chunks_written": 0, "skipped": 0, "failed": 1},
        }


def ingest_files(
    pipeline: Pipeline,
    paths: list[Path],
    *,
    kb: str,
    tenant: str | None = None,
    root: str | Path | None = None,
    force: bool = False,
    url_base: str | None = None,
) -> list[dict[str, Any]]:
    """
    Run the index pipeline over several files at once, or, when that run raises, over each one alone (see
    `ingest_file`).

    :returns: One writer report per file, in order.
    :raises PipelineRuntimeError: As `ingest_file`.
    """
    root_path = Path(root).resolve() if root is not None else None
    if len(paths) > 1:
        run = {"sources": [str(path) for path in paths], "kb": kb, "tenant": tenant, "force": force,
               "root": None if root_path is None else str(root_path), "url_base": url_base}
        try:
            report = pipeline.run({"planner": run})["writer"]["report"]
        except PipelineRuntimeError as error:
            if error.component_name == "planner" or find_data_dir_error(error, data_dir()) is not None:
                raise
            logger.info("a run over %d files failed in %s: each file goes through alone", len(paths),
                        error.component_name)
        else:
            return [_file_report(report, _source_name(str(path), root_path)) for path in paths]
    return [ingest_file(pipeline, str(path), kb=kb, tenant=tenant, root=root, force=force, url_base=url_base)
            for path in paths]


def batches(paths: list[Path]) -> list[list[Path]]:
    """Consecutive runs of at most `BATCH_FILES` files and, unless one file alone is larger, `BATCH_BYTES`."""
    runs: list[list[Path]] = []
    size = 0
    for path in paths:
        try:
            length = path.stat().st_size
        except OSError:
            length = 0  # the planner reports the file
        if not runs or len(runs[-1]) >= BATCH_FILES or size + length > BATCH_BYTES:
            runs.append([])
            size = 0
        runs[-1].append(path)
        size += length
    return runs


def _file_report(report: dict[str, Any], source: str) -> dict[str, Any]:
    """The part of a several-file writer report that concerns one file, shaped as the report of its own run."""
    part = {key: [item for item in report.get(key, []) if item.get("source") == source]
            for key in ("written", "skipped", "failed")}
    totals = {"documents_written": len(part["written"]), "chunks_written": sum(item["chunks"] for item in part["written"]),
              "skipped": len(part["skipped"]), "failed": len(part["failed"])}
    return {"kb": report.get("kb"), "tenant": report.get("tenant"), **part, "totals": totals}


def _shown(path: Path) -> str:
    """A path as the progress lines show it: relative to the working directory when it is under it."""
    return path.relative_to(Path.cwd()).as_posix() if path.is_relative_to(Path.cwd()) else str(path)


def ingest(
    groups: list[IngestGroup], *, force: bool = False, progress: bool = True, prune_missing: bool = False
) -> IngestSummary:
    """
    Run the index pipeline over the groups' files in batches (`batches`), printing a line per file on stderr.

    :param groups: What to ingest.
    :param force: Rewrite unchanged files too.
    :param progress: Print `[3/12] kb/product/pricing.md written (14 chunks)` on stderr after each file.
    :param prune_missing: Afterwards delete the groups' documents whose source file is gone (see `prune`).
    :returns: The summary.
    :raises PipelineRuntimeError: When the run cannot go on (see `ingest_file`).
    """
    spec = read_spec("index")
    start_workers(spec)  # the chunker's worker imports while the pipeline loads
    pipeline = build_pipeline(spec, origin=str(pipeline_path("index")))
    summary = IngestSummary()
    total = sum(len(group.files) for group in groups)
    done = 0
    for group in groups:
        for paths in batches([Path(path) for path in group.files]):
            reports = ingest_files(pipeline, paths, kb=group.kb, tenant=group.tenant, root=group.root, force=force,
                                   url_base=group.url_base)
            for path, report in zip(paths, reports, strict=True):
                summary.add(report)
                done += 1
                if progress:
                    print(f"[{done}/{total}] {_shown(path.absolute())} {FileOutcome.of(report).describe()}",
                          file=sys.stderr, flush=True)
    if prune_missing:
        summary.pruned = prune(groups, catalogue=KnowledgeBaseCatalogue.from_index_pipeline(pipeline))
    learn(groups, pipeline)
    return summary


def learn(groups: list[IngestGroup], pipeline: Pipeline) -> None:
    """Store the groups' KB entries and bring the profiles of their KBs up to date (see `kb_profile`)."""
    from gatehouse.components.kb_profile import KBProfiles

    profiles = KBProfiles(pipeline.get_component("planner").document_store)
    for group in groups:
        if group.entry is not False:
            profiles.set_entry(group.tenant or PUBLIC_TENANT, group.kb, group.entry or None)
    profiles.refresh()


def format_summary(summary: IngestSummary) -> str:
    """A human-readable summary."""
    by_kb: dict[str, int] = defaultdict(int)
    for item in summary.written:
        by_kb[f"{item['tenant']}/{item['kb']}"] += item["chunks"]
    lines = [
        f"written: {summary.documents_written} documents, {summary.chunks_written} chunks",
        f"skipped (unchanged): {len(summary.skipped)}",
        f"failed: {len(summary.failed)}",
    ]
    lines += [f"  {kb}: {chunks} chunks" for kb, chunks in sorted(by_kb.items())]
    lines += [f"  failed {item['source']}: {item['reason']}" for item in summary.failed]
    if summary.pruned is not None:
        lines.append(f"pruned: {len(summary.pruned)} documents")
        lines += [f"  pruned {document.doc_id}" for document in summary.pruned]
    return "\n".join(lines)
