"""
BoundedConverter: the base of the converters that extract each file in a child process
(`python -m gatehouse.components.converters.extraction`) under a time budget, a character cap and a memory cap, and,
for zip formats (Word, PowerPoint, Excel), a cap on what the zip unzips to.

A few kilobytes can expand into gigabytes (a compressed PDF stream, a zip bomb in a .docx) and a library's parse of a
hostile file can run for minutes in a thread nobody can stop. Here the child stops at `max_chars`, is limited to
`max_memory_mb`, refuses a zip whose parts declare more than `max_expanded_mb` and is killed when its time is up: a
file may take `timeout_base_s` plus `timeout_s_per_mb` per megabyte, at most `timeout_s`, so a small file cannot hold
the ingest for the whole of `timeout_s`. The file then fails alone with a one-line reason naming the file and the bound
(the ingest goes on with the next file).
A file the format's library cannot read fails with the library's reason (PDFs are skipped instead, as Haystack's
`PyPDFToDocument` does).

Usage (a subclass sets `kind`, `label` and `setting`):
```python
from gatehouse.components.converters.docx_to_document import DOCXToDocument

DOCXToDocument(timeout_s=60, max_chars=2_000_000).run(sources=["handbook.docx"])["documents"][0].content
```
"""

import json
import logging
import os
import subprocess
import sys
from typing import Any, ClassVar

from gatehouse.components.converters.sources import FileConverter, file_title

logger = logging.getLogger(__name__)

CHILD = [sys.executable, "-m", "gatehouse.components.converters.extraction"]
MEGABYTE = 1024 * 1024


def time_budget(size_bytes: int, *, base_s: float, per_mb_s: float, cap_s: float) -> float:
    """Seconds allowed for work on `size_bytes` of input: `base_s` plus `per_mb_s` per megabyte, at most `cap_s`."""
    return min(cap_s, base_s + per_mb_s * size_bytes / MEGABYTE)


