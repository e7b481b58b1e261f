"""
An Excel workbook's text as markdown, for `XLSXToDocument` (run in its child process, `extraction.py`): one section
per worksheet, headed by its name, holding its tables (`tables.read_tables`): the title and units rows above a
table's header are its caption (a lead-in line), several tables of a sheet stay apart, merged header cells name every
column they span, and each row is one item that keeps its column names (`- Region: North; Revenue: 1200`), readable
alone. Cells give their values (a formula its last computed value). The workbook is read row by row (openpyxl's
read-only mode), so the character cap stops a huge sheet early; the merged cells are read from the sheet's XML.
"""

import datetime
import io
import re

from gatehouse.components.converters.extraction import Text, TooMuchText, one_line
from gatehouse.components.tables import Merged, grid_rows

_MERGE = re.compile(rb'<mergeCell\s[^>]*?ref="([A-Z]{1,3})(\d{1,7}):([A-Z]{1,3})(\d{1,7})"')
CHUNK_BYTES = 1 << 20


def cell_text(value) -> str:
    """A cell's value as text: numbers to 15 significant digits (whole ones without '.0'), dates without a midnight
    time."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float):  # as a spreadsheet shows it: no '.0', no binary rounding tail (0.13079200000000002)
        return str(int(value)) if value.is_integer() else f"{value:.15g}"
    if isinstance(value, datetime.datetime) and value.time() == datetime.time(0):
        return value.date().isoformat()
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    return one_line(value)


def _column(letters: bytes) -> int:
    number = 0
    for letter in letters:
        number = number * 26 + letter - 64
    return number


def merged_ranges(archive, path: str) -> list[tuple[int, int, int, int]]:
    """
    The merged cells of a sheet as (top row, left column, bottom row, right column), from 1. The sheet's XML part is
    read in pieces; only what follows its first `<mergeCell` (the list comes after the cells) is kept.
    """
    kept: list[bytes] = []
    carry = b""
    with archive.open(path) as part:
        while piece := part.read(CHUNK_BYTES):
            if not kept:
                window = carry + piece
                found = window.find(b"<mergeCell")
                if found < 0:
                    carry = window[-16:]
                    continue
                piece = window[found:]
            kept.append(piece)
    return [(int(match.group(2)), _column(match.group(1)), int(match.group(4)), _column(match.group(3)))
            for match in _MERGE.finditer(b"".join(kept))]


def sheet_grid(rows, merged: list[tuple[int, int, int, int]], max_chars: int) -> list[list[str]]:
    """
    A sheet's rows as a grid of cell texts (trailing empty cells dropped); an empty cell covered by a merged cell with
    text is a `Merged` holding that text.

    :raises TooMuchText: When the cells' text passes `max_chars`.
    """
    grid: list[list[str]] = []
    size = 0
    for values in rows:
        cells = [cell_text(value) for value in values]
        while cells and not cells[-1]:
            cells.pop()
        size += sum(len(cell) + 2 for cell in cells)
        if size > max_chars:
            raise TooMuchText(size)
        grid.append(cells)
    width = max((len(cells) for cells in grid), default=0)
    for top, left, bottom, right in merged:
        origin = grid[top - 1][left - 1] if top <= len(grid) and left <= len(grid[top - 1]) else ""
        if not origin:
            continue
        for row in range(top, min(bottom, len(grid)) + 1):
            cells = grid[row - 1]
            for column in range(left, min(right, width) + 1):
                if (row, column) == (top, left):
                    continue
                cells.extend([""] * (column - len(cells)))
                if not cells[column - 1]:
                    cells[column - 1] = Merged(origin, left=row == top)
    return grid


def extract(data: bytes, text: Text) -> None:
    """Add the workbook's markdown to `text`."""
    from openpyxl import load_workbook

    workbook = load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        title = one_line(workbook.properties.title or "")
        if title:
            text.meta["title"] = title
        for sheet in workbook.worksheets:
            text.add(f"## {one_line(sheet.title)}", "")
            merged = merged_ranges(workbook._archive, sheet._worksheet_path)  # noqa: SLF001 - the sheet's XML part
            grid = sheet_grid(sheet.iter_rows(values_only=True), merged, text.max_chars - text.size)
            text.add(*grid_rows(grid), "")
    finally:
        workbook.close()
