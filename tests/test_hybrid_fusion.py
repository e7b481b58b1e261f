import pytest
from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict

from gatehouse.components.joiners.hybrid_fusion import HybridFusion


def d(doc_id: str, score: float, **meta) -> Document:
    return Document(id=doc_id, content=f"content {doc_id}", score=score, meta=meta)


def dense_list() -> list[Document]:
    return [d("A", 0.9, dense_score=0.9, kb="faq"), d("B", 0.5, dense_score=0.5), d("C", 0.1, dense_score=0.1)]


def lexical_list() -> list[Document]:
    return [d("C", 10.0, bm25_score=10.0), d("A", 4.0, bm25_score=4.0, kb="faq"), d("D", 2.0, bm25_score=2.0)]


def test_init():
    fusion = HybridFusion(method="weighted_sum", weights={"dense": 2.0, "ngrams": 0.5}, rrf_k=10, top_k=3)
    assert fusion.method == "weighted_sum"
    assert fusion.weights == {"dense": 2.0, "ngrams": 0.5}
    assert (fusion.rrf_k, fusion.top_k) == (10, 3)
    assert set(fusion.__haystack_input__._sockets_dict) == {"dense", "ngrams", "top_k"}  # one input per list
    assert HybridFusion().weights == {"dense": 1.0, "lexical": 1.0}


def test_init_unknown_method():
    with pytest.raises(ValueError, match="Unknown fusion method 'max'"):
        HybridFusion(method="max")


def test_to_dict():
    assert component_to_dict(HybridFusion(rrf_k=30), "component") == {
        "type": "gatehouse.components.joiners.hybrid_fusion.HybridFusion",
        "init_parameters": {
            "method": "rrf",
            "weights": {"dense": 1.0, "lexical": 1.0},
            "rrf_k": 30,
            "top_k": 20,
            "normalization": "minmax",
            "group_by": None,
            "chunks_per_group": None,
        },
    }


def test_from_dict():
    original = HybridFusion(
        method="weighted_sum", weights={"dense": 1.0, "lexical": 0.5}, top_k=4, normalization="max",
        group_by="doc_id", chunks_per_group=2,
    )
    restored = component_from_dict(HybridFusion, component_to_dict(original, "component"), "component")
    assert restored.method == "weighted_sum" and restored.weights == {"dense": 1.0, "lexical": 0.5}
    assert restored.top_k == 4
    assert (restored.normalization, restored.group_by, restored.chunks_per_group) == ("max", "doc_id", 2)


def test_init_bad_parameters():
    with pytest.raises(ValueError, match="Unknown normalization 'l2'"):
        HybridFusion(normalization="l2")
    with pytest.raises(ValueError, match="weights must name at least one list"):
        HybridFusion(weights={})
    with pytest.raises(ValueError, match=r"Fusion list name\(s\) \['top_k', 'two words'\] cannot be inputs"):
        HybridFusion(weights={"top_k": 1.0, "two words": 1.0})
    with pytest.raises(ValueError, match="chunks_per_group must be at least 1"):
        HybridFusion(group_by="doc_id", chunks_per_group=0)


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
    assert a["dense_rank"] == 1 and a["lexical_rank"] == 2 and a["kb"] == "faq"
    assert docs["C"].meta["dense_rank"] == 3 and docs["C"].meta["lexical_rank"] == 1
    assert "bm25_score" not in b and "lexical_rank" not in b
    assert "dense_score" not in d_only and "dense_rank" not in d_only and d_only["lexical_rank"] == 3


def test_run_inputs_not_mutated():
    dense = dense_list()
    HybridFusion().run(dense=dense, lexical=lexical_list())
    assert dense[0].score == 0.9 and "bm25_score" not in dense[0].meta and "dense_rank" not in dense[0].meta


def test_run_top_k_and_empty():
    fusion = HybridFusion(top_k=2)
    assert len(fusion.run(dense=dense_list(), lexical=lexical_list())["documents"]) == 2
    assert len(fusion.run(dense=dense_list(), lexical=lexical_list(), top_k=3)["documents"]) == 3
    assert fusion.run(dense=dense_list(), lexical=lexical_list(), top_k=0)["documents"] == []  # 0 is not the default
    assert fusion.run()["documents"] == []
    assert fusion.run(dense=[], lexical=[])["documents"] == []
    only_lex = fusion.run(lexical=lexical_list())["documents"]
    assert [doc.id for doc in only_lex] == ["C", "A"]


def test_run_weighted_sum_max_normalization_hand_computed():
    fusion = HybridFusion(method="weighted_sum", normalization="max", weights={"dense": 0.6, "lexical": 0.4})
    docs = fusion.run(dense=dense_list(), lexical=lexical_list())["documents"]
    # max-normalised: dense A=1, B=5/9, C=1/9 (floor 1/9); lexical C=1, A=0.4, D=0.2 (floor 0.2)
    expected = {
        "A": 0.6 * 1 + 0.4 * 0.4,
        "C": 0.6 / 9 + 0.4 * 1,
        "B": 0.6 * 5 / 9 + 0.4 * 0.2,
        "D": 0.6 / 9 + 0.4 * 0.2,
    }
    assert [doc.id for doc in docs] == ["A", "C", "B", "D"]
    for doc in docs:
        assert doc.score == pytest.approx(expected[doc.id])


