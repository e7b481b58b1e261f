"""Decides which files an ingest run must (re)write, skips unchanged ones and rejects bad ones with a reason."""

import hashlib
import re
from pathlib import Path, PurePosixPath
from typing import Any

from haystack import component
from haystack.dataclasses import ByteStream

from gatehouse.components.state import PUBLIC_TENANT
from gatehouse.components.printable import printable
from gatehouse.document_stores.lexical_document_store import LexicalDocumentStore

NAME_PATTERN = r"[a-z0-9][a-z0-9_-]{0,63}"  # knowledge base and tenant names (they name folders and filters)


def upload_name(raw: str) -> str:
    r"""
    The name an uploaded file is stored under (its `source`, the end of its `doc_id`): the base name, with `\` a
    folder separator like `/`, without control characters, bidirectional controls or surrounding spaces.

    ```python
    upload_name("C:\\Users\\me\\notes.md")       # "notes.md"
    upload_name("invoice\u202efdp.md\x00")      # "invoicefdp.md"
    upload_name("../\x07")                      # "": nothing usable remains
    ```

    :param raw: The file name the client sent.
    :returns: The name, or "" when nothing usable remains (also for `.` and `..`).
    """
    cleaned = "".join(char for char in printable(raw) if char not in "\n\t").replace("\\", "/")
    name = PurePosixPath(cleaned).name.strip()
    return "" if name in (".", "..") else name


def page_url(url_base: str, name: str) -> str:
    """
    The link of a file under a KB's URL base: `{path}` in the base is the file's path without its extension (an
    `index` file is its folder), else that path is appended to the base.

    ```python
    page_url("https://docs.example.com/", "guide/setup.md")          # "https://docs.example.com/guide/setup"
    page_url("https://docs.example.com/{path}/", "guide/index.md")   # "https://docs.example.com/guide/"
    ```
    """
    path = Path(name).with_suffix("").as_posix()
    if Path(path).name == "index":
        path = Path(path).parent.as_posix().strip(".")
    if "{path}" in url_base:
        return re.sub(r"(?<!:)//+", "/", url_base.replace("{path}", path))
    return url_base.rstrip("/") + "/" + path if path else url_base


DEFAULT_MIME_TYPES = {
    ".txt": "text/plain",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".html": "text/html",
    ".htm": "text/html",
    ".pdf": "application/pdf",
    ".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    ".pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    ".xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    ".csv": "text/csv",
    ".json": "application/json",
}


