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


def _style_facts(style) -> tuple[int | None, int | None, bool, bool]:
    """
    A paragraph style's heading level by its name or id (1 for Title, N for Heading N), the outline level it sets,
    whether it is a list style and whether it is the Title style.
    """
    if style is None:
        return None, None, False, False
    named, is_title = None, False
    for name in (style.name or "", style.style_id or ""):
        if name.casefold() == "title":
            named, is_title = 1, True
            break
        match = _HEADING.match(name)
        if match:
            named = int(match.group(1))
            break
    return named, _outline_level(style.element), (style.name or "").casefold().startswith("list"), is_title


class _ParagraphStyles:
    """
    The facts of each paragraph style of a file, looked up once per style: python-docx looks a paragraph's style up
    among all the file's styles each time (a paragraph without one: every style, reading each one's type), some
    milliseconds a paragraph, so 100,000 short paragraphs took minutes.
    """

    def __init__(self) -> None:
        self.facts: dict[str | None, tuple[int | None, int | None, bool, bool]] = {}

    def of(self, paragraph) -> tuple[int | None, int | None, bool, bool]:
        """`_style_facts` of the paragraph's style."""
        style_id = paragraph._p.style
        if style_id not in self.facts:
            self.facts[style_id] = _style_facts(paragraph.style)
        return self.facts[style_id]


def _new_block(text: Text) -> None:
    """A blank line unless the text is empty or already ends with one: a heading or table never joins a list."""
    if text.lines and text.lines[-1]:
        text.add("")


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
            grid.extend(parallel_rows([[one_line(line) for line in text.split("\n")] for text in texts]))
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
    styles = _ParagraphStyles()
    for block in document.iter_inner_content():
        if isinstance(block, Table):
            _table(block, text)
            first = False
            continue
        line = one_line(block.text)
        if not line:
            continue
        named_level, style_level, list_style, title_style = styles.of(block)
        level = named_level or _outline_level(block._p) or style_level  # Title, Heading N, else an outline level
        if not title and (title_style or (first and not level and reads_as_title(line) and _set_apart(block))):
            title = line
        first = False
        if level:
            _new_block(text)
            text.add(f"{'#' * min(level, 6)} {line}", "")
        elif block._p.find(f"{_W}pPr/{_W}numPr") is not None or list_style:
            text.add(f"- {line}")
        else:
            _new_block(text)
            text.add(line, "")
    if title:
        text.meta["title"] = title
