"""XLSXToDocument: workbooks (made with openpyxl) to markdown, one section per sheet, each row with its headers."""

import datetime

import pytest
from haystack.core.serialization import component_from_dict, component_to_dict
from haystack.dataclasses import ByteStream

from gatehouse.components.converters.xlsx_to_document import XLSXToDocument
from office_files import xlsx_file, zip_bomb

BOOK = xlsx_file({
    "Inventory": [[None], ["Item", "Warehouse", "Count", "Checked"],
                  ["Blue kettle", "Lille", 37, datetime.datetime(2026, 3, 2)], [None, None],
                  ["Red lamp", "Porto", 12.0, None]],
    "Contacts": [["Name", "Phone"]],
})


def upload(data: bytes, name: str = "stock.xlsx") -> ByteStream:
    return ByteStream(data=data, meta={"file_name": name})


def test_init():
    converter = XLSXToDocument(max_expanded_mb=64)
    assert (converter.timeout_s, converter.max_chars, converter.max_memory_mb, converter.max_expanded_mb) == (
        60.0, 2_000_000, 1024, 64)
    with pytest.raises(ValueError, match="must be positive"):
        XLSXToDocument(max_memory_mb=0)


def test_to_dict():
    assert component_to_dict(XLSXToDocument(timeout_s=9), "xlsx_converter") == {
        "type": "gatehouse.components.converters.xlsx_to_document.XLSXToDocument",
        "init_parameters": {"timeout_s": 9, "max_chars": 2_000_000, "max_memory_mb": 1024, "max_expanded_mb": 256, "timeout_base_s": 15.0, "timeout_s_per_mb": 20.0},
    }


def test_from_dict():
    data = component_to_dict(XLSXToDocument(max_expanded_mb=5), "xlsx_converter")
    assert component_from_dict(XLSXToDocument, data, "xlsx_converter").max_expanded_mb == 5


def test_run_each_sheet_is_a_section_and_each_row_keeps_its_column_headers():
    document = XLSXToDocument().run(sources=[upload(BOOK)])["documents"][0]
    assert document.meta["mime_type"] == "text/markdown"
    assert document.meta["title"] == "stock"  # no title in the workbook's properties: the file's name
    assert document.content.split("\n") == [
        "## Inventory", "",
        "- Item: Blue kettle; Warehouse: Lille; Count: 37; Checked: 2026-03-02",
        "- Item: Red lamp; Warehouse: Porto; Count: 12",
        "",
        "## Contacts", "",
        "Name; Phone",  # a header with no rows under it
        "",
    ]


def test_run_title_rows_above_the_header_are_the_caption_and_a_sheets_tables_stay_apart():
    report = xlsx_file({"Segments": [
        ["3. Analyses by segment"], [], ["in EUR thousands"],
        [None, "2024", None, "2025", None],
        ["Segment", "Revenue", "EBIT", "Revenue", "EBIT"],
        ["Retail", 1200, -30, 1320, 12], ["Wholesale", 870.5, 44, 905, 51],
        [], ["4. Headcount"], ["Segment", "Staff"], ["Retail", 41],
    ]}, merged={"Segments": ["B4:C4", "D4:E4"]}, title="Annual report 2025")
    document = XLSXToDocument().run(sources=[upload(report, "report.xlsx")])["documents"][0]
    assert (document.meta["title"], document.meta["file_title"]) == ("Annual report 2025", "report")
    assert document.content.split("\n") == [
        "## Segments", "",
        "3\\. Analyses by segment, in EUR thousands:",
        "- Segment: Retail; 2024 Revenue: 1200; 2024 EBIT: -30; 2025 Revenue: 1320; 2025 EBIT: 12",
        "- Segment: Wholesale; 2024 Revenue: 870.5; 2024 EBIT: 44; 2025 Revenue: 905; 2025 EBIT: 51",
        "",
        "4\\. Headcount:",
        "- Segment: Retail; Staff: 41",
        "",
    ]


def test_run_a_corrupt_file_fails_in_one_line_naming_it():
    with pytest.raises(ValueError, match=r"^broken.xlsx: not a readable Excel workbook \(\w+: .*\)$"):
        XLSXToDocument().run(sources=[upload(BOOK[: len(BOOK) // 2], "broken.xlsx")])


def test_run_a_zip_bomb_fails_before_it_is_unzipped():
    with pytest.raises(ValueError, match=r"^big.xlsx: the Excel workbook unzips to \d+ bytes, over 1 MB"):
        XLSXToDocument(max_expanded_mb=1).run(sources=[upload(zip_bomb(BOOK, "xl/workbook.xml", 2), "big.xlsx")])


def test_run_rows_over_max_chars_fail_naming_the_limit():
    with pytest.raises(ValueError, match=r"^stock.xlsx: the Excel workbook expands to over 30 characters .*max_chars"):
        XLSXToDocument(max_chars=30).run(sources=[upload(BOOK)])
