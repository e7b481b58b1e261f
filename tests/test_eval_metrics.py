"""gatehouse.eval.metrics against values worked out by hand on the records of tests/eval_records.py."""

import math

import pytest
from eval_records import records

from gatehouse.eval.metrics import (
    aggregate,
    answer_quality,
    citation_problems,
    clean_answer,
    route_label,
    scalars,
    score_records,
    sentence_support,
    supported_sentences,
    summarize,
    summarize_repeats,
)


@pytest.fixture(scope="module")
def scored():
    return {record["id"]: record for record in score_records(records())}


@pytest.fixture(scope="module")
def handmade(scored):
    return aggregate(list(scored.values()))["handmade"]


def test_clean_answer_drops_citation_markers():
    assert clean_answer("Keys expire. [S1]  They rotate [S2, S3].") == "Keys expire. They rotate."


def test_ragas_metrics_per_case(scored):
    q1 = scored["q1"]["metrics"]
    # retrieved source ids {api-keys, billing} (api-keys twice), gold {api-keys, security}
    assert q1["id_based_context_precision"] == pytest.approx(1 / 2)  # 1 of 2 distinct retrieved ids is gold
    assert q1["id_based_context_recall"] == pytest.approx(1 / 2)  # 1 of 2 gold ids retrieved
    assert q1["non_llm_context_recall"] == pytest.approx(1.0)  # the gold passage was retrieved verbatim
    assert q1["exact_match"] == 0.0
    q3 = scored["q3"]["metrics"]
    assert q3["id_based_context_recall"] == 0.0  # nothing retrieved recalls nothing
    assert q3["non_llm_context_recall"] == 0.0
    assert "id_based_context_precision" not in q3  # precision of nothing retrieved does not apply
    # unanswerable cases without gold answer, sources or contexts: no Ragas metric applies
    assert scored["q2"]["metrics"] == {} and scored["q4"]["metrics"] == {}
    assert all(not record["metric_errors"] for record in scored.values())


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        # identical once the marker is removed
        ("the cat sat [S1]", {"exact_match": 1.0, "rouge_score": 1.0, "non_llm_string_similarity": 1.0}),
        # LCS 3 words: P = 3/4, R = 3/3, F = 2PR/(P+R) = 6/7; Levenshtein distance 5 over 16 chars -> 11/16
        ("the cat sat down", {"exact_match": 0.0, "rouge_score": 6 / 7, "non_llm_string_similarity": 11 / 16}),
    ],
)
def test_answer_metrics_by_hand(answer, expected):
    record = {
        "set": "s",
        "id": "x",
        "question": "q",
        "gold": {"answer": "the cat sat", "sources": [], "contexts": [], "answerable": True},
        "response": {"answer": answer},
        "retrieved": [],
    }
    metrics = score_records([record])[0]["metrics"]
    assert set(metrics) == {"rouge_score", "bleu_score", "chrf_score", "non_llm_string_similarity", "exact_match"}
    for name, value in expected.items():
        assert metrics[name] == pytest.approx(value)


def test_ragas_aggregates_count_not_applicable(handmade):
    ragas = handmade["ragas"]
    recall = ragas["id_based_context_recall"]
    assert (recall["mean"], recall["n"], recall["nan"], recall["not_applicable"]) == (0.25, 2, 0, 2)  # (0.5 + 0) / 2
    precision = ragas["id_based_context_precision"]
    assert (precision["mean"], precision["n"], precision["not_applicable"]) == (0.5, 1, 3)
    assert ragas["non_llm_context_recall"]["mean"] == pytest.approx(0.5)  # (1 + 0) / 2
    assert (ragas["exact_match"]["mean"], ragas["exact_match"]["n"]) == (0.0, 2)


def test_intent_and_routing_accuracy_with_confusion_matrices(handmade):
    gatehouse = handmade["gatehouse"]
    # gold intents all factual; q3 was predicted out_of_scope -> 3 of 4
    assert gatehouse["intent_accuracy"]["mean"] == pytest.approx(3 / 4)
    assert gatehouse["intent_confusion"] == {"labels": ["factual", "out_of_scope"], "matrix": [[3, 1], [0, 0]]}
    # q1 retrieve:faq ok, q2 retrieve:ops ok, q3 gold retrieve:product -> refuse, q4 gold retrieve:faq ->
    # retrieve:faq+product: 2 of 4
    assert gatehouse["routing_accuracy"]["mean"] == pytest.approx(2 / 4)
    labels = ["refuse", "retrieve:faq", "retrieve:faq+product", "retrieve:ops", "retrieve:product"]
    assert gatehouse["routing_confusion"] == {
        "labels": labels,
        "matrix": [
            [0, 0, 0, 0, 0],  # gold refuse: none
            [0, 1, 1, 0, 0],  # gold retrieve:faq: q1 right, q4 to faq+product
            [0, 0, 0, 0, 0],
            [0, 0, 0, 1, 0],  # gold retrieve:ops: q2
            [1, 0, 0, 0, 0],  # gold retrieve:product: q3 refused
        ],
    }
    assert route_label("direct", None) == "direct" and route_label("retrieve", None) == "retrieve:(none)"


