"""HTMLLayoutTables: pages laid out with tables read as blocks and lines, data tables left as they are."""

from haystack.components.converters.html import HTMLToDocument
from haystack.core.serialization import component_from_dict, component_to_dict
from haystack.dataclasses import ByteStream

from gatehouse.components.converters.html_layout import HTMLLayoutTables
from gatehouse.pipelines import build_pipeline, read_spec

# an invoice page laid out as e-mail templates are: an outer table of one column holding tables of blocks, then rows
# styled as headings above rows of figures
INVOICE = """<!DOCTYPE html><html><head><meta charset="utf-8" /><title>Invoice</title></head><body>
<div class="box"><table cellpadding="0" cellspacing="0">
  <tr class="top"><td colspan="2"><table><tr>
    <td class="title"><img src="logo.png" /></td>
    <td>Order #: 4471<br />Placed: March 3, 2025<br />Payment due: April 2, 2025</td>
  </tr></table></td></tr>
  <tr class="information"><td colspan="2"><table><tr>
    <td>Harbour Bakery Ltd<br />8 Quay Street<br />Plymouth PL1 2AB</td>
    <td>Tilde Ovens GmbH<br />Mara Voss<br />mara@tilde.test</td>
  </tr></table></td></tr>
  <tr class="heading"><td>Delivery</td><td>Tracking</td></tr>
  <tr class="details"><td>Freight</td><td>TR-88213</td></tr>
  <tr class="heading"><td>Article</td><td>Amount</td></tr>
  <tr class="item"><td>Deck oven, two chambers</td><td>&euro;9,800.00</td></tr>
  <tr class="item"><td>Proofing cabinet</td><td>&euro;2,150.00</td></tr>
  <tr class="total"><td></td><td>Total: &euro;11,950.00</td></tr>
</table></div></body></html>"""

DATA = ('<html><body><p>Opening hours of the branches.</p><table><tr><th>Branch</th><th>Opens</th></tr>'
        '<tr><td>Lille</td><td>8:00</td></tr><tr><td colspan="2">Closed on Sundays<br>and holidays</td></tr>'
        '</table></body></html>')


def text_of(page: str, encoding: str = "utf-8") -> str:
    sources = HTMLLayoutTables().run(sources=[ByteStream(data=page.encode(encoding), meta={"file_path": "p.html"})])
    return HTMLToDocument().run(sources=sources["sources"])["documents"][0].content


def test_init():
    assert isinstance(HTMLLayoutTables(), HTMLLayoutTables)


def test_to_dict():
    assert component_to_dict(HTMLLayoutTables(), "html_layout") == {
        "type": "gatehouse.components.converters.html_layout.HTMLLayoutTables", "init_parameters": {}}


def test_from_dict():
    data = component_to_dict(HTMLLayoutTables(), "html_layout")
    assert isinstance(component_from_dict(HTMLLayoutTables, data, "html_layout"), HTMLLayoutTables)


def test_run_a_layout_table_is_read_as_blocks_of_lines_and_its_rows_with_their_headings():
    lines = [" ".join(line.split()) for line in text_of(INVOICE).splitlines() if line.strip()]
    assert lines == [
        "Order #: 4471", "Placed: March 3, 2025", "Payment due: April 2, 2025",  # each label with its value
        "Harbour Bakery Ltd", "8 Quay Street", "Plymouth PL1 2AB", "Tilde Ovens GmbH", "Mara Voss", "mara@tilde.test",
        "- Delivery: Freight; Tracking: TR-88213",
        "- Article: Deck oven, two chambers; Amount: €9,800.00",  # a row styled as the heading starts a new table
        "- Article: Proofing cabinet; Amount: €2,150.00",
        "Total: €11,950.00",
    ]


def test_run_a_data_table_and_a_page_without_tables_pass_unchanged():
    page = ByteStream(data=DATA.encode(), meta={"file_path": "hours.html"})
    prose = ByteStream(data=b"<html><body><p>No tables here.</p></body></html>", meta={"file_path": "prose.html"})
    out = HTMLLayoutTables().run(sources=[page, prose])["sources"]
    assert [source.data for source in out] == [page.data, prose.data]
    assert [source.meta for source in out] == [{"file_path": "hours.html"}, {"file_path": "prose.html"}]


def test_run_a_page_keeps_its_declared_encoding():
    page = INVOICE.replace('charset="utf-8"', 'charset="windows-1252"').replace("&euro;", "€")
    assert "- Article: Proofing cabinet; Amount: €2,150.00" in text_of(page, "cp1252")


def test_index_pipeline_chunks_a_layout_page_with_each_label_by_its_value(tmp_path):
    spec = read_spec("index")["components"]["chunker"]["init_parameters"]["spec"]
    (tmp_path / "invoice.html").write_text(INVOICE, encoding="utf-8")
    chunks = build_pipeline(spec).run({"file_router": {"sources": [str(tmp_path / "invoice.html")]}})
    text = "\n".join(chunk.content for chunk in chunks["splitter"]["documents"])
    assert "Order #: 4471\nPlaced: March 3, 2025\nPayment due: April 2, 2025\n" in text
    assert "- Article: Deck oven, two chambers; Amount: €9,800.00" in text


def test_run_tables_nested_deeper_than_the_bound_are_read_with_work_linear_in_the_page(monkeypatch):
    # each nesting level copies what its tables hold once, so the bound keeps a hostile page's work linear
    from gatehouse.components.converters import html_layout

    written = []
    markup = html_layout._Table.markup
    monkeypatch.setattr(html_layout._Table, "markup", lambda table: written.append(markup(table)) or written[-1])
    depth = 400
    page = "<table><tr><td>cell<br>line" * depth + "</td></tr></table>" * depth
    text = html_layout.unwrap_layout_tables(page)
    assert "<table" not in text and text.count("cell") == text.count("line") == depth
    assert sum(len(out) for out in written) <= (html_layout.MAX_NESTING + 1) * len(text)
