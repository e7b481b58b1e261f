import pytest
from haystack import Document
from haystack.document_stores.errors import DuplicateDocumentError
from haystack.document_stores.types import DuplicatePolicy

from gatehouse.document_stores.bm25_document_store import Analyzer, BM25DocumentStore

KB_FAQ = {"field": "meta.kb", "operator": "==", "value": "faq"}


def docs() -> list[Document]:
    return [
        Document(id="a", content="Rotate API keys from the console every ninety days.", meta={"kb": "faq", "tenant": "public"}),
        Document(id="b", content="Billing invoices are sent monthly by email.", meta={"kb": "billing", "tenant": "public"}),
        Document(id="c", content="Single sign-on uses SAML with your identity provider.", meta={"kb": "faq", "tenant": "acme"}),
        Document(id="d", content="Keys keys keys: an API key rotation guide for keys.", meta={"kb": "docs", "tenant": "public"}),
    ]


@pytest.fixture
def store(tmp_path) -> BM25DocumentStore:
    s = BM25DocumentStore(path=str(tmp_path))
    s.write_documents(docs())
    return s


def test_init(tmp_path):
    s = BM25DocumentStore(path=str(tmp_path), index="idx", k1=1.5, b=0.5, stemmer=None, stopwords=["the"])
    assert (s.path, s.index, s.k1, s.b, s.stemmer, s.stopwords) == (str(tmp_path), "idx", 1.5, 0.5, None, ["the"])
    assert s.indexed_fields == ["meta.title", "meta.section", "content"]
    assert s.database_path == tmp_path / "idx.sqlite"
    assert s.count_documents() == 0


def test_init_bad_stemmer_raises(tmp_path):
    with pytest.raises(ValueError, match="Unknown stemmer 'klingon'"):
        BM25DocumentStore(path=str(tmp_path), stemmer="klingon")


def test_init_bad_stopwords_raises(tmp_path):
    with pytest.raises(ValueError, match="Unknown stopword list"):
        BM25DocumentStore(path=str(tmp_path), stopwords="xx")


def test_to_dict(tmp_path):
    data = BM25DocumentStore(path=str(tmp_path), index="i2", method="bm25+", indexed_fields=["content"]).to_dict()
    assert data["type"] == "gatehouse.document_stores.bm25_document_store.BM25DocumentStore"
    assert data["init_parameters"] == {
        "path": str(tmp_path),
        "index": "i2",
        "k1": 1.2,
        "b": 0.75,
        "method": "bm25+",
        "stemmer": "english",
        "stopwords": "en",
        "token_pattern": r"(?u)\b\w\w*\b",
        "indexed_fields": ["content"],
        "char_ngrams": None,
    }


def test_from_dict(tmp_path):
    original = BM25DocumentStore(path=str(tmp_path), index="i3", k1=0.9, stemmer=None)
    restored = BM25DocumentStore.from_dict(original.to_dict())
    assert isinstance(restored, BM25DocumentStore)
    assert restored.to_dict() == original.to_dict()


def test_run_write_count_filter(store):
    assert store.count_documents() == 4
    assert {d.id for d in store.filter_documents()} == {"a", "b", "c", "d"}
    assert {d.id for d in store.filter_documents(KB_FAQ)} == {"a", "c"}
    both = {"operator": "AND", "conditions": [KB_FAQ, {"field": "meta.tenant", "operator": "==", "value": "acme"}]}
    assert [d.id for d in store.filter_documents(both)] == ["c"]


def test_run_write_rejects_non_documents(store):
    with pytest.raises(ValueError, match="list of Documents"):
        store.write_documents(["not a document"])


def test_run_embedding_not_stored(tmp_path):
    s = BM25DocumentStore(path=str(tmp_path))
    s.write_documents([Document(id="e", content="vector here", embedding=[0.1, 0.2])])
    assert s.filter_documents()[0].embedding is None


