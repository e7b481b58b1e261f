"""
What every chunk store does alike: the parts of it every store passes (a dense-only one, a Qdrant collection,
included), and what the stores that carry write counters do besides (the embedded shard and PostgreSQL).
"""

import pytest
from haystack import Document
from haystack.document_stores.types import DuplicatePolicy


def chunk(text: str, *, kb: str = "faq", tenant: str = "public", doc_id: str = "faq/a.md", vector=(1.0, 0.0, 0.0),
          title: str = "Keys") -> Document:
    """A chunk as the index writer stores it, with a 3-dimensional vector."""
    return Document(content=text, embedding=list(vector), meta={"kb": kb, "tenant": tenant, "doc_id": doc_id,
                                                                 "title": title})


def check_write_search_and_delete(store) -> None:
    """
    Chunks written and overwritten, found by tenant, KB and document, searched by vector within the caller's tenants
    (another tenant's nearer chunk is not seen), deleted by id and by filter: what the index writer and the dense
    retriever ask of any store (`write_documents`, `filter_documents`, `embedding_retrieval`, `delete_documents`,
    `delete_by_filter`, `count_documents`).
    """
    acme = chunk("Acme rotates its keys monthly.", tenant="acme", doc_id="acme/keys.md")
    public = chunk("Rotate API keys from the console.", vector=(0.9, 0.1, 0.0))
    billing = chunk("Invoices are sent monthly.", kb="billing", doc_id="billing/invoices.md", vector=(0.0, 1.0, 0.0))
    assert store.write_documents([acme, public, billing], policy=DuplicatePolicy.OVERWRITE) == 3
    assert store.write_documents([public], policy=DuplicatePolicy.OVERWRITE) == 1
    assert store.count_documents() == 3
    readable = {"field": "meta.tenant", "operator": "in", "value": ["public"]}
    hits = store.embedding_retrieval([1.0, 0.0, 0.0], filters=readable, top_k=5)
    assert [d.content for d in hits] == [public.content, billing.content]
    assert hits[0].score > hits[1].score
    assert [d.id for d in store.embedding_retrieval([1.0, 0.0, 0.0], filters=readable, top_k=1)] == [public.id]
    in_kb = {"operator": "AND", "conditions": [readable, {"field": "meta.kb", "operator": "==", "value": "billing"}]}
    assert [d.content for d in store.filter_documents(filters=in_kb)] == [billing.content]
    of_doc = {"field": "meta.doc_id", "operator": "==", "value": "faq/a.md"}
    assert [(d.id, d.meta["tenant"]) for d in store.filter_documents(filters=of_doc)] == [(public.id, "public")]
    store.delete_documents([public.id])
    assert store.count_documents() == 2 and store.filter_documents(filters=of_doc) == []
    assert store.delete_by_filter({"field": "meta.kb", "operator": "==", "value": "billing"}) == 1
    assert [d.content for d in store.filter_documents()] == [acme.content]


def check_replace_delete_and_counters(store) -> None:
    """A replaced document's old chunks go, a delete empties its KB, and each write moves the KB's counter."""
    store.write_documents([chunk("Old one."), chunk("Old two.")])
    before = store.kb_generations()[("public", "faq")]
    assert store.replace_documents("faq/a.md", [chunk("New one.")]) == 2
    assert [d.content for d in store.filter_documents()] == ["New one."]
    after_replace = store.kb_generations()[("public", "faq")]
    assert after_replace > before
    assert store.delete_by_filter({"field": "meta.kb", "operator": "==", "value": "faq"}) == 1
    assert store.count_documents() == 0
    assert store.kb_generations()[("public", "faq")] > after_replace
    assert store.bm25_retrieval("new", top_k=5) == []
    with pytest.raises(ValueError, match="every chunk must have meta\\['doc_id'\\] == 'faq/b.md'"):
        store.replace_documents("faq/b.md", [chunk("Wrong document.")])
