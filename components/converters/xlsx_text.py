"""
An Excel workbook's text as markdown, for `XLSXToDocument` (run in its child process, `extraction.py`): one section
per worksheet, headed by its name; its first non-empty row is the header and every later row becomes one item that
keeps its column headers (`- Region: North; Revenue: 1200`), readable alone. Cells give their values (a formula its
last computed value); the workbook is read row by row (openpyxl's read-only mode), so the character cap stops a huge
sheet early.
"""

import datetime
import io

from gatehouse.components.converters.extraction import Text, one_line
from gatehouse.components.tables import table_rows


def cell_text(value) -> str:
    """A cell's value as text: whole numbers without '.0', dates without a midnight time."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, datetime.datetime) and value.time() == datetime.time(0):
        return value.date().isoformat()
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    return one_line(value)


def rows_with_headers(rows, text: Text) -> None:
    """
    Add table rows to `text`: the first non-empty row is the header, each later one an item with its headers (a
    header with no row under it is added as it is).
    """
    header, body = None, 0
    for row in rows:
        cells = [one_line(value) if isinstance(value, str) else cell_text(value) for value in row]
        while cells and not cells[-1]:
            cells.pop()
        if not cells:
            continue
        if header is None:
            header = cells
            continue
        text.add(*table_rows(header, [cells]))
        body += 1
    if header is not None and not body:
        text.add("; ".join(cell for cell in header if cell))


def extract(data: bytes, text: Text) -> None:
    """Add the workbook's markdown to `text`."""
    from openpyxl import load_workbook

    workbook = load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        for sheet in workbook.worksheets:
            text.add(f"## {one_line(sheet.title)}", "")
            rows_with_headers(sheet.iter_rows(values_only=True), text)
            text.add("")
    finally:
        workbook.close()
