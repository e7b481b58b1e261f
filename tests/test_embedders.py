import sqlite3

import numpy as np
import pytest
from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict

from gatehouse.components.embedders.document_embedder import DocumentEmbedder, embedded_text
from gatehouse.components.embedders.embedding import EmbeddingBackend
from gatehouse.components.embedders.text_embedder import TextEmbedder
from gatehouse.components.embedders.vector import Vector


@pytest.fixture(scope="module")
def text_embedder() -> TextEmbedder:
    e = TextEmbedder()
    e.warm_up()
    return e


def cosine(a, b) -> float:
    return float(np.dot(np.asarray(a), np.asarray(b)))


def test_init():
    t = TextEmbedder(model="m", cache_dir=None, prefix="query: ")
    assert (t.model, t.cache_dir, t.prefix) == ("m", None, "query: ")
    assert TextEmbedder().cache_dir == "off"
    d = DocumentEmbedder(cache_dir="off", meta_fields_to_embed=["title"], embedding_separator=" | ", batch_size=4)
    assert (d.cache_dir, d.meta_fields_to_embed, d.embedding_separator, d.batch_size) == ("off", ["title"], " | ", 4)
    assert DocumentEmbedder().meta_fields_to_embed == [] and DocumentEmbedder().cache_dir is None


def test_to_dict():
    assert component_to_dict(TextEmbedder(prefix="q: "), "component") == {
        "type": "gatehouse.components.embedders.text_embedder.TextEmbedder",
        "init_parameters": {"model": None, "cache_dir": "off", "prefix": "q: "},
    }
    assert component_to_dict(DocumentEmbedder(meta_fields_to_embed=["title"]), "component") == {
        "type": "gatehouse.components.embedders.document_embedder.DocumentEmbedder",
        "init_parameters": {
            "model": None,
            "cache_dir": None,
            "meta_fields_to_embed": ["title"],
            "embedding_separator": "\n",
            "batch_size": 32,
            "progress_bar": False,
        },
    }


def test_from_dict():
    t = component_from_dict(
        TextEmbedder, component_to_dict(TextEmbedder(prefix="q: ", cache_dir="/tmp/x"), "component"), "component"
    )
    assert (t.prefix, t.cache_dir) == ("q: ", "/tmp/x")
    d = component_from_dict(DocumentEmbedder, component_to_dict(DocumentEmbedder(meta_fields_to_embed=["section"], batch_size=8), "component"), "component")
    assert (d.meta_fields_to_embed, d.batch_size) == (["section"], 8)


def test_run_text_embedder_dimension_and_norm(text_embedder):
    emb = text_embedder.run(text="How do I rotate an API key?")["embedding"]
    assert isinstance(emb, Vector) and len(emb) == 384 and isinstance(list(emb)[0], float)
    assert np.linalg.norm(emb) == pytest.approx(1.0, abs=1e-4)
    near = text_embedder.run(text="Rotating API keys")["embedding"]
    far = text_embedder.run(text="Chocolate cake recipe with strawberries")["embedding"]
    assert cosine(emb, near) > cosine(emb, far) + 0.2


def test_run_text_embedder_unicode_and_empty(text_embedder):
    assert len(text_embedder.run(text="Schlüssel drehen ✓ 鍵")["embedding"]) == 384
    assert len(text_embedder.run(text="")["embedding"]) == 384


def test_run_text_embedder_prefix_changes_vector(text_embedder):
    prefixed = TextEmbedder(prefix="query: ")
    a = text_embedder.run(text="api key")["embedding"]
    b = prefixed.run(text="api key")["embedding"]
    assert not np.allclose(a, b)


def test_run_text_embedder_type_error(text_embedder):
    with pytest.raises(TypeError, match="DocumentEmbedder"):
        text_embedder.run(text=["a list"])
    with pytest.raises(TypeError):
        text_embedder.run(text=Document(content="doc"))


def test_run_document_embedder_matches_text_embedder(text_embedder):
    docs = [Document(content="Rotate API keys every 90 days.", meta={"title": "API keys"}), Document(content="")]
    out = DocumentEmbedder(cache_dir="off").run(documents=docs)["documents"]
    assert [len(d.embedding) for d in out] == [384, 384]
    assert np.linalg.norm(out[0].embedding) == pytest.approx(1.0, abs=1e-4)
    assert np.allclose(out[0].embedding, text_embedder.run(text=docs[0].content)["embedding"], atol=1e-5)
    assert docs[0].embedding is None  # inputs are copied, not changed
    assert out[0].meta == docs[0].meta and out[0].id == docs[0].id


