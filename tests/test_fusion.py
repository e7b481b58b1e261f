import pytest

from gatehouse.components.joiners.fusion import Fusion

LISTS = {"dense": [("c1", "d1", 0.8), ("c2", "d2", 0.7), ("c3", "d1", 0.4)], "lexical": [("c2", "d2", 9.0), ("c4", "d3", 3.0)]}


def test_init_refuses_unknown_settings():
    with pytest.raises(ValueError, match="fusion method"):
        Fusion(method="sum", weights={"dense": 1.0})
    with pytest.raises(ValueError, match="normalization"):
        Fusion(method="weighted_sum", weights={"dense": 1.0}, normalization="l2")
    with pytest.raises(ValueError, match="at least one list"):
        Fusion(method="rrf", weights={})
    with pytest.raises(ValueError, match="chunks_per_group"):
        Fusion(method="rrf", weights={"dense": 1.0}, group=True, chunks_per_group=0)


def test_rank_rrf_per_chunk():
    ranked = Fusion(method="rrf", weights={"dense": 1.0, "lexical": 1.0}, rrf_k=60).rank(LISTS, top_k=3)
    assert [chunk for chunk, _ in ranked] == ["c2", "c1", "c4"]  # c2 is in both lists; c1 and c4 tie, c1 seen first
    assert ranked[0][1] == pytest.approx(1 / 62 + 1 / 61)


def test_rank_weighted_sum_gives_an_absent_key_the_lists_floor():
    ranked = dict(Fusion(method="weighted_sum", weights={"dense": 0.5, "lexical": 0.5}, normalization="max").rank(
        LISTS, top_k=10))
    assert ranked["c1"] == pytest.approx(0.5 * 1.0 + 0.5 * (3.0 / 9.0))  # lexical's lowest normalised score
    assert ranked["c2"] == pytest.approx(0.5 * 0.7 / 0.8 + 0.5 * 1.0)


def test_rank_weighted_sum_a_list_shorter_than_its_depth_gives_an_absent_key_nothing():
    # the lexical list holds every chunk that has the term (2 of a depth of 200): the others matched nothing
    ranked = dict(Fusion(method="weighted_sum", weights={"dense": 0.5, "lexical": 0.5}, normalization="max",
                         depth=200).rank(LISTS, top_k=10))
    assert ranked["c1"] == pytest.approx(0.5 * 1.0)
    assert ranked["c2"] == pytest.approx(0.5 * 0.7 / 0.8 + 0.5 * 1.0)
    cut = dict(Fusion(method="weighted_sum", weights={"dense": 0.5, "lexical": 0.5}, normalization="max",
                      depth=2).rank(LISTS, top_k=10))
    assert cut["c1"] == pytest.approx(0.5 * 1.0 + 0.5 * (3.0 / 9.0))  # a list cut at its depth: its floor
    with pytest.raises(ValueError, match="depth"):
        Fusion(method="rrf", weights={"dense": 1.0}, depth=0)


def test_rank_per_group_keeps_a_groups_best_chunks_with_its_score():
    fusion = Fusion(method="rrf", weights={"dense": 1.0, "lexical": 1.0}, group=True, chunks_per_group=1)
    ranked = fusion.rank(LISTS, top_k=2)
    assert [chunk for chunk, _ in ranked] == ["c2", "c1"]  # d2, then d1 by its best chunk only
    both = Fusion(method="rrf", weights={"dense": 1.0}, group=True).rank(LISTS, top_k=1)
    assert [chunk for chunk, _ in both] == ["c1", "c3"] and both[0][1] == both[1][1]  # d1's chunks share its score
