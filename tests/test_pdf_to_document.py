"""PDFToDocument: real PDFs (made with pypdf and reportlab) extracted in a child process, within a time and a character
budget; ruled tables as rows with their headers."""

import io
import time

import pytest
from haystack.core.serialization import component_from_dict, component_to_dict
from haystack.dataclasses import ByteStream
from pypdf import PdfReader, PdfWriter
from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

from gatehouse.components.converters.pdf_text import page_texts, reflow
from gatehouse.components.converters.pdf_to_document import PDFToDocument
from gatehouse.components.preprocessors.section_splitter import SectionSplitter
from office_files import form_pdf, table_pdf

PRICES = table_pdf("Price list", "Prices are per month, billed yearly.",
                   [["Plan", "Monthly price", "Seats"], ["Solo", "$8", "10"], ["Studio", "$15", "50"]])


def pdf(*pages: bytes) -> bytes:
    """A PDF whose pages draw these text operators in Helvetica, with compressed content streams."""
    writer = PdfWriter()
    font = writer._add_object(DictionaryObject({NameObject("/Type"): NameObject("/Font"),
                                                NameObject("/Subtype"): NameObject("/Type1"),
                                                NameObject("/BaseFont"): NameObject("/Helvetica")}))
    for text in pages:
        page = writer.add_blank_page(612, 792)
        page[NameObject("/Resources")] = DictionaryObject(
            {NameObject("/Font"): DictionaryObject({NameObject("/F1"): font})})
        stream = DecodedStreamObject()
        stream.set_data(b"BT /F1 12 Tf 72 720 Td " + text + b" ET")
        page[NameObject("/Contents")] = writer._add_object(stream)
        page.compress_content_streams()
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def bomb(lines: int) -> bytes:
    """A small file whose one page expands to `lines` lines of text."""
    return pdf((b"(" + b"A" * 90 + b") Tj T* ") * lines)


def test_init():
    converter = PDFToDocument(timeout_s=5, max_chars=100, max_memory_mb=256)
    assert (converter.timeout_s, converter.max_chars, converter.max_memory_mb) == (5, 100, 256)
    with pytest.raises(ValueError, match="must be positive"):
        PDFToDocument(max_chars=0)


def test_to_dict():
    assert component_to_dict(PDFToDocument(max_chars=10), "pdf_converter") == {
        "type": "gatehouse.components.converters.pdf_to_document.PDFToDocument",
        "init_parameters": {"timeout_s": 60.0, "max_chars": 10, "max_memory_mb": 1024, "timeout_base_s": 15.0, "timeout_s_per_mb": 20.0},
    }


def test_from_dict():
    data = component_to_dict(PDFToDocument(timeout_s=7, max_memory_mb=300), "pdf_converter")
    restored = component_from_dict(PDFToDocument, data, "pdf_converter")
    assert (restored.timeout_s, restored.max_chars, restored.max_memory_mb) == (7, 2_000_000, 300)


def test_run_extracts_each_page_and_keeps_the_upload_meta():
    upload = ByteStream(data=pdf(b"(Lockers are on level one.) Tj", b"(Bikes go in the yard.) Tj"),
                        meta={"file_name": "office.pdf"})
    documents = PDFToDocument().run(sources=[upload], meta={"kb": "office"})["documents"]
    assert len(documents) == 1
    assert documents[0].content.split("\f") == ["Lockers are on level one.", "Bikes go in the yard."]
    assert documents[0].meta == {"file_name": "office.pdf", "kb": "office", "title": "office"}  # the file's name


def test_run_skips_a_file_pypdf_cannot_read():
    assert PDFToDocument().run(sources=[ByteStream(data=b"not a pdf at all")])["documents"] == []


def test_run_a_compressed_file_expanding_over_max_chars_fails_naming_the_limit():
    data = bomb(20_000)  # 1.8 M characters of text
    assert len(data) < 20_000
    with pytest.raises(ValueError, match=r"bomb.pdf: the PDF expands to over 100000 characters .*max_chars"):
        PDFToDocument(max_chars=100_000, timeout_s=300, timeout_base_s=300).run(  # time: a hang guard
            sources=[ByteStream(data=data, meta={"file_name": "bomb.pdf"})])


def test_run_an_extraction_over_its_time_budget_is_stopped():
    data = bomb(200_000)  # pypdf takes far longer than a second to lay out 18 M characters
    with pytest.raises(ValueError, match=r"slow.pdf: text extraction took over 1 s .*timeout_s"):
        PDFToDocument(timeout_s=1, max_chars=10**9).run(sources=[ByteStream(data=data, meta={"file_name": "slow.pdf"})])


