from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict

from gatehouse.components.embedders.embedding import EmbeddingBackend, EmbeddingCache
from gatehouse.components.embedders.sentence_embedder import SentenceEmbedder
from gatehouse.components.sentences import SENTENCE_PATTERN, sentence_settings, sentence_texts


def chunk() -> Document:
    return Document(id="k", content="Rotate keys monthly. Revoke leaked keys at once.", meta={"title": "API keys"})


def test_init():
    embedder = SentenceEmbedder(sentences={"context_fields": [], "min_words": 2}, batch_size=8, cache_dir="off")
    assert embedder.sentences == {"pattern": SENTENCE_PATTERN, "context_fields": [], "min_words": 2}
    assert (embedder.batch_size, embedder.cache_dir) == (8, "off")
    assert SentenceEmbedder().sentences["context_fields"] == ["title"]


def test_to_dict():
    assert component_to_dict(SentenceEmbedder(), "component") == {
        "type": "gatehouse.components.embedders.sentence_embedder.SentenceEmbedder",
        "init_parameters": {"model": None, "cache_dir": None, "batch_size": 32,
                            "sentences": {"pattern": SENTENCE_PATTERN, "context_fields": ["title"], "min_words": 1}},
    }


def test_from_dict():
    original = SentenceEmbedder(sentences={"min_words": 3, "context_fields": ["section"]})
    assert component_to_dict(
        component_from_dict(SentenceEmbedder, component_to_dict(original, "component"), "component"), "component"
    ) == component_to_dict(original, "component")


def test_run_gives_each_chunks_sentence_vectors():
    empty = Document(id="e", content="", meta={"title": "Nothing"})
    out = SentenceEmbedder(cache_dir="off").run(documents=[chunk(), empty])
    assert out["documents"] == [chunk(), empty]  # passed through unchanged
    assert list(out["sentence_embeddings"]) == ["k"]  # a chunk without a sentence has none
    texts = sentence_texts(chunk(), sentence_settings(None))
    expected = EmbeddingBackend.get(cache_dir="off").embed(texts)
    assert out["sentence_embeddings"]["k"].shape == (2, expected.shape[1])
    assert abs(out["sentence_embeddings"]["k"] - expected).max() < 1e-6


def test_run_fills_the_cache_so_a_reingest_encodes_nothing_again(tmp_path):
    cache = str(tmp_path / "cache")
    out = SentenceEmbedder(cache_dir=cache).run(documents=[chunk()])["documents"]
    assert out == [chunk()]
    backend = EmbeddingBackend.get(cache_dir=cache)
    hashes = [EmbeddingCache.key(text) for text in sentence_texts(chunk(), sentence_settings(None))]
    assert len(hashes) == 2 and set(backend.cache.get_many(backend.model_name, hashes)) == set(hashes)
    before = backend.encoded_count
    again = SentenceEmbedder(cache_dir=cache).run(documents=[chunk()])
    assert backend.encoded_count == before  # every sentence vector came from the cache
    assert [len(rows) for rows in again["sentence_embeddings"].values()] == [2]


def test_sentence_texts_each_table_row_is_a_sentence_of_its_cells_with_words():
    rows = Document(content="Customers:\n- Index: 1; First Name: Sheryl; Last Name: Baxter; Company: Rasmussen Group\n"
                            "- Index: 2; First Name: Preston; Last Name: Lozano; Company: Vega-Gentry\n"
                            "- Index: 3; Score: 7\nSource: the CRM export.", meta={"title": "customers"})
    assert sentence_texts(rows, sentence_settings(None)) == [
        "customers\nCustomers:",
        "customers\nFirst Name: Sheryl; Last Name: Baxter; Company: Rasmussen Group",
        "customers\nFirst Name: Preston; Last Name: Lozano; Company: Vega-Gentry",
        "customers\nSource: the CRM export.",  # a row of figures only has no sentence
    ]


def test_sentence_texts_a_long_row_is_named_by_its_first_words():
    notes = " ".join(f"word{n}" for n in range(60))
    row = Document(content=f"- Name: Ada Lovelace; Notes: {notes}\n- Name: Lin; Notes: short", meta={"title": "t"})
    first = sentence_texts(row, sentence_settings(None))[0]
    assert first.startswith("t\nName: Ada Lovelace; Notes: word0") and len(first.split()) == 1 + 24
