"""
The LLM judge (gatehouse.eval.judge) against a real HTTP peer: a tiny OpenAI chat-completions server on a loopback port that
answers the Ragas prompts with deterministic JSON (or with garbage, to prove that failed judgements are counted as
NaN). The wiring against a real local model (llama.cpp) is tested where such a model is installed.
"""

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gatehouse.eval.judge import GatehouseEmbeddings, JudgeConfig, count_tokens, judge_inputs, run_judge
from gatehouse.eval.metrics import judge_aggregates

QUESTION = "How long do API keys last?"
RELEVANT = "API keys expire after 90 days unless they are rotated earlier."
IRRELEVANT = "The Team plan costs 49 dollars per month."


def _input_of(prompt: str) -> dict:
    """The JSON input the Ragas prompt ends with ("input: {...}\nOutput: ")."""
    start = prompt.rindex("input: ") + len("input: ")
    return json.loads(prompt[start : prompt.rindex("Output:")].strip())


def deterministic_judge(prompt: str) -> str:
    """Answer a Ragas prompt by its output schema, deterministically."""
    if '"title": "StatementGeneratorOutput"' in prompt:
        return json.dumps({"statements": ["API keys expire after 90 days.", "API keys never expire."]})
    if '"title": "NLIStatementOutput"' in prompt:
        statements = _input_of(prompt)["statements"]
        # the first statement is supported, every other one is not: faithfulness 1/2 for two statements
        return json.dumps(
            {"statements": [{"statement": s, "reason": "r", "verdict": int(i == 0)} for i, s in enumerate(statements)]}
        )
    if '"title": "AnswerRelevanceOutput"' in prompt:
        return json.dumps({"question": QUESTION, "noncommittal": 0})
    if '"title": "ContextPrecisionOutput"' in prompt:
        return json.dumps({"reason": "r", "verdict": int("90 days" in _input_of(prompt)["context"])})
    return "unknown prompt"


def garbage_judge(prompt: str) -> str:
    """What a small local model often writes instead of the judge's JSON."""
    return "Sure! The answer looks faithful to me."


