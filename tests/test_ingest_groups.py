"""How `gatehouse ingest` reads a folder: its files, its `kb.yml` entry, its URL base, and the summary per KB."""

import pytest

from gatehouse.cli import main
from gatehouse.components.writers.ingest_planner import page_url
from gatehouse.document_stores.lexical_document_store import LexicalDocumentStore
from gatehouse.ingest import IngestSummary, folder_group, format_summary, path_groups, read_entry


@pytest.fixture
def docs(tmp_path):
    (tmp_path / "guide").mkdir()
    (tmp_path / "guide" / "setup.md").write_text("# Setup\n\nRun it.\n")
    (tmp_path / "index.md").write_text("# Home\n\nWelcome.\n")
    (tmp_path / "kb.yml").write_text("description: Our tool\nkeywords: [setup]\nurl_base: https://docs.example.com/\n")
    return tmp_path


def test_folder_group_reads_its_entry_and_leaves_it_out_of_the_documents(docs):
    group = folder_group(docs, kb="tool", tenant=None)
    assert [p.relative_to(docs).as_posix() for p in group.files] == ["guide/setup.md", "index.md"]
    assert group.entry == {"description": "Our tool", "keywords": ["setup"], "url_base": "https://docs.example.com/"}
    assert group.url_base == "https://docs.example.com/"
    assert folder_group(docs, kb="tool", tenant=None, url_base="https://other.example/").url_base == \
        "https://other.example/"


def test_path_groups_single_files_leave_the_entry_alone(docs):
    (group,) = path_groups([str(docs / "index.md")], kb="tool", tenant="acme", url_base="https://x.example/")
    assert group.entry is False and group.url_base == "https://x.example/" and group.tenant == "acme"
    (folder,) = path_groups([str(docs)], kb="tool", tenant=None)
    assert folder.entry["description"] == "Our tool"


def test_a_bad_entry_is_one_clear_line(docs, capsys):
    (docs / "kb.yml").write_text("descripton: typo\n")
    with pytest.raises(ValueError, match="unknown keys"):
        read_entry(docs)
    assert main(["ingest", str(docs), "--kb", "tool"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gatehouse: ") and "kb.yml: unknown keys ['descripton']" in err and "Traceback" not in err


def test_url_base_only_with_your_own_files(capsys):
    assert main(["ingest", "--url-base", "https://x.example/"]) == 2
    assert "--url-base applies to your own files" in capsys.readouterr().err


def test_page_url():
    assert page_url("https://docs.example.com/", "guide/setup.md") == "https://docs.example.com/guide/setup"
    assert page_url("https://docs.example.com", "index.md") == "https://docs.example.com"
    assert page_url("https://docs.example.com/{path}/", "guide/index.md") == "https://docs.example.com/guide/"
    assert page_url("https://docs.example.com/{path}/", "index.md") == "https://docs.example.com/"


def test_summary_counts_chunks_per_kb_not_per_sub_folder():
    summary = IngestSummary()
    summary.add({"kb": "tool", "tenant": "public", "written": [
        {"source": "guide/setup.md", "doc_id": "public/tool/guide/setup.md", "chunks": 2},
        {"source": "index.md", "doc_id": "public/tool/index.md", "chunks": 1}],
        "totals": {"documents_written": 2, "chunks_written": 3}})
    text = format_summary(summary)
    assert "  public/tool: 3 chunks" in text and "public/tool/guide" not in text


def test_text_files_not_in_utf_8_are_ingested_decoded(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GATEHOUSE_DATA_DIR", str(tmp_path / "data"))
    folder = tmp_path / "legacy"
    folder.mkdir()
    texts = {"kantine.txt": ("Die Kantine öffnet um 11:30 Uhr; das Menü kostet 7 €.", "cp1252"),
             "anfahrt.md": ("# Anfahrt\n\nDas Büro liegt an der Königstraße.", "latin-1"),
             "notiz.txt": ("Große Notiz in UTF-16.", "utf-16")}
    for name, (text, encoding) in texts.items():
        (folder / name).write_bytes(text.encode(encoding))
    assert main(["ingest", str(folder), "--kb", "legacy"]) == 0
    assert "written: 3 documents" in capsys.readouterr().out
    chunks = LexicalDocumentStore().filter_documents(filters={"field": "meta.kb", "operator": "==", "value": "legacy"})
    contents = {chunk.meta["source"]: chunk.content for chunk in chunks}
    assert contents["kantine.txt"] == texts["kantine.txt"][0]
    assert "Königstraße" in contents["anfahrt.md"] and contents["notiz.txt"] == texts["notiz.txt"][0]


def test_ingest_files_runs_several_files_at_once_and_a_failing_one_alone(tmp_path, monkeypatch):
    from gatehouse.ingest import FileOutcome, ingest_files
    from gatehouse.pipelines import load_pipeline

    monkeypatch.setenv("GATEHOUSE_DATA_DIR", str(tmp_path / "data"))
    pipeline = load_pipeline("index")
    chunker = pipeline.get_component("chunker").pipeline
    chunker.get_component("splitter").max_chunks = 3  # a longer file fails in the splitter
    (tmp_path / "a.md").write_text("# Keys\n\nRotate keys monthly.\n")
    (tmp_path / "c.md").write_text("# Billing\n\nInvoices go out yearly.\n")
    (tmp_path / "b.md").write_text("".join(f"## Part {i}\n\nSection {i} says something.\n\n" for i in range(6)))
    together = ingest_files(pipeline, [tmp_path / "a.md", tmp_path / "c.md"], kb="tool", root=tmp_path)
    assert [FileOutcome.of(report).describe() for report in together] == ["written (1 chunk)", "written (1 chunk)"]
    assert [report["totals"]["documents_written"] for report in together] == [1, 1]
    paths = [tmp_path / name for name in ("a.md", "b.md", "c.md")]
    alone = ingest_files(pipeline, paths, kb="tool", root=tmp_path, force=True)
    outcomes = [FileOutcome.of(report) for report in alone]
    assert [outcome.status for outcome in outcomes] == ["written", "failed", "written"]
    assert outcomes[1].source == "b.md" and "over the limit of 3" in outcomes[1].reason


def test_batches_bound_files_and_bytes(tmp_path, monkeypatch):
    from gatehouse import ingest as ingest_module

    monkeypatch.setattr(ingest_module, "BATCH_FILES", 3)
    monkeypatch.setattr(ingest_module, "BATCH_BYTES", 100)
    sizes = {"a": 10, "b": 10, "c": 10, "d": 10, "big": 500, "e": 60, "f": 60, "gone": 0}
    for name, size in sizes.items():
        if name != "gone":
            (tmp_path / name).write_text("x" * size)
    runs = ingest_module.batches([tmp_path / name for name in sizes])
    assert [[path.name for path in run] for run in runs] == [["a", "b", "c"], ["d"], ["big"], ["e"], ["f", "gone"]]
