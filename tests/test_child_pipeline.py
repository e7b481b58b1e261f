"""ChildPipeline: the index pipeline's file-to-chunks part (`chunker`), run in a worker process kept between runs."""

import logging
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from haystack.core.errors import PipelineRuntimeError
from haystack.core.serialization import component_from_dict, component_to_dict
from haystack.dataclasses import ByteStream
from office_files import docx_file

from gatehouse.components.pipelines.child_pipeline import ChildPipeline
from gatehouse.components.writers.ingest_planner import DEFAULT_MIME_TYPES
from gatehouse.pipelines import component_spec, read_spec

NOTES = b"# Notes\n\nKeys rotate monthly.\n\n## Billing\n\nInvoices go out {{ yearly }}.\n"


def chunker_parameters(**changes) -> dict:
    """The init parameters of index.yml's chunker, some changed."""
    return {**component_spec(read_spec("index"), "chunker")["init_parameters"], **changes}


def upload(name: str, data: bytes) -> ByteStream:
    """A file as the planner gives it to the chunker."""
    mime_type = DEFAULT_MIME_TYPES[Path(name).suffix]
    return ByteStream(data=data, mime_type=mime_type, meta={"file_name": name, "source": name, "file_path": name,
                                                            "doc_id": f"public/kb/{name}", "mime_type": mime_type})


@pytest.fixture(scope="module")
def chunker() -> ChildPipeline:
    return ChildPipeline(**chunker_parameters())


def test_init(chunker):
    assert (chunker.timeout_s, chunker.timeout_base_s, chunker.timeout_s_per_mb) == (120, 30, 30)
    assert "splitter" in chunker.spec["components"] and chunker.pipeline.get_component("splitter").max_words == 220
    with pytest.raises(ValueError, match="timeout_s and timeout_base_s must be positive"):
        ChildPipeline(**chunker_parameters(timeout_base_s=0))


def test_to_dict(chunker):
    data = component_to_dict(chunker, "chunker")
    assert data["type"] == "gatehouse.components.pipelines.child_pipeline.ChildPipeline"
    assert data["init_parameters"] == chunker_parameters()


def test_from_dict(chunker):
    restored = component_from_dict(ChildPipeline, component_to_dict(chunker, "chunker"), "chunker")
    assert restored.spec == chunker.spec and restored.timeout_s == 120


def test_run_gives_the_chunks_of_the_pipeline_in_process(chunker):
    made = chunker.run(sources=[upload("notes.md", NOTES)])["documents"]
    here = chunker.pipeline.run({"file_router": {"sources": [upload("notes.md", NOTES)]}},
                                include_outputs_from={"splitter"})["splitter"]["documents"]
    assert [(c.id, c.content, c.meta["section_id"]) for c in made] == [(c.id, c.content, c.meta["section_id"])
                                                                          for c in here]
    assert [c.content for c in made] == ["Keys rotate monthly.", "Invoices go out yearly."]


def test_run_happens_in_a_child_whose_logs_come_here(chunker, caplog):
    with caplog.at_level(logging.WARNING):
        assert chunker.run(sources=[upload("scan.pdf", b"%PDF-1.4 not really")])["documents"] == []
    skipped = [record for record in caplog.records if "Could not convert scan.pdf" in record.getMessage()]
    assert len(skipped) == 1 and skipped[0].process != os.getpid()


def test_run_a_component_that_fails_in_the_child_is_named_with_its_error(chunker):
    with pytest.raises(PipelineRuntimeError) as raised:
        chunker.run(sources=[upload("broken.docx", b"not a zip")])
    assert raised.value.component_name == "docx_converter"
    assert str(raised.value.__cause__).startswith("broken.docx: not a readable Word file (BadZipFile")


def test_run_reuses_its_worker_which_never_imports_torch(chunker, caplog):
    with caplog.at_level(logging.WARNING):
        for name in ("scan.pdf", "scan2.pdf"):
            chunker.run(sources=[upload(name, b"%PDF-1.4 not really")])
    workers = {record.process for record in caplog.records if "Could not convert scan" in record.getMessage()}
    assert len(workers) == 1 and os.getpid() not in workers
    assert "torch" not in Path(f"/proc/{workers.pop()}/maps").read_text()  # no PyTorch library loaded


def on_extraction(marker: int, act, times: int) -> tuple[threading.Thread, list[int]]:
    """
    A thread that calls `act(pid)` on the first `times` extraction processes whose command line has `marker` (for 30 s
    at most).
    """
    found: list[int] = []

    def watch() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(found) < times:
            for process in Path("/proc").glob("[0-9]*"):
                try:
                    command = (process / "cmdline").read_bytes()
                except OSError:
                    continue
                if b"converters.extraction" in command and str(marker).encode() in command and \
                        int(process.name) not in found:
                    found.append(int(process.name))
                    act(int(process.name))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    return watcher, found


def parent_of(pid: int) -> int:
    """A process's parent (from /proc; a stopped process's record stays until it is reaped)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def gone_or_zombie(pid: int) -> bool:
    try:
        return "State:\tZ" in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True


def eventually(condition, within_s: float = 30) -> bool:
    """Whether `condition` holds within `within_s` (a hang guard: on a busy machine a killed process is reaped late)."""
    deadline = time.monotonic() + within_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.1)
    return condition()


def marked(marker: int, **changes) -> dict:
    """The chunker's parameters with its Word extraction marked by `marker` (its max_chars) on its command line."""
    spec = chunker_parameters()["spec"]
    component_spec(spec, "docx_converter")["init_parameters"]["max_chars"] = marker
    return chunker_parameters(spec=spec, **changes)