def test_request_refused_before_the_intent_gate():
    case = records()[2]  # gold: factual, retrieve:product
    case["response"]["metadata"].update(intent=None, route=None)  # the input guardrails refused it
    others = records()[:2]
    gatehouse = aggregate(others + [case])["handmade"]["gatehouse"]
    # never classified: not applicable for intent accuracy (q1, q2 right) ...
    assert (gatehouse["intent_accuracy"]["mean"], gatehouse["intent_accuracy"]["not_applicable"]) == (1.0, 1)
    # ... but refused is its routing decision: gold retrieve:product -> refuse
    assert gatehouse["routing_confusion"]["matrix"][0] == [0, 0, 0, 0]  # labels: refuse, faq, ops, product
    assert gatehouse["routing_confusion"]["matrix"][3] == [1, 0, 0, 0]


def test_abstention_precision_and_recall(handmade):
    # q1 answered/answerable TN, q2 fallback/unanswerable TP, q3 refused/answerable FP, q4 answered/unanswerable FN
    # false abstention rate: answerable questions abstained on, 1 of 2 (q3)
    assert handmade["gatehouse"]["abstention"] == {"precision": 0.5, "recall": 0.5, "false_abstention_rate": 0.5,
                                                   "tp": 1, "fp": 1, "fn": 1, "tn": 1}


def test_answer_quality_first_sentence_and_length():
    def record(answer, gold, *, status="success", answerable=True):
        return {"response": {"answer": answer, "status": status, "metadata": {}},
                "gold": {"answer": gold, "answerable": answerable}}

    quality = answer_quality([
        record("Keys expire after 90 days. [S1] Rotate them in Settings. [S1]", "90 days"),   # hit
        record("Rotate keys in Settings. [S1] They expire after 90 days. [S1]", "90 days"),  # second sentence: miss
        record("I couldn't locate it.", "2019", status="fallback"),                          # abstained: miss
        record("The Platinum plan does not exist. [S2]", None, answerable=False),             # not counted for hits
    ])
    assert quality["first_sentence_hit"] == pytest.approx(1 / 3)
    assert quality["answered"] == pytest.approx(2 / 3)
    assert (quality["n"], quality["answered_n"]) == (3, 3)
    assert quality["words_p50"] == 9  # of the three answered responses (9, 9 and 6 words), markers excluded


def test_invented_citations(scored, handmade):
    assert citation_problems(scored["q1"]) == []
    assert citation_problems(scored["q4"]) == [
        "citation S1 cites product/roadmap.md, which was not retrieved",
        "marker [S3] has no citation",
    ]
    invented = handmade["gatehouse"]["invented_citation_share"]
    # citing answers: q1 (clean) and q4 (invented) -> 1 of 2; q2 and q3 cite nothing
    assert (invented["mean"], invented["n"], invented["not_applicable"]) == (0.5, 2, 2)
    assert list(handmade["gatehouse"]["invented_citations"]) == ["q4"]


def test_supported_sentences(scored, handmade):
    assert sentence_support(scored["q1"]) == (1, 2)  # "Rotate them in Settings." is unsupported
    assert sentence_support(scored["q4"]) == (1, 1)
    assert sentence_support(scored["q2"]) is None
    support = handmade["gatehouse"]["supported_sentence_share"]
    assert support["mean"] == pytest.approx((1 / 2 + 1) / 2)
    assert support["sd"] == pytest.approx(math.sqrt(((0.5 - 0.75) ** 2 + (1 - 0.75) ** 2) / 1))
    assert (support["supported"], support["claims"], support["micro"]) == (2, 3, pytest.approx(2 / 3))


def test_supported_sentences_count_reattributed_citations(handmade):
    assert (handmade["gatehouse"]["supported_sentence_share"]["reattributed"],
            handmade["gatehouse"]["supported_sentence_share"]["micro_as_cited"]) == (0, pytest.approx(2 / 3))
    record = {"response": {"answer": "Keys expire after 90 days. [S2] Rotate them in Settings. [S1]", "validation": {
        "guardrail_actions": ["reattributed_citation:S1->S2:Keys expire after 90 days."], "unsupported_sentences": []}}}
    support = supported_sentences([record])
    assert (support["supported"], support["claims"], support["reattributed"]) == (2, 2, 1)
    assert (support["micro"], support["micro_as_cited"]) == (1.0, 0.5)


def test_unsupported_sentence_of_a_replaced_answer_still_counts():
    record = {"response": {"answer": "I could not find this.", "validation": {"unsupported_sentences": ["Made up."]}}}
    assert sentence_support(record) == (0, 1)