def test_run_weighted_sum_zscore_normalization():
    fusion = HybridFusion(method="weighted_sum", normalization="zscore")
    docs = {doc.id: doc.score for doc in fusion.run(dense=dense_list(), lexical=lexical_list())["documents"]}
    dense_sd = (((0.9 - 0.5) ** 2 + 0 + (0.1 - 0.5) ** 2) / 3) ** 0.5  # mean 0.5
    lex_mean = 16 / 3
    lex_sd = (((10 - lex_mean) ** 2 + (4 - lex_mean) ** 2 + (2 - lex_mean) ** 2) / 3) ** 0.5
    assert docs["A"] == pytest.approx(0.4 / dense_sd + (4 - lex_mean) / lex_sd)
    assert docs["B"] == pytest.approx(0.0 + (2 - lex_mean) / lex_sd)  # absent from lexical: its lowest score


def chunk(chunk_id: str, score: float, document: str) -> Document:
    return Document(id=chunk_id, content=f"content {chunk_id}", score=score, meta={"doc_id": document})


def test_run_three_lists_weighted_sum_hand_computed():
    ngrams = [d("D", 6.0), d("B", 3.0)]
    fusion = HybridFusion(method="weighted_sum", normalization="max",
                          weights={"dense": 0.6, "lexical": 0.2, "ngrams": 0.2})
    docs = fusion.run(dense=dense_list(), lexical=lexical_list(), ngrams=ngrams)["documents"]
    # max-normalised: dense A 1, B 5/9, C 1/9; lexical C 1, A 0.4, D 0.2; ngrams D 1, B 0.5
    # a document missing from a list gets that list's lowest normalised value
    expected = {
        "A": 0.6 * 1 + 0.2 * 0.4 + 0.2 * 0.5,
        "B": 0.6 * 5 / 9 + 0.2 * 0.2 + 0.2 * 0.5,
        "C": 0.6 * 1 / 9 + 0.2 * 1 + 0.2 * 0.5,
        "D": 0.6 * 1 / 9 + 0.2 * 0.2 + 0.2 * 1,
    }
    assert [doc.id for doc in docs] == sorted(expected, key=lambda key: -expected[key])
    assert {doc.id: doc.score for doc in docs} == pytest.approx(expected)
    assert docs[-1].meta["ngrams_rank"] == 1 and "ngrams_rank" not in docs[0].meta
    assert fusion.run(dense=dense_list())["documents"][0].id == "A"  # unconnected lists count as empty


def chunked() -> tuple[list[Document], list[Document]]:
    dense = [chunk("a1", 0.9, "A"), chunk("b1", 0.8, "B"), chunk("a2", 0.7, "A"), chunk("c1", 0.2, "C")]
    lexical = [chunk("b2", 9.0, "B"), chunk("a2", 6.0, "A"), chunk("c1", 3.0, "C")]
    return dense, lexical


def test_run_group_by_fuses_documents_not_chunks():
    dense, lexical = chunked()
    per_chunk = HybridFusion(top_k=10).run(dense=dense, lexical=lexical)["documents"]
    assert [doc.id for doc in per_chunk][:2] == ["a2", "c1"]  # per chunk, only a2 and c1 are in both lists
    grouped = HybridFusion(group_by="doc_id", top_k=10).run(dense=dense, lexical=lexical)["documents"]
    # per document: dense ranks A, B, C; lexical ranks B, A, C -> A and B tie at 1/61 + 1/62; A was seen first.
    # Within a document, chunks by their own RRF: a2 (1/63 + 1/62) before a1 (1/61), b2 (1/61) before b1 (1/62)
    assert [doc.id for doc in grouped] == ["a2", "a1", "b2", "b1", "c1"]
    assert grouped[0].score == pytest.approx(1 / 61 + 1 / 62) and grouped[1].score == grouped[0].score
    assert grouped[4].score == pytest.approx(2 / 63)
    assert grouped[0].meta["dense_rank"] == 3 and grouped[0].meta["lexical_rank"] == 2


def test_run_group_by_top_k_counts_documents_and_chunks_per_group():
    dense, lexical = chunked()
    two_docs = HybridFusion(group_by="doc_id", top_k=2).run(dense=dense, lexical=lexical)["documents"]
    assert [doc.id for doc in two_docs] == ["a2", "a1", "b2", "b1"]
    best = HybridFusion(group_by="doc_id", chunks_per_group=1, top_k=5).run(dense=dense, lexical=lexical)
    assert [doc.id for doc in best["documents"]] == ["a2", "b2", "c1"]  # each document's best chunk
    no_key = HybridFusion(group_by="doc_id").run(dense=[d("x", 0.5)], lexical=[d("x", 2.0)])["documents"]
    assert [doc.id for doc in no_key] == ["x"]  # a chunk without the key is its own group
