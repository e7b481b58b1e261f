"""Small Word, PowerPoint, Excel and PDF files made by the tests (python-docx, python-pptx, openpyxl, reportlab)."""

import io
import zipfile


def docx_file(blocks: list[tuple[str, object]], *, title: str | None = None) -> bytes:
    """
    A Word file of ("title" | "h1".."h3" | "p" | "bold" | "bullet", text), ("table", rows), ("merged", (rows,
    [((row, column), (row, column)), ...])) and ("nested", (rows, inner rows in the last cell)) blocks, in order, with
    `title` in its properties.
    """
    import docx

    document = docx.Document()
    if title:
        document.core_properties.title = title
    for kind, value in blocks:
        if kind == "merged":
            rows, merges = value
            table = document.add_table(rows=len(rows), cols=len(rows[0]))
            for (top, left), (bottom, right) in merges:
                table.cell(top, left).merge(table.cell(bottom, right))
            for r, row in enumerate(rows):
                for c, cell in enumerate(row):
                    if cell:
                        table.cell(r, c).text = cell
        elif kind == "nested":
            rows, inner = value
            table = document.add_table(rows=len(rows), cols=len(rows[0]))
            for r, row in enumerate(rows):
                for c, cell in enumerate(row):
                    table.cell(r, c).text = cell
            nested = table.cell(len(rows) - 1, len(rows[0]) - 1).add_table(rows=len(inner), cols=len(inner[0]))
            for r, row in enumerate(inner):
                for c, cell in enumerate(row):
                    nested.cell(r, c).text = cell
        elif kind == "bold":
            document.add_paragraph().add_run(value).bold = True
        elif kind == "title":
            document.add_heading(value, 0)
        elif kind.startswith("h"):
            document.add_heading(value, int(kind[1:]))
        elif kind == "bullet":
            document.add_paragraph(value, style="List Bullet")
        elif kind == "table":
            table = document.add_table(rows=len(value), cols=len(value[0]))
            for r, row in enumerate(value):
                for c, cell in enumerate(row):
                    table.cell(r, c).text = cell
        else:
            document.add_paragraph(value)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def pptx_file(slides: list[tuple[str | None, list[tuple[str, int]]]], *, table: list[list[str]] | None = None,
              notes: str | None = None, title_slide: tuple[str, str] | None = None) -> bytes:
    """
    A presentation: a title slide (title, subtitle) first if given, then per slide its title (None: no title, the
    bullets in a text box) and (bullet, level) items (a "\v" in a bullet is a line break); a table and notes on the
    last.
    """
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()
    if title_slide:
        first = deck.slides.add_slide(deck.slide_layouts[0])
        first.shapes.title.text, first.placeholders[1].text = title_slide
    for title, bullets in slides:
        slide = deck.slides.add_slide(deck.slide_layouts[1] if title is not None else deck.slide_layouts[6])
        if title is not None:
            slide.shapes.title.text = title
            frame = slide.placeholders[1].text_frame
        else:
            frame = slide.shapes.add_textbox(Inches(1), Inches(1), Inches(6), Inches(3)).text_frame
        for position, (text, level) in enumerate(bullets):
            paragraph = frame.paragraphs[0] if position == 0 else frame.add_paragraph()
            paragraph.text = text
            paragraph.level = level
    if table:
        shape = slide.shapes.add_table(len(table), len(table[0]), Inches(1), Inches(5), Inches(6), Inches(1))
        for r, row in enumerate(table):
            for c, cell in enumerate(row):
                shape.table.cell(r, c).text = cell
    if notes:
        slide.notes_slide.notes_text_frame.text = notes
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def xlsx_file(sheets: dict[str, list[list[object]]], *, merged: dict[str, list[str]] | None = None,
              title: str | None = None) -> bytes:
    """A workbook with these sheets and rows, the `merged` cell ranges of each sheet ("B3:C3") and a title."""
    from openpyxl import Workbook

    workbook = Workbook()
    workbook.remove(workbook.active)
    if title:
        workbook.properties.title = title
    for name, rows in sheets.items():
        sheet = workbook.create_sheet(name)
        for row in rows:
            sheet.append(row)
        for cells in (merged or {}).get(name, []):
            sheet.merge_cells(cells)
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()


def table_pdf(heading: str, prose: str, rows: list[list[str]]) -> bytes:
    """A one-page PDF: a heading, a paragraph and a fully ruled table (its first row the header)."""
    from reportlab.lib import colors
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import Paragraph, SimpleDocTemplate, Table, TableStyle

    styles = getSampleStyleSheet()
    out = io.BytesIO()
    SimpleDocTemplate(out, pagesize=A4).build([
        Paragraph(heading, styles["Heading1"]), Paragraph(prose, styles["BodyText"]),
        Table(rows, style=TableStyle([("GRID", (0, 0), (-1, -1), 0.5, colors.black)])),
    ])
    return out.getvalue()


def zip_bomb(data: bytes, part: str, megabytes: int) -> bytes:
    """
    An Office file whose `part` (e.g. "word/document.xml") ends in `megabytes` MB of spaces, still valid XML: a few
    hundred kilobytes on disk that its library reads whole.
    """
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for info in source.infolist():
            content = source.read(info)
            if info.filename == part:
                content += b" " * (megabytes * 1024 * 1024)
            archive.writestr(info.filename, content)
    return out.getvalue()


def prose_pdf(heading: str, prose: str) -> bytes:
    """A one-page PDF: a heading and a paragraph."""
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import Paragraph, SimpleDocTemplate

    styles = getSampleStyleSheet()
    out = io.BytesIO()
    SimpleDocTemplate(out, pagesize=A4).build([Paragraph(heading, styles["Heading1"]),
                                               Paragraph(prose, styles["BodyText"])])
    return out.getvalue()


def form_pdf(title: str, fields: list[tuple[str, str]]) -> bytes:
    """A one-page form: its title in large type, then each label with its value to the right (pypdf reads the value
    on the line under its label)."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    out = io.BytesIO()
    page = canvas.Canvas(out, pagesize=A4)
    page.setFont("Helvetica-Bold", 20)
    page.drawString(72, 800, title)
    page.setFont("Helvetica", 9)
    for number, (label, value) in enumerate(fields):
        page.drawString(72, 770 - 10 * number, label)
        page.drawString(450, 770 - 10 * number, value)
    page.save()
    return out.getvalue()
