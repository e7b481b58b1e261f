"""
Which PDF text extraction keeps a table's rows with their headers: a measured comparison on PDFs made here with
reportlab (the test extra), with known tables drawn three ways (fully ruled, rules under the header only, no rules)
and a page of prose with no table.

For each extraction it counts the body rows recovered with every cell next to its column header (a line holding each
`Header: cell`), the rows recovered intact (a line holding the row's cells in order), the tables it finds on the prose
page (false tables), and its time per page.

Usage (`make install` first; prints a markdown table):
```
python -m gatehouse.eval.pdf_table_bench [--repeats 3]
```
"""

import argparse
import io
import re
import time
from collections.abc import Callable

from gatehouse.components.converters.pdf_text import page_texts
from gatehouse.components.tables import table_rows

HEADER = ["Plan", "Monthly price", "Included seats", "Support level"]
ROWS = [[f"Plan {name}", f"${10 + 7 * i} per month", f"{5 * (i + 1)} seats", level]
        for i, (name, level) in enumerate(zip(
            ["Alder", "Birch", "Cedar", "Dogwood", "Elm", "Fir", "Ginkgo", "Hazel", "Ivy", "Juniper", "Kapok", "Larch"],
            ["Email only", "Email and chat", "Phone 9 to 5", "Phone 24 hours"] * 3))]
PROSE = ("The committee met on Tuesday to review the budget for the coming year. Each department presented its "
         "plans, and the finance team answered questions about travel, equipment and training. ") * 6


def _pdf(style: str) -> bytes:
    """Two pages: a heading, prose and the table drawn in `style` (grid, header-rules, none); then a prose page."""
    from reportlab.lib import colors
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import PageBreak, Paragraph, SimpleDocTemplate, Table, TableStyle

    styles = getSampleStyleSheet()
    commands = {
        "grid": [("GRID", (0, 0), (-1, -1), 0.5, colors.black)],
        "header-rules": [("LINEBELOW", (0, 0), (-1, 0), 1, colors.black),
                         ("LINEBELOW", (0, -1), (-1, -1), 1, colors.black)],
        "none": [],
    }[style]
    out = io.BytesIO()
    SimpleDocTemplate(out, pagesize=A4).build([
        Paragraph("Price list", styles["Heading1"]), Paragraph(PROSE[:300], styles["BodyText"]),
        Table([HEADER, *ROWS], style=TableStyle(commands)), PageBreak(),
        Paragraph("Minutes", styles["Heading1"]), Paragraph(PROSE, styles["BodyText"]),
    ])
    return out.getvalue()


def _prose_pdf(pages: int) -> bytes:
    """`pages` pages of prose with no table and no drawing."""
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import PageBreak, Paragraph, SimpleDocTemplate

    styles = getSampleStyleSheet()
    out = io.BytesIO()
    flow = []
    for _ in range(pages):
        flow += [Paragraph(PROSE * 2, styles["BodyText"]), PageBreak()]
    SimpleDocTemplate(out, pagesize=A4).build(flow[:-1])
    return out.getvalue()


def _pypdf(data: bytes) -> tuple[str, int]:
    from pypdf import PdfReader

    return "\n".join(page.extract_text() or "" for page in PdfReader(io.BytesIO(data)).pages), 0


def _pypdf_layout(data: bytes) -> tuple[str, int]:
    from pypdf import PdfReader

    pages = PdfReader(io.BytesIO(data)).pages
    return "\n".join(page.extract_text(extraction_mode="layout") or "" for page in pages), 0


def _pdfium(data: bytes) -> tuple[str, int]:
    import pypdfium2

    document = pypdfium2.PdfDocument(data)
    try:
        return "\n".join(page.get_textpage().get_text_range() for page in document), 0
    finally:
        document.close()


def _plumber(settings: dict) -> Callable[[bytes], tuple[str, int]]:
    def extract(data: bytes) -> tuple[str, int]:
        import pdfplumber

        texts, prose_tables = [], 0
        with pdfplumber.open(io.BytesIO(data)) as pdf:
            for number, page in enumerate(pdf.pages):
                tables = page.extract_tables(settings)
                prose_tables += len(tables) if number == len(pdf.pages) - 1 else 0
                texts.append(page.extract_text() or "")
                for table in tables:
                    rows = [[cell or "" for cell in row] for row in table]
                    texts.append("\n".join(table_rows(rows[0], rows[1:])) if rows else "")
        return "\n".join(texts), prose_tables
    return extract


def _gatehouse(data: bytes) -> tuple[str, int]:
    pages = page_texts(data, max_chars=10**7)
    last = pages[-1]
    return "\n".join(pages), sum(1 for line in last.splitlines() if re.match(r"- \S.*: ", line))


METHODS: dict[str, Callable[[bytes], tuple[str, int]]] = {
    "pypdf `extract_text` (before)": _pypdf,
    "pypdf `extract_text(layout)`": _pypdf_layout,
    "pypdfium2 `get_text_range`": _pdfium,
    "pdfplumber tables, `lines` strategy": _plumber({}),
    "pdfplumber tables, `text` strategy": _plumber({"vertical_strategy": "text", "horizontal_strategy": "text"}),
    "Gatehouse `pdf_text` (chosen)": _gatehouse,
}


def score(text: str) -> tuple[int, int]:
    """Rows with every cell next to its header, and rows whose cells are on one line in order."""
    lines = [" ".join(line.split()) for line in text.splitlines()]
    headed = sum(1 for row in ROWS if any(all(f"{h}: {c}" in line for h, c in zip(HEADER, row)) for line in lines))
    pattern = [re.compile(r".*".join(re.escape(c) for c in row)) for row in ROWS]
    intact = sum(1 for rx in pattern if any(rx.search(line) for line in lines))
    return headed, intact


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    files = {style: _pdf(style) for style in ("grid", "header-rules", "none")}
    pages = 2 * len(files)
    print(f"{len(ROWS)} body rows per table, 3 tables (grid, header-rules, none), {pages} pages\n")
    print("| extraction | rows with headers (grid / rules / none) | rows intact (grid / rules / none) | "
          "false tables on prose pages | ms per page |")
    print("|---|---|---|---|---|")
    for name, method in METHODS.items():
        headed, intact, false_tables = [], [], 0
        start = time.perf_counter()
        for _ in range(args.repeats):
            for style, data in files.items():
                text, found = method(data)
                false_tables += found
        per_page = (time.perf_counter() - start) / args.repeats / pages * 1000
        for data in files.values():
            h, i = score(method(data)[0])
            headed.append(str(h))
            intact.append(str(i))
        print(f"| {name} | {' / '.join(headed)} | {' / '.join(intact)} | {false_tables // args.repeats} | "
              f"{per_page:.0f} |")
    prose = _prose_pdf(20)
    timings = {}
    for name in ("pypdf `extract_text` (before)", "Gatehouse `pdf_text` (chosen)"):
        start = time.perf_counter()
        for _ in range(args.repeats):
            METHODS[name](prose)
        timings[name] = (time.perf_counter() - start) / args.repeats / 20 * 1000
    before, chosen = timings.values()
    print(f"\nA 20-page PDF of prose (no drawing): pypdf {before:.1f} ms per page, Gatehouse {chosen:.1f} ms per page "
          f"({chosen / before:.2f}x)")


if __name__ == "__main__":
    main()
