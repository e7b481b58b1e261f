import numpy as np
import pytest
from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict

from gatehouse.components.embedders.embedding import EmbeddingBackend
from gatehouse.components.rankers.sentence_scorer import SentenceScorer
from gatehouse.components.sentences import SENTENCE_PATTERN, sentence_settings, sentence_texts

QUERY = "Vitamin D supplements increase bone density."
MATCH = "Daily vitamin D supplementation increased bone mineral density."


def chunks() -> tuple[list[Document], list[Document]]:
    long = Document(
        id="a",
        content="The cohort was recruited in 2004 from twelve clinics. Follow-up visits took place every six months. "
        + MATCH,
        meta={"title": "A randomised trial", "doc_id": "A", "dense_score": 0.3},
    )
    other = Document(
        id="b", content="Statins lower LDL cholesterol in adults.", meta={"title": "Statins", "doc_id": "B"}
    )
    return [long], [replace_meta(long, bm25_score=7.0), other]


def replace_meta(doc: Document, **meta) -> Document:
    return Document(id=doc.id, content=doc.content, meta={k: v for k, v in doc.meta.items() if k != "dense_score"} | meta)


def query_vector() -> list[float]:
    return EmbeddingBackend.get(cache_dir="off").embed([QUERY])[0].tolist()


def test_init():
    scorer = SentenceScorer(sentences={"context_fields": [], "min_words": 3}, include_chunk=False,
                            chunk_fields=["title"], cache_dir="off")
    assert scorer.sentences == {"pattern": SENTENCE_PATTERN, "context_fields": [], "min_words": 3}
    assert scorer.chunk_fields == ["title"] and scorer.cache_dir == "off" and not scorer.include_chunk
    default = SentenceScorer()
    assert default.sentences["context_fields"] == ["title"] and default.chunk_fields == ["title", "section"]
    assert default.include_chunk
    with pytest.raises(ValueError, match="min_words must be at least 1"):
        SentenceScorer(sentences={"min_words": 0})
    with pytest.raises(ValueError, match="does not compile"):
        SentenceScorer(sentences={"pattern": "(unclosed"})
    with pytest.raises(ValueError, match=r"Unknown sentence setting\(s\) \['context'\]"):
        SentenceScorer(sentences={"context": ["title"]})


def test_to_dict():
    assert component_to_dict(SentenceScorer(cache_dir="off"), "component") == {
        "type": "gatehouse.components.rankers.sentence_scorer.SentenceScorer",
        "init_parameters": {
            "model": None,
            "cache_dir": "off",
            "sentences": {"pattern": SENTENCE_PATTERN, "context_fields": ["title"], "min_words": 1},
            "include_chunk": True,
            "chunk_fields": ["title", "section"],
            "batch_size": 64,
        },
    }


def test_from_dict():
    original = SentenceScorer(sentences={"min_words": 2, "context_fields": ["section"]}, include_chunk=False)
    assert component_to_dict(component_from_dict(SentenceScorer, component_to_dict(original, "component"), "component"), "component") == component_to_dict(original, "component")


def test_sentence_texts_split_context_and_min_words():
    doc = Document(content="First claim holds. (Second) one too! 3 of 4 agreed? ok.", meta={"title": "T", "section": None})
    assert sentence_texts(doc, sentence_settings({"context_fields": ["title", "section"]})) == [
        "T\nFirst claim holds.", "T\n(Second) one too!", "T\n3 of 4 agreed? ok."]
    assert sentence_texts(doc, sentence_settings({"context_fields": [], "min_words": 4})) == ["3 of 4 agreed? ok."]
    assert sentence_texts(Document(content="e.g. this stays whole."), sentence_settings(None)) == [
        "e.g. this stays whole."]


def test_run_best_sentence_ranks_a_long_chunk_first():
    dense, lexical = chunks()
    vector = query_vector()
    docs = SentenceScorer(cache_dir="off").run(query_embedding=vector, candidates=[dense, lexical])["documents"]
    assert [d.id for d in docs] == ["a", "b"]  # a is in both lists but comes out once
    backend = EmbeddingBackend.get(cache_dir="off")
    best = float(backend.embed([f"A randomised trial\n{MATCH}"])[0] @ np.asarray(vector, np.float32))
    assert docs[0].score == pytest.approx(best, abs=1e-5) and docs[0].meta["sentence_score"] == pytest.approx(best, abs=1e-5)
    assert docs[0].meta["dense_score"] == 0.3 and docs[0].meta["bm25_score"] == 7.0  # both retrievers' meta kept
    whole = float(backend.embed([f"A randomised trial\n{dense[0].content}"])[0] @ np.asarray(vector, np.float32))
    assert best > whole  # the sentence matches better than the whole chunk's vector


def test_run_include_chunk_takes_the_higher_of_chunk_and_sentences():
    doc = Document(id="c", content="Bone density. Vitamin D.", meta={"title": "Vitamin D supplements and bone density"})
    vector = query_vector()
    with_chunk = SentenceScorer(cache_dir="off").run(query_embedding=vector, candidates=[[doc]])["documents"][0]
    sentences_only = SentenceScorer(cache_dir="off", include_chunk=False).run(query_embedding=vector, candidates=[[doc]])
    assert with_chunk.score >= sentences_only["documents"][0].score
    assert with_chunk.meta["sentence_score"] == pytest.approx(sentences_only["documents"][0].score, abs=1e-6)


def test_run_empty():
    assert SentenceScorer(cache_dir="off").run(query_embedding=[0.0] * 384, candidates=[])["documents"] == []
    empty = Document(id="e", content="", meta={})
    out = SentenceScorer(cache_dir="off", include_chunk=False).run(query_embedding=query_vector(), candidates=[[empty]])
    assert out["documents"] == []  # nothing to score: left out
