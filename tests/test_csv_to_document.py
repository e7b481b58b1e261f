"""CSVToDocument: CSV files to markdown rows that keep their column headers, in a child process."""

import pytest
from haystack.core.serialization import component_from_dict, component_to_dict
from haystack.dataclasses import ByteStream

from gatehouse.components.converters.csv_to_document import CSVToDocument


def upload(data: bytes, name: str = "people.csv") -> ByteStream:
    return ByteStream(data=data, meta={"file_name": name})


def test_init():
    converter = CSVToDocument(timeout_s=3, max_chars=10, max_memory_mb=200)
    assert (converter.timeout_s, converter.max_chars, converter.max_memory_mb) == (3, 10, 200)
    assert not hasattr(converter, "max_expanded_mb")
    with pytest.raises(ValueError, match="must be positive"):
        CSVToDocument(max_chars=0)


def test_to_dict():
    assert component_to_dict(CSVToDocument(), "csv_converter") == {
        "type": "gatehouse.components.converters.csv_to_document.CSVToDocument",
        "init_parameters": {"timeout_s": 60.0, "max_chars": 2_000_000, "max_memory_mb": 1024, "timeout_base_s": 15.0, "timeout_s_per_mb": 20.0},
    }


def test_from_dict():
    data = component_to_dict(CSVToDocument(max_memory_mb=300), "csv_converter")
    assert component_from_dict(CSVToDocument, data, "csv_converter").max_memory_mb == 300


@pytest.mark.parametrize("data", [
    "name,team,desk\nAda,Data,4B\n\"Lin, Jr.\",Ops,2A\n".encode(),
    "name;team;desk\r\nAda;Data;4B\r\nLin, Jr.;Ops;2A\r\n".encode("cp1252"),
    "name\tteam\tdesk\nAda\tData\t4B\nLin, Jr.\tOps\t2A\n".encode("utf-16"),
])
def test_run_each_row_keeps_its_column_headers_whatever_the_delimiter_and_encoding(data):
    document = CSVToDocument().run(sources=[upload(data)], meta={"kb": "office"})["documents"][0]
    assert document.content == "- name: Ada; team: Data; desk: 4B\n- name: Lin, Jr.; team: Ops; desk: 2A"
    assert document.meta == {"file_name": "people.csv", "kb": "office", "mime_type": "text/markdown", "title": "people"}


def test_run_a_title_row_above_the_header_is_the_caption():
    data = b"Staff list for March\n\nname,team,desk\nAda,Data,4B\n"
    document = CSVToDocument().run(sources=[upload(data)])["documents"][0]
    assert document.content == "Staff list for March:\n- name: Ada; team: Data; desk: 4B"


def test_run_a_corrupt_file_fails_in_one_line_naming_it():
    row = "a," + "x" * 200_000 + "\n"  # one field over the csv module's field limit
    with pytest.raises(ValueError, match=r"^huge.csv: not a readable CSV file \(Error: field larger than field limit"):
        CSVToDocument().run(sources=[upload(("h1,h2\n" + row).encode(), "huge.csv")])


def test_run_rows_over_max_chars_fail_naming_the_limit():
    data = ("id,comment\n" + "".join(f"{i},row number {i}\n" for i in range(1000))).encode()
    with pytest.raises(ValueError, match=r"^people.csv: the CSV file expands to over 5000 characters of text "
                                         r"\(csv_converter.max_chars in index.yml\)$"):
        CSVToDocument(max_chars=5000).run(sources=[upload(data)])