class BoundedConverter(FileConverter):
    """
    Converts files of one format to documents, one child process per file, within a time, character and memory
    budget. A subclass sets `kind` (the extractor module `<kind>_text`), `label` (the format in messages), `setting`
    (its component name in index.yml, named in messages) and `unnamed`.
    """

    kind: ClassVar[str]
    label: ClassVar[str]
    setting: ClassVar[str]
    skip_unreadable: ClassVar[bool] = False

    def __init__(
        self, *, timeout_s: float = 60.0, max_chars: int = 2_000_000, max_memory_mb: int = 1024,
        timeout_base_s: float = 15.0, timeout_s_per_mb: float = 20.0,
    ) -> None:
        """
        :param timeout_s: Longest extraction of one file, in seconds; a file over it fails.
        :param max_chars: Most characters of text one file may give; a file over it fails.
        :param max_memory_mb: Memory cap of the extracting process; a file over it fails.
        :param timeout_base_s: Time for the extraction of a file of no size, in seconds...
        :param timeout_s_per_mb: ...plus this many seconds per megabyte of the file (at most `timeout_s` in all).
        """
        if min(timeout_s, max_chars, max_memory_mb, timeout_base_s) <= 0 or timeout_s_per_mb < 0:
            raise ValueError(f"{type(self).__name__}'s 'timeout_s', 'max_chars', 'max_memory_mb' and 'timeout_base_s' "
                             "must be positive, 'timeout_s_per_mb' not negative.")
        self.timeout_s = timeout_s
        self.max_chars = max_chars
        self.max_memory_mb = max_memory_mb
        self.timeout_base_s = timeout_base_s
        self.timeout_s_per_mb = timeout_s_per_mb

    def _expanded_mb(self) -> int:
        return 0

    def _extract(self, data: bytes, name: str) -> dict[str, Any]:
        """The child's JSON answer for one file; raises ValueError naming the bound the file went over."""
        setting = self.setting
        budget = time_budget(len(data), base_s=self.timeout_base_s, per_mb_s=self.timeout_s_per_mb,
                             cap_s=self.timeout_s)
        try:
            done = subprocess.run(
                [*CHILD, self.kind, str(self.max_chars), str(self.max_memory_mb), str(self._expanded_mb()),
                 str(budget)],
                input=data, capture_output=True, timeout=budget, check=False,
                env={**os.environ, "PYTHONWARNINGS": "ignore"},
            )
        except subprocess.TimeoutExpired as error:
            bound = f"{setting}.timeout_s" if budget == self.timeout_s else (
                f"{setting}.timeout_base_s plus timeout_s_per_mb for its {len(data) / MEGABYTE:.2f} MB")
            raise ValueError(f"{name}: text extraction took over {budget:g} s ({bound} in index.yml)") from error
        try:
            answer = json.loads(done.stdout or b"{}")
        except ValueError:
            answer = {}
        if "over" in answer:
            raise ValueError(f"{name}: the {self.label} expands to over {self.max_chars} characters of text "
                             f"({setting}.max_chars in index.yml)")
        if "expanded" in answer:
            raise ValueError(f"{name}: the {self.label} unzips to {answer['expanded']} bytes, over "
                             f"{self._expanded_mb()} MB ({setting}.max_expanded_mb in index.yml)")
        if "memory" in answer:
            raise ValueError(f"{name}: text extraction needed over {self.max_memory_mb} MB of memory "
                             f"({setting}.max_memory_mb in index.yml)")
        if "text" not in answer and "error" not in answer:
            raise ValueError(f"{name}: text extraction stopped (exit code {done.returncode})")
        return answer

    def convert(self, data: bytes, name: str) -> tuple[str, dict[str, Any]] | None:
        """
        The text of one file and its title: the one the file holds (see the format's extractor), else the file's name
        (`file_title`). A file with a title of its own also keeps its name's words as `file_title` (what a person
        named the file, a retrieval cue beside a title its template may have left).

        :returns: The text and `{"title": ...}` (and `file_title`); None for an unreadable file when
            `skip_unreadable` (logged).
        :raises ValueError: When the file goes over a bound, or is unreadable (naming the file and the reason).
        """
        answer = self._extract(data, name)
        if "error" in answer:
            if self.skip_unreadable:
                logger.warning("Could not convert %s, skipping it: %s", name, answer["error"])
                return None
            raise ValueError(f"{name}: not a readable {self.label} ({answer['error']})")
        own, named = str((answer.get("meta") or {}).get("title") or ""), file_title(name)
        return answer["text"], {"title": own, "file_title": named} if own and own != named else {"title": named}


class ZipConverter(BoundedConverter):
    """A `BoundedConverter` of a zip format (Word, PowerPoint, Excel), with a cap on what its parts unzip to."""

    def __init__(
        self, *, timeout_s: float = 60.0, max_chars: int = 2_000_000, max_memory_mb: int = 1024,
        max_expanded_mb: int = 256, timeout_base_s: float = 15.0, timeout_s_per_mb: float = 20.0,
    ) -> None:
        """
        :param timeout_s: Longest extraction of one file, in seconds; a file over it fails.
        :param max_chars: Most characters of text one file may give; a file over it fails.
        :param max_memory_mb: Memory cap of the extracting process; a file over it fails.
        :param max_expanded_mb: Most megabytes the file's zip parts may declare unzipped; a file over it (a zip bomb)
            fails before any part is read.
        :param timeout_base_s: Time for the extraction of a file of no size, in seconds...
        :param timeout_s_per_mb: ...plus this many seconds per megabyte of the file (at most `timeout_s` in all).
        """
        super().__init__(timeout_s=timeout_s, max_chars=max_chars, max_memory_mb=max_memory_mb,
                         timeout_base_s=timeout_base_s, timeout_s_per_mb=timeout_s_per_mb)
        if max_expanded_mb <= 0:
            raise ValueError(f"{type(self).__name__}'s 'max_expanded_mb' must be positive.")
        self.max_expanded_mb = max_expanded_mb

    def _expanded_mb(self) -> int:
        return self.max_expanded_mb
