"""
A PDF's text, extracted in a child process that the parent can stop (`PDFToDocument` runs it).

Run as `python -m gatehouse.components.converters.pdf_text MAX_CHARS MAX_MEMORY_MB` with the PDF on standard input:
it writes the pages' text as JSON (`{"pages": [...]}`) on standard output, or `{"over": <chars so far>}` as soon as the
text passes MAX_CHARS (a compressed PDF can expand a few kilobytes into millions of characters), or
`{"error": "<why>"}` for a file pypdf cannot read. Its address space is capped at MAX_MEMORY_MB.
"""

import io
import json
import resource
import sys


def extract(data: bytes, max_chars: int) -> dict:
    """The text of each page, or `{"over": n}` once the text passes `max_chars`, or `{"error": ...}`."""
    from pypdf import PdfReader

    try:
        reader = PdfReader(io.BytesIO(data))
        pages, total = [], 0
        for page in reader.pages:
            pages.append(page.extract_text() or "")
            total += len(pages[-1])
            if total > max_chars:
                return {"over": total}
    except Exception as error:  # any unreadable PDF is reported, not raised: the parent decides
        return {"error": f"{type(error).__name__}: {str(error).strip()[:200]}"}
    return {"pages": pages}


def main() -> None:
    """Read the PDF from standard input and write the result as JSON."""
    max_chars, max_memory_mb = int(sys.argv[1]), int(sys.argv[2])
    limit = max_memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    data = sys.stdin.buffer.read()
    try:
        result = extract(data, max_chars)
    except MemoryError:
        result = {"memory": max_memory_mb}
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