def test_run_a_ruled_table_keeps_its_rows_with_their_headers_and_the_text_around_it():
    upload = ByteStream(data=PRICES, meta={"file_name": "prices.pdf"})
    text = PDFToDocument().run(sources=[upload])["documents"][0].content
    assert text == ("Price list\n\nPrices are per month, billed yearly.\n\n"
                    "- Plan: Solo; Monthly price: $8; Seats: 10\n- Plan: Studio; Monthly price: $15; Seats: 50")


def test_run_totals_ruled_only_at_their_amount_keep_their_labels_and_the_items_all_columns():
    from reportlab.lib import colors
    from reportlab.lib.pagesizes import A4
    from reportlab.platypus import SimpleDocTemplate, Table, TableStyle

    rows = [["Qty", "Item", "Unit price", "Amount"], ["2", "Oak bench", "$120.00", "$240.00"],
            ["1", "Brass lamp", "$45.00", "$45.00"], ["", "", "Subtotal", "$285.00"], ["", "", "Delivery", "$15.00"],
            ["", "", "Total due", "$300.00"]]
    out = io.BytesIO()  # the items fully ruled; each total draws the box of its amount only, its label left of it
    SimpleDocTemplate(out, pagesize=A4).build([Table(rows, style=TableStyle([
        ("GRID", (0, 0), (-1, 2), 0.5, colors.black), ("GRID", (-1, 3), (-1, -1), 0.5, colors.black)]))])
    text = PDFToDocument().run(sources=[ByteStream(data=out.getvalue(), meta={"file_name": "invoice.pdf"})])[
        "documents"][0].content
    assert text == ("- Qty: 2; Item: Oak bench; Unit price: $120.00; Amount: $240.00\n"
                    "- Qty: 1; Item: Brass lamp; Unit price: $45.00; Amount: $45.00\n"
                    "- Subtotal: $285.00\n- Delivery: $15.00\n- Total due: $300.00")


def test_the_table_pass_past_its_deadline_keeps_pypdfs_text():
    late = page_texts(PRICES, max_chars=10_000, deadline=time.monotonic() - 1)
    assert late == [reflow(PdfReader(io.BytesIO(PRICES)).pages[0].extract_text())]
    assert "Plan: Solo" not in late[0] and "Solo" in late[0]


def test_run_a_form_keeps_each_value_with_its_label_and_its_title_line_titles_it():
    lines = [(f"Line {n}: repaint of wall section {n} with two coats", f"{80 + n},00") for n in range(1, 60)]
    data = form_pdf("Estimate E-2041", [("Customer", "Harbour Bakery Ltd"), *lines, ("GRAND TOTAL", "5,738")])
    document = PDFToDocument().run(sources=[ByteStream(data=data, meta={"file_name": "estimate.pdf"})])["documents"][0]
    assert document.meta["title"] == "Estimate E-2041"  # the first line, in larger type than the page's text
    chunks = SectionSplitter(max_words=220, overlap_words=30).run(documents=[document])["documents"]
    assert len(chunks) > 2
    for chunk in chunks:
        lines = chunk.content.split("\n")
        assert not lines[0].replace(",", "").isdigit()  # no chunk starts with a value cut from its label
        assert all(line == "GRAND TOTAL 5,738" for line in lines if "GRAND TOTAL" in line)  # the value on its line


def test_page_texts_read_the_first_page_once_for_its_text_and_its_title(monkeypatch):
    """The title's type sizes were read in a pass of their own: the first page's text laid out twice, so a one-page
    bomb took twice the time (and a busy machine's extraction budget) before its characters were counted."""
    from pypdf import PageObject

    laid_out = []
    extract_text = PageObject.extract_text
    monkeypatch.setattr(PageObject, "extract_text",
                        lambda page, *args, **kwargs: laid_out.append(1) or extract_text(page, *args, **kwargs))
    data = form_pdf("Estimate E-2041", [("Customer", "Harbour Bakery Ltd"), ("GRAND TOTAL", "5,738")])
    meta: dict = {}
    pages = page_texts(data, max_chars=10_000, meta=meta)
    assert (len(laid_out), len(pages), meta["title"]) == (1, 1, "Estimate E-2041")


def test_run_a_first_line_in_body_type_is_not_a_title():
    upload = ByteStream(data=pdf(b"(Lockers are on level one) Tj"), meta={"file_name": "lockers-note.pdf"})
    assert PDFToDocument().run(sources=[upload])["documents"][0].meta["title"] == "lockers note"


def test_reflow_joins_wrapped_prose_and_keeps_each_value_on_its_labels_line():
    page = ("Annual report\nThe board met four times this year and agreed the budget for the\nnew depot, which "
            "opens in May.\nInvoice Date:\n03/20/2023\nTotal\n$\n279.84\nThank you.")
    assert reflow(page).split("\n\n") == [
        "Annual report",
        "The board met four times this year and agreed the budget for the\nnew depot, which opens in May.",
        "Invoice Date: 03/20/2023", "Total $ 279.84", "Thank you."]