def test_run_duplicate_policies(store):
    dup = Document(id="a", content="Replaced content about refunds.", meta={"kb": "faq"})
    with pytest.raises(DuplicateDocumentError):
        store.write_documents([dup])
    with pytest.raises(DuplicateDocumentError):
        store.write_documents([dup], policy=DuplicatePolicy.FAIL)
    # all or nothing: a new document in the same failing batch is not written
    with pytest.raises(DuplicateDocumentError):
        store.write_documents([Document(id="new", content="fresh"), dup])
    assert store.count_documents() == 4
    assert store.write_documents([dup], policy=DuplicatePolicy.SKIP) == 0
    assert next(d for d in store.filter_documents() if d.id == "a").content.startswith("Rotate")
    assert store.write_documents([dup], policy=DuplicatePolicy.OVERWRITE) == 1
    assert next(d for d in store.filter_documents() if d.id == "a").content == "Replaced content about refunds."
    assert store.count_documents() == 4


def test_run_delete(store):
    store.delete_documents(["a", "unknown"])
    assert store.count_documents() == 3
    assert "a" not in {d.id for d in store.filter_documents()}
    assert store.delete_by_filter(KB_FAQ) == 1
    assert {d.id for d in store.filter_documents()} == {"b", "d"}
    assert store.delete_by_filter(KB_FAQ) == 0
    assert store.bm25_retrieval("saml identity provider") == []


def test_run_bm25_ranking(store):
    hits = store.bm25_retrieval("API key")
    assert [d.id for d in hits][:2] == ["d", "a"]  # "d" repeats "key" the most
    assert all(h.score > 0 for h in hits)
    assert hits[0].score >= hits[1].score
    assert "b" not in {d.id for d in hits}  # no shared term: score 0 is left out


def test_run_bm25_filters_and_top_k(store):
    filtered = store.bm25_retrieval("API key", filters=KB_FAQ)
    assert [d.id for d in filtered] == ["a"]
    assert len(store.bm25_retrieval("API key", top_k=1)) == 1
    assert store.bm25_retrieval("API key", top_k=0) == []
    scaled = store.bm25_retrieval("API key", scale_score=True)
    assert all(0 < d.score < 1 for d in scaled)


def test_run_bm25_unknown_or_stopword_query(store):
    assert store.bm25_retrieval("zzzqqq") == []
    assert store.bm25_retrieval("the and of") == []
    assert store.bm25_retrieval("") == []


def test_run_bm25_empty_index(tmp_path):
    s = BM25DocumentStore(path=str(tmp_path))
    assert s.bm25_retrieval("anything") == []
    assert s.filter_documents() == []


def test_run_stemming(tmp_path):
    s = BM25DocumentStore(path=str(tmp_path / "stem"))
    s.write_documents([Document(id="x", content="How to rotate a credential.")])
    assert [d.id for d in s.bm25_retrieval("rotating")] == ["x"]
    plain = BM25DocumentStore(path=str(tmp_path / "plain"), stemmer=None)
    plain.write_documents([Document(id="x", content="How to rotate a credential.")])
    assert plain.bm25_retrieval("rotating") == []


def test_init_bad_char_ngrams_raises(tmp_path):
    with pytest.raises(ValueError, match="char_ngrams must be at least 2"):
        BM25DocumentStore(path=str(tmp_path), char_ngrams=1)


def test_run_char_ngrams_analysis():
    analyzer = Analyzer(r"(?u)\b\w\w*\b", "en", "english", char_ngrams=3)
    assert analyzer("The genes") == [" ge", "gen", "ene", "ne "]  # stopword dropped, stemmed, then n-grams
    assert Analyzer(r"(?u)\b\w\w*\b", None, None, char_ngrams=4)("a") == [" a "]  # shorter than n: kept whole


