"""Ingesting files into knowledge bases through `pipelines/index.yml`."""

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from gatehouse.settings import project_path
from gatehouse.components.state import PUBLIC_TENANT
from gatehouse.knowledge_bases import KnowledgeBaseCatalogue, StoredDocument
from gatehouse.pipelines import load_pipeline

BATCH_SIZE = 16


@dataclass
class IngestGroup:
    """Files of one knowledge base of one tenant, named relative to `root`."""

    kb: str
    tenant: str | None
    root: Path
    files: list[Path] = field(default_factory=list)


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
        self.written.extend(report.get("written", []))

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
    groups = [IngestGroup(kb=d.name, tenant=None, root=d, files=files_under(d)) for d in sorted(root.iterdir())
              if d.is_dir() and d.name != "tenants"]
    tenants = root / "tenants"
    if tenants.is_dir():
        for tenant_dir in sorted(d for d in tenants.iterdir() if d.is_dir()):
            for kb_dir in sorted(d for d in tenant_dir.iterdir() if d.is_dir()):
                groups.append(IngestGroup(kb=kb_dir.name, tenant=tenant_dir.name, root=kb_dir,
                                          files=files_under(kb_dir)))
    return groups


def path_groups(paths: list[str], kb: str, tenant: str | None) -> list[IngestGroup]:
    """
    Groups for user-given paths: a folder's files are named relative to the folder, a file by its name.

    :param paths: Files or folders.
    :param kb: The knowledge base to ingest into.
    :param tenant: The owning tenant.
    """
    groups: dict[Path, IngestGroup] = {}
    for raw in paths:
        path = Path(raw).expanduser().resolve()
        root = path if path.is_dir() else path.parent
        group = groups.setdefault(root, IngestGroup(kb=kb, tenant=tenant, root=root))
        group.files.extend(files_under(path) if path.exists() else [path])
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


def ingest(
    groups: list[IngestGroup], *, force: bool = False, progress: bool = True, prune_missing: bool = False
) -> IngestSummary:
    """
    Run the index pipeline over the groups in batches, with a progress bar over files.

    :param groups: What to ingest.
    :param force: Rewrite unchanged files too.
    :param progress: Show a progress bar (on stderr).
    :param prune_missing: Afterwards delete the groups' documents whose source file is gone (see `prune`).
    :returns: The summary.
    """
    pipeline = load_pipeline("index")
    summary = IngestSummary()
    total = sum(len(group.files) for group in groups)
    with tqdm(total=total, unit="file", desc="ingest", disable=not progress) as bar:
        for group in groups:
            for start in range(0, len(group.files), BATCH_SIZE):
                batch = group.files[start : start + BATCH_SIZE]
                result = pipeline.run(
                    {
                        "planner": {
                            "sources": [str(p) for p in batch],
                            "kb": group.kb,
                            "tenant": group.tenant,
                            "root": str(group.root),
                            "force": force,
                        }
                    }
                )
                summary.add(result["writer"]["report"])
                bar.update(len(batch))
    if prune_missing:
        summary.pruned = prune(groups, catalogue=KnowledgeBaseCatalogue.from_index_pipeline(pipeline))
    return summary


def format_summary(summary: IngestSummary) -> str:
    """A human-readable summary."""
    by_kb: dict[str, int] = defaultdict(int)
    for item in summary.written:
        by_kb[item["doc_id"].rsplit("/", 1)[0]] += item["chunks"]
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
