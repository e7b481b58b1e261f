"""
A PDF's text for `PDFToDocument`, extracted in its child process (`extraction.py`): pypdf's text of each page, except
that a page with ruled tables gives pdfplumber's text around the tables and each table as rows that keep their column
headers (`- Header: cell; Header: cell`). Pages are separated by form feeds.

Only pages that draw at least `MIN_PATHS` paths (lines or rectangles: a ruled table of two rows and two columns has
more) go through pdfplumber: pypdfium2 counts them in C, so a PDF of prose costs what pypdf costs. The tables are a
bonus on pypdf's text: the table pass stops at the child's deadline (half its time budget), keeping pypdf's text for
the pages left, and a file pdfium or pdfplumber cannot read keeps pypdf's text.

The comparison that chose this is in docs/benchmarks.md ("PDF tables"): pdfplumber's `lines` strategy recovers ruled
tables with their headers and finds no table in prose; its `text` strategy splits cells of several words and finds
tables in prose, so tables without rules stay pypdf's text.
"""

import io
import time

from gatehouse.components.converters.extraction import Text, TooMuchText, one_line
from gatehouse.components.tables import grid_rows

MIN_PATHS = 4  # paths a page draws before it is searched for ruled tables


def _drawn_pages(data: bytes) -> set[int]:
    """The indexes of the pages that draw at least `MIN_PATHS` paths."""
    import pypdfium2
    import pypdfium2.raw as pdfium_c

    document = pypdfium2.PdfDocument(data)
    try:
        drawn = set()
        for index in range(len(document)):
            page = document[index]
            objects = page.get_objects(filter=(pdfium_c.FPDF_PAGEOBJ_PATH,), max_depth=2)
            if sum(1 for _ in zip(range(MIN_PATHS), objects)) >= MIN_PATHS:
                drawn.add(index)
            page.close()
        return drawn
    finally:
        document.close()


def _with_tables(page) -> str | None:
    """pdfplumber's text of a page with its ruled tables as rows with headers, or None when it finds no table."""
    tables = page.find_tables()
    if not tables:
        return None
    parts, top = [], page.bbox[1]
    for table in sorted(tables, key=lambda found: found.bbox[1]):
        x0, y0, x1, y1 = table.bbox
        if y0 > top:
            parts.append(page.crop((page.bbox[0], top, page.bbox[2], y0), strict=False).extract_text() or "")
        parts.append("\n".join(grid_rows([[one_line(cell or "") for cell in row] for row in table.extract()])))
        top = max(top, y1)
    if top < page.bbox[3]:
        parts.append(page.crop((page.bbox[0], top, page.bbox[2], page.bbox[3]), strict=False).extract_text() or "")
    return "\n\n".join(part.strip() for part in parts if part.strip())


def _table_texts(data: bytes, deadline: float | None) -> dict[int, str]:
    """pdfplumber's text of each page with ruled tables (see `_with_tables`), until `deadline` (time.monotonic)."""
    found: dict[int, str] = {}
    drawn = _drawn_pages(data)
    if not drawn:
        return found
    import pdfplumber

    with pdfplumber.open(io.BytesIO(data)) as pdf:
        for index in sorted(drawn):
            if deadline is not None and time.monotonic() > deadline:
                break
            text = _with_tables(pdf.pages[index])
            if text is not None:
                found[index] = text
            pdf.pages[index].close()
    return found


def page_texts(data: bytes, max_chars: int, deadline: float | None = None) -> list[str]:
    """
    Each page's text, ruled tables as rows with their headers (those found before `deadline`, a time.monotonic()).

    :raises TooMuchText: As soon as the text passes `max_chars`.
    """
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data))
    pages, total = [], 0
    for page in reader.pages:
        pages.append(page.extract_text() or "")
        total += len(pages[-1])
        if total > max_chars:
            raise TooMuchText(total)
    try:
        tables = _table_texts(data, deadline) if pages else {}
    except MemoryError:
        raise
    except Exception:  # noqa: BLE001 - the tables are a bonus: a file pypdf reads keeps pypdf's text
        tables = {}
    for index, text in tables.items():
        total += len(text) - len(pages[index])
        if total > max_chars:
            raise TooMuchText(total)
        pages[index] = text
    return pages


def extract(data: bytes, text: Text) -> None:
    """Add the PDF's pages, separated by form feeds, to `text`."""
    text.add("\f".join(page_texts(data, text.max_chars, text.deadline)))
