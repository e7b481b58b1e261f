"""
One folder with a file of every format Gatehouse reads (markdown, HTML, text, PDF, a PDF with a table, Word,
PowerPoint, Excel, CSV, JSON), ingested with one command through index.yml and asked one question each through
ask.yml (real MiniLM, Qdrant and BM25): each answer comes from its file and cites the unit it is in.
"""

import json

import pytest

from gatehouse.ask import run_ask
from gatehouse.ingest import ingest, path_groups
from gatehouse.pipelines import load_pipeline
from office_files import docx_file, pptx_file, prose_pdf, table_pdf, xlsx_file

FILES = {
    "parking.md": b"# Parking\n\n## Visitor parking\n\nVisitors park on level minus two; the barrier code is 4471.\n\n"
                  b"## Bicycles\n\nBicycles go in the locked shed by the east gate.\n",
    "garden.html": b"<html><head><title>Garden</title></head><body><h1>Garden</h1>"
                   b"<p>The rooftop garden opens at 7:30 every weekday morning.</p></body></html>",
    "wifi.txt": b"The guest wireless network password is lantern-seven-kites.\n",
    "safety.pdf": prose_pdf("Fire safety", "In a fire alarm, gather at the assembly point in the north car park."),
    "prices.pdf": table_pdf("Price list", "Prices are per month, billed yearly.",
                            [["Plan", "Monthly price", "Seats"], ["Solo", "$8", "10"], ["Studio", "$15", "50"]]),
    "travel.docx": docx_file([("title", "Travel policy"), ("h1", "Booking"), ("p", "Book trains two weeks ahead."),
                              ("h2", "Hotels"), ("p", "The nightly hotel cap in Lyon is 140 euros.")]),
    "roadmap.pptx": pptx_file([("Roadmap", [("Launch the mobile app in March", 0), ("Beta with 40 customers", 1)]),
                               ("Team", [("Mira leads design", 0)])]),
    "stock.xlsx": xlsx_file({"Inventory": [["Item", "Warehouse", "Count"], ["Blue kettle", "Lille", 37],
                                           ["Red lamp", "Porto", 12]]}),
    "desks.csv": b"name,team,desk\nAda,Data,4B\nLin,Ops,2A\n",
    "vendors.json": json.dumps({"vendors": [{"name": "Acme Paper", "terms": "net 30"},
                                            {"name": "Bolt Tools", "terms": "net 60"}]}).encode(),
}

# question, file, words the answer must hold, the cited unit (the section's id; "" when the format has none)
QUESTIONS = [
    ("What is the barrier code for visitor parking?", "parking.md", "4471", "visitor-parking"),
    ("What time does the rooftop garden open on weekdays?", "garden.html", "7:30", ""),
    ("What is the guest wireless network password?", "wifi.txt", "lantern-seven-kites", ""),
    ("Where is the fire assembly point?", "safety.pdf", "north car park", ""),
    ("What is the monthly price of the Studio plan?", "prices.pdf", "Plan: Studio; Monthly price: $15", ""),
    ("What is the nightly hotel cap in Lyon?", "travel.docx", "140 euros", "hotels"),
    ("When does the mobile app launch?", "roadmap.pptx", "March", "roadmap"),
    ("How many blue kettles are in the Lille warehouse?", "stock.xlsx",
     "Item: Blue kettle; Warehouse: Lille; Count: 37", "inventory"),
    ("Which desk does Ada sit at?", "desks.csv", "name: Ada; team: Data; desk: 4B", ""),
    ("What are the payment terms of Bolt Tools?", "vendors.json", "name: Bolt Tools; terms: net 60", "vendors"),
]


@pytest.fixture(scope="module")
def office(tmp_path_factory):
    folder = tmp_path_factory.mktemp("formats")
    for name, data in FILES.items():
        (folder / name).write_bytes(data)
    (folder / "broken.docx").write_bytes(b"PK\x03\x04 cut short")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GATEHOUSE_DATA_DIR", str(tmp_path_factory.mktemp("formats-data")))
        summary = ingest(path_groups([str(folder)], kb="office", tenant=None), progress=False)
        assert summary.failed == [{"source": "broken.docx", "reason": "docx_converter failed: broken.docx: not a "
                                   "readable Word file (BadZipFile: File is not a zip file)"}]
        assert sorted(item["source"] for item in summary.written) == sorted(FILES)
        pipeline = load_pipeline("ask")  # its stores open this module's data folder
        pipeline.warm_up()
        yield pipeline


@pytest.mark.parametrize(("question", "source", "words", "unit"), QUESTIONS, ids=[q[1] for q in QUESTIONS])
def test_each_format_answers_from_its_file_and_cites_its_unit(office, question, source, words, unit):
    response = run_ask(office, question, kb="office")
    assert response["status"] in ("success", "partial"), response
    assert words in response["answer"]
    first = response["citations"][0]
    assert (first["source"], first["url"]) == (source, f"kb://office/{source}" + (f"#{unit}" if unit else ""))
