"""What every chunk store that carries write counters must do alike (the embedded shard and PostgreSQL)."""

import pytest
from haystack import Document


def chunk(text: str, *, kb: str = "faq", tenant: str = "public", doc_id: str = "faq/a.md", vector=(1.0, 0.0, 0.0),
          title: str = "Keys") -> Document:
    """A chunk as the index writer stores it, with a 3-dimensional vector."""
    return Document(content=text, embedding=list(vector), meta={"kb": kb, "tenant": tenant, "doc_id": doc_id,
                                                                 "title": title})


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
