"""PPTXToDocument: presentations (made with python-pptx) to markdown with one section per slide, in a child process."""

import pytest
from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict
from haystack.dataclasses import ByteStream

from gatehouse.components.converters.pptx_to_document import PPTXToDocument
from gatehouse.components.preprocessors.section_splitter import SectionSplitter
from office_files import pptx_file, zip_bomb

DECK = pptx_file(
    [("Roadmap", [("Launch the mobile app in March", 0), ("Beta with 40 customers", 1)]),
     (None, [("Hiring two designers", 0)]),
     ("Team", [("Design and research", 0)])],
    table=[["Role", "Lead"], ["Design", "Mira"], ["Research", "Tomas"]],
    notes="Mira joined in May.\nTomas starts in June.",
)


def upload(data: bytes, name: str = "plan.pptx") -> ByteStream:
    return ByteStream(data=data, meta={"file_name": name})


def test_init():
    converter = PPTXToDocument(timeout_s=5, max_chars=100, max_memory_mb=256, max_expanded_mb=10)
    assert (converter.timeout_s, converter.max_chars, converter.max_memory_mb, converter.max_expanded_mb) == (
        5, 100, 256, 10)
    with pytest.raises(ValueError, match="must be positive"):
        PPTXToDocument(max_chars=-1)


def test_to_dict():
    assert component_to_dict(PPTXToDocument(max_memory_mb=512), "pptx_converter") == {
        "type": "gatehouse.components.converters.pptx_to_document.PPTXToDocument",
        "init_parameters": {"timeout_s": 60.0, "max_chars": 2_000_000, "max_memory_mb": 512, "max_expanded_mb": 256, "timeout_base_s": 15.0, "timeout_s_per_mb": 20.0},
    }


def test_from_dict():
    data = component_to_dict(PPTXToDocument(max_chars=99), "pptx_converter")
    assert component_from_dict(PPTXToDocument, data, "pptx_converter").max_chars == 99


def test_run_each_slide_is_a_section_with_its_title_bullets_table_and_notes():
    document = PPTXToDocument().run(sources=[upload(DECK)])["documents"][0]
    assert document.meta["mime_type"] == "text/markdown"
    assert document.meta["title"] == "plan"  # no title in its properties, no title slide: the file's name
    assert "## Roadmap\n\n- Launch the mobile app in March\n  - Beta with 40 customers" in document.content
    chunks = SectionSplitter(min_words=1).run(documents=[Document(content=document.content, meta={
        **document.meta, "doc_id": "public/plans/plan.pptx", "source": "plan.pptx"})])["documents"]
    by_section = {chunk.meta["section"]: chunk.content for chunk in chunks}
    assert list(by_section) == ["Roadmap", "Slide 2", "Team"]
    assert by_section["Slide 2"] == "Hiring two designers"  # a text box: a paragraph of its own
    assert "- Role: Research; Lead: Tomas" in by_section["Team"]
    assert by_section["Team"].endswith("- Speaker notes: Mira joined in May. Tomas starts in June.")  # whole


def test_run_a_title_slide_titles_the_deck_and_each_part_of_a_slide_is_a_unit():
    deck = pptx_file([("Results", [("Revenue up 12%\vmargin flat", 0), ("Churn down", 0)])],
                     table=[["Quarterly figures", "", ""], ["Quarter", "Revenue", "Churn"], ["Q1", "4.2", "3%"]],
                     notes="Say the revenue first.\nThen the churn.", title_slide=("Board update", "March 2026"))
    document = PPTXToDocument().run(sources=[upload(deck)])["documents"][0]
    assert document.meta["title"] == "Board update"
    results = document.content[document.content.index("## Results"):]
    assert results.split("\n\n") == [
        "## Results",
        "- Revenue up 12%\n- margin flat\n- Churn down",  # a line break is not two words glued together
        "Quarterly figures:\n- Quarter: Q1; Revenue: 4.2; Churn: 3%",  # the table's title row is its caption
        "- Speaker notes: Say the revenue first. Then the churn.\n",
    ]


def test_run_a_corrupt_file_fails_in_one_line_naming_it():
    with pytest.raises(ValueError, match=r"^deck.pptx: not a readable PowerPoint file \(\w+: .*\)$"):
        PPTXToDocument().run(sources=[upload(b"\x00\x01 not a presentation", "deck.pptx")])


def test_run_a_zip_bomb_fails_before_it_is_unzipped():
    with pytest.raises(ValueError, match=r"^big.pptx: the PowerPoint file unzips to \d+ bytes, over 1 MB "
                                         r"\(pptx_converter.max_expanded_mb in index.yml\)$"):
        PPTXToDocument(max_expanded_mb=1).run(sources=[upload(zip_bomb(DECK, "ppt/presentation.xml", 2), "big.pptx")])


def test_run_text_over_max_chars_fails_naming_the_limit():
    with pytest.raises(ValueError, match=r"^plan.pptx: the PowerPoint file expands to over 40 characters"):
        PPTXToDocument(max_chars=40).run(sources=[upload(DECK)])


def chart_deck(*, three_d: bool) -> bytes:
    """A slide with a column chart of two series by quarter; `three_d` rewrites it as a 3-D chart, which python-pptx
    reads no plot of."""
    import io
    import zipfile

    from pptx import Presentation
    from pptx.chart.data import CategoryChartData
    from pptx.enum.chart import XL_CHART_TYPE
    from pptx.util import Inches

    deck = Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[5])
    slide.shapes.title.text = "Sales"
    data = CategoryChartData()
    data.categories = ["Q1", "Q2"]
    data.add_series("Lyon", (10.5, 12))
    data.add_series("Oslo", (7, 9))
    slide.shapes.add_chart(XL_CHART_TYPE.COLUMN_CLUSTERED, Inches(1), Inches(2), Inches(6), Inches(4), data)
    out = io.BytesIO()
    deck.save(out)
    if not three_d:
        return out.getvalue()
    rewritten = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(out.getvalue())) as source, zipfile.ZipFile(rewritten, "w") as archive:
        for info in source.infolist():
            content = source.read(info)
            if info.filename.startswith("ppt/charts/chart"):
                content = content.replace(b"c:barChart>", b"c:bar3DChart>")
            archive.writestr(info, content)
    return rewritten.getvalue()


def test_run_a_chart_is_a_table_of_its_series_and_one_that_cannot_be_read_is_left_out():
    content = PPTXToDocument().run(sources=[upload(chart_deck(three_d=False))])["documents"][0].content
    assert content.strip().split("\n") == ["## Sales", "", "- Q1; Lyon: 10.5; Oslo: 7", "- Q2; Lyon: 12; Oslo: 9"]
    content = PPTXToDocument().run(sources=[upload(chart_deck(three_d=True))])["documents"][0].content
    assert content.strip() == "## Sales"
