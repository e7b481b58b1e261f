"""
A Word file's text as markdown, for `DOCXToDocument` (run in its child process, `extraction.py`): headings (the
Title style, Heading 1-9 or any style with an outline level) become markdown headings, so the splitter makes one
section per heading with its heading path; list paragraphs become items; tables become rows that keep their column
headers (`- Header: cell; Header: cell`). Body paragraphs and tables keep their order.
"""

import io
import re

from gatehouse.components.converters.extraction import Text, one_line
from gatehouse.components.tables import grid_rows

_HEADING = re.compile(r"heading\s*([1-9])$", re.IGNORECASE)
_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"


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


def _table(table, text: Text) -> None:
    rows = []
    for row in table.rows:
        cells, previous = [], None
        for cell in row.cells:  # a merged cell comes once per grid column it spans: keep it once
            if cell._tc is not previous:
                cells.append(one_line(cell.text))
            previous = cell._tc
        rows.append(cells)
    items = grid_rows(rows)
    if items:
        _new_block(text)
        text.add(*items, "")


def extract(data: bytes, text: Text) -> None:
    """Add the Word file's markdown to `text`."""
    import docx
    from docx.table import Table

    document = docx.Document(io.BytesIO(data))
    for block in document.iter_inner_content():
        if isinstance(block, Table):
            _table(block, text)
            continue
        line = one_line(block.text)
        if not line:
            continue
        level = heading_level(block)
        if level:
            _new_block(text)
            text.add(f"{'#' * min(level, 6)} {line}", "")
        elif _is_list_item(block):
            text.add(f"- {line}")
        else:
            _new_block(text)
            text.add(line, "")
