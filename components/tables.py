"""
Tables as text that keeps each cell with its column header: what the markdown cleaner makes of HTML and pipe tables,
and what the converters make of Word, PowerPoint, Excel, CSV, JSON and PDF tables. Imports nothing from Haystack, so
that the converters' child processes start fast.

A grid read from a file (a sheet, a Word or slide table) is first read as tables (`read_tables`): the rows above the
real header that hold one cell (a title, a units line such as "in EUR thousands") are the table's caption; a header
that spans several rows (merged cells over the column names) names each column by all of its rows ("2019 Revenue");
a blank row followed by a caption, or by a row of names where numbers were, starts another table; a one-cell row
inside the rows labels the rows under it; one-cell rows after the last row are notes. Each table becomes its caption
as a lead-in line and one list item per row (`render`).

Usage:
```python
from gatehouse.components.tables import read_tables, render, table_rows

table_rows(["Plan", "Price"], [["Solo", "$8"]])   # ["- Plan: Solo; Price: $8"]
grid = [["Price list"], ["in EUR"], ["Plan", "Price"], ["Solo", "8"]]
render(read_tables(grid)[0])   # ["Price list, in EUR:", "- Plan: Solo; Price: 8"]
```
"""

import re
from dataclasses import dataclass, field

#: A cell holding a number: an amount, a count, a share, a signed or bracketed figure, with a currency or unit.
_NUMBER = re.compile(r"[-+(]?(?:[$€£¥₹]\s?|[A-Z]{3}\s)?[-+]?\d[\d,.'\u00a0 ]*"
                     r"(?:%|\s?[$€£¥₹]|\s[^\W\d]{1,4})?\)?")
_YEAR = re.compile(r"(?:1[89]|20)\d\d")
_UNIT = re.compile(r"[$€£¥₹%]|\([^()\d]{1,12}\)|\[[^\[\]\d]{1,12}\]")
_LIST_MARK = re.compile(r"^(?:[-*+]|\d{1,3}[.)])(?=\s)")  # a caption starting so would read as a list item
MAX_HEADER_ROWS = 3
MAX_CAPTION_CHARS = 200  # longer one-cell rows above a table are text, not its caption
MAX_LABEL_CHARS = 60  # longer one-cell rows inside a table are text in place, not a label of the rows under them


class Merged(str):
    """
    A cell covered by a merged cell, holding the merged cell's text; `left` when the merged cell starts to its left in
    the same row (a header spanning columns), else above (a label spanning rows). A header row names every column it
    covers; a body row keeps a text spanning columns once and a label spanning rows in each row.
    """

    left: bool

    def __new__(cls, text: str, *, left: bool) -> "Merged":
        cell = super().__new__(cls, text)
        cell.left = left
        return cell


@dataclass
class Table:
    """
    One table of a grid: its caption lines, column names, body rows (with the label of their group; a line of text
    between rows has the label None) and notes.
    """

    caption: list[str] = field(default_factory=list)
    header: list[str] = field(default_factory=list)
    rows: list[tuple[str | None, list[str]]] = field(default_factory=list)  # label None: a line of text in its place
    notes: list[str] = field(default_factory=list)


def is_number(cell: str) -> bool:
    """Whether a cell holds a figure (`1,234.5`, `-12%`, `(300)`, `$8`, `12 kg`) rather than words."""
    return bool(_NUMBER.fullmatch(cell.strip())) if cell.strip() else False


def _filled(row: list[str]) -> list[int]:
    return [position for position, cell in enumerate(row) if cell.strip() and not _is_left_merged(cell)]


def _is_left_merged(cell: str) -> bool:
    return isinstance(cell, Merged) and cell.left


def _is_names(row: list[str]) -> bool:
    """
    A row that can name columns: two cells or more (or one merged over several), none of them a figure (a year may
    be a column's name).
    """
    cells = [row[position] for position in _filled(row)]
    return (len(cells) >= 2 or (len(cells) == 1 and any(map(_is_left_merged, row)))) and \
        not any(is_number(cell) and not _YEAR.fullmatch(cell.strip()) for cell in cells)


def _is_one_cell(row: list[str]) -> bool:
    """A row of one text (a title, a units line, a note): one cell, or one merged across the whole row."""
    filled = _filled(row)
    if len(filled) != 1:
        return not filled
    spanned = [position for position, cell in enumerate(row) if _is_left_merged(cell)]
    return not spanned or (filled[0] == 0 and spanned[-1] == len(row) - 1)


