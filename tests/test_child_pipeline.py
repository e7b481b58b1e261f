"""ChildPipeline: the index pipeline's file-to-chunks part (`chunker`), run in a child process per run."""

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


def test_run_over_its_budget_is_stopped_with_every_process_it_started():
    """The Word extraction the child starts is stopped (SIGSTOP) so that the run must go over its budget."""
    spec = chunker_parameters(timeout_base_s=4, timeout_s_per_mb=0)["spec"]
    component_spec(spec, "docx_converter")["init_parameters"]["max_chars"] = 1_234_567  # marks its command line
    chunker = ChildPipeline(**chunker_parameters(spec=spec, timeout_base_s=4, timeout_s_per_mb=0))
    found: list[int] = []

    def stop_the_extraction() -> None:
        deadline = time.monotonic() + 30
        while not found and time.monotonic() < deadline:
            for process in Path("/proc").glob("[0-9]*"):
                try:
                    command = (process / "cmdline").read_bytes()
                except OSError:
                    continue
                if b"converters.extraction" in command and b"1234567" in command:
                    os.kill(int(process.name), signal.SIGSTOP)
                    found.append(int(process.name))
            time.sleep(0.05)

    stopper = threading.Thread(target=stop_the_extraction)
    stopper.start()
    with pytest.raises(ValueError, match=r"^report.docx: converting and splitting took over 4 s \(the chunker's "):
        chunker.run(sources=[upload("report.docx", docx_file([("p", "A paragraph.")]))])
    stopper.join()
    assert found
    status = Path(f"/proc/{found[0]}/status")
    time.sleep(0.5)
    assert not status.exists() or "State:\tZ" in status.read_text()  # killed (a zombie until its new parent reaps it)
