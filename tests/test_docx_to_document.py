"""DOCXToDocument: Word files (made with python-docx) to markdown whose headings make sections, in a child process."""

import pytest
from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict
from haystack.dataclasses import ByteStream

from gatehouse.components.converters.bounded import time_budget
from gatehouse.components.converters.docx_to_document import DOCXToDocument
from gatehouse.components.preprocessors.section_splitter import SectionSplitter
from office_files import docx_file, zip_bomb

HANDBOOK = docx_file([
    ("title", "Staff handbook"),
    ("h1", "Travel"),
    ("p", "Book trains at least two weeks ahead."),
    ("h2", "Hotels"),
    ("bullet", "The nightly cap is 140 euros."),
    ("bullet", "Breakfast is included."),
    ("table", [["City", "Nightly cap"], ["Lyon", "140 euros"], ["Oslo", "210 euros"]]),
    ("h1", "Leave"),
    ("p", "Ask your manager before booking leave."),
])


def upload(data: bytes, name: str = "handbook.docx") -> ByteStream:
    return ByteStream(data=data, meta={"file_name": name})


def test_init():
    converter = DOCXToDocument(timeout_s=5, max_chars=100, max_memory_mb=256, max_expanded_mb=10)
    assert (converter.timeout_s, converter.max_chars, converter.max_memory_mb, converter.max_expanded_mb) == (
        5, 100, 256, 10)
    with pytest.raises(ValueError, match="must be positive"):
        DOCXToDocument(max_expanded_mb=0)
    with pytest.raises(ValueError, match="must be positive"):
        DOCXToDocument(timeout_s=0)


def test_to_dict():
    assert component_to_dict(DOCXToDocument(max_chars=10), "docx_converter") == {
        "type": "gatehouse.components.converters.docx_to_document.DOCXToDocument",
        "init_parameters": {"timeout_s": 60.0, "max_chars": 10, "max_memory_mb": 1024, "max_expanded_mb": 256, "timeout_base_s": 15.0, "timeout_s_per_mb": 20.0},
    }


def test_from_dict():
    data = component_to_dict(DOCXToDocument(timeout_s=7, max_expanded_mb=30), "docx_converter")
    restored = component_from_dict(DOCXToDocument, data, "docx_converter")
    assert (restored.timeout_s, restored.max_chars, restored.max_expanded_mb) == (7, 2_000_000, 30)


def test_run_headings_become_sections_with_their_heading_path_and_tables_rows_with_headers():
    documents = DOCXToDocument().run(sources=[upload(HANDBOOK)], meta={"kb": "hr"})["documents"]
    assert len(documents) == 1
    document = documents[0]
    assert document.meta == {"file_name": "handbook.docx", "kb": "hr", "mime_type": "text/markdown",
                             "title": "Staff handbook", "file_title": "handbook"}  # the Title style, the file's name
    assert document.content.splitlines()[:4] == ["# Staff handbook", "", "# Travel", ""]
    assert "- The nightly cap is 140 euros.\n- Breakfast is included.\n\n- City: Lyon; Nightly cap: 140 euros\n" \
           "- City: Oslo; Nightly cap: 210 euros" in document.content
    chunks = SectionSplitter(min_words=1).run(documents=[Document(content=document.content, meta={
        **document.meta, "doc_id": "public/hr/handbook.docx", "source": "handbook.docx"})])["documents"]
    by_section = {chunk.meta["section"]: chunk for chunk in chunks}
    assert list(by_section) == ["Travel", "Hotels", "Leave"]
    assert by_section["Hotels"].meta["heading_path"] == ["Travel", "Hotels"]
    assert by_section["Hotels"].meta["title"] == "Staff handbook"
    assert "City: Oslo; Nightly cap: 210 euros" in by_section["Hotels"].content


@pytest.mark.parametrize(("blocks", "title", "expected"), [
    ([("bold", "Annual Report 2025"), ("h1", "Introduction"), ("p", "The report covers the year.")], None,
     "Annual Report 2025"),
    ([("p", "The report covers the year."), ("h1", "Introduction")], None, "annual report"),
    ([("title", "Draft"), ("p", "The report covers the year.")], "Annual Report 2025", "Annual Report 2025"),
], ids=["bold-first-line", "first-line-a-sentence", "properties-first"])
def test_run_the_title_is_the_documents_own_else_the_file_name(blocks, title, expected):
    document = DOCXToDocument().run(sources=[upload(docx_file(blocks, title=title), "annual-report.docx")])
    assert document["documents"][0].meta["title"] == expected


def test_run_a_first_heading_1_is_a_section_not_the_title():
    blocks = [("h1", "CHAPTER 1 – INTRODUCTION"), ("p", "The report covers the year."),
              ("h1", "CHAPTER 4 – RESULTS"),
              ("h2", "3. ACCOUNTING REPORTS"), ("p", "Accounts were closed in March.")]
    document = DOCXToDocument().run(sources=[upload(docx_file(blocks), "annual-report.docx")])["documents"][0]
    assert document.meta["title"] == "annual report"
    chunks = SectionSplitter(min_words=1).run(documents=[Document(content=document.content, meta={
        **document.meta, "doc_id": "public/annual-report.docx", "source": "annual-report.docx"})])["documents"]
    assert [(chunk.meta["title"], chunk.meta["heading_path"]) for chunk in chunks] == [
        ("annual report", ["CHAPTER 1 – INTRODUCTION"]),
        ("annual report", ["CHAPTER 4 – RESULTS", "3. ACCOUNTING REPORTS"])]


