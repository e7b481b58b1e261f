"""
Serving latency benchmark: ask over REST (P50/P95 over N sequential calls) and time to first streamed token.

It prints the HTTP round trip next to the pipeline's own time (`metadata.latency_ms.total`) measured in the same
calls, so the serving overhead shows as a ratio rather than as an absolute number that depends on the machine.

Usage (against a running `gatehouse serve`):
```
python -m gatehouse.serving.bench --url http://127.0.0.1:1416 --calls 50 [--key KEY]
```
"""

import argparse
import time

import httpx
from openai import OpenAI

from gatehouse.stats import percentile

QUESTIONS = [
    "How do I rotate an API key?",
    "What does error CGW-2003 mean?",
    "How much does the Business plan cost?",
    "How do I back up the gateway database?",
    "Can I get a refund if I cancel mid-month?",
]


def run(url: str, calls: int, streams: int, key: str | None) -> dict[str, float]:
    """Measure; returns the figures in milliseconds."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    http_ms, pipeline_ms = [], []
    with httpx.Client(base_url=url, headers=headers, timeout=120) as client:
        client.post("/ask/run", json={"query": QUESTIONS[0]}).raise_for_status()  # warm-up, not counted
        for index in range(calls):
            started = time.perf_counter()
            response = client.post("/ask/run", json={"query": QUESTIONS[index % len(QUESTIONS)]})
            http_ms.append((time.perf_counter() - started) * 1000)
            response.raise_for_status()
            pipeline_ms.append(response.json()["result"]["metadata"]["latency_ms"]["total"])
    chat = OpenAI(base_url=f"{url}/v1", api_key=key or "none")
    first_ms, total_ms = [], []
    for index in range(streams):
        started = time.perf_counter()
        first = None
        for chunk in chat.chat.completions.create(
            model="ask", stream=True, messages=[{"role": "user", "content": QUESTIONS[index % len(QUESTIONS)]}]
        ):
            if first is None and chunk.choices and chunk.choices[0].delta.content:
                first = (time.perf_counter() - started) * 1000
        total_ms.append((time.perf_counter() - started) * 1000)
        first_ms.append(first or total_ms[-1])
    return {
        "ask_http_p50": percentile(http_ms, 0.5),
        "ask_http_p95": percentile(http_ms, 0.95),
        "ask_pipeline_p50": percentile(pipeline_ms, 0.5),
        "stream_ttft_p50": percentile(first_ms, 0.5),
        "stream_total_p50": percentile(total_ms, 0.5),
    }


def main() -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:1416")
    parser.add_argument("--calls", type=int, default=50, help="sequential ask calls over REST")
    parser.add_argument("--streams", type=int, default=10, help="streamed chat completions for time to first token")
    parser.add_argument("--key", help="bearer key, when the server has keys")
    args = parser.parse_args()
    figures = run(args.url, args.calls, args.streams, args.key)
    print(f"ask over REST, {args.calls} sequential calls: P50 {figures['ask_http_p50']:.1f} ms, "
          f"P95 {figures['ask_http_p95']:.1f} ms")
    print(f"  pipeline time inside those calls: P50 {figures['ask_pipeline_p50']:.1f} ms "
          f"(HTTP/serving overhead x{figures['ask_http_p50'] / figures['ask_pipeline_p50']:.2f})")
    print(f"streamed chat, {args.streams} calls: time to first token P50 {figures['stream_ttft_p50']:.1f} ms, "
          f"whole stream P50 {figures['stream_total_p50']:.1f} ms")


if __name__ == "__main__":
    main()
