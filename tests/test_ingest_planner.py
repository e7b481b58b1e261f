import hashlib

import pytest
from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict
from haystack.dataclasses import ByteStream

from gatehouse.components.writers.ingest_planner import DEFAULT_MIME_TYPES, IngestPlanner
from gatehouse.document_stores.lexical_document_store import LexicalDocumentStore


@pytest.fixture
def store(tmp_path, monkeypatch) -> LexicalDocumentStore:
    monkeypatch.delenv("GATEHOUSE_ELASTICSEARCH_URL", raising=False)
    return LexicalDocumentStore(local={"path": str(tmp_path / "store")})


@pytest.fixture
def kb_dir(tmp_path):
    root = tmp_path / "kb" / "faq"
    (root / "sub").mkdir(parents=True)
    (root / "api-keys.md").write_text("# API keys\n\nRotate keys every 90 days.\n", encoding="utf-8")
    (root / "sub" / "billing.txt").write_text("Invoices are monthly.\n", encoding="utf-8")
    return root


def test_init(store):
    planner = IngestPlanner(document_store=store, max_file_bytes=10)
    assert planner.document_store is store
    assert planner.mime_types == DEFAULT_MIME_TYPES and planner.mime_types is not DEFAULT_MIME_TYPES
    assert planner.max_file_bytes == 10
    assert planner.kb_pattern == r"[a-z0-9][a-z0-9_-]{0,63}"


def test_to_dict(store, tmp_path):
    data = component_to_dict(IngestPlanner(document_store=store, mime_types={".md": "text/markdown"}), "component")
    assert data["type"] == "gatehouse.components.writers.ingest_planner.IngestPlanner"
    params = data["init_parameters"]
    assert params["document_store"] == store.to_dict()
    assert params["document_store"]["init_parameters"]["local"] == {"path": str(tmp_path / "store")}
    assert params["mime_types"] == {".md": "text/markdown"}
    assert params["max_file_bytes"] == 20_000_000


def test_from_dict(store, tmp_path, monkeypatch):
    # nested Gatehouse classes deserialise only from allowlisted modules (gatehouse.pipelines allows gatehouse.components.*)
    monkeypatch.setenv("HAYSTACK_DESERIALIZATION_ALLOWLIST", "gatehouse.components.*,gatehouse.document_stores.*")
    restored = component_from_dict(
        IngestPlanner,
        component_to_dict(IngestPlanner(document_store=store, max_file_bytes=123), "component"),
        "component",
    )
    assert isinstance(restored.document_store, LexicalDocumentStore)
    assert restored.document_store.store.folder == tmp_path / "store"
    assert restored.document_store.store.shares_shard(store.store)
    assert restored.max_file_bytes == 123


def test_run_plans_new_files(store, kb_dir):
    files = [str(kb_dir / "api-keys.md"), str(kb_dir / "sub" / "billing.txt")]
    out = IngestPlanner(document_store=store).run(sources=files, kb="faq", root=str(kb_dir))
    report = out["report"]
    assert report["tenant"] == "public" and report["kb"] == "faq"
    assert [p["doc_id"] for p in report["planned"]] == ["public/faq/api-keys.md", "public/faq/sub/billing.txt"]
    assert all(p["changed"] is False for p in report["planned"])
    assert report["skipped"] == [] and report["failed"] == []
    md = out["sources"][0]
    assert md.meta["source"] == "api-keys.md"
    assert md.meta["mime_type"] == "text/markdown" and md.mime_type == "text/markdown"
    assert md.meta["content_hash"] == hashlib.sha256((kb_dir / "api-keys.md").read_bytes()).hexdigest()
    assert out["sources"][1].meta["mime_type"] == "text/plain"


def test_run_without_root_uses_file_name(store, kb_dir):
    out = IngestPlanner(document_store=store).run(sources=[kb_dir / "sub" / "billing.txt"], kb="faq", tenant="acme")
    assert out["sources"][0].meta["doc_id"] == "acme/faq/billing.txt"


def test_run_failures_with_reasons(store, tmp_path):
    (tmp_path / "image.png").write_bytes(b"\x89PNG....")
    (tmp_path / "empty.md").write_text("  \n\n", encoding="utf-8")
    (tmp_path / "big.txt").write_text("x" * 50, encoding="utf-8")
    sources = [str(tmp_path / n) for n in ("image.png", "empty.md", "missing.md", "big.txt")]
    out = IngestPlanner(document_store=store, max_file_bytes=20).run(sources=sources, kb="faq", root=str(tmp_path))
    failed = {f["source"]: f["reason"] for f in out["report"]["failed"]}
    assert out["sources"] == [] and out["report"]["planned"] == []
    assert failed["image.png"].startswith("unsupported file type '.png'")
    assert ".md" in failed["image.png"]  # lists accepted types
    assert failed["empty.md"] == "empty file"
    assert failed[str(tmp_path / "missing.md")] == "file not found"
    assert failed["big.txt"] == "file larger than 20 bytes"


