"""
HTMLLayoutTables: an HTML page laid out with tables, made readable before `HTMLToDocument` extracts its text.

Pages such as invoices and e-mails place their blocks in the cells of a `<table>`: a row of empty cells, a cell holding
several lines ("Invoice #: 123", "Due: February 1, 2023"), tables inside cells. Read as a data table, such a page gives
rows of empty headers and cells running several lines into one. A table is a layout table by its structure: it holds
another table, or no row has two cells with text, or its first row names no columns (no `<th>`, and a cell of it empty
or of several lines). Its rows are read in order: a row of cells of one line each goes with the rows like it next to it
into a grid read as tables are everywhere (`tables.grid_rows`: the first row names the columns, a row of names where
figures were starts a new table), written as lines `- Item: Hosting; Price: $75.00`; a row with a cell of several lines
(or a table inside) gives each cell as a block of its own, its lines kept. Data tables are left as they are.

Usage:
```python
from haystack.dataclasses import ByteStream
from gatehouse.components.converters.html_layout import HTMLLayoutTables

page = ByteStream(data=b"<table><tr><td>Invoice #: 1<br>Due: May 2</td><td></td></tr></table>")
HTMLLayoutTables().run(sources=[page])["sources"][0].data   # b"<div><p>Invoice #: 1<br>Due: May 2</p></div>"
```
"""

import html
import re
from pathlib import Path
from typing import Any

from haystack import component
from haystack.components.converters.utils import get_bytestream_from_source
from haystack.dataclasses import ByteStream

from gatehouse.components.html_tokens import attributes, html_tokens
from gatehouse.components.tables import grid_rows

_LINE_BREAKS = frozenset("br p div li tr h1 h2 h3 h4 h5 h6 ul ol dl dt dd table blockquote pre hr".split())
_VOID = frozenset("area base br col embed hr img input link meta source track wbr".split())  # no end tag
#: Tables nested deeper than this are read as blocks of the deepest one kept: each level copies what it holds once, so
#: the work stays linear in the page however deep a hostile page nests them.
MAX_NESTING = 16
_CHARSET = re.compile(rb"""<meta[^>]*charset\s*=\s*["']?([-\w]+)""", re.IGNORECASE)


class _Cell:
    def __init__(self, header: bool) -> None:
        self.header = header
        self.parts: list[str] = []  # its inner HTML
        self.lines: list[list[str]] = [[]]  # its text, line by line
        self.nested = False

    def text(self, text: str) -> None:
        self.parts.append(html.escape(text, quote=False))
        self.lines[-1].append(text)

    def markup(self, markup: str, name: str) -> None:
        self.parts.append(markup)
        if name in _LINE_BREAKS:
            self.lines.append([])

    def line_texts(self) -> list[str]:
        return [line for line in (" ".join("".join(parts).split()) for parts in self.lines) if line]


class _Table:
    def __init__(self, start: str) -> None:
        self.raw = [start]  # its HTML as written
        self.rows: list[list[_Cell]] = []
        self.row_classes: list[str] = []  # each row's class attribute

    def is_layout(self) -> bool:
        """Whether the table lays out a page rather than holding data (see the module's docstring)."""
        cells = [cell for row in self.rows for cell in row]
        if any(cell.nested for cell in cells):
            return True
        if not any(sum(1 for cell in row if cell.line_texts()) >= 2 for row in self.rows):
            return True
        first = next((row for row in self.rows if row), [])
        return not any(cell.header for cell in first) and any(len(cell.line_texts()) != 1 for cell in first)

    def markup(self) -> str:
        """The table as it was, or, for a layout table, its rows as blocks and grids (see the module's docstring)."""
        if not self.is_layout():
            return f"{''.join(self.raw)}</table>"
        out, grid, grid_class = ["<div>"], [], ""
        for row, row_class in zip(self.rows, self.row_classes):
            if all(not cell.nested and len(cell.line_texts()) <= 1 for cell in row):
                if grid and row_class and row_class == grid_class:  # styled as the grid's header: a new header
                    out.extend(_grid_markup(grid))
                    grid = []
                grid_class = grid_class if grid else row_class
                grid.append([" ".join(cell.line_texts()) for cell in row])
                continue
            out.extend(_grid_markup(grid))
            grid = []
            out.extend(f"<p>{''.join(cell.parts).strip()}</p>" for cell in row if cell.nested or cell.line_texts())
        out.extend(_grid_markup(grid))
        out.append("</div>")
        return "".join(out)


