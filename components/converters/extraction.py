"""
The child process a bounded converter extracts one file in (`BoundedConverter` runs it), and what the extractors of
each format share: a text budget and the zip check of Office files.

Run as `python -m gatehouse.components.converters.extraction KIND MAX_CHARS MAX_MEMORY_MB MAX_EXPANDED_MB TIMEOUT_S`
with the file on standard input: KIND names the module `gatehouse.components.converters.<KIND>_text`, whose
`extract(data, text)` adds the file's text to `text` (`text.deadline`, half of TIMEOUT_S from the start, is when
optional work such as the PDF table pass stops; the parent kills the child at TIMEOUT_S). The child writes JSON on
standard output: `{"text": ..., "meta": {...}}` (`meta`: what the extractor read of the document, e.g. its
`title`), or `{"over": <chars so far>}` as soon as the text passes MAX_CHARS, `{"expanded":
<bytes>}` when a zip file's parts unzip to over MAX_EXPANDED_MB (0: not a zip format), `{"memory": MAX_MEMORY_MB}`
when its address space (capped at MAX_MEMORY_MB) ran out, or `{"error": "<why>"}` for a file the format's library
cannot read. Nothing here imports Haystack, so that a child starts in a fraction of a second.
"""

import importlib
import io
import json
import resource
import sys
import time
import unicodedata
import zipfile

KINDS = ("pdf", "docx", "pptx", "xlsx", "csv", "json")


class TooMuchText(Exception):
    """The text went over its character budget."""


class TooLarge(Exception):
    """A zip file's parts unzip to more bytes than allowed."""


class Text:
    """
    Lines of extracted text within a character budget: `add` raises `TooMuchText` as soon as the text passes
    `max_chars`, so an extractor stops early on a file that expands without end. `deadline` (a time.monotonic(), or
    None) is when an extractor stops optional work. `meta` holds what the extractor read of the document besides its
    text (its `title`).
    """

    def __init__(self, max_chars: int, deadline: float | None = None) -> None:
        self.max_chars = max_chars
        self.deadline = deadline
        self.lines: list[str] = []
        self.size = 0
        self.meta: dict[str, str] = {}

    def add(self, *lines: str) -> None:
        """Append lines; raises `TooMuchText` when the text passes the budget."""
        for line in lines:
            self.size += len(line) + 1
            if self.size > self.max_chars:
                raise TooMuchText(self.size)
            self.lines.append(line)

    def value(self) -> str:
        """The text so far, one line per line added."""
        return "\n".join(self.lines)


def one_line(text: str) -> str:
    """
    Text with its runs of white space (line breaks, tabs, vertical tabs) as single spaces; "" for text with nothing a
    reader sees, only format characters (zero-width spaces and joiners, soft hyphens, direction marks).
    """
    line = " ".join(str(text).split())
    if line.isprintable() or any(unicodedata.category(char) != "Cf" for char in line if char != " "):
        return line
    return ""


def check_zip(data: bytes, max_bytes: int) -> None:
    """
    Raise `TooLarge` when the parts of a zip file declare more than `max_bytes` unzipped: Python's zipfile reads no
    part past its declared size (a part that unzips to more fails its checksum), so a zip bomb is stopped here before
    any part is read. A file that is not a zip is left to the format's library to report.
    """
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            total = sum(info.file_size for info in archive.infolist())
    except zipfile.BadZipFile:
        return
    if total > max_bytes:
        raise TooLarge(total)


def run(kind: str, data: bytes, max_chars: int, max_expanded_mb: int, deadline: float | None = None) -> dict:
    """The child's JSON answer for one file of `kind`."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}")
    module = importlib.import_module(f"gatehouse.components.converters.{kind}_text")
    text = Text(max_chars, deadline)
    try:
        if max_expanded_mb:
            check_zip(data, max_expanded_mb * 1024 * 1024)
        module.extract(data, text)
    except TooMuchText as over:
        return {"over": over.args[0]}
    except TooLarge as large:
        return {"expanded": large.args[0]}
    except MemoryError:
        raise
    except Exception as error:  # any unreadable file is reported, not raised: the parent decides
        return {"error": f"{type(error).__name__}: {one_line(error)[:200]}"}
    return {"text": text.value(), "meta": text.meta}


def main() -> None:
    """Read the file from standard input and write the result as JSON."""
    start = time.monotonic()
    kind, max_chars, max_memory_mb, max_expanded_mb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    deadline = start + float(sys.argv[5]) / 2
    limit = max_memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    data = sys.stdin.buffer.read()
    try:
        result = run(kind, data, max_chars, max_expanded_mb, deadline)
    except MemoryError:
        result = {"memory": max_memory_mb}
    json.dump(result, sys.stdout)


if __name__ == "__main__":  # the module's own copy, so that extractors raise the exceptions `run` catches
    importlib.import_module("gatehouse.components.converters.extraction").main()
