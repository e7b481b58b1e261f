"""
A PDF's text for `PDFToDocument`, extracted in its child process (`extraction.py`): pypdf's text of each page, its
lines rejoined into paragraphs (`reflow`: wrapped prose runs on, a form's value stays on its label's line), except
that a page with ruled tables gives pdfplumber's text around the tables and each table as rows that keep their column
headers (`- Header: cell; Header: cell`; `tables.read_tables`: a title row is the caption, a merged header cell names
every column it spans). Pages are separated by form feeds.

The document's title is the one its properties name, else the first line of its first page when it reads as a title
and is set in larger type than the page's text (`TITLE_SCALE`).

Only pages that draw at least `MIN_PATHS` paths (lines or rectangles: a ruled table of two rows and two columns has
more) go through pdfplumber: pypdfium2 counts them in C, so a PDF of prose costs what pypdf costs. The tables are a
bonus on pypdf's text: the table pass stops at the child's deadline (half its time budget), keeping pypdf's text for
the pages left, and a file pdfium or pdfplumber cannot read keeps pypdf's text.

The comparison that chose this is in docs/benchmarks.md ("PDF tables"): pdfplumber's `lines` strategy recovers ruled
tables with their headers and finds no table in prose; its `text` strategy splits cells of several words and finds
tables in prose, so tables without rules stay pypdf's text.
"""

import io
import re
import time

import statistics

from gatehouse.components.converters.extraction import Text, TooMuchText, one_line
from gatehouse.components.converters.titles import property_title, reads_as_title
from gatehouse.components.tables import Merged, grid_rows, is_number

MIN_PATHS = 4  # paths a page draws before it is searched for ruled tables
FULL_LINE = 0.7  # a line at least this share of a page's long lines' length runs on into the next (wrapped prose)
LABEL_VALUE_WORDS = 6  # a line this short after a label ending in ':' is its value
PROSE_WORDS = 6  # a line of fewer words is a label, a heading or a row, never wrapped prose
_ALNUM = re.compile(r"[^\W_]")
_BULLET = re.compile(r"(?:[-*•▪◦]|\d{1,3}[.)])\s")
TITLE_SCALE = 1.2  # a first line in type this many times the page's usual size is set apart as the title


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


