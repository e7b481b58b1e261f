"""
The `gatehouse` command: the README's demo and `init` in new processes, as a user runs them; ask --json, ingest and
bad input through the same entry point in this process.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1]
GATEHOUSE = str(Path(sys.executable).with_name("gatehouse"))


def run(args: list[str], data_dir: Path) -> subprocess.CompletedProcess:
    """The command in a new process, as a user runs it."""
    env = {**os.environ, "GATEHOUSE_DATA_DIR": str(data_dir)}
    return subprocess.run([GATEHOUSE, *args], cwd=PROJECT, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture
def cli(data_dir, monkeypatch, capsys):
    """The command in this process (its pipelines load once per data folder): `cli(args)` -> (exit code, out, err)."""
    from gatehouse.cli import main

    monkeypatch.setenv("GATEHOUSE_DATA_DIR", str(data_dir))
    monkeypatch.chdir(PROJECT)

    def call(args: list[str]) -> tuple[int, str, str]:
        capsys.readouterr()
        try:
            code = main(args)
        except SystemExit as exit_:  # argparse refusing an argument
            code = exit_.code
        out, err = capsys.readouterr()
        return code, out, err

    return call


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("cli-data")


def test_demo_from_a_clean_data_directory(data_dir):
    result = run(["demo"], data_dir)
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert "written: 53 documents" in out
    assert "Sources:" in out and "#rotate-an-api-key" in out
    assert "status: success" in out
    assert "path: start" in out and "route_to_faq" in out


def test_ask_json_prints_only_the_response_contract(cli):
    code, out, err = cli(["ask", "--json", "How do I rotate an API key?"])
    assert code == 0, err[-2000:]
    response = json.loads(out)
    assert set(response) == {"answer", "citations", "metadata", "validation", "status", "error_message", "path"}
    assert response["status"] == "success"
    assert any(c["kb"] == "faq" and "#" in c["url"] for c in response["citations"])


def test_ask_json_nonsense_falls_back(cli):
    response = json.loads(cli(["ask", "--json", "asdkjh qwpoeiru zxmcnv"])[1])
    assert response["status"] == "fallback"
    assert "max_retries_reached" in response["path"]


def test_ingest_own_files_changes_and_failures(cli, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "notes.md").write_text("# Notes\n\n## Parking\n\nVisitors park on level two of the garage.\n")
    (docs / "scan.png").write_bytes(b"\x89PNG\r\n\x1a\n not read")
    summary = json.loads(cli(["ingest", str(docs), "--kb", "faq", "--tenant", "acme", "--json"])[1])
    assert summary["documents_written"] == 1 and summary["failed"][0]["source"] == "scan.png"
    assert "unsupported file type" in summary["failed"][0]["reason"]
    again = json.loads(cli(["ingest", str(docs / "notes.md"), "--kb", "faq", "--tenant", "acme", "--json"])[1])
    assert again["documents_written"] == 0 and again["skipped"] == 1
    (docs / "notes.md").write_text("# Notes\n\n## Parking\n\nVisitors now park on level three of the garage.\n")
    changed = json.loads(cli(["ingest", str(docs / "notes.md"), "--kb", "faq", "--tenant", "acme", "--json"])[1])
    assert changed["documents_written"] == 1
    answer = json.loads(cli(["ask", "--json", "--kb", "faq", "--tenant", "acme", "Where do visitors park?"])[1])
    assert "level three" in answer["answer"] and "level two" not in answer["answer"]
    public = json.loads(cli(["ask", "--json", "--kb", "faq", "Where do visitors park?"])[1])
    assert "level three" not in public["answer"]


def test_printed_text_carries_no_terminal_escapes(tmp_path, monkeypatch, capsys):
    from gatehouse.ask import ask_pipeline
    from gatehouse.cli import main

    ask_pipeline()  # loaded over the session's data folder: the asks below, over another, must not reuse it
    monkeypatch.setenv("GATEHOUSE_DATA_DIR", str(tmp_path / "data"))
    hostile = tmp_path / "hostile.md"
    hostile.write_text("---\ntitle: \"Lockers\\e]0;pwned\\a\"\n---\n\n# Lockers\n\n"
                       "Lockers are on level\u200b one of the\u2066 garage\ufeff.\x1b[2J\x1b[31m\u202e\n")
    assert main(["ingest", str(hostile), "--kb", "hostile", "--tenant", "acme"]) == 0
    capsys.readouterr()
    assert main(["ask", "--kb", "hostile", "--tenant", "acme", "Where are the lockers?"]) == 0
    out = capsys.readouterr().out
    assert "level one" in out, out
    assert not any(char in out for char in "\x1b\x07\x9b\u202e\u200b\u2066\ufeff"), repr(out)

def test_help_loads_neither_haystack_nor_a_model():
    probe = ("import sys\nfrom gatehouse.cli import build_parser\nbuild_parser().format_help()\n"
             "print(sorted(m for m in ('haystack', 'torch', 'sentence_transformers') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"


def test_kb_list_reads_the_store_without_haystack_or_a_model(tmp_path):
    from haystack import Document

    from gatehouse.document_stores.edge_document_store import EdgeDocumentStore

    store = EdgeDocumentStore(path=str(tmp_path / "data" / "store"), embedding_dim=3)
    store.write_documents([Document(content="Lockers are on level one.", embedding=[1.0, 0.0, 0.0],
                                    meta={"tenant": "acme", "kb": "garage", "doc_id": "acme/garage/a.md",
                                          "source": "a.md"})])
    store.close()
    probe = ("import sys\nfrom gatehouse.cli import main\nmain(['kb', 'list'])\n"
             "print(sorted(m for m in ('haystack', 'torch', 'sentence_transformers') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True,
                          env={**os.environ, "GATEHOUSE_DATA_DIR": str(tmp_path / "data")})
    table, modules = done.stdout.strip().rsplit("\n", 1)
    assert modules == "[]"
    assert table.splitlines()[1].split() == ["acme", "garage", "1", "1"]


def test_bad_input_gets_a_clear_error_not_a_traceback(cli):
    code, _, err = cli(["ingest", "somewhere", "--kb", "Bad Name!"])
    assert code == 2
    assert "Invalid knowledge base name" in err and "Traceback" not in err
    code, out, _ = cli(["ask", "--mode", "constrained-context", "--context", "short", "--json", "What?"])
    assert code == 1 and json.loads(out)["status"] == "error"


@pytest.fixture
def unreadable(tmp_path) -> dict[str, Path]:
    (tmp_path / "folder").mkdir()
    (tmp_path / "latin1.txt").write_bytes("Caf\xe9 opening hours".encode("latin-1"))
    return {"missing": tmp_path / "missing.txt", "folder": tmp_path / "folder", "latin1": tmp_path / "latin1.txt"}


@pytest.mark.parametrize(("option", "kind", "message"), [
    ("--context", "missing", "the context file {path} does not exist"),
    ("--context", "folder", "the context file {path} is a folder, not a file"),
    ("--context", "latin1", "the context file {path} is not UTF-8 text (byte 0xe9 at offset 3); save it as UTF-8"),
    ("--history", "latin1", "the history file {path} is not UTF-8 text (byte 0xe9 at offset 3); save it as UTF-8"),
    ("--history", "folder", "the history file {path} is a folder, not a file"),
])
def test_a_file_that_cannot_be_read_is_one_line_and_status_2(cli, unreadable, option, kind, message):
    path = unreadable[kind]
    value = f"@{path}" if option == "--context" else str(path)
    code, out, err = cli(["ask", "--mode", "hybrid", option, value, "What?"])
    assert (code, out, err) == (2, "", f"gatehouse: {message.format(path=path)}\n")


@pytest.mark.parametrize(("change", "message"), [
    ("subprocess.Popen", "component 'intake' (subprocess.Popen) is of a module pipelines may not load: Gatehouse "
                         "loads gatehouse.components.* and gatehouse.document_stores.*"),
    ("gatehouse.components.routers.nope.Nope", "component 'intake' has type 'gatehouse.components.routers.nope.Nope', "
                                               "which does not exist: check its spelling"),
])
def test_a_pipeline_naming_a_type_it_may_not_load_is_one_line_and_status_2(cli, tmp_path, monkeypatch, change,
                                                                           message):
    folder = tmp_path / "pipelines"
    folder.mkdir()
    for path in (PROJECT / "pipelines").glob("*.yml"):
        (folder / path.name).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    ask = folder / "ask.yml"
    ask.write_text(ask.read_text(encoding="utf-8").replace(
        "type: gatehouse.components.intake.request_intake.RequestIntake", f"type: {change}", 1), encoding="utf-8")
    monkeypatch.setenv("GATEHOUSE_PIPELINES_DIR", str(folder))
    code, out, err = cli(["ask", "What?"])
    assert code == 2 and out == ""
    assert err.startswith(f"gatehouse: {ask}: {message}") and err.count("\n") == 1


@pytest.mark.parametrize("args", [["serve", "--prepare-only", "--port", "99999"],
                                  ["serve", "--prepare-only", "--port", "0"],
                                  ["llm", "serve", "--path", "missing.gguf", "--port", "65536"]])
def test_a_port_outside_1_to_65535_is_refused(cli, args):
    code, _, err = cli(args)
    assert code == 2 and f"argument --port: {int(args[-1])} is not a port number: use 1 to 65535" in err


def test_init_then_an_edited_copy_is_the_one_used(tmp_path):
    project = tmp_path / "project"
    first = subprocess.run([GATEHOUSE, "init", str(project)], capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    again = subprocess.run([GATEHOUSE, "init", str(project)], capture_output=True, text=True, timeout=120)
    assert again.returncode == 2 and "--force" in again.stderr and "Traceback" not in again.stderr
    ask = project / "pipelines" / "ask.yml"
    ask.write_text(ask.read_text().replace("type: gatehouse.components.intent.intent_gate.IntentGate",
                                           "type: components.intent_gate.IntentGate"))
    env = {key: value for key, value in os.environ.items() if key != "GATEHOUSE_PIPELINES_DIR"}
    old = subprocess.run([GATEHOUSE, "ask", "hello"], cwd=project, env={**env, "GATEHOUSE_DATA_DIR": str(tmp_path / "d")},
                         capture_output=True, text=True, timeout=300)
    assert old.returncode == 2 and "gatehouse.components.intent.intent_gate.IntentGate" in old.stderr
    assert str(ask) in old.stderr and "Traceback" not in old.stderr
