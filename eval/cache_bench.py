"""
Answer cache benchmark: the ask pipeline's run time on a cache miss, an exact hit and a paraphrase (semantic) hit,
in-process (no HTTP), and the ratio of a miss to a hit.

It loads `ask.yml` afresh (an empty cache) over `GATEHOUSE_DATA_DIR`, which must hold the sample knowledge bases
(`gatehouse ingest`). Each question is asked once (a miss, whose answer is stored), then `--repeats` times (exact
hits), then in its paraphrase (a semantic hit: the question is embedded and compared).

Usage:
```
python -m gatehouse.eval.cache_bench                  # 5 golden questions, 20 repeats each
python -m gatehouse.eval.cache_bench --repeats 50
```
"""

import argparse
import sys
import time
from typing import Any

from haystack import Pipeline

from gatehouse import runtime
from gatehouse.pipelines import load_pipeline
from gatehouse.stats import percentile

#: Golden-set questions and a paraphrase of each that the default similarity threshold accepts.
QUESTIONS = {
    "How do I rotate an API key without downtime?": "How can I rotate an API key with no downtime?",
    "How much does the Business plan cost?": "What does the Business plan cost?",
    "Which Prometheus metrics does the gateway expose?": "What Prometheus metrics does the gateway export?",
    "How long is the password reset link valid?": "For how long does the password reset link stay valid?",
    "When did vista-1 become generally available?": "When was vista-1 made generally available?",
}


def _timed(pipeline: Pipeline, question: str) -> tuple[float, dict[str, Any]]:
    """One ask: its wall time in ms and the response."""
    started = time.perf_counter()
    response = pipeline.run({"intake": {"query": question}})["response"]["response"]
    return (time.perf_counter() - started) * 1000.0, response


def bench(pipeline: Pipeline, questions: list[str], *, repeats: int = 20,
          paraphrases: dict[str, str] | None = None) -> dict[str, float]:
    """
    Time misses, exact hits and (with `paraphrases`) semantic hits of the ask pipeline's answer cache; print them.

    :param pipeline: A loaded ask pipeline whose cache has none of `questions` yet.
    :param questions: Questions whose answers are cached (status success).
    :param repeats: Exact hits timed per question.
    :param paraphrases: A paraphrase per question, asked once after its hits.
    :returns: `miss_p50_ms`, `hit_p50_ms`, `hit_p95_ms`, `semantic_p50_ms` (when paraphrases are given) and `ratio`
        (miss P50 / hit P50).
    :raises ValueError: When a first ask is not a stored miss or a repeat is not a hit (the figures would be wrong).
    """
    miss_ms, hit_ms, semantic_ms = [], [], []
    for question in questions:
        elapsed, response = _timed(pipeline, question)
        if (response["metadata"].get("cache") or {}).get("stored") is not True:
            raise ValueError(f"{question!r} was not a stored miss: {response['metadata'].get('cache')} "
                             f"(status {response['status']}); load the pipeline afresh and ask answerable questions.")
        miss_ms.append(elapsed)
        asked = [(question, hit_ms)] * repeats
        if paraphrases and question in paraphrases:
            asked.append((paraphrases[question], semantic_ms))
        for text, into in asked:
            elapsed, response = _timed(pipeline, text)
            if (response["metadata"].get("cache") or {}).get("status") != "hit":
                raise ValueError(f"{text!r} was not a cache hit: {response['metadata'].get('cache')}")
            into.append(elapsed)
    figures = {"miss_p50_ms": percentile(miss_ms, 0.5), "hit_p50_ms": percentile(hit_ms, 0.5),
               "hit_p95_ms": percentile(hit_ms, 0.95)}
    if semantic_ms:
        figures["semantic_p50_ms"] = percentile(semantic_ms, 0.5)
    figures["ratio"] = figures["miss_p50_ms"] / figures["hit_p50_ms"]
    lines = [
        f"ask pipeline, {len(miss_ms)} questions: miss P50 {figures['miss_p50_ms']:.1f} ms",
        f"  exact hit ({len(hit_ms)} runs): P50 {figures['hit_p50_ms']:.2f} ms, P95 {figures['hit_p95_ms']:.2f} ms",
    ]
    if semantic_ms:
        lines.append(f"  semantic hit ({len(semantic_ms)} paraphrases, one embedding each): "
                     f"P50 {figures['semantic_p50_ms']:.2f} ms")
    lines.append(f"  ratio miss / exact hit: {figures['ratio']:.0f}x")
    print("\n".join(lines), flush=True)
    return figures


def main() -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=20, help="exact hits timed per question")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    runtime.configure()
    pipeline = load_pipeline("ask")
    pipeline.warm_up()
    try:
        bench(pipeline, list(QUESTIONS), repeats=args.repeats, paraphrases=QUESTIONS)
    except ValueError as error:
        sys.exit(f"cache_bench: {error}")


if __name__ == "__main__":
    main()