def _is_units(row: list[str]) -> bool:
    """A row of units under a header (`€`, `%`, `(EUR m)`): each cell a currency sign, a percent, a bracketed unit."""
    cells = [row[position].strip() for position in _filled(row)]
    return bool(cells) and all(_UNIT.fullmatch(cell) for cell in cells)


def _has_figures(row: list[str]) -> bool:
    return any(is_number(row[position]) and not _YEAR.fullmatch(row[position].strip()) for position in _filled(row))


def _continues_header(header_rows: list[list[str]], row: list[str], following: list[str] | None) -> bool:
    """
    Whether `row` is one more row of a header: the header so far spans columns (merged cells; or names over empty
    cells right of them, with figures in the row under `row`) that `row` names one by one.
    """
    if len(header_rows) >= MAX_HEADER_ROWS or following is None:
        return False
    if _is_units(row):
        return True
    if not _is_names(row):
        return False
    last = header_rows[-1]
    named = set(_filled(row))
    merged = {position for position, cell in enumerate(last) if _is_left_merged(cell)}
    if merged & named:
        return True
    unmarked = {position for position in range(1, len(last))
                if not last[position].strip() and any(cell.strip() for cell in last[:position])}
    return bool(unmarked & named) and _has_figures(following)


def parallel_rows(cells: list[list[str]]) -> list[list[str]]:
    """
    One row of a file's table whose cells hold their lines side by side (a label per line in one cell, a figure per
    line in the next, as old documents lay tables out) as that many rows; any other row as one row of one-line cells.

    :param cells: Each cell's lines (paragraphs, line breaks).
    :returns: The rows, each a list of cell texts.
    """
    lines = [[line.strip() for line in cell] for cell in cells]
    for cell in lines:
        while cell and not cell[-1]:
            cell.pop()
    counts = {len(cell) for cell in lines if len(cell) > 1}
    if len(counts) == 1 and sum(len(cell) > 1 for cell in lines) >= 2:
        depth = counts.pop()
        return [[cell[line] if len(cell) == depth else (" ".join(cell) if line == 0 else "") for cell in lines]
                for line in range(depth)]
    return [[" ".join(" ".join(cell).split()) for cell in lines]]


def _column_names(header_rows: list[list[str]]) -> list[str]:
    """Each column's name: its cells of the header rows top to bottom, an upper row's name carried over the empty
    cells right of it (an unmarked merged cell), repeats left out."""
    width = max(len(row) for row in header_rows)
    names: list[list[str]] = [[] for _ in range(width)]
    for depth, row in enumerate(header_rows):
        carried = ""
        for position in range(width):
            cell = " ".join((row[position] if position < len(row) else "").split())
            if cell:
                carried = cell
            elif depth < len(header_rows) - 1 and position > 0:
                cell = carried
            if cell and (not names[position] or names[position][-1] != cell):
                names[position].append(cell)
    return [" ".join(parts) for parts in names]


def _body_row(row: list[str]) -> list[str]:
    """
    A body row's cells: a text spanning columns kept once; a label spanning rows stays in each row, a longer text
    spanning rows only in its first.
    """
    return ["" if _is_left_merged(cell) or (isinstance(cell, Merged) and len(cell) > MAX_LABEL_CHARS) else cell
            for cell in row]


def _text(row: list[str]) -> str:
    return " ".join(" ".join(row[position].split()) for position in _filled(row))


def _is_labelled(rows: list[list[str]]) -> bool:
    """Rows of a label and a value, most labels ending in ':' (a form: its first row is no header)."""
    pairs = [[row[position] for position in _filled(row)] for row in rows if not _is_one_cell(row)]
    return bool(pairs) and all(len(pair) == 2 for pair in pairs) and \
        sum(pair[0].rstrip().endswith(":") for pair in pairs) * 2 >= len(pairs)


def _table_has_figures(table: Table) -> bool:
    return any(_has_figures(cells) for label, cells in table.rows if label is not None)


def _repeats(row: list[str], header_rows: list[list[str]]) -> bool:
    """Whether a row repeats a header row (a header printed again further down): each of its cells is that row's."""
    return any(all(position < len(names) and " ".join(row[position].split()) == " ".join(names[position].split())
                   for position in _filled(row)) for names in header_rows)