def test_run_merged_header_cells_name_each_column_and_a_nested_table_is_kept():
    rows = [["Budget 2025", "", ""], ["", "Spent", ""], ["Team", "Q1", "Q2"], ["Data", "10", "12"], ["Ops", "7", "9"]]
    merges = [((0, 0), (0, 2)), ((1, 1), (1, 2))]  # a title across the table, "Spent" over two columns
    document = DOCXToDocument().run(sources=[upload(docx_file([("merged", (rows, merges))]))])["documents"][0]
    assert document.content.strip().split("\n") == [
        "Budget 2025:", "- Team: Data; Spent Q1: 10; Spent Q2: 12", "- Team: Ops; Spent Q1: 7; Spent Q2: 9"]
    nested = docx_file([("nested", ([["Site", "Contacts"], ["Lyon", "see below"]],
                                     [["Name", "Phone"], ["Ada", "555 0101"]]))])
    content = DOCXToDocument().run(sources=[upload(nested)])["documents"][0].content
    assert "- Site: Lyon; Contacts: see below" in content and "- Name: Ada; Phone: 555 0101" in content


def test_run_a_corrupt_file_fails_in_one_line_naming_it():
    with pytest.raises(ValueError) as error:
        DOCXToDocument().run(sources=[upload(b"PK\x03\x04 truncated", "broken.docx")])
    assert str(error.value) == "broken.docx: not a readable Word file (BadZipFile: File is not a zip file)"


def test_run_a_zip_bomb_fails_before_it_is_unzipped():
    bomb = zip_bomb(HANDBOOK, "word/document.xml", 300)
    assert len(bomb) < len(HANDBOOK) + 400_000  # 300 MB unzipped
    with pytest.raises(ValueError, match=r"^bomb.docx: the Word file unzips to \d+ bytes, over 256 MB "
                                         r"\(docx_converter.max_expanded_mb in index.yml\)$"):
        DOCXToDocument().run(sources=[upload(bomb, "bomb.docx")])


def test_run_text_over_max_chars_fails_naming_the_limit():
    with pytest.raises(ValueError, match=r"^handbook.docx: the Word file expands to over 50 characters of text "
                                         r"\(docx_converter.max_chars in index.yml\)$"):
        DOCXToDocument(max_chars=50).run(sources=[upload(HANDBOOK)])


def test_run_a_file_needing_more_memory_than_allowed_fails_naming_the_limit():
    big = zip_bomb(HANDBOOK, "word/document.xml", 200)  # python-docx reads and parses it whole
    with pytest.raises(ValueError, match=r"^handbook.docx: text extraction needed over 150 MB of memory "
                                         r"\(docx_converter.max_memory_mb in index.yml\)$"):
        DOCXToDocument(max_memory_mb=150, max_expanded_mb=1000).run(sources=[upload(big)])


def test_run_an_extraction_over_its_time_budget_is_stopped():
    with pytest.raises(ValueError, match=r"^handbook.docx: text extraction took over 0.01 s "
                                         r"\(docx_converter.timeout_s in index.yml\)$"):
        DOCXToDocument(timeout_s=0.01).run(sources=[upload(HANDBOOK)])


def test_run_a_files_time_budget_grows_with_its_size():
    assert [time_budget(size, base_s=15, per_mb_s=20, cap_s=60) for size in (0, 2**20, 10 * 2**20)] == [15, 35, 60]
    small = DOCXToDocument(timeout_s=60, timeout_base_s=0.01, timeout_s_per_mb=0.01)  # 0.01 s + 0.01 s per MB
    megabytes = len(HANDBOOK) / 2**20
    with pytest.raises(ValueError, match=rf"^handbook.docx: text extraction took over {0.01 + 0.01 * megabytes:g} s "
                                         rf"\(docx_converter.timeout_base_s plus timeout_s_per_mb for its "
                                         rf"{megabytes:.2f} MB in index.yml\)$"):
        small.run(sources=[upload(HANDBOOK)])


def test_each_paragraph_style_is_looked_up_once(monkeypatch):
    """python-docx looks a paragraph's style up among all the file's styles each time it is asked (a paragraph without
    a style: every style, reading each one's type), about 3 ms: 100,000 one-character paragraphs burnt the 60 s
    extraction budget. Run in-process here to count the look-ups."""
    from docx.parts.document import DocumentPart

    from gatehouse.components.converters.extraction import run

    looked_up = []
    get_style = DocumentPart.get_style
    monkeypatch.setattr(DocumentPart, "get_style", lambda part, *args: looked_up.append(args) or get_style(part, *args))
    blocks = [("p", f"Line {n}.") for n in range(300)] + [("h1", "Leave"), ("bullet", "Ask first."), ("p", "Done.")]
    text = run("docx", docx_file(blocks), max_chars=100_000, max_expanded_mb=256)["text"]
    assert text.startswith("Line 0.\n\nLine 1.\n\n") and text.endswith("Line 299.\n\n# Leave\n\n- Ask first.\n\nDone.\n")
    assert len(looked_up) == 3  # the paragraphs' default style, Heading 1 and List Bullet: once each


def test_paragraphs_of_nothing_visible_are_left_out():
    """A paragraph of a zero-width space looks empty: 100,000 of them made chunks of nothing to embed and store."""
    from gatehouse.components.converters.extraction import run

    blocks = [("p", "\u200b"), ("p", "Visible \u200btext."), ("p", "\u00ad \u200d"), ("table", [["\u200b", "B"]])]
    assert run("docx", docx_file(blocks), max_chars=1000, max_expanded_mb=256)["text"] == "Visible \u200btext.\n\n- B\n"
