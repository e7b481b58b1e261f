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


def _style_facts(style) -> tuple[int | None, int | None, bool]:
    """
    A paragraph style's heading level by its name or id (1 for Title, N for Heading N), the outline level it sets,
    and whether it is a list style.
    """
    if style is None:
        return None, None, False
    named = None
    for name in (style.name or "", style.style_id or ""):
        if name.casefold() == "title":
            named = 1
            break
        match = _HEADING.match(name)
        if match:
            named = int(match.group(1))
            break
    return named, _outline_level(style.element), (style.name or "").casefold().startswith("list")


class _ParagraphStyles:
    """
    The facts of each paragraph style of a file, looked up once per style: python-docx looks a paragraph's style up
    among all the file's styles each time (a paragraph without one: every style, reading each one's type), some
    milliseconds a paragraph, so 100,000 short paragraphs took minutes.
    """

    def __init__(self) -> None:
        self.facts: dict[str | None, tuple[int | None, int | None, bool]] = {}

    def of(self, paragraph) -> tuple[int | None, int | None, bool]:
        """`_style_facts` of the paragraph's style."""
        style_id = paragraph._p.style
        if style_id not in self.facts:
            self.facts[style_id] = _style_facts(paragraph.style)
        return self.facts[style_id]


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
    styles = _ParagraphStyles()
    for block in document.iter_inner_content():
        if isinstance(block, Table):
            _table(block, text)
            continue
        line = one_line(block.text)
        if not line:
            continue
        named_level, style_level, list_style = styles.of(block)
        level = named_level or _outline_level(block._p) or style_level  # Title, Heading N, else an outline level
        if level:
            _new_block(text)
            text.add(f"{'#' * min(level, 6)} {line}", "")
        elif block._p.find(f"{_W}pPr/{_W}numPr") is not None or list_style:
            text.add(f"- {line}")
        else:
            _new_block(text)
            text.add(line, "")
