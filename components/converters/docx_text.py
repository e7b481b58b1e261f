"""
A Word file's text as markdown, for `DOCXToDocument` (run in its child process, `extraction.py`): headings (the
Title style, Heading 1-9 or any style with an outline level) become markdown headings, so the splitter makes one
section per heading with its heading path; list paragraphs become items; tables are read as tables
(`tables.read_tables`: title rows are the caption, merged header cells name every column they span) and become rows
that keep their column names (`- Header: cell; Header: cell`), a table nested in a cell after its table. Body
paragraphs and tables keep their order.

The document's title is the one its properties name, else its first paragraph in the Title style, else a first
paragraph (before any heading or table) that reads as a title and is set apart: bold, centred or in large type. A
first Heading 1 is a section, never the title.
"""

import io
import re

from gatehouse.components.converters.extraction import Text, one_line
from gatehouse.components.converters.titles import property_title, reads_as_title
from gatehouse.components.tables import Merged, grid_rows, parallel_rows

_HEADING = re.compile(r"heading\s*([1-9])$", re.IGNORECASE)
_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
LARGE_TYPE_PT = 14  # a first paragraph in type this large (or larger) is set apart as a title


def _outline_level(element) -> int | None:
    """The outline level (1-9) a paragraph or style element sets, if any."""
    found = element.find(f"{_W}pPr/{_W}outlineLvl") if element is not None else None
    if found is None:
        return None
    level = int(found.get(f"{_W}val", "9")) + 1
    return level if level <= 9 else None


def heading_level(paragraph) -> int | None:
    """A paragraph's heading level: 1 for Title, N for Heading N (by name or style id), else its outline level."""
    style = paragraph.style
    for name in (style.name or "", style.style_id or "") if style is not None else ():
        if name.casefold() == "title":
            return 1
        match = _HEADING.match(name)
        if match:
            return int(match.group(1))
    return _outline_level(paragraph._p) or (_outline_level(style.element) if style is not None else None)


def _is_list_item(paragraph) -> bool:
    style_name = (paragraph.style.name or "") if paragraph.style is not None else ""
    return paragraph._p.find(f"{_W}pPr/{_W}numPr") is not None or style_name.casefold().startswith("list")


def _new_block(text: Text) -> None:
    """A blank line unless the text is empty or already ends with one: a heading or table never joins a list."""
    if text.lines and text.lines[-1]:
        text.add("")


def _is_title_style(paragraph) -> bool:
    style = paragraph.style
    return style is not None and "title" in {(style.name or "").casefold(), (style.style_id or "").casefold()}


def _set_apart(paragraph) -> bool:
    """Whether a paragraph stands out from body text: all its text bold, centred, or in large type."""
    from docx.enum.text import WD_ALIGN_PARAGRAPH

    runs = [run for run in paragraph.runs if run.text.strip()]
    sizes = [run.font.size for run in runs if run.font.size] + ([paragraph.style.font.size] if paragraph.style is not
                                                                 None and paragraph.style.font.size else [])
    return (bool(runs) and all(run.bold for run in runs)) or paragraph.alignment == WD_ALIGN_PARAGRAPH.CENTER or \
        any(size.pt >= LARGE_TYPE_PT for size in sizes)


def _grid(table) -> list[list[str]]:
    """
    A table's rows of cell texts, a cell covered by a merged cell (across columns or down rows) a `Merged`; a row
    whose cells hold their lines side by side is that many rows (`tables.parallel_rows`).
    """
    grid, above = [], None
    for row in table.rows:
        cells = row.cells  # a merged cell comes once per grid column and row it spans
        texts: list[str] = []
        for position, cell in enumerate(cells):
            if position and cell._tc is cells[position - 1]._tc:
                texts.append(Merged(texts[-1], left=True))
            elif above is not None and position < len(above) and cell._tc is above[position]._tc:
                texts.append(Merged(one_line(cell.text), left=False))
            else:
                texts.append(cell.text)
        if any(isinstance(text, Merged) for text in texts):
            grid.append([text if isinstance(text, Merged) else one_line(text) for text in texts])
        else:
            grid.extend(parallel_rows([text.split("\n") for text in texts]))
        above = cells
    return grid


def _table(table, text: Text) -> None:
    lines = grid_rows(_grid(table))
    if lines:
        _new_block(text)
        text.add(*lines, "")
    seen = set()
    for row in table.rows:
        for cell in row.cells:
            if cell._tc not in seen:
                seen.add(cell._tc)
                for nested in cell.tables:
                    _table(nested, text)


def extract(data: bytes, text: Text) -> None:
    """Add the Word file's markdown to `text`, and its title to `text.meta`."""
    import docx
    from docx.table import Table

    document = docx.Document(io.BytesIO(data))
    title = property_title(document.core_properties.title)
    first = True  # no heading, table or text before this block
    for block in document.iter_inner_content():
        if isinstance(block, Table):
            _table(block, text)
            first = False
            continue
        line = one_line(block.text)
        if not line:
            continue
        level = heading_level(block)
        if not title and (_is_title_style(block) or (first and not level and reads_as_title(line)
                                                     and _set_apart(block))):
            title = line
        first = False
        if level:
            _new_block(text)
            text.add(f"{'#' * min(level, 6)} {line}", "")
        elif _is_list_item(block):
            text.add(f"- {line}")
        else:
            _new_block(text)
            text.add(line, "")
    if title:
        text.meta["title"] = title
