"""
PDFToDocument: PDF files to documents with pypdf, each file extracted in a child process under a time budget, a
character cap and a memory cap.

A PDF's content streams are compressed: a few kilobytes can expand into millions of characters, and pypdf's text
extraction of one hostile page can run for many minutes in a thread nobody can stop. Here each file is extracted by
`python -m gatehouse.components.converters.pdf_text`, which stops at `max_chars`, is limited to `max_memory_mb` and is
killed after `timeout_s`: the file then fails alone with a reason naming the bound (the ingest goes on with the next
file). A PDF pypdf cannot read gives no document, as Haystack's `PyPDFToDocument` does.

Usage:
```python
from gatehouse.components.converters.pdf_to_document import PDFToDocument

converter = PDFToDocument(timeout_s=60, max_chars=2_000_000)
converter.run(sources=["manual.pdf"])["documents"][0].content     # pages separated by form feeds
```
"""

import json
import logging
import os
import subprocess
import sys
from typing import Any

from haystack import component

from gatehouse.components.converters.sources import FileConverter

logger = logging.getLogger(__name__)

CHILD = [sys.executable, "-m", "gatehouse.components.converters.pdf_text"]


@component
class PDFToDocument(FileConverter):
    """
    Converts PDF files to documents, one child process per file, within a time, character and memory budget; `run`
    (from `FileConverter`) gives one document per readable file, its pages' text separated by form feeds.
    """

    unnamed = "PDF"

    def __init__(self, *, timeout_s: float = 60.0, max_chars: int = 2_000_000, max_memory_mb: int = 1024) -> None:
        """
        :param timeout_s: Longest extraction of one file, in seconds; a file over it fails.
        :param max_chars: Most characters of text one file may give; a file over it fails.
        :param max_memory_mb: Memory cap of the extracting process; a file over it fails.
        """
        if timeout_s <= 0 or max_chars <= 0 or max_memory_mb <= 0:
            raise ValueError("PDFToDocument's 'timeout_s', 'max_chars' and 'max_memory_mb' must be positive.")
        self.timeout_s = timeout_s
        self.max_chars = max_chars
        self.max_memory_mb = max_memory_mb

    def _extract(self, data: bytes, name: str) -> dict[str, Any]:
        """The child's JSON answer for one file; raises ValueError naming the bound the file went over."""
        try:
            done = subprocess.run(
                [*CHILD, str(self.max_chars), str(self.max_memory_mb)], input=data, capture_output=True,
                timeout=self.timeout_s, check=False, env={**os.environ, "PYTHONWARNINGS": "ignore"},
            )
        except subprocess.TimeoutExpired as error:
            raise ValueError(f"{name}: text extraction took over {self.timeout_s:g} s "
                             "(pdf_converter.timeout_s in index.yml)") from error
        try:
            answer = json.loads(done.stdout or b"{}")
        except ValueError:
            answer = {}
        if "over" in answer:
            raise ValueError(f"{name}: the PDF expands to over {self.max_chars} characters of text "
                             "(pdf_converter.max_chars in index.yml)")
        if "memory" in answer:
            raise ValueError(f"{name}: text extraction needed over {self.max_memory_mb} MB of memory "
                             "(pdf_converter.max_memory_mb in index.yml)")
        if "pages" not in answer and "error" not in answer:
            raise ValueError(f"{name}: text extraction stopped (exit code {done.returncode})")
        return answer

    def text(self, data: bytes, name: str) -> str | None:
        """
        The text of a PDF file: its pages' text separated by form feeds; None for a PDF pypdf cannot read (logged).

        :raises ValueError: When the file goes over `timeout_s`, `max_chars` or `max_memory_mb`.
        """
        answer = self._extract(data, name)
        if "error" in answer:
            logger.warning("Could not convert %s, skipping it: %s", name, answer["error"])
            return None
        return "\f".join(answer["pages"])