def test_retries_guardrails_statuses(handmade):
    gatehouse = handmade["gatehouse"]
    assert gatehouse["retries"] == {"0": 1, "1": 1, "2": 1, "3": 1}
    assert gatehouse["guardrail_actions"] == {"redacted_pii": 1, "removed_invalid_citation": 1}
    assert gatehouse["status_counts"] == {"fallback": 1, "refused": 1, "success": 2}


def test_latency_percentiles(handmade):
    latency = handmade["gatehouse"]["latency_ms"]
    # intent [10, 20, 30, 40]: P50 = 25; P95 at rank 0.95 * 3 = 2.85 -> 30 + 0.85 * 10 = 38.5
    assert (latency["intent"]["p50"], latency["intent"]["p95"]) == (pytest.approx(25.0), pytest.approx(38.5))
    # retrieval [100, 200, 300] (q3 did not retrieve): P50 = 200; P95 at rank 1.9 -> 200 + 0.9 * 100 = 290
    assert (latency["retrieval"]["p50"], latency["retrieval"]["p95"], latency["retrieval"]["n"]) == (
        pytest.approx(200.0),
        pytest.approx(290.0),
        3,
    )
    # total [50, 200, 400, 600]: P50 = 300; P95 = 400 + 0.85 * 200 = 570
    assert (latency["total"]["p50"], latency["total"]["p95"]) == (pytest.approx(300.0), pytest.approx(570.0))
    assert list(latency)[-1] == "total"


def test_scalars_flatten_the_headline(handmade):
    values = scalars(handmade)
    assert values["intent_accuracy"] == pytest.approx(0.75)
    assert values["abstention_precision"] == 0.5
    assert values["mean_attempts"] == pytest.approx((1 + 2 + 3) / 3)  # over the cases that retrieved
    assert values["latency_p95_ms.total"] == pytest.approx(570.0)
    assert values["nan_share.id_based_context_recall"] == 0.0


def test_summarize_never_turns_nan_into_zero():
    stats = summarize([0.5, None, float("nan"), 1.0], not_applicable=3)
    assert (stats["mean"], stats["n"], stats["nan"], stats["not_applicable"]) == (0.75, 2, 2, 3)
    assert stats["values"] == [0.5, 1.0]
    empty = summarize([None, None])
    assert (empty["mean"], empty["sd"], empty["n"], empty["nan"]) == (None, None, 0, 2)


def test_summarize_repeats_counts_failed_judgements():
    # case a: [0.8, None, 0.6] -> 0.7; case b: [None, None, None] -> no value; case c: [0.2, 0.4, 0.3] -> 0.3
    stats = summarize_repeats([[0.8, None, 0.6], [None, None, None], [0.2, 0.4, 0.3]], not_applicable=1)
    assert stats["mean"] == pytest.approx((0.7 + 0.3) / 2)
    assert (stats["n"], stats["nan"], stats["nan_cases"], stats["calls"], stats["not_applicable"]) == (2, 4, 1, 9, 1)
    # repeat means: r0 (0.8 + 0.2) / 2 = 0.5, r1 0.4 (only c), r2 (0.6 + 0.3) / 2 = 0.45
    assert stats["repeat_means"] == [pytest.approx(0.5), pytest.approx(0.4), pytest.approx(0.45)]
    assert stats["sd"] == pytest.approx(0.05)  # sample sd of 0.5, 0.4, 0.45
    assert stats["values"] == [pytest.approx(0.7), pytest.approx(0.3)]


def test_failing_ragas_metric_is_a_counted_nan():
    from ragas.metrics._rouge_score import RougeScore

    broken = RougeScore(rouge_type="rougeZ")  # a real Ragas metric that raises when scoring
    rescored = score_records(records(), metrics={"rouge_score": broken})
    by_id = {record["id"]: record for record in rescored}
    for case in ("q1", "q3"):  # the answerable cases with a gold answer
        assert by_id[case]["metrics"]["rouge_score"] is None
        assert "Invalid rouge type: rougeZ" in by_id[case]["metric_errors"]["rouge_score"]
        assert by_id[case]["metrics"]["chrf_score"] is not None  # the other metrics still ran
    rouge = aggregate(rescored)["handmade"]["ragas"]["rouge_score"]
    assert (rouge["mean"], rouge["n"], rouge["nan"], rouge["not_applicable"]) == (None, 0, 2, 2)
    assert scalars(aggregate(rescored)["handmade"])["nan_share.rouge_score"] == 1.0


def test_judge_values_aggregate_per_metric():
    judged = records()
    judged[0]["judge"] = {"faithfulness": [1.0, 0.5, None]}
    judged[3]["judge"] = {"faithfulness": [None, None, None]}
    faithfulness = aggregate(judged)["handmade"]["judge"]["faithfulness"]
    assert (faithfulness["mean"], faithfulness["n"], faithfulness["nan"], faithfulness["nan_cases"]) == (0.75, 1, 4, 1)
    assert faithfulness["not_applicable"] == 2


def test_unknown_metric_override_is_rejected():
    with pytest.raises(ValueError, match="rouge_l"):
        score_records(records(), metrics={"rouge_l": object()})