class JudgeServer:
    """An OpenAI-compatible chat-completions endpoint on 127.0.0.1 that answers with `answer(prompt)`."""

    def __init__(self, answer):
        self.requests = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(body)
                prompt = body["messages"][-1]["content"]
                content = answer(prompt)
                prompt_chars = sum(len(m["content"]) for m in body["messages"])
                payload = json.dumps(
                    {
                        "id": f"chatcmpl-{len(server.requests)}",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body["model"],
                        "choices": [
                            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
                        ],
                        "usage": {
                            "prompt_tokens": prompt_chars // 4,
                            "completion_tokens": 7,
                            "total_tokens": prompt_chars // 4 + 7,
                        },
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def record(case_id, *, status="success", contexts=(RELEVANT, IRRELEVANT), gold_answer="Keys expire after 90 days."):
    return {
        "set": "fixture",
        "id": case_id,
        "question": QUESTION,
        "gold": {"answer": gold_answer, "sources": [], "contexts": [], "answerable": True},
        "response": {"answer": "API keys expire after 90 days. [S1] They can be rotated. [S1]", "status": status},
        "retrieved": [{"source": f"faq/doc{i}.md", "text": text} for i, text in enumerate(contexts)],
    }


@pytest.fixture(scope="module")
def embeddings():
    return GatehouseEmbeddings()


def config(url, **kwargs):
    return JudgeConfig(url=url, model="fixture-judge", max_concurrency=2, **kwargs)


def test_from_env_reads_the_judge_settings():
    env = {
        "GATEHOUSE_JUDGE_URL": "http://127.0.0.1:8080/v1",
        "GATEHOUSE_JUDGE_MODEL": "smollm2",
        "GATEHOUSE_JUDGE_PRICE_IN": "0.15",
        "GATEHOUSE_JUDGE_PRICE_OUT": "0.6",
        "GATEHOUSE_JUDGE_REPEATS": "5",
    }
    judge = JudgeConfig.from_env(env)
    assert (judge.url, judge.model, judge.api_key, judge.price_in, judge.price_out, judge.repeats) == (
        "http://127.0.0.1:8080/v1",
        "smollm2",
        "none",
        0.15,
        0.6,
        5,
    )
    assert JudgeConfig.from_env(env, repeats=2).repeats == 2
    assert JudgeConfig.from_env({}) is None


def test_from_env_names_the_bad_setting():
    with pytest.raises(ValueError, match="GATEHOUSE_JUDGE_MODEL"):
        JudgeConfig.from_env({"GATEHOUSE_JUDGE_URL": "http://127.0.0.1:1/v1"})
    with pytest.raises(ValueError, match="GATEHOUSE_JUDGE_PRICE_IN"):
        JudgeConfig.from_env(
            {"GATEHOUSE_JUDGE_URL": "http://x/v1", "GATEHOUSE_JUDGE_MODEL": "m", "GATEHOUSE_JUDGE_PRICE_IN": "cheap"}
        )
    with pytest.raises(ValueError, match="repeats"):
        JudgeConfig(url="http://x/v1", model="m", repeats=0)
    with pytest.raises(ValueError, match="Unknown judge metrics"):
        JudgeConfig(url="http://x/v1", model="m", metrics=("helpfulness",))


def test_judge_inputs_apply_only_where_the_metric_makes_sense():
    answered = record("a")
    assert judge_inputs(answered, "faithfulness")["response"] == "API keys expire after 90 days. They can be rotated."
    fallback = record("b", status="fallback")
    assert judge_inputs(fallback, "faithfulness") is None
    assert judge_inputs(fallback, "answer_relevancy") is None
    assert judge_inputs(fallback, "context_precision_with_reference") is not None  # judges retrieval, not the answer
    assert judge_inputs(record("c", contexts=()), "faithfulness") is None
    assert judge_inputs(record("d", gold_answer=None), "context_precision_with_reference") is None


def test_dry_run_estimates_without_calling_the_endpoint():
    records = [record("a"), record("b", status="fallback")]
    with JudgeServer(deterministic_judge) as server:
        result = run_judge(records, config(server.url, price_in=1.0, price_out=2.0), dry_run=True, echo=None)
        assert server.requests == []
    summary = result["estimate"]
    assert result["records"] is None
    # faithfulness: 1 answered case x 2 calls x 3 repeats; relevancy: 1 case x 3 questions x 3 repeats;
    # context precision: 2 cases x 2 contexts x 3 repeats
    assert {m: s["calls"] for m, s in summary["metrics"].items()} == {
        "faithfulness": 6,
        "answer_relevancy": 9,
        "context_precision_with_reference": 12,
    }
    assert summary["calls"] == 27
    assert summary["prompt_tokens"] > 27 * count_tokens("Now perform the same with the following input")
    assert summary["cost"] == pytest.approx(
        summary["prompt_tokens"] / 1e6 * 1.0 + summary["completion_tokens"] / 1e6 * 2.0
    )


def test_judge_scores_against_a_real_http_endpoint(embeddings):
    records = [
        record("relevant-first", contexts=(RELEVANT, IRRELEVANT)),
        record("relevant-second", contexts=(IRRELEVANT, RELEVANT)),
        record("abstained", status="fallback"),
    ]
    printed = []
    with JudgeServer(deterministic_judge) as server:
        result = run_judge(records, config(server.url, repeats=3), embeddings=embeddings, echo=printed.append)
    assert printed and "fixture-judge" in printed[0]
    judged = {r["id"]: r for r in result["records"]}
    # faithfulness: verdicts [1, 0] -> 1/2 in every repeat
    assert judged["relevant-first"]["judge"]["faithfulness"] == [0.5, 0.5, 0.5]
    # context precision = average precision of the verdicts: [1, 0] -> 1.0; [0, 1] -> (1/2 * 1) / 1 = 0.5
    assert judged["relevant-first"]["judge"]["context_precision_with_reference"] == pytest.approx([1.0] * 3)
    assert judged["relevant-second"]["judge"]["context_precision_with_reference"] == pytest.approx([0.5] * 3)
    # relevancy: the generated question is the question itself -> cosine 1
    assert judged["relevant-first"]["judge"]["answer_relevancy"] == pytest.approx([1.0] * 3, abs=1e-5)
    assert "faithfulness" not in judged["abstained"]["judge"]
    # requests: 2 answered cases x (2 faithfulness + 3 relevancy + 2 context precision) + 1 case x 2 contexts, x 3
    assert result["usage"]["requests"] == len(server.requests) == (2 * 7 + 2) * 3
    assert result["usage"]["completion_tokens"] == 7 * len(server.requests)
    # the estimate renders the same prompts (and JSON schemas) the endpoint received; the server counts 4 chars/token
    assert result["estimate"]["prompt_tokens"] == pytest.approx(result["usage"]["prompt_tokens"], rel=0.05)

    aggregates = judge_aggregates(result["records"])
    precision = aggregates["context_precision_with_reference"]
    assert precision["mean"] == pytest.approx((1.0 + 0.5 + 1.0) / 3)  # the abstained case has both contexts: [1, 0]
    assert precision["sd"] == pytest.approx(0.0, abs=1e-9)  # identical repeats: no judge variance
    assert (precision["n"], precision["nan"], precision["calls"], precision["repeats"]) == (3, 0, 9, 3)
    faithfulness = aggregates["faithfulness"]
    assert (faithfulness["mean"], faithfulness["n"], faithfulness["not_applicable"]) == (0.5, 2, 1)


def test_judge_output_that_is_not_json_is_counted_as_nan(embeddings):
    records = [record("a"), record("b")]
    with JudgeServer(garbage_judge) as server:
        result = run_judge(records, config(server.url, repeats=2, max_attempts=1), embeddings=embeddings, echo=None)
    # every metric fails at its first call: 2 cases x 2 repeats x 3 metrics, no re-asks with max_attempts=1
    assert len(server.requests) == 12
    for judged in result["records"]:
        for metric in ("faithfulness", "answer_relevancy", "context_precision_with_reference"):
            assert judged["judge"][metric] == [None, None]
            assert all(reason for reason in judged["judge_errors"][metric])
    aggregates = judge_aggregates(result["records"])
    for stats in aggregates.values():
        # two cases x two repeats, every one a NaN: no mean, nothing averaged in as zero
        assert (stats["mean"], stats["n"], stats["nan"], stats["nan_cases"], stats["calls"]) == (None, 0, 4, 2, 4)
        assert stats["values"] == []


def test_gatehouse_embeddings_are_normalised_minilm_vectors(embeddings):
    vectors = embeddings.embed_texts(["API keys", "billing"])
    assert len(vectors) == 2 and len(vectors[0]) == 384
    assert math.isclose(sum(v * v for v in vectors[0]), 1.0, rel_tol=1e-4)
    assert embeddings.embed_text("API keys") == pytest.approx(vectors[0], abs=1e-6)