def _bands(rows: list[list[str]]) -> list[tuple[int, int]]:
    """
    The grid's side-by-side parts, as column ranges: it is cut at a column empty in every row when the parts on both
    sides have two columns or more and do not read as one table (they hold text in different rows, or the right
    part starts with a title of its own).
    """
    width = max((len(row) for row in rows), default=0)
    used = [any(position < len(row) and row[position].strip() and not isinstance(row[position], Merged)
                for row in rows) for position in range(width)]
    runs: list[tuple[int, int]] = []
    for position, filled in enumerate(used):
        if filled and runs and runs[-1][1] == position:
            runs[-1] = (runs[-1][0], position + 1)
        elif filled:
            runs.append((position, position + 1))
    bands: list[tuple[int, int]] = []
    for start, end in runs:
        if bands and (end - start < 2 or bands[-1][1] - bands[-1][0] < 2 or not _apart(rows, bands[-1], (start, end))):
            bands[-1] = (bands[-1][0], end)
        else:
            bands.append((start, end))
    return bands or [(0, width)]


def _apart(rows: list[list[str]], left: tuple[int, int], right: tuple[int, int]) -> bool:
    def rows_with_text(band: tuple[int, int]) -> list[int]:
        return [number for number, row in enumerate(rows) if any(cell.strip() for cell in row[band[0]:band[1]])]

    on_left, on_right = rows_with_text(left), rows_with_text(right)
    if on_left != on_right:
        return True
    first = rows[on_right[0]][right[0]:right[1]] if on_right else []
    return _is_one_cell(first)


def read_tables(rows: list[list[str]], *, header: bool = True) -> list[Table]:
    """
    The tables of a grid (see the module's docstring), side-by-side parts one after the other (`_bands`).

    :param rows: The grid's rows of cell texts, top to bottom; a cell covered by a merged cell is a `Merged`.
    :param header: False when the file says its table has no header row (a slide table's "header row" unticked).
    :returns: The tables, top to bottom (one-cell rows that belong to no table make a table of notes).
    """
    return [table for start, end in _bands(rows) for table in _Reader(header).read([row[start:end] for row in rows])]


class _Reader:
    """Reads a grid's rows top to bottom into tables (`read_tables`)."""

    def __init__(self, header: bool) -> None:
        self.header = header
        self.tables: list[Table] = []
        self.table: Table | None = None  # the table rows go to
        self.header_rows: list[list[str]] = []
        self.pending: list[str] = []  # one-cell rows not yet placed: a caption, a label of rows, or notes
        self.label = ""  # the label of the rows being read

    def read(self, rows: list[list[str]]) -> list[Table]:
        blank = [not any(cell.strip() for cell in row) for row in rows]
        ends = [len(rows)] * (len(rows) + 1)  # where the run of rows with text from each row ends
        for position in range(len(rows) - 1, -1, -1):
            ends[position] = position if blank[position] else ends[position + 1]
        after_blank = True
        position = 0
        while position < len(rows):
            row = rows[position]
            if blank[position]:
                after_blank, position = True, position + 1
                continue
            if _is_one_cell(row):
                self.pending.append(_text(row))
                position += 1
                continue
            block_end = ends[position]
            following = rows[position + 1] if position + 1 < block_end else None
            if self._starts_table(row, following, after_blank):
                after_header = self._start(rows, position, block_end)
                if after_header > position:
                    position, after_blank = after_header, False
                    continue
            self._add(row)
            position += 1
            after_blank = False
        if self.pending:
            (self.table.notes if self.table is not None else self._new([]).notes).extend(self.pending)
        return self.tables

    def _add(self, row: list[str]) -> None:
        """Add a body row to the table under the label of the one-cell rows above it (a header printed again: no)."""
        assert self.table is not None
        if self.pending:
            label = " ".join(self.pending)
            if len(label) <= MAX_LABEL_CHARS:
                self.label = label
            else:  # text between rows, in its place
                self.table.rows.extend((None, [line]) for line in self.pending)
                self.label = ""
            self.pending = []
        if not _repeats(row, self.header_rows):
            self.table.rows.append((self.label, _body_row(row)))

    def _starts_table(self, row: list[str], following: list[str] | None, after_blank: bool) -> bool:
        """Whether a row of several cells starts a table rather than adding a row to the current one."""
        table = self.table
        if table is None:
            return True
        if not _is_names(row):
            return False
        over_figures = following is not None and _has_figures(following)
        if after_blank:  # a table below a blank row: after a title, over figures, or where figures were
            return bool(self.pending) or over_figures or _table_has_figures(table)
        return over_figures and bool(self.pending)  # a header under a title row, within a block

    def _new(self, caption: list[str]) -> Table:
        self.table = Table(caption=caption)
        self.tables.append(self.table)
        self.header_rows = []
        self.label = ""
        return self.table

    def _start(self, rows: list[list[str]], position: int, block_end: int) -> int:
        """Start a table at `position` (its caption the pending one-cell rows); returns the row after its header."""
        long = [line for line in self.pending if len(line) > MAX_CAPTION_CHARS]
        if long:  # text, not a caption
            (self.table.notes if self.table is not None else self._new([]).notes).extend(long)
        table = self._new([line for line in self.pending if len(line) <= MAX_CAPTION_CHARS])
        self.pending = []
        first = rows[position]
        if not (self.header and _is_names(first) and not _is_labelled(rows[position:block_end])):
            return position
        self.header_rows = [first]
        position += 1
        while position + 1 < block_end and _continues_header(self.header_rows, rows[position], rows[position + 1]):
            self.header_rows.append(rows[position])
            position += 1
        table.header = _column_names(self.header_rows)
        return position


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
            items.append(f"- {' '.join(row[0].split()).rstrip(':')}: {' '.join(row[1].split())}")  # key-value
            continue
        cells = []
        for position, cell in enumerate(row):
            cell = " ".join(cell.split())
            if not cell:
                continue
            name = " ".join(header[position].split()) if position < len(header) else ""
            cells.append(f"{name.rstrip(':')}: {cell}" if name and name != cell else cell)
        if cells:
            items.append("- " + "; ".join(cells))
    return items


