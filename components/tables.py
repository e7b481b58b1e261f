"""
Tables as text that keeps each cell with its column header: what the markdown cleaner makes of HTML and pipe tables,
and what the converters make of Word, PowerPoint, Excel, CSV and PDF tables. Imports nothing from Haystack, so that
the converters' child processes start fast.

Usage:
```python
from gatehouse.components.tables import table_rows

table_rows(["Plan", "Price"], [["Solo", "$8"]])   # ["- Plan: Solo; Price: $8"]
grid_rows([["Plan", "Price"], ["", ""], ["Solo", "$8"]])   # the same: the first row with text is the header
```
"""


def table_rows(header: list[str], rows: list[list[str]]) -> list[str]:
    """
    A table as list items that keep their column headers: `- Header: cell; Header: cell`.

    :param header: The column headers (empty strings for unnamed columns).
    :param rows: The body rows.
    :returns: One markdown list item per row with text in it.
    """
    items = []
    for row in rows:
        if not any(name.strip() for name in header) and len(row) == 2 and row[0].strip() and row[1].strip():
            items.append(f"- {' '.join(row[0].split())}: {' '.join(row[1].split())}")  # a key-value table
            continue
        cells = []
        for position, cell in enumerate(row):
            cell = " ".join(cell.split())
            if not cell:
                continue
            name = " ".join(header[position].split()) if position < len(header) else ""
            cells.append(f"{name}: {cell}" if name and name != cell else cell)
        if cells:
            items.append("- " + "; ".join(cells))
    return items


def grid_rows(rows: list[list[str]]) -> list[str]:
    """
    A table read from a file's grid (a Word, PowerPoint or PDF table) as `table_rows` items: rows without text left
    out, the first row the header when more follow (a lone row has no header).

    :param rows: The table's rows of cell texts, top to bottom.
    :returns: One markdown list item per row with text in it (none for an empty table).
    """
    rows = [row for row in rows if any(cell.strip() for cell in row)]
    return table_rows(rows[0], rows[1:]) if len(rows) > 1 else table_rows([], rows)
