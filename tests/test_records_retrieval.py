"""
Records found by any value in them: a knowledge base of a short customer CSV, a long staff CSV, nested JSON orders,
a JSON order with camelCase keys and a handbook that talks about companies and work, ingested through index.yml and searched through retrieve.yml
(real MiniLM, Qdrant and BM25). A name, an ID or a code finds its row first, however long its file.
"""

import json

import pytest

from gatehouse.ask import run_ask
from gatehouse.components.retrievers.retrieval_pipeline import RetrievalPipeline
from gatehouse.ingest import ingest, path_groups
from gatehouse.pipelines import load_pipeline

FIRST = ["Amara", "Bruno", "Chiara", "Dmitri", "Elif", "Farid", "Greta", "Hugo", "Ines", "Jonas", "Keiko", "Lars",
         "Maelle", "Nikos", "Oona", "Pavel", "Quentin", "Rosa", "Sven", "Talia"]
LAST = ["Abbott", "Brennan", "Castillo", "Dufresne", "Eriksen", "Fontaine", "Gallo", "Haddad", "Ivanova", "Jensen",
        "Kowalski", "Lindqvist", "Moreau", "Novak", "Okafor", "Petrov", "Quinn", "Rossi", "Sato", "Tanaka"]
DEPARTMENTS = ["Finance", "Logistics", "Customer care", "Research", "Facilities", "Legal", "Sales"]


def staff_csv() -> bytes:
    lines = ["Employee ID,First Name,Last Name,Department,Office,Email,Start Date"]
    for number in range(160):
        first, last = FIRST[number % 20], LAST[(number * 7 + number // 20) % 20]
        lines.append(f"E{1000 + number},{first},{last},{DEPARTMENTS[number % 7]},Floor {number % 9 + 1},"
                     f"{first.lower()}.{last.lower()}@staff.example,2019-{number % 12 + 1:02d}-{number % 27 + 1:02d}")
    return ("\n".join(lines) + "\n").encode()


FILES = {
    "customers.csv": b"Index,Customer Id,First Name,Last Name,Company,City,Country,Phone 1,Email\n"
                     b"1,DD41Cf93aecB7Ab,Sheryl,Baxter,Rasmussen Group,East Leonard,Chile,229.077.5154,"
                     b"zuniga@example.info\n"
                     b"2,1Ef7b82A4CAAD10,Preston,Lozano,Vega-Gentry,East Jimmychester,Djibouti,5153435776,"
                     b"vmata@example.com\n"
                     b"3,6F94879bDAfE5a6,Roy,Berry,Murillo-Perry,Isabelborough,Antigua,(496)978-3969,"
                     b"becky@example.com\n"
                     b"4,5Cef8BFA16c5e3c,Linda,Olsen,\"Dominguez, Mcmillan and Donovan\",Bensonview,Peru,"
                     b"001-808-617-6467,stanley@example.org\n"
                     b"5,053d585Ab6b3159,Joanna,Bender,\"Martin, Lang and Andrade\",West Priscilla,Slovakia,"
                     b"001-234-203-0635,colin@example.net\n",
    "staff.csv": staff_csv(),
    "orders.json": json.dumps({"orders": [
        {"order": f"SO-{4400 + n}", "customer": f"{FIRST[n]} {LAST[n]}", "status": "shipped" if n % 3 else "open",
         "lines": [{"sku": f"KT-{n:03d}-{k}", "item": ["kettle", "lamp", "chair"][k], "qty": k + n % 4 + 1}
                   for k in range(3)]} for n in range(20)]}).encode(),
    "shipment.json": json.dumps({"orderId": "ORD-77120", "orderDate": "2024-03-18",
                                 "customer": {"fullName": "Mirela Oprea", "emailAddress": "mirela@example.org"},
                                 "shipAddress": {"street": "14 Linden Walk", "city": "Cluj-Napoca",
                                                 "postalCode": "400117", "countryCode": "RO"},
                                 "paymentMethod": "card", "totalAmount": 182.4}).encode(),
    "handbook.md": b"# Working here\n\n## Companies we work with\n\nOur company works with partner companies in "
                   b"many countries. Every customer company is assigned an account manager who works for the "
                   b"customer for at least a year.\n\n## Who works where\n\nStaff work from the office floors listed "
                   b"in the directory; ask the facilities team which floor a person works on.\n",
}


@pytest.fixture(scope="module")
def search(tmp_path_factory):
    folder = tmp_path_factory.mktemp("records")
    for name, data in FILES.items():
        (folder / name).write_bytes(data)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GATEHOUSE_DATA_DIR", str(tmp_path_factory.mktemp("records-data")))
        summary = ingest(path_groups([str(folder)], kb="records", tenant=None), progress=False)
        assert not summary.failed
        retrieval = RetrievalPipeline(pipeline_file="retrieve")
        retrieval.warm_up()
        ask = load_pipeline("ask")
        ask.warm_up()
        yield lambda query: retrieval.run(query=query, tenant=None, kbs=["records"])["documents"], ask


@pytest.mark.parametrize(("query", "source", "row"), [
    ("Sheryl Baxter", "customers.csv", "First Name: Sheryl; Last Name: Baxter; Company: Rasmussen Group"),
    ("Which company does Sheryl Baxter work for?", "customers.csv", "First Name: Sheryl; Last Name: Baxter"),
    ("6F94879bDAfE5a6", "customers.csv", "Customer Id: 6F94879bDAfE5a6; First Name: Roy"),
    ("Which department is Quentin Okafor in?", "staff.csv", "E1056; First Name: Quentin; Last Name: Okafor; Department:"),
    ("E1137", "staff.csv", "Employee ID: E1137; First Name: Rosa; Last Name: Fontaine"),
    ("Which order holds KT-017-2?", "orders.json", "sku: KT-017-2"),
], ids=["name", "question-about-a-name", "customer-id", "name-deep-in-a-long-file", "employee-id", "nested-sku"])
def test_a_record_is_found_first_by_a_value_in_it(search, query, source, row):
    find, _ = search
    first = find(query)[0]
    assert (first.meta["source"], row in first.content) == (source, True), [d.content[:200] for d in find(query)[:3]]
    assert "fields[" not in first.content and "lines[" not in first.content  # records, not key paths


def test_a_question_about_a_person_is_answered_with_their_row(search):
    _, ask = search
    response = run_ask(ask, "Which company does Sheryl Baxter work for?", kb="records")
    assert response["status"] in ("success", "partial"), response
    assert "Rasmussen Group" in response["answer"]
    assert response["citations"][0]["source"] == "customers.csv"


def test_a_person_s_row_answers_alone(search):
    _, ask = search
    response = run_ask(ask, "What is Roy Berry's phone number?", kb="records")
    assert response["status"] in ("success", "partial") and "(496)978-3969" in response["answer"], response
    assert "Roy" in response["answer"] and not any(name in response["answer"] for name in ("Linda", "Joanna"))


def test_a_camel_case_field_of_a_json_record_is_answered(search):
    _, ask = search
    response = run_ask(ask, "What is the postal code of the shipping address?", kb="records")
    assert response["status"] in ("success", "partial") and "400117" in response["answer"], response
    assert response["citations"][0]["source"] == "shipment.json"
