"""
A PowerPoint file's text as markdown, for `PPTXToDocument` (run in its child process, `extraction.py`): one section
per slide, headed by the slide's title ("Slide N" when it has none), holding its parts in reading order, each a unit
of its own: the bullets of a body placeholder as items (indented by their level, a line break inside a bullet a new
item), each other text box as its own paragraph (several paragraphs: its own list), each table as a table
(`tables.read_tables`: rows that keep their column names, merged header cells naming every column they span), each
chart as a table of its series by category, and the speaker notes as one item, whole.

The presentation's title is the one its properties name, else the title of its first slide when that is a title
slide.
"""

import io

from gatehouse.components.converters.extraction import Text, one_line
from gatehouse.components.converters.titles import property_title
from gatehouse.components.tables import Merged, grid_rows


def _shapes(shapes):
    """The shapes in reading order (top to bottom, left to right), group shapes opened."""
    ordered = sorted(shapes, key=lambda shape: (shape.top or 0, shape.left or 0))
    for shape in ordered:
        if hasattr(shape, "shapes"):  # a group
            yield from _shapes(shape.shapes)
        else:
            yield shape


def _lines(paragraph) -> list[str]:
    """A paragraph's lines: its text split at its line breaks (the runs alone would join the words around one)."""
    return [line for line in (one_line(part) for part in paragraph.text.split("\v")) if line]


def _is_body(shape) -> bool:
    """A placeholder that holds a slide's bullets (body, object or subtitle), not a title, date, footer or number."""
    from pptx.enum.shapes import PP_PLACEHOLDER

    if not shape.is_placeholder:
        return False
    return shape.placeholder_format.type in (PP_PLACEHOLDER.BODY, PP_PLACEHOLDER.OBJECT, PP_PLACEHOLDER.SUBTITLE,
                                             PP_PLACEHOLDER.VERTICAL_BODY, PP_PLACEHOLDER.VERTICAL_OBJECT)


def _grid(table) -> list[list[str]]:
    """A slide table's rows of cell texts, a cell covered by a merged cell a `Merged` holding its text."""
    rows, columns = len(table.rows), len(table.columns)
    covered: dict[tuple[int, int], Merged] = {}
    for row in range(rows):
        for column in range(columns):
            cell = table.cell(row, column)
            if cell.is_merge_origin:
                text = one_line(cell.text)
                for down in range(row, min(row + cell.span_height, rows)):
                    for across in range(column, min(column + cell.span_width, columns)):
                        if (down, across) != (row, column):
                            covered[(down, across)] = Merged(text, left=down == row)
    return [[covered.get((row, column)) or one_line(table.cell(row, column).text) for column in range(columns)]
            for row in range(rows)]


def _figure(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(round(float(value), 6))


def _chart(chart) -> list[list[str]]:
    """A chart as a grid: its title, then a row of series names over one row per category."""
    plot = chart.plots[0] if len(chart.plots) else None
    if plot is None:
        return []
    title = one_line(chart.chart_title.text_frame.text) if chart.has_title and chart.chart_title.has_text_frame else ""
    series = list(plot.series)
    grid = [[title]] if title else []
    grid.append([""] + [one_line(item.name or "") for item in series])
    values = [list(item.values) for item in series]
    for position, category in enumerate(plot.categories):
        grid.append([one_line(category)] + [
            "" if position >= len(column) or column[position] is None else _figure(column[position])
            for column in values])
    return grid


def _is_furniture(shape) -> bool:
    """A placeholder every slide repeats: the date, the footer, the slide number."""
    from pptx.enum.shapes import PP_PLACEHOLDER

    return shape.is_placeholder and shape.placeholder_format.type in (
        PP_PLACEHOLDER.DATE, PP_PLACEHOLDER.FOOTER, PP_PLACEHOLDER.SLIDE_NUMBER)


def _shape(shape, text: Text) -> None:
    if _is_furniture(shape):
        return
    if shape.has_text_frame:
        paragraphs = [(paragraph.level, line) for paragraph in shape.text_frame.paragraphs
                      for line in _lines(paragraph)]
        if not paragraphs:
            return
        if _is_body(shape) or len(paragraphs) > 1:
            text.add("", *(f"{'  ' * level}- {line}" for level, line in paragraphs))
        else:
            text.add("", paragraphs[0][1])
    elif getattr(shape, "has_table", False) and shape.has_table:
        lines = grid_rows(_grid(shape.table), header=shape.table.first_row)
        if lines:
            text.add("", *lines)
    elif getattr(shape, "has_chart", False) and shape.has_chart:
        try:
            grid = _chart(shape.chart)
        except MemoryError:
            raise
        except Exception:  # noqa: BLE001 - a chart is a bonus: one python-pptx cannot read (a 3-D plot) is left out
            grid = []
        lines = grid_rows(grid)
        if lines:
            text.add("", *lines)


def _frame_lines(frame) -> list[str]:
    return [line for paragraph in frame.paragraphs for line in _lines(paragraph)]


def _title(slide) -> str:
    shape = slide.shapes.title
    return " ".join(_frame_lines(shape.text_frame)) if shape is not None else ""


def extract(data: bytes, text: Text) -> None:
    """Add the presentation's markdown to `text`, and its title to `text.meta`."""
    from pptx import Presentation
    from pptx.enum.shapes import PP_PLACEHOLDER

    deck = Presentation(io.BytesIO(data))
    title = property_title(deck.core_properties.title)
    for number, slide in enumerate(deck.slides, start=1):
        title_shape = slide.shapes.title
        heading = _title(slide)
        if number == 1 and not title and heading and title_shape.placeholder_format.type == PP_PLACEHOLDER.CENTER_TITLE:
            title = heading
        text.add(f"## {heading or f'Slide {number}'}")
        for shape in _shapes(slide.shapes):
            if title_shape is None or shape.shape_id != title_shape.shape_id:
                _shape(shape, text)
        if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
            notes = " ".join(_frame_lines(slide.notes_slide.notes_text_frame))
            if notes:
                text.add("", f"- Speaker notes: {notes}")
        text.add("")
    if title:
        text.meta["title"] = title
