"""
A PowerPoint file's text as markdown, for `PPTXToDocument` (run in its child process, `extraction.py`): one section
per slide, headed by the slide's title ("Slide N" when it has none), holding its text boxes' paragraphs as items
(indented by their bullet level), its tables as rows that keep their column headers and its speaker notes. The
presentation's title (its properties) heads the document.
"""

import io

from gatehouse.components.converters.extraction import Text, one_line
from gatehouse.components.tables import grid_rows


def _shapes(shapes):
    """The shapes in reading order (top to bottom, left to right), group shapes opened."""
    ordered = sorted(shapes, key=lambda shape: (shape.top or 0, shape.left or 0))
    for shape in ordered:
        if hasattr(shape, "shapes"):  # a group
            yield from _shapes(shape.shapes)
        else:
            yield shape


def _shape(shape, text: Text) -> None:
    if shape.has_text_frame:
        for paragraph in shape.text_frame.paragraphs:
            line = one_line("".join(run.text for run in paragraph.runs) or paragraph.text)
            if line:
                text.add(f"{'  ' * paragraph.level}- {line}")
    elif getattr(shape, "has_table", False) and shape.has_table:
        items = grid_rows([[one_line(cell.text) for cell in row.cells] for row in shape.table.rows])
        if items:
            text.add("", *items, "")


def extract(data: bytes, text: Text) -> None:
    """Add the presentation's markdown to `text`."""
    from pptx import Presentation

    deck = Presentation(io.BytesIO(data))
    title = one_line(deck.core_properties.title or "")
    if title:
        text.add(f"# {title}", "")
    for number, slide in enumerate(deck.slides, start=1):
        title_shape = slide.shapes.title
        heading = one_line(title_shape.text_frame.text) if title_shape is not None else ""
        text.add(f"## {heading or f'Slide {number}'}", "")
        for shape in _shapes(slide.shapes):
            if title_shape is None or shape.shape_id != title_shape.shape_id:
                _shape(shape, text)
        if slide.has_notes_slide:
            notes = one_line(slide.notes_slide.notes_text_frame.text if slide.notes_slide.notes_text_frame else "")
            if notes:
                text.add("", f"Notes: {notes}")
        text.add("")