def _grid_markup(grid: list[list[str]]) -> list[str]:
    width = max((len(row) for row in grid), default=0)
    lines = grid_rows([row + [""] * (width - len(row)) for row in grid if any(row)])
    return [f"<p>{html.escape(line, quote=False)}</p>" for line in lines if line]


def unwrap_layout_tables(page: str) -> str:
    """The HTML of a page with its layout tables made blocks and lines (see the module's docstring)."""
    out: list[str] = []
    tables: list[_Table] = []
    cell: _Cell | None = None
    cells: list[_Cell | None] = []  # the open cell of each open table
    deeper = 0  # tables opened past MAX_NESTING and not yet closed

    def emit(text: str, name: str = "", markup: bool = False) -> None:
        if cell is None:
            if not tables:
                out.append(text)
        elif markup:
            cell.markup(text, name)
        else:
            cell.text(text)

    for token in html_tokens(page):
        kind, name = token[0], token[1] if token[0] != "text" else ""
        if kind == "end" and name in _VOID:
            continue
        if name == "table" and ((kind == "start" and len(tables) >= MAX_NESTING) or (kind == "end" and deeper)):
            deeper += 1 if kind == "start" else -1
            if cell is not None:
                cell.nested = True
            emit("<div>" if kind == "start" else "</div>", "div", markup=True)
            continue
        if tables and not (kind == "end" and name == "table"):
            tables[-1].raw.append(html.escape(token[1], quote=False) if kind == "text" else
                                  token[2] if kind == "start" else f"</{name}>")
        if kind == "text":
            if cell is not None or not tables:
                emit(token[1] if cell is not None else html.escape(token[1], quote=False))
        elif kind == "start" and name == "table":
            if cell is not None:
                cell.nested = True
            cells.append(cell)
            tables.append(_Table(token[2]))
            cell = None
        elif kind == "end" and name == "table" and tables:
            markup = tables.pop().markup()
            cell = cells.pop()
            if cell is not None:
                cell.nested = True
                cell.parts.append(markup)
                cell.lines.append([])
            elif not tables:
                out.append(markup)
        elif tables and kind == "start" and name == "tr":
            tables[-1].rows.append([])
            tables[-1].row_classes.append(" ".join((attributes(token[2]).get("class") or "").split()))
            cell = None
        elif tables and kind == "start" and name in ("td", "th"):
            if not tables[-1].rows:
                tables[-1].rows.append([])
                tables[-1].row_classes.append("")
            cell = _Cell(name == "th")
            tables[-1].rows[-1].append(cell)
        elif tables and kind == "end" and name in ("td", "th", "tr"):
            cell = None
        elif kind == "start":
            emit(token[2], name, markup=True)
        else:
            emit(f"</{name}>", name, markup=True)
    for table in tables:  # a table never closed: kept as read so far
        out.append(table.markup())
    return "".join(out)


@component
class HTMLLayoutTables:
    """
    Rewrites the layout tables of HTML pages as blocks and lines (see the module's docstring); pages without a table
    pass unchanged.
    """

    @component.output_types(sources=list[ByteStream])
    def run(self, sources: list[str | Path | ByteStream]) -> dict[str, Any]:
        """
        :param sources: HTML files (paths or ByteStreams).
        :returns: `sources`, each page as a ByteStream with its metadata, in its own encoding.
        """
        pages = []
        for source in sources:
            stream = get_bytestream_from_source(source)
            if b"<table" in stream.data.lower():
                declared = _CHARSET.search(stream.data[:4096])
                encoding = declared.group(1).decode("ascii") if declared else "utf-8"
                try:
                    text = stream.data.decode(encoding)
                except (LookupError, UnicodeDecodeError):
                    text = None
                if text is not None:
                    stream = ByteStream(data=unwrap_layout_tables(text).encode(encoding, "xmlcharrefreplace"),
                                        meta=stream.meta, mime_type=stream.mime_type)
            pages.append(stream)
        return {"sources": pages}