def test_run_bytestream_upload(store):
    planner = IngestPlanner(document_store=store)
    upload = ByteStream(data="Schlüssel rotieren ✓".encode(), meta={"file_name": "uploads/Notes.MD"})
    nameless = ByteStream(data=b"text", meta={})
    out = planner.run(sources=[upload, nameless], kb="faq")
    assert [s.meta["doc_id"] for s in out["sources"]] == ["public/faq/Notes.MD"]
    assert out["sources"][0].meta["mime_type"] == "text/markdown"
    assert out["report"]["failed"] == [{"source": "upload", "reason": "an uploaded file has no file name"}]


@pytest.mark.parametrize(
    ("raw", "name"),
    [
        ("C:\\Users\\me\\notes.md", "notes.md"),
        ("uploads\\..\\notes.md", "notes.md"),
        ("notes\x00.md", "notes.md"),
        ("\x1b[31mnotes\x07.md\r\n", "notes.md"),
        ("invoice\u202emd.exe\u2066.md", "invoicemd.exe.md"),
        ("  notes.md  ", "notes.md"),
    ],
)
def test_run_upload_names_are_base_names_without_control_or_bidi_characters(store, raw, name):
    upload = ByteStream(data=b"# Notes\n\nText.", meta={"file_name": raw})
    out = IngestPlanner(document_store=store).run(sources=[upload], kb="faq")
    assert [(s.meta["source"], s.meta["doc_id"], s.meta["file_path"]) for s in out["sources"]] == [
        (name, f"public/faq/{name}", name)]


def test_run_an_upload_name_with_nothing_usable_fails_alone(store):
    uploads = [ByteStream(data=b"Text.", meta={"file_name": name}) for name in ("\u202e\x00", "a\\..", "ok.md")]
    out = IngestPlanner(document_store=store).run(sources=uploads, kb="faq")
    assert [s.meta["source"] for s in out["sources"]] == ["ok.md"]
    assert out["report"]["failed"] == [
        {"source": "upload", "reason": "the file name '\\u202e\\x00' has no usable characters"},
        {"source": "upload", "reason": "the file name 'a\\\\..' has no usable characters"},
    ]


def test_run_unchanged_skipped_changed_and_force(store, kb_dir):
    planner = IngestPlanner(document_store=store)
    path = kb_dir / "api-keys.md"
    first = planner.run(sources=[str(path)], kb="faq", root=str(kb_dir))
    meta = first["sources"][0].meta
    # simulate the index writer having stored a chunk of this file
    store.write_documents(
        [Document(content="chunk", meta={"doc_id": meta["doc_id"], "content_hash": meta["content_hash"]})]
    )

    again = planner.run(sources=[str(path)], kb="faq", root=str(kb_dir))
    assert again["sources"] == []
    assert again["report"]["skipped"] == [{"source": "api-keys.md", "doc_id": "public/faq/api-keys.md", "reason": "unchanged"}]

    forced = planner.run(sources=[str(path)], kb="faq", root=str(kb_dir), force=True)
    assert len(forced["sources"]) == 1 and forced["report"]["skipped"] == []

    path.write_text("# API keys\n\nRotate keys every 30 days.\n", encoding="utf-8")
    changed = planner.run(sources=[str(path)], kb="faq", root=str(kb_dir))
    assert len(changed["sources"]) == 1
    assert changed["report"]["planned"] == [{"source": "api-keys.md", "doc_id": "public/faq/api-keys.md", "changed": True}]

    # the same file under another tenant is a different document
    other = planner.run(sources=[str(path)], kb="faq", tenant="acme", root=str(kb_dir))
    assert other["report"]["planned"][0]["changed"] is False


def test_run_empty_sources(store):
    out = IngestPlanner(document_store=store).run(sources=[], kb="faq", tenant="  ")
    assert out["sources"] == []
    assert out["report"] == {"kb": "faq", "tenant": "public", "planned": [], "skipped": [], "failed": []}


@pytest.mark.parametrize(("kb", "tenant"), [("FAQ", None), ("../etc", None), ("", None), ("faq", "Bad Tenant")])
def test_run_invalid_names(store, kb, tenant):
    with pytest.raises(ValueError, match="Invalid"):
        IngestPlanner(document_store=store).run(sources=[], kb=kb, tenant=tenant)


def test_run_url_base_links_files_and_a_new_base_rewrites_them(store, kb_dir):
    planner = IngestPlanner(document_store=store)
    out = planner.run(sources=[str(kb_dir / "sub" / "billing.txt")], kb="faq", root=str(kb_dir),
                      url_base="https://docs.example.com/")
    (stream,) = out["sources"]
    assert stream.meta["url"] == "https://docs.example.com/sub/billing"
    plain = planner.run(sources=[str(kb_dir / "sub" / "billing.txt")], kb="faq", root=str(kb_dir))["sources"][0]
    assert "url" not in plain.meta and plain.meta["content_hash"] != stream.meta["content_hash"]
