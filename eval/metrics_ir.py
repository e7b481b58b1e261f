"""
Ranking metrics for retrieval benchmarks: nDCG@k, recall@k and MRR@k over document ids, as BEIR reports them.

- **nDCG@k**: DCG with the judged grade as gain and `log2(rank + 1)` discount, divided by the ideal DCG of the
  query's judgments (trec_eval's `ndcg_cut`, which BEIR uses).
- **recall@k**: relevant documents (grade > 0) among the first k, divided by the query's relevant documents.
- **MRR@k**: 1 / rank of the first relevant document among the first k, 0 when none.

A ranking that names a document twice counts it at its first rank only. A query is scored when its judgments
hold at least one relevant document; a judged query with no ranking (nothing retrieved) scores 0.

Usage:
```python
from gatehouse.eval.metrics_ir import evaluate_run

qrels = {"q1": {"d1": 1, "d7": 2}}
run = {"q1": ["d7", "d3", "d1"]}
evaluate_run(run, qrels)   # {"ndcg@10": ..., "recall@100": 1.0, "mrr@10": 1.0, "queries": 1}
```
"""

import math
from collections.abc import Mapping, Sequence


def _unique(ranking: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(ranking))


def _relevant(judgments: Mapping[str, int]) -> set[str]:
    return {doc for doc, grade in judgments.items() if grade > 0}


def ndcg_at_k(ranking: Sequence[str], judgments: Mapping[str, int], k: int) -> float:
    """
    Normalised discounted cumulative gain of one ranking.

    :param ranking: Document ids, best first.
    :param judgments: Document id to graded relevance (0 = not relevant).
    :param k: Cut-off.
    :returns: nDCG@k in [0, 1]; 0 when no judged document is relevant.
    """
    if k <= 0:
        raise ValueError(f"k must be positive, got {k}.")
    dcg = sum(max(judgments.get(doc, 0), 0) / math.log2(rank + 2) for rank, doc in enumerate(_unique(ranking)[:k]))
    ideal = sorted((grade for grade in judgments.values() if grade > 0), reverse=True)[:k]
    idcg = sum(grade / math.log2(rank + 2) for rank, grade in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def recall_at_k(ranking: Sequence[str], judgments: Mapping[str, int], k: int) -> float:
    """
    Share of the relevant documents found among the first k.

    :param ranking: Document ids, best first.
    :param judgments: Document id to graded relevance.
    :param k: Cut-off.
    :returns: Recall@k in [0, 1]; 0 when no judged document is relevant.
    """
    if k <= 0:
        raise ValueError(f"k must be positive, got {k}.")
    relevant = _relevant(judgments)
    if not relevant:
        return 0.0
    return len(relevant.intersection(_unique(ranking)[:k])) / len(relevant)


def mrr_at_k(ranking: Sequence[str], judgments: Mapping[str, int], k: int) -> float:
    """
    Reciprocal rank of the first relevant document among the first k.

    :param ranking: Document ids, best first.
    :param judgments: Document id to graded relevance.
    :param k: Cut-off.
    :returns: 1/rank, or 0 when no relevant document is in the first k.
    """
    if k <= 0:
        raise ValueError(f"k must be positive, got {k}.")
    relevant = _relevant(judgments)
    for rank, doc in enumerate(_unique(ranking)[:k], start=1):
        if doc in relevant:
            return 1.0 / rank
    return 0.0


def per_query(
    run: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]], ndcg_k: int = 10,
    recall_k: int = 100, mrr_k: int = 10,
) -> dict[str, dict[str, float]]:
    """
    Each scored query's metrics.

    :param run: Query id to ranked document ids.
    :param qrels: Query id to judgments (document id to grade).
    :param ndcg_k: nDCG cut-off.
    :param recall_k: Recall cut-off.
    :param mrr_k: MRR cut-off.
    :returns: Query id to `{"ndcg@<k>", "recall@<k>", "mrr@<k>"}`, for the queries with a relevant document.
    """
    scores: dict[str, dict[str, float]] = {}
    for query_id, judgments in qrels.items():
        if not _relevant(judgments):
            continue
        ranking = run.get(query_id, [])
        scores[query_id] = {
            f"ndcg@{ndcg_k}": ndcg_at_k(ranking, judgments, ndcg_k),
            f"recall@{recall_k}": recall_at_k(ranking, judgments, recall_k),
            f"mrr@{mrr_k}": mrr_at_k(ranking, judgments, mrr_k),
        }
    return scores


def evaluate_run(
    run: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]], ndcg_k: int = 10,
    recall_k: int = 100, mrr_k: int = 10,
) -> dict[str, float]:
    """
    Mean metrics of a run over the judged queries.

    :param run: Query id to ranked document ids.
    :param qrels: Query id to judgments.
    :param ndcg_k: nDCG cut-off.
    :param recall_k: Recall cut-off.
    :param mrr_k: MRR cut-off.
    :returns: `{"ndcg@<k>", "recall@<k>", "mrr@<k>": mean, "queries": number scored}`.
    :raises ValueError: If no judged query has a relevant document.
    """
    scores = per_query(run, qrels, ndcg_k=ndcg_k, recall_k=recall_k, mrr_k=mrr_k)
    if not scores:
        raise ValueError("No query in the judgments has a relevant document: nothing to score.")
    names = next(iter(scores.values())).keys()
    means: dict[str, float] = {name: sum(s[name] for s in scores.values()) / len(scores) for name in names}
    means["queries"] = len(scores)
    return means