def test_run_over_its_budget_is_stopped_with_every_process_it_started_and_the_next_run_has_a_new_worker(caplog):
    """
    The Word extraction the worker starts is stopped (SIGSTOP) so that the run must go over its budget; the worker is
    started by a first run, so that on a busy machine its start does not spend the budget before the extraction runs.
    """
    chunker = ChildPipeline(**marked(1_234_567, timeout_base_s=10, timeout_s_per_mb=0))
    assert chunker.run(sources=[upload("notes.md", NOTES)])["documents"][0].content == "Keys rotate monthly."
    workers: list[int] = []

    def stop(pid: int) -> None:
        workers.append(parent_of(pid))
        os.kill(pid, signal.SIGSTOP)

    watcher, found = on_extraction(1_234_567, stop, times=1)
    with pytest.raises(ValueError, match=r"^report.docx: converting and splitting took over 10 s \(the chunker's "):
        chunker.run(sources=[upload("report.docx", docx_file([("p", "A paragraph.")]))])
    watcher.join()
    assert eventually(lambda: gone_or_zombie(found[0]))  # killed (a zombie until its new parent reaps it)
    assert eventually(lambda: not Path(f"/proc/{workers[0]}").exists())  # killed and reaped
    with caplog.at_level(logging.WARNING):
        assert chunker.run(sources=[upload("notes.md", NOTES)])["documents"][0].content == "Keys rotate monthly."
        chunker.run(sources=[upload("scan.pdf", b"%PDF-1.4 not really")])
    assert [record.process for record in caplog.records if "Could not convert scan" in record.getMessage()] != workers


def test_ingest_a_file_whose_worker_dies_fails_alone_in_one_line_and_the_others_are_written(tmp_path, monkeypatch):
    """The worker is killed while it extracts the Word file, in the run of all three files and in its own."""
    from gatehouse.ingest import FileOutcome, ingest_files
    from gatehouse.pipelines import load_pipeline

    monkeypatch.setenv("GATEHOUSE_DATA_DIR", str(tmp_path / "data"))
    pipeline = load_pipeline("index")
    pipeline.get_component("chunker").pipeline.get_component("docx_converter").max_chars = 1_234_568
    (tmp_path / "a.md").write_text("# Keys\n\nRotate keys monthly.\n")
    (tmp_path / "b.docx").write_bytes(docx_file([("p", "A paragraph.")]))
    (tmp_path / "c.md").write_text("# Billing\n\nInvoices go out yearly.\n")

    watcher, found = on_extraction(1_234_568, lambda pid: os.kill(parent_of(pid), signal.SIGKILL), times=2)
    reports = ingest_files(pipeline, [tmp_path / name for name in ("a.md", "b.docx", "c.md")], kb="tool",
                           root=tmp_path)
    watcher.join()
    outcomes = [FileOutcome.of(report) for report in reports]
    assert len(found) == 2 and [outcome.status for outcome in outcomes] == ["written", "failed", "written"]
    assert outcomes[1].reason == ("chunker failed: b.docx: the process converting and splitting it stopped "
                                  "(exit code -9)")


def test_start_workers_starts_the_chunkers_worker_before_the_index_pipeline_is_built(chunker, caplog):
    from gatehouse.components.pipelines import pipeline_worker
    from gatehouse.components.pipelines.child_pipeline import start_workers

    pipeline_worker.stop_idle()
    start_workers(read_spec("index"))
    started = [worker.process.pid for worker in pipeline_worker._IDLE]
    with caplog.at_level(logging.WARNING):
        chunker.run(sources=[upload("scan.pdf", b"%PDF-1.4 not really")])
    assert len(started) == 1
    assert [record.process for record in caplog.records if "Could not convert scan" in record.getMessage()] == started


def test_a_worker_builds_its_spec_once_and_again_only_when_the_spec_sent_changes(chunker, monkeypatch):
    """The worker's loop (`_serve`) in a thread, over pipes: the spec it was started with is built before any run."""
    from multiprocessing import Pipe

    from gatehouse import pipelines
    from gatehouse.components.pipelines import pipeline_worker

    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", root.handlers)  # the loop sets the root logger's: put back afterwards
    monkeypatch.setattr(root, "level", root.level)
    built: list[dict] = []
    build = pipelines.build_pipeline
    monkeypatch.setattr(pipelines, "build_pipeline", lambda spec, **kw: built.append(spec) or build(spec, **kw))
    (worker_in, to_worker), (from_worker, worker_out) = Pipe(duplex=False), Pipe(duplex=False)
    serving = threading.Thread(target=pipeline_worker._serve, args=(worker_in, worker_out), daemon=True)
    serving.start()
    to_worker.send(([], [], chunker_parameters()["spec"]))
    data = {"file_router": {"sources": [upload("notes.md", NOTES)]}}
    for _ in range(2):  # the spec as the parent sends it: its built pipeline's
        to_worker.send((chunker.pipeline.to_dict(), data, {"splitter"}, logging.WARNING))
        assert from_worker.poll(120)  # a hang guard
        assert from_worker.recv()[1][1]["splitter"]["documents"][0].content == "Keys rotate monthly."
    assert len(built) == 1
    changed = chunker.pipeline.to_dict()
    component_spec(changed, "splitter")["init_parameters"].update(max_words=2, overlap_words=0)
    to_worker.send((changed, data, {"splitter"}, logging.WARNING))
    assert from_worker.poll(120)
    outcome = from_worker.recv()[1]
    assert outcome[0] == "done", outcome
    assert outcome[1]["splitter"]["documents"][0].content == "Keys rotate"
    assert len(built) == 2
    to_worker.close()
    serving.join(timeout=60)