@component
class IngestPlanner:
    """
    Reads each source, gives it a stable document id and a content hash, and sorts it into new, changed,
    unchanged (skipped) or failed.

    A document's id is `<tenant>/<kb>/<source>`; re-ingesting a file whose bytes did not change writes nothing.
    Sources to (re)write come out as ByteStreams carrying `kb`, `tenant`, `source`, `doc_id`, `content_hash`
    and `mime_type`, ready for the file-type router.

    Usage:
    ```python
    from gatehouse.components.writers.ingest_planner import IngestPlanner
    from gatehouse.document_stores.lexical_document_store import LexicalDocumentStore

    planner = IngestPlanner(document_store=LexicalDocumentStore())
    out = planner.run(sources=["kb/faq/api-keys.md"], kb="faq", root="kb/faq")
    out["sources"], out["report"]["skipped"], out["report"]["failed"]
    ```
    """

    def __init__(
        self,
        *,
        document_store: LexicalDocumentStore,
        mime_types: dict[str, str] | None = None,
        max_file_bytes: int = 20_000_000,
        kb_pattern: str = NAME_PATTERN,
    ) -> None:
        """
        :param document_store: The store whose stored hashes tell what changed.
        :param mime_types: File extension to MIME type of the accepted files.
        :param max_file_bytes: Larger files fail with a reason.
        :param kb_pattern: Allowed knowledge-base and tenant names.
        """
        self.document_store = document_store
        self.mime_types = mime_types or dict(DEFAULT_MIME_TYPES)
        self.max_file_bytes = max_file_bytes
        self.kb_pattern = kb_pattern

    def _read(self, source: str | Path | ByteStream, root: Path | None) -> tuple[str, bytes]:
        if isinstance(source, ByteStream):
            raw = str(source.meta.get("file_name") or source.meta.get("file_path") or "")
            name = upload_name(raw)
            if not name:
                raise ValueError(f"the file name {raw!r} has no usable characters" if raw else
                                 "an uploaded file has no file name")
            return name, source.data
        path = Path(source)
        if not path.is_file():
            raise ValueError("file not found")
        name = path.resolve().relative_to(root).as_posix() if root and path.resolve().is_relative_to(root) else path.name
        return name, path.read_bytes()

    def _stored_hashes(self, doc_ids: list[str]) -> dict[str, str]:
        if not doc_ids:
            return {}
        stored = self.document_store.filter_documents(
            filters={"field": "meta.doc_id", "operator": "in", "value": doc_ids}
        )
        return {doc.meta["doc_id"]: doc.meta.get("content_hash", "") for doc in stored}

    @component.output_types(sources=list[ByteStream], report=dict[str, Any])
    def run(
        self,
        sources: list[str | Path | ByteStream],
        kb: str,
        tenant: str | None = None,
        root: str | None = None,
        force: bool = False,
        url_base: str | None = None,
    ) -> dict[str, Any]:
        """
        Plan an ingest run.

        :param sources: File paths or ByteStreams (with `meta["file_name"]`).
        :param kb: The knowledge base they belong to.
        :param tenant: The owning tenant; None is the public tenant.
        :param root: Folder that paths are named relative to (their file name otherwise).
        :param force: Rewrite unchanged files too (after a splitting or embedding change).
        :param url_base: The KB's URL base: each file links to `page_url(url_base, its path)` unless its front matter
            names a `url`; None links files that name none as `kb://` (a change of base rewrites the files).
        :returns: `sources` to convert and `report` with `planned`, `skipped` and `failed` entries.
        :raises ValueError: If `kb` or `tenant` is not a valid name.
        """
        tenant = (tenant or "").strip() or PUBLIC_TENANT
        for label, value in (("knowledge base", kb), ("tenant", tenant)):
            if not isinstance(value, str) or not re.fullmatch(self.kb_pattern, value):
                raise ValueError(f"Invalid {label} name '{value}': use lower-case letters, digits, '-' or '_'.")
        root_path = Path(root).resolve() if root else None
        planned: list[dict[str, Any]] = []
        failed: list[dict[str, Any]] = []
        streams: list[ByteStream] = []
        for source in sources:
            label = str(source)
            if isinstance(source, ByteStream):
                label = upload_name(str(source.meta.get("file_name") or "")) or "upload"
            try:
                name, data = self._read(source, root_path)
            except (OSError, ValueError) as error:
                failed.append({"source": label, "reason": str(error)})
                continue
            suffix = Path(name).suffix.lower()
            mime_type = self.mime_types.get(suffix)
            if mime_type is None:
                accepted = ", ".join(sorted(self.mime_types))
                failed.append({"source": name, "reason": f"unsupported file type '{suffix or name}' (accepted: {accepted})"})
                continue
            if not data.strip():
                failed.append({"source": name, "reason": "empty file"})
                continue
            if len(data) > self.max_file_bytes:
                failed.append({"source": name, "reason": f"file larger than {self.max_file_bytes} bytes"})
                continue
            digest = hashlib.sha256(data)
            if url_base:
                digest.update(b"\x00" + url_base.encode())
            meta = {
                "kb": kb,
                "tenant": tenant,
                "source": name,
                "doc_id": f"{tenant}/{kb}/{name}",
                "content_hash": digest.hexdigest(),
                "mime_type": mime_type,
                "file_path": name,
                **({"url": page_url(url_base, name)} if url_base else {}),
            }
            planned.append(meta)
            streams.append(ByteStream(data=data, meta=meta, mime_type=mime_type))
        stored = {} if force else self._stored_hashes([meta["doc_id"] for meta in planned])
        to_write, skipped, report_planned = [], [], []
        for stream, meta in zip(streams, planned):
            if stored.get(meta["doc_id"]) == meta["content_hash"]:
                skipped.append({"source": meta["source"], "doc_id": meta["doc_id"], "reason": "unchanged"})
                continue
            to_write.append(stream)
            report_planned.append(
                {"source": meta["source"], "doc_id": meta["doc_id"], "changed": meta["doc_id"] in stored}
            )
        return {
            "sources": to_write,
            "report": {"kb": kb, "tenant": tenant, "planned": report_planned, "skipped": skipped, "failed": failed},
        }