def test_run_char_ngrams_match_variants_and_share_the_file(tmp_path):
    words = BM25DocumentStore(path=str(tmp_path))
    words.write_documents([Document(id="t", content="TNFalpha signalling in macrophages."),
                           Document(id="o", content="Unrelated billing text.")])
    assert words.bm25_retrieval("TNF-alpha") == []  # whole terms: 'tnf' and 'alpha' never occur
    grams = BM25DocumentStore(path=str(tmp_path), char_ngrams=3)  # same SQLite file, its own in-memory analysis
    assert grams.count_documents() == 2
    assert [d.id for d in grams.bm25_retrieval("TNF-alpha")] == ["t"]


def test_run_unicode(tmp_path):
    s = BM25DocumentStore(path=str(tmp_path), stemmer=None)
    s.write_documents([Document(id="u", content="Schlüssel rotieren über die Konsole ✓", meta={"title": "Zürich"})])
    assert [d.id for d in s.bm25_retrieval("schlüssel")] == ["u"]
    assert [d.id for d in s.bm25_retrieval("zürich")] == ["u"]  # meta.title is indexed


def test_run_persistence_new_instance(store, tmp_path):
    other = BM25DocumentStore(path=str(tmp_path))
    assert other.count_documents() == 4
    assert [d.id for d in other.bm25_retrieval("saml")] == ["c"]


def test_run_generation_seen_by_loaded_instance(store, tmp_path):
    reader = BM25DocumentStore(path=str(tmp_path))
    assert reader.bm25_retrieval("refund") == []  # index loaded, nothing matches yet
    store.write_documents([Document(id="r", content="Refunds take fourteen days.")])
    assert [d.id for d in reader.bm25_retrieval("refund")] == ["r"]
    store.delete_documents(["r"])
    assert reader.bm25_retrieval("refund") == []
    assert reader.count_documents() == 4


def test_run_interleaved_writers_stay_consistent(store, tmp_path):
    other = BM25DocumentStore(path=str(tmp_path))
    other.write_documents([Document(id="o", content="Other writer adds a refund policy.")])
    # `store` was in sync before the other writer; its own next write must not hide the other's document
    store.write_documents([Document(id="s", content="Store adds a refund form.")])
    assert {d.id for d in store.bm25_retrieval("refund")} == {"o", "s"}
    assert {d.id for d in other.bm25_retrieval("refund")} == {"o", "s"}
    store.delete_documents(["o"])
    assert [d.id for d in other.bm25_retrieval("refund")] == ["s"]


def test_run_doc_id_filters_answered_from_the_index(tmp_path):
    s = BM25DocumentStore(path=str(tmp_path))
    chunks = [Document(id=f"{doc}-{i}", content=f"chunk {i} of {doc}", meta={"doc_id": doc})
              for doc in ("a.md", "b.md") for i in range(2)]
    s.write_documents(chunks)
    by_one = {"field": "meta.doc_id", "operator": "==", "value": "a.md"}
    by_many = {"field": "meta.doc_id", "operator": "in", "value": ["b.md", "missing.md"]}
    assert [d.id for d in s.filter_documents(by_one)] == ["a.md-0", "a.md-1"]
    assert [d.id for d in s.filter_documents(by_many)] == ["b.md-0", "b.md-1"]
    moved = Document(id="a.md-1", content="now part of b", meta={"doc_id": "b.md"})
    s.write_documents([moved], policy=DuplicatePolicy.OVERWRITE)
    s.delete_documents(["b.md-0"])
    assert [d.id for d in s.filter_documents(by_one)] == ["a.md-0"]
    assert [d.id for d in s.filter_documents(by_many)] == ["a.md-1", "b.md-1"]
    fresh = BM25DocumentStore(path=str(tmp_path))  # a reload from SQLite agrees with the in-memory index
    assert [d.id for d in fresh.filter_documents(by_many)] == ["a.md-1", "b.md-1"]
    assert s.filter_documents({"field": "meta.doc_id", "operator": "!=", "value": "a.md"})[0].id == "a.md-1"
