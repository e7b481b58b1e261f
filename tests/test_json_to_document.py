"""JSONToDocument: JSON files to markdown that keeps key paths, a list of objects as one section per record."""

import json

import pytest
from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict
from haystack.dataclasses import ByteStream

from gatehouse.components.converters.json_to_document import JSONToDocument
from gatehouse.components.preprocessors.section_splitter import SectionSplitter

VENDORS = {
    "version": 2,
    "vendors": [
        {"name": "Acme Paper", "contact": {"email": "orders@acme.test"}, "terms": "net 30"},
        {"id": 7, "name": "Bolt Tools", "terms": "net 60", "tags": ["tools", "hardware"], "active": True,
         "orders": [{"sku": "B-1", "qty": 3}]},
    ],
    "settings": {"currency": "EUR", "limits": {"monthly": 5000}},
}


def upload(value, name: str = "vendors.json") -> ByteStream:
    return ByteStream(data=json.dumps(value).encode(), meta={"file_name": name})


def test_init():
    converter = JSONToDocument(timeout_s=2)
    assert (converter.timeout_s, converter.max_chars, converter.max_memory_mb) == (2, 2_000_000, 1024)
    with pytest.raises(ValueError, match="must be positive"):
        JSONToDocument(timeout_s=-1)


def test_to_dict():
    assert component_to_dict(JSONToDocument(max_chars=5), "json_converter") == {
        "type": "gatehouse.components.converters.json_to_document.JSONToDocument",
        "init_parameters": {"timeout_s": 60.0, "max_chars": 5, "max_memory_mb": 1024, "timeout_base_s": 15.0, "timeout_s_per_mb": 20.0},
    }


def test_from_dict():
    data = component_to_dict(JSONToDocument(timeout_s=4), "json_converter")
    assert component_from_dict(JSONToDocument, data, "json_converter").timeout_s == 4


def test_run_each_record_is_a_section_and_each_value_keeps_its_key_path():
    document = JSONToDocument().run(sources=[upload(VENDORS)])["documents"][0]
    assert document.meta["mime_type"] == "text/markdown"
    chunks = SectionSplitter(min_words=1).run(documents=[Document(content=document.content, meta={
        **document.meta, "doc_id": "public/buying/vendors.json", "source": "vendors.json"})])["documents"]
    by_section = {chunk.meta["section"]: chunk.content for chunk in chunks}
    assert by_section == {
        None: "- version: 2",
        "vendors[0] Acme Paper": "- name: Acme Paper\n- contact.email: orders@acme.test\n- terms: net 30",
        "vendors[1] Bolt Tools": "- id: 7\n- name: Bolt Tools\n- terms: net 60\n- tags: tools, hardware\n"
                                 "- active: true\n\norders:\n- sku: B-1; qty: 3",  # a list of objects: a table
        "settings": "- currency: EUR\n- limits.monthly: 5000",
    }


def test_run_a_top_level_list_of_flat_records_is_a_table():
    document = JSONToDocument().run(sources=[upload([{"city": "Lyon", "cap": 140}, {"city": "Oslo"}])])["documents"][0]
    assert document.content.strip() == "- city: Lyon; cap: 140\n- city: Oslo"


def test_run_a_nested_list_of_objects_is_records_not_key_paths():
    layout = {"name": "tickets", "tables": [
        {"table": "ticket", "fields": [{"name": "id", "type": "int", "size": 4},
                                       {"name": "status_notes", "type": "text", "size": 126}]},
        {"table": "agent", "fields": [{"name": "email", "type": "text", "size": 80}]},
    ]}
    content = JSONToDocument().run(sources=[upload(layout, "layout.json")])["documents"][0].content
    assert "[2]" not in content and "fields[" not in content
    assert "## tables[0] ticket\n\n- table: ticket\n\nfields:\n- name: id; type: int; size: 4\n" \
           "- name: status_notes; type: text; size: 126" in content
    assert "## tables[1] agent\n\n- table: agent\n\nfields:\n- name: email; type: text; size: 80" in content


def test_run_a_corrupt_file_fails_in_one_line_naming_it():
    broken = ByteStream(data=b'{"vendors": [1, 2', meta={"file_name": "broken.json"})
    with pytest.raises(ValueError, match=r"^broken.json: not a readable JSON file \(JSONDecodeError: Expecting"):
        JSONToDocument().run(sources=[broken])


def test_run_text_over_max_chars_fails_naming_the_limit():
    with pytest.raises(ValueError, match=r"^vendors.json: the JSON file expands to over 20 characters of text "
                                         r"\(json_converter.max_chars in index.yml\)$"):
        JSONToDocument(max_chars=20).run(sources=[upload(VENDORS)])