def _key_value(rows: list[list[str]]) -> list[list[str]]:
    """Rows of a table without names whose cells are a label and a value, however many columns the grid has."""
    pairs = []
    for row in rows:
        cells = [cell for cell in row if cell.strip()]
        pairs.append(cells if len(cells) == 2 else [])
    return pairs if all(pairs) else []


def render(table: Table) -> list[str]:
    """
    A table as markdown lines: its caption as a lead-in ending in ':' (the splitter repeats it above the rest of the
    rows when it cuts a table), one list item per row with its column names (a row under a group label starts with
    it), then its notes.

    :param table: A table of `read_tables`.
    :returns: The lines (empty for a table without text).
    """
    caption = ", ".join(table.caption)
    if caption:
        mark = _LIST_MARK.match(caption)
        if mark:  # escaped as markdown escapes it: "3\\. Results" is a line, not an item
            caption = f"{caption[:mark.end() - 1]}\\{caption[mark.end() - 1:]}"
        lines = [caption if caption.endswith(":") or not table.rows else f"{caption.rstrip('.')}:"]
    else:
        lines = []
    if table.header and not table.rows:  # names with no row under them
        return [*lines, "; ".join(name for name in table.header if name), *table.notes]
    bodies = [cells for label, cells in table.rows if label is not None]
    pairs = [] if table.header else _key_value(bodies)
    items = iter(table_rows([], pairs) if pairs else [next(iter(table_rows(table.header, [cells])), "")
                                                       for cells in bodies])
    for label, cells in table.rows:
        if label is None:
            lines.extend(["", cells[0], ""])
            continue
        item = next(items)
        if item:
            lines.append(f"- {label} › {item[2:]}" if label else item)
    if table.notes and not table.rows and not table.header:  # one-cell rows alone: a list
        lines.extend(f"- {note}" for note in table.notes)
    else:
        for note in table.notes:
            lines.extend(["", note] if lines else [note])
    return lines


def grid_rows(rows: list[list[str]], *, header: bool = True) -> list[str]:
    """
    A grid read from a file (a sheet, a CSV file, a Word, PowerPoint or PDF table) as markdown lines (`read_tables`,
    `render`): each table's caption and its rows with their column names.

    :param rows: The grid's rows of cell texts, top to bottom (`Merged` for a cell covered by a merged cell).
    :param header: False when the file says the table has no header row.
    :returns: The lines, a blank line between two tables (none for an empty grid).
    """
    lines: list[str] = []
    for table in read_tables(rows, header=header):
        rendered = render(table)
        if rendered:
            lines.extend(([""] if lines else []) + rendered)
    return lines