def test_run_meta_fields_change_vector():
    doc = Document(content="Click Rotate next to the key.", meta={"title": "Billing invoices", "section": None})
    plain = DocumentEmbedder(cache_dir="off").run(documents=[doc])["documents"][0].embedding
    with_title = DocumentEmbedder(cache_dir="off", meta_fields_to_embed=["title", "section"]).run(documents=[doc])
    vec = with_title["documents"][0].embedding
    assert not np.allclose(plain, vec)
    expected = TextEmbedder().run(text="Billing invoices\nClick Rotate next to the key.")["embedding"]
    assert np.allclose(vec, expected, atol=1e-5)  # missing/None fields are left out


def test_run_cache_dir_reuse(tmp_path):
    cache = tmp_path / "cache"
    docs = [Document(content=f"Cached chunk number {i} about keys.") for i in range(3)]
    embedder = DocumentEmbedder(cache_dir=str(cache))
    first = embedder.run(documents=docs)["documents"]
    backend = EmbeddingBackend.get(cache_dir=str(cache))
    assert embedder._backend is backend  # noqa: SLF001
    assert (cache / "embeddings.sqlite").is_file()
    before = backend.encoded_count
    assert before == 3  # a fresh cache: the first run encoded every chunk
    second = DocumentEmbedder(cache_dir=str(cache)).run(documents=docs)["documents"]
    assert backend.encoded_count == before  # every vector came from the cache
    assert all(np.allclose(a.embedding, b.embedding) for a, b in zip(first, second))
    DocumentEmbedder(cache_dir=str(cache)).run(documents=[*docs, Document(content="A new one.")])
    assert backend.encoded_count == before + 1


def test_run_a_text_just_encoded_is_not_encoded_again_whatever_the_cache(tmp_path):
    """Retrieval embeds a question with the cache off, the gates after it with the cache on: one encoding."""
    uncached, cached = EmbeddingBackend.get(cache_dir="off"), EmbeddingBackend.get(cache_dir=str(tmp_path / "cache"))
    question = f"How often are the rules of {tmp_path.name} evaluated?"
    before = uncached.encoded_count + cached.encoded_count
    first = TextEmbedder().run(text=question)["embedding"]
    assert uncached.encoded_count + cached.encoded_count == before + 1
    again = cached.embed([question])[0]
    assert uncached.encoded_count + cached.encoded_count == before + 1 and np.allclose(first, again)


def test_run_text_embedder_answers_when_the_cache_folder_turned_read_only(tmp_path, caplog):
    cache = tmp_path / "cache"
    embedder = TextEmbedder(cache_dir=str(cache))
    expected = embedder.run(text="How do I rotate an API key?")["embedding"]
    backend = EmbeddingBackend.get(cache_dir=str(cache))
    # what the open cache meets once its folder is read-only: SQLite's own "attempt to write a readonly database"
    backend.cache._conn = sqlite3.connect(f"file:{cache / 'embeddings.sqlite'}?mode=ro", uri=True,  # noqa: SLF001
                                          check_same_thread=False)
    vector = embedder.run(text="How do I revoke an API key?")["embedding"]  # not cached: its vector cannot be stored
    assert len(vector) == len(expected) and embedder.run(text="How do I rotate an API key?")["embedding"] == expected
    assert "embeddings not cached: the data directory" in caplog.text and "is read-only" in caplog.text


def test_run_document_embedder_empty_and_type_errors():
    embedder = DocumentEmbedder(cache_dir="off")
    assert embedder.run(documents=[])["documents"] == []
    with pytest.raises(TypeError, match="TextEmbedder"):
        embedder.run(documents="a query")
    with pytest.raises(TypeError):
        embedder.run(documents=[Document(content="ok"), "not a doc"])


def test_run_a_table_row_is_embedded_by_its_cells_with_words():
    rows = Document(content="Players:\n- Name: Avery Johnson; GP: 43; PTS: 1.6\n- GP: 12; PTS: 3")
    vector = DocumentEmbedder(cache_dir="off").run(documents=[rows])["documents"][0].embedding
    assert embedded_text(rows, []) == "Players:\nName: Avery Johnson"  # figures are BM25's to match
    assert np.allclose(vector, TextEmbedder().run(text="Players:\nName: Avery Johnson")["embedding"], atol=1e-5)


def test_embedded_text_a_chunk_of_many_rows_embeds_its_first_rows_words_and_every_other_line():
    rows = "\n".join(f"- Name: Person {n} Smith; Team: Data" for n in range(40))
    text = embedded_text(Document(content=f"Staff list:\n{rows}\nUpdated in May."), [])
    assert text.startswith("Staff list:\nName: Person 0 Smith; Team: Data") and text.endswith("Updated in May.")
    assert len(text.split()) == 2 + 64 + 3  # the rows' words stop at 64: each row has a vector of its own
