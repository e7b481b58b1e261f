import pytest
from haystack import Document

from components.hybrid_fusion import HybridFusion


def d(doc_id: str, score: float, **meta) -> Document:
    return Document(id=doc_id, content=f"content {doc_id}", score=score, meta=meta)


def dense_list() -> list[Document]:
    return [d("A", 0.9, dense_score=0.9, kb="faq"), d("B", 0.5, dense_score=0.5), d("C", 0.1, dense_score=0.1)]


def lexical_list() -> list[Document]:
    return [d("C", 10.0, bm25_score=10.0), d("A", 4.0, bm25_score=4.0, kb="faq"), d("D", 2.0, bm25_score=2.0)]


def test_init():
    fusion = HybridFusion(method="weighted_sum", weights={"dense": 2.0}, rrf_k=10, top_k=3)
    assert fusion.method == "weighted_sum"
    assert fusion.weights == {"dense": 2.0, "lexical": 1.0}
    assert (fusion.rrf_k, fusion.top_k) == (10, 3)
    assert HybridFusion().weights == {"dense": 1.0, "lexical": 1.0}


def test_init_unknown_method():
    with pytest.raises(ValueError, match="Unknown fusion method 'max'"):
        HybridFusion(method="max")


def test_to_dict():
    assert HybridFusion(rrf_k=30).to_dict() == {
        "type": "components.hybrid_fusion.HybridFusion",
        "init_parameters": {"method": "rrf", "weights": {"dense": 1.0, "lexical": 1.0}, "rrf_k": 30, "top_k": 20},
    }


def test_from_dict():
    restored = HybridFusion.from_dict(HybridFusion(method="weighted_sum", weights={"lexical": 0.5}, top_k=4).to_dict())
    assert restored.method == "weighted_sum" and restored.weights == {"dense": 1.0, "lexical": 0.5}
    assert restored.top_k == 4


def test_run_rrf_hand_computed():
    out = HybridFusion(rrf_k=60).run(dense=dense_list(), lexical=lexical_list())["documents"]
    expected = {
        "A": 1 / 61 + 1 / 62,
        "C": 1 / 63 + 1 / 61,
        "B": 1 / 62,
        "D": 1 / 63,
    }
    assert [doc.id for doc in out] == ["A", "C", "B", "D"]
    for doc in out:
        assert doc.score == pytest.approx(expected[doc.id])


def test_run_rrf_weights_change_order():
    out = HybridFusion(weights={"dense": 0.1, "lexical": 1.0}).run(dense=dense_list(), lexical=lexical_list())
    docs = out["documents"]
    assert [doc.id for doc in docs] == ["C", "A", "D", "B"]
    assert docs[0].score == pytest.approx(0.1 / 63 + 1 / 61)


def test_run_weighted_sum():
    docs = HybridFusion(method="weighted_sum").run(dense=dense_list(), lexical=lexical_list())["documents"]
    # min-max: dense A=1, B=0.5, C=0; lexical C=1, A=0.25, D=0
    assert [(doc.id, round(doc.score, 6)) for doc in docs] == [("A", 1.25), ("C", 1.0), ("B", 0.5), ("D", 0.0)]
    single = HybridFusion(method="weighted_sum").run(dense=[d("X", 0.3)])["documents"]
    assert single[0].score == pytest.approx(1.0)  # one hit: no span, full weight


def test_run_meta_scores_and_ranks_merged():
    docs = {doc.id: doc for doc in HybridFusion().run(dense=dense_list(), lexical=lexical_list())["documents"]}
    a, b, d_only = docs["A"].meta, docs["B"].meta, docs["D"].meta
    assert a["dense_score"] == 0.9 and a["bm25_score"] == 4.0
    assert a["dense_rank"] == 1 and a["bm25_rank"] == 2 and a["kb"] == "faq"
    assert docs["C"].meta["dense_rank"] == 3 and docs["C"].meta["bm25_rank"] == 1
    assert "bm25_score" not in b and "bm25_rank" not in b
    assert "dense_score" not in d_only and "dense_rank" not in d_only and d_only["bm25_rank"] == 3


def test_run_inputs_not_mutated():
    dense = dense_list()
    HybridFusion().run(dense=dense, lexical=lexical_list())
    assert dense[0].score == 0.9 and "bm25_score" not in dense[0].meta and "dense_rank" not in dense[0].meta


def test_run_top_k_and_empty():
    fusion = HybridFusion(top_k=2)
    assert len(fusion.run(dense=dense_list(), lexical=lexical_list())["documents"]) == 2
    assert len(fusion.run(dense=dense_list(), lexical=lexical_list(), top_k=3)["documents"]) == 3
    assert fusion.run()["documents"] == []
    assert fusion.run(dense=[], lexical=[])["documents"] == []
    only_lex = fusion.run(lexical=lexical_list())["documents"]
    assert [doc.id for doc in only_lex] == ["C", "A"]
