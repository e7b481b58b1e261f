"""Haystack filters on the embedded engine give what Haystack's own filter semantics give."""

import pytest
from haystack import Document
from haystack.utils.filters import document_matches_filter

from gatehouse.document_stores.edge_document_store import EdgeDocumentStore
from gatehouse.document_stores.edge_filters import FilterError, edge_filter

DOCS = [
    Document(content="a", embedding=[1.0, 0.0], meta={"kb": "faq", "tenant": "public", "year": 2020}),
    Document(content="b", embedding=[1.0, 0.0], meta={"kb": "ops", "tenant": "public", "year": 2024}),
    Document(content="c", embedding=[1.0, 0.0], meta={"kb": "faq", "tenant": "acme"}),
]
FILTERS = [
    {"field": "meta.kb", "operator": "==", "value": "faq"},
    {"field": "meta.kb", "operator": "!=", "value": "faq"},
    {"field": "meta.year", "operator": "==", "value": None},
    {"field": "meta.year", "operator": ">=", "value": 2021},
    {"field": "meta.year", "operator": "<", "value": 2021},
    {"field": "meta.tenant", "operator": "in", "value": ["acme", "initech"]},
    {"field": "meta.tenant", "operator": "not in", "value": ["acme"]},
    {"operator": "OR", "conditions": [{"field": "meta.kb", "operator": "==", "value": "ops"},
                                      {"field": "meta.tenant", "operator": "==", "value": "acme"}]},
    {"operator": "NOT", "conditions": [{"field": "meta.kb", "operator": "==", "value": "faq"},
                                       {"field": "meta.tenant", "operator": "==", "value": "public"}]},
]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    opened = EdgeDocumentStore(path=str(tmp_path_factory.mktemp("filters") / "store"), embedding_dim=2)
    opened.write_documents(DOCS)
    yield opened
    opened.close()


@pytest.mark.parametrize("filters", FILTERS)
def test_run_matches_haystack_semantics(store, filters):
    expected = sorted(d.content for d in DOCS if document_matches_filter(filters, d))
    assert sorted(d.content for d in store.filter_documents(filters)) == expected


@pytest.mark.parametrize(("filters", "message"), [
    ({"field": "meta.kb", "operator": "like", "value": "f%"}, "Unknown comparison operator 'like'"),
    ({"operator": "XOR", "conditions": []}, "Unknown logical operator 'XOR'"),
    ({"field": "meta.kb", "operator": "in", "value": "faq"}, "need a list"),
    ({"field": "meta.year", "operator": ">", "value": "2020"}, "needs a number"),
    ({"field": "meta.kb"}, "Not a Haystack filter"),
])
def test_run_refuses_what_it_cannot_express(filters, message):
    with pytest.raises(FilterError, match=message):
        edge_filter(filters)


def test_init_none_is_no_filter():
    assert edge_filter(None) is None and edge_filter({}) is None