def reflow(text: str) -> str:
    """
    A page's text lines as paragraphs (blank lines between them): a line that is only a figure or signs ("5,738",
    "$") goes on the line before it (a form's value with its label), and so does a short line after a label ending
    in ':'; a line of words as long as the page's long lines that ends no sentence runs on into the next (wrapped
    prose);
    any other line ends its paragraph (a heading, a label, a row of a table without rules, a prose paragraph's end).
    """
    lines: list[str] = []
    for line in (" ".join(raw.split()) for raw in text.splitlines()):
        if not line:
            continue
        if lines and (is_number(line) or not _ALNUM.search(line)
                      or (lines[-1].endswith(":") and len(line.split()) <= LABEL_VALUE_WORDS)):
            lines[-1] = f"{lines[-1]} {line}"
        else:
            lines.append(line)
    if not lines:
        return ""
    lengths = sorted(len(line) for line in lines)
    full = lengths[(len(lengths) - 1) * 9 // 10] * FULL_LINE
    paragraphs = [[lines[0]]]
    for before, line in zip(lines, lines[1:]):
        if len(before) >= full and len(before.split()) >= PROSE_WORDS and not before.endswith((".", "!", "?", ":")) \
                and not _BULLET.match(line):
            paragraphs[-1].append(line)
        else:
            paragraphs.append([line])
    return "\n\n".join("\n".join(paragraph) for paragraph in paragraphs)


def _grid(rows: list[list[str | None]]) -> list[list[str]]:
    """pdfplumber's cells as a grid: a cell a merged cell covers (None) holds the text on its left as a `Merged`."""
    grid = []
    for row in rows:
        cells: list[str] = []
        for cell in row:
            cells.append(Merged(cells[-1] if cells else "", left=True) if cell is None else one_line(cell))
        grid.append(cells)
    return grid


class _Runs:
    """A `visitor_text` for pypdf's `extract_text` that keeps each run of text with its type size on the page."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, float]] = []

    def __call__(self, text, matrix, text_matrix, font, size) -> None:
        scale = abs(text_matrix[3] * matrix[3]) or abs(text_matrix[0] * matrix[0]) or 1.0
        if text.strip():
            self.runs.append((text, float(size or 0) * scale))


def first_page_title(runs: list[tuple[str, float]]) -> str:
    """
    The first line of a page (its runs of text with their type sizes, `_Runs`) when it reads as a title and its type
    is `TITLE_SCALE` times the page's usual size (the size most of its characters are set in); following lines in
    that type are part of it.
    """
    if not runs:
        return ""
    usual = statistics.median_high([size for text, size in runs for _ in range(len(text.strip()))])
    lines = []
    for text, size in runs:
        if size < usual * TITLE_SCALE:
            break
        lines.extend(line for line in (one_line(part) for part in text.splitlines()) if line)
    title = " ".join(lines)
    return title if lines and reads_as_title(title) else ""


def _undrawn_labels(page, table) -> list[str]:
    """
    For each row of a ruled table, the text printed where the row draws no cell on the left of its first drawn one
    (a totals row ruling only its amount: "Subtotal" beside "$285.00"), "" when there is none.
    """
    labels = []
    for row in table.rows:
        drawn = next((cell for cell in row.cells if cell is not None), None)
        if row.cells and row.cells[0] is None and drawn is not None and drawn[0] > table.bbox[0]:
            box = (table.bbox[0], drawn[1], drawn[0], drawn[3])
            labels.append(one_line(page.crop(box, strict=False).extract_text() or ""))
        else:
            labels.append("")
    return labels


def _labelled_rows(rows: list[list[str | None]], labels: list[str]) -> tuple[list[list[str | None]], list[str]]:
    """
    A table's rows, a row's label (`_undrawn_labels`) in its first cell, and the labelled rows at its end taken out as
    items of their label and values (`- Subtotal: $285.00`): the totals under a table are a form, not rows of it.
    """
    end = len(rows)
    while end > 1 and labels[end - 1]:
        end -= 1
    lines = [f"- {label}: {'; '.join(one_line(cell) for cell in row if cell and cell.strip())}"
             for row, label in zip(rows[end:], labels[end:])]
    return [[label, *row[1:]] if label else row for row, label in zip(rows[:end], labels[:end])], lines


def _with_tables(page) -> str | None:
    """
    pdfplumber's text of a page with its ruled tables as rows with headers, or None when it finds no table. A ruled
    box of one column (a frame around text) is no table: its text stays text.
    """
    found = [(table, table.extract()) for table in page.find_tables()]
    tables = [(table, rows) for table, rows in found if any(sum(1 for cell in row if cell and cell.strip()) > 1
                                                            for row in rows)]
    if not tables:
        return None
    parts, top = [], page.bbox[1]
    for table, rows in sorted(tables, key=lambda pair: pair[0].bbox[1]):
        x0, y0, x1, y1 = table.bbox
        if y0 > top:
            parts.append(reflow(page.crop((page.bbox[0], top, page.bbox[2], y0), strict=False).extract_text() or ""))
        rows, totals = _labelled_rows(rows, _undrawn_labels(page, table))
        parts.append("\n".join([*grid_rows(_grid(rows)), *totals]))
        top = max(top, y1)
    if top < page.bbox[3]:
        parts.append(reflow(page.crop((page.bbox[0], top, page.bbox[2], page.bbox[3]), strict=False).extract_text()
                            or ""))
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


def page_texts(data: bytes, max_chars: int, deadline: float | None = None, meta: dict | None = None) -> list[str]:
    """
    Each page's text, ruled tables as rows with their headers (those found before `deadline`, a time.monotonic());
    the document's title goes to `meta` when one is given.

    :raises TooMuchText: As soon as the text passes `max_chars`.
    """
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data))
    title, first_runs = "", None
    if meta is not None:
        try:
            title = property_title(reader.metadata.title if reader.metadata else "")
        except MemoryError:
            raise
        except Exception:  # noqa: BLE001 - the title is a bonus: a file pypdf reads keeps its text
            title = ""
        first_runs = None if title else _Runs()
    pages, total = [], 0
    for number, page in enumerate(reader.pages):  # the first page read once, for its text and its title's type
        visitor = first_runs if number == 0 else None
        pages.append(reflow((page.extract_text(visitor_text=visitor) if visitor else page.extract_text()) or ""))
        total += len(pages[-1])
        if total > max_chars:
            raise TooMuchText(total)
        if visitor:
            try:
                title = first_page_title(visitor.runs)
            except MemoryError:
                raise
            except Exception:  # noqa: BLE001 - the title is a bonus: a file pypdf reads keeps its text
                title = ""
    if title:
        meta["title"] = title
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
    """Add the PDF's pages, separated by form feeds, to `text`, and its title to `text.meta`."""
    text.add("\f".join(page_texts(data, text.max_chars, text.deadline, text.meta)))
