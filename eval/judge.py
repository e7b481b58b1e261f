"""
LLM-judged Ragas metrics against any OpenAI-compatible endpoint: faithfulness, response relevancy and LLM context
precision with reference.

The judge is configured from the environment (`JudgeConfig.from_env`):

| variable | what |
| --- | --- |
| `GATEHOUSE_JUDGE_URL` | base URL of an OpenAI-compatible API (`http://127.0.0.1:8080/v1`); unset = no judge |
| `GATEHOUSE_JUDGE_MODEL` | model name sent to the endpoint (required with the URL) |
| `GATEHOUSE_JUDGE_API_KEY` | API key (default `none`, for local servers) |
| `GATEHOUSE_JUDGE_PRICE_IN` / `GATEHOUSE_JUDGE_PRICE_OUT` | price per 1M prompt / completion tokens |
| `GATEHOUSE_JUDGE_REPEATS` | how many times every case is judged (default 3) |
| `GATEHOUSE_JUDGE_CONCURRENCY` | judgements in flight at once (default 4) |

The LLM is Ragas' `llm_factory` over an `openai.AsyncOpenAI` client with `base_url`; response relevancy embeds
with Gatehouse's own embedding backend (the packaged all-MiniLM-L6-v2, offline) through `GatehouseEmbeddings`.

Every applicable case is judged `repeats` times per metric. A judgement that fails — the model did not produce the
judge's JSON, the endpoint errored, the metric returned NaN — becomes `None` and its reason is kept; it never
crashes the run and never turns into a zero. `record["judge"] = {metric: [value or None per repeat]}` and
`record["judge_errors"] = {metric: [reason or None per repeat]}` feed `gatehouse.eval.metrics.judge_aggregates`.

Before anything is sent, `estimate()` renders the metrics' real prompts for every case and counts tokens with a
documented heuristic (`count_tokens`: 4 characters per token, OpenAI's rule of thumb for English; no tokenizer
file is downloaded), multiplied by the calls per metric and the repeats; `run_judge` prints it, and with
`dry_run=True` returns it without calling the endpoint. The tokens the endpoint reports are summed as `usage`.

Usage:
```python
from gatehouse.eval.judge import JudgeConfig, run_judge

config = JudgeConfig.from_env()            # None when GATEHOUSE_JUDGE_URL is unset
if config is not None:
    run = run_judge(records, config, progress=True)       # prints the estimate, then judges
    records = run["records"]                               # with record["judge"]
```
"""

import asyncio
import json
import logging
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ragas.embeddings.base import BaseRagasEmbedding
from tqdm import tqdm

from gatehouse.components.text_units import split_sentences
from gatehouse.eval.metrics import ANSWERED_STATUSES, clean_answer, error_reason

JUDGE_METRICS = ("faithfulness", "answer_relevancy", "context_precision_with_reference")
CHARS_PER_TOKEN = 4.0
JSON_MODE_OVERHEAD_TOKENS = 60  # Instructor's JSON-mode system message around the schema, and the chat framing
REASON_TOKENS = 30


def count_tokens(text: str) -> int:
    """Estimated tokens of a text: characters / 4, rounded up (OpenAI's rule of thumb for English text)."""
    return math.ceil(len(text or "") / CHARS_PER_TOKEN)


class GatehouseEmbeddings(BaseRagasEmbedding):
    """
    Ragas embeddings backed by Gatehouse's `EmbeddingBackend`: the packaged all-MiniLM-L6-v2 by default, loaded
    offline once per process and cached on disk like every other Gatehouse embedding.

    Usage:
    ```python
    from gatehouse.eval.judge import GatehouseEmbeddings

    embeddings = GatehouseEmbeddings()
    vector = embeddings.embed_text("How do I rotate an API key?")   # list of 384 floats, L2-normalised
    ```
    """

    def __init__(self, *, model: str | None = None, cache_dir: str | None = None) -> None:
        """
        :param model: SentenceTransformers model path; None uses the configured default.
        :param cache_dir: Embedding cache directory; None uses the configured default, `"off"` disables it.
        """
        super().__init__()
        self.model = model
        self.cache_dir = cache_dir
        self._backend: Any = None

    def _embed(self, texts: list[str]) -> list[list[float]]:
        if self._backend is None:
            from gatehouse.components.embedders.embedding import EmbeddingBackend

            self._backend = EmbeddingBackend.get(model=self.model, cache_dir=self.cache_dir)
        return self._backend.embed(list(texts)).tolist()

    def embed_text(self, text: str, **kwargs: Any) -> list[float]:
        """Embed one text."""
        return self._embed([text])[0]

    async def aembed_text(self, text: str, **kwargs: Any) -> list[float]:
        """Embed one text without blocking the event loop."""
        return (await asyncio.to_thread(self._embed, [text]))[0]

    def embed_texts(self, texts: list[str], **kwargs: Any) -> list[list[float]]:
        """Embed several texts in one batch."""
        return self._embed(texts)

    async def aembed_texts(self, texts: list[str], **kwargs: Any) -> list[list[float]]:
        """Embed several texts in one batch without blocking the event loop."""
        return await asyncio.to_thread(self._embed, texts)


def _env_number(environ: Mapping[str, str], name: str, cast: Callable[[str], Any]) -> Any:
    raw = environ.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        return cast(raw)
    except ValueError as error:
        raise ValueError(f"{name}={raw!r} is not a valid {cast.__name__}.") from error


@dataclass
class JudgeConfig:
    """
    Where the judge runs and how often.

    :param url: Base URL of the OpenAI-compatible API.
    :param model: Model name sent to the endpoint.
    :param api_key: API key; local servers accept any.
    :param price_in: Price per 1M prompt tokens (None = unknown, no cost is computed).
    :param price_out: Price per 1M completion tokens.
    :param repeats: How many times each case is judged per metric.
    :param metrics: The judge metrics to run (a subset of `JUDGE_METRICS`).
    :param max_concurrency: Judgements in flight at once.
    :param max_attempts: Attempts per LLM call when the answer is not the judge's JSON (Instructor re-asks).
    :param relevancy_strictness: Questions response relevancy generates per judgement (one call each).
    :param timeout_s: Timeout of one HTTP request.
    """

    url: str
    model: str
    api_key: str = "none"
    price_in: float | None = None
    price_out: float | None = None
    repeats: int = 3
    metrics: tuple[str, ...] = JUDGE_METRICS
    max_concurrency: int = 4
    max_attempts: int = 2
    relevancy_strictness: int = 3
    timeout_s: float = 120.0

    def __post_init__(self) -> None:
        if not self.url:
            raise ValueError("The judge needs an endpoint URL (GATEHOUSE_JUDGE_URL).")
        if not self.model:
            raise ValueError("The judge needs a model name (GATEHOUSE_JUDGE_MODEL).")
        unknown = [m for m in self.metrics if m not in JUDGE_METRICS]
        if unknown:
            raise ValueError(f"Unknown judge metrics {unknown}; choose from {', '.join(JUDGE_METRICS)}.")
        for name in ("repeats", "max_concurrency", "max_attempts", "relevancy_strictness"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"Judge {name} must be at least 1, got {getattr(self, name)}.")
        for name in ("price_in", "price_out"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"Judge {name} must not be negative, got {value}.")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> "JudgeConfig | None":
        """
        The judge configured in the environment, or None when `GATEHOUSE_JUDGE_URL` is unset.

        :param environ: The environment (default `os.environ`).
        :param overrides: Fields that replace the environment's (e.g. `repeats` from a command-line flag).
        """
        env = os.environ if environ is None else environ
        url = (env.get("GATEHOUSE_JUDGE_URL") or "").strip()
        if not url:
            return None
        values: dict[str, Any] = {
            "url": url,
            "model": (env.get("GATEHOUSE_JUDGE_MODEL") or "").strip(),
            "api_key": env.get("GATEHOUSE_JUDGE_API_KEY") or "none",
            "price_in": _env_number(env, "GATEHOUSE_JUDGE_PRICE_IN", float),
            "price_out": _env_number(env, "GATEHOUSE_JUDGE_PRICE_OUT", float),
        }
        for key, name in (("repeats", "GATEHOUSE_JUDGE_REPEATS"), ("max_concurrency", "GATEHOUSE_JUDGE_CONCURRENCY")):
            number = _env_number(env, name, int)
            if number is not None:
                values[key] = number
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


def judge_inputs(record: dict[str, Any], metric: str) -> dict[str, Any] | None:
    """
    The inputs of one judge metric for one record, or None when the metric does not apply.

    - `faithfulness`: an answered case (status success or partial) with retrieved contexts.
    - `answer_relevancy`: an answered case.
    - `context_precision_with_reference`: a case with a gold answer and retrieved contexts.

    The answer is compared without its citation markers.
    """
    response = record.get("response") or {}
    question = str(record.get("question") or "").strip()
    answer = clean_answer(response.get("answer"))
    answered = response.get("status") in ANSWERED_STATUSES and bool(answer) and bool(question)
    contexts = [str(item.get("text")) for item in record.get("retrieved") or [] if str(item.get("text") or "").strip()]
    reference = str((record.get("gold") or {}).get("answer") or "").strip()
    if metric == "faithfulness":
        return (
            {"user_input": question, "response": answer, "retrieved_contexts": contexts}
            if answered and contexts
            else None
        )
    if metric == "answer_relevancy":
        return {"user_input": question, "response": answer} if answered else None
    if metric == "context_precision_with_reference":
        if question and reference and contexts:
            return {"user_input": question, "reference": reference, "retrieved_contexts": contexts}
        return None
    raise ValueError(f"Unknown judge metric {metric!r}; choose from {', '.join(JUDGE_METRICS)}.")


def _calls(metric: str, inputs: dict[str, Any], config: JudgeConfig) -> list[tuple[str, Any, int]]:
    """The LLM calls of one judgement: (rendered prompt, output model, estimated completion tokens) per call."""
    from ragas.metrics.collections.answer_relevancy.util import (
        AnswerRelevanceInput,
        AnswerRelevanceOutput,
        AnswerRelevancePrompt,
    )
    from ragas.metrics.collections.context_precision.util import (
        ContextPrecisionInput,
        ContextPrecisionOutput,
        ContextPrecisionPrompt,
    )
    from ragas.metrics.collections.faithfulness.util import (
        NLIStatementInput,
        NLIStatementOutput,
        NLIStatementPrompt,
        StatementGeneratorInput,
        StatementGeneratorOutput,
        StatementGeneratorPrompt,
    )

    if metric == "faithfulness":
        # The statements are not known before the judge writes them: the answer's sentences stand in for them.
        statements = split_sentences(inputs["response"]) or [inputs["response"]]
        listed = json.dumps({"statements": statements})
        verdicts = sum(count_tokens(s) + REASON_TOKENS for s in statements)
        return [
            (
                StatementGeneratorPrompt().to_string(
                    StatementGeneratorInput(question=inputs["user_input"], answer=inputs["response"])
                ),
                StatementGeneratorOutput,
                count_tokens(listed),
            ),
            (
                NLIStatementPrompt().to_string(
                    NLIStatementInput(context="\n".join(inputs["retrieved_contexts"]), statements=statements)
                ),
                NLIStatementOutput,
                verdicts,
            ),
        ]
    if metric == "answer_relevancy":
        prompt = AnswerRelevancePrompt().to_string(AnswerRelevanceInput(response=inputs["response"]))
        return [(prompt, AnswerRelevanceOutput, count_tokens(inputs["user_input"]) + 10)] * config.relevancy_strictness
    prompt_class = ContextPrecisionPrompt()
    return [
        (
            prompt_class.to_string(
                ContextPrecisionInput(question=inputs["user_input"], context=context, answer=inputs["reference"])
            ),
            ContextPrecisionOutput,
            REASON_TOKENS + 10,
        )
        for context in inputs["retrieved_contexts"]
    ]


def prompt_tokens_of(prompt: str, output_model: Any) -> int:
    """Estimated prompt tokens of one call: the metric's prompt plus the JSON schema Instructor's JSON mode sends."""
    schema = json.dumps(output_model.model_json_schema(), indent=2)
    return count_tokens(prompt) + count_tokens(schema) + JSON_MODE_OVERHEAD_TOKENS


def _cost(prompt_tokens: int, completion_tokens: int, config: JudgeConfig) -> float | None:
    if config.price_in is None or config.price_out is None:
        return None
    return prompt_tokens / 1e6 * config.price_in + completion_tokens / 1e6 * config.price_out


def estimate(records: list[dict[str, Any]], config: JudgeConfig) -> dict[str, Any]:
    """
    Token and cost estimate of judging the records, computed before any call.

    :returns: `{model, repeats, metrics: {metric: {cases, calls, prompt_tokens, completion_tokens, cost}},
        calls, prompt_tokens, completion_tokens, cost, max_attempts}`; costs are None without prices. Calls that
        the judge answers with invalid JSON are re-asked, up to `max_attempts` times the calls.
    """
    metrics: dict[str, dict[str, Any]] = {}
    for metric in config.metrics:
        cases = calls = prompt_tokens = completion_tokens = 0
        for record in records:
            inputs = judge_inputs(record, metric)
            if inputs is None:
                continue
            cases += 1
            for prompt, output_model, completion in _calls(metric, inputs, config):
                calls += config.repeats
                prompt_tokens += config.repeats * prompt_tokens_of(prompt, output_model)
                completion_tokens += config.repeats * completion
        metrics[metric] = {
            "cases": cases,
            "calls": calls,
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "cost": _cost(prompt_tokens, completion_tokens, config),
        }
    prompt_total = sum(m["prompt_tokens"] for m in metrics.values())
    completion_total = sum(m["completion_tokens"] for m in metrics.values())
    return {
        "model": config.model,
        "url": config.url,
        "repeats": config.repeats,
        "metrics": metrics,
        "calls": sum(m["calls"] for m in metrics.values()),
        "prompt_tokens": prompt_total,
        "completion_tokens": completion_total,
        "cost": _cost(prompt_total, completion_total, config),
        "max_attempts": config.max_attempts,
        "token_counting": f"heuristic: {CHARS_PER_TOKEN:g} characters per token",
    }


def format_estimate(summary: dict[str, Any]) -> str:
    """A few lines for the terminal: calls, tokens and cost per metric and in total."""

    def money(cost: float | None) -> str:
        return "cost unknown (set GATEHOUSE_JUDGE_PRICE_IN/OUT)" if cost is None else f"~${cost:.4f}"

    lines = [
        (
            f"Judge {summary['model']} at {summary['url']}: {summary['repeats']} repeat(s), "
            f"{summary['calls']} calls, ~{summary['prompt_tokens']:,} prompt + ~{summary['completion_tokens']:,} "
            f"completion tokens, {money(summary['cost'])} ({summary['token_counting']}; a call answered with invalid "
            f"JSON is tried up to {summary['max_attempts']} times)"
        )
    ]
    for metric, stats in summary["metrics"].items():
        lines.append(
            f"  {metric}: {stats['cases']} cases, {stats['calls']} calls, ~{stats['prompt_tokens']:,} + "
            f"~{stats['completion_tokens']:,} tokens, {money(stats['cost'])}"
        )
    return "\n".join(lines)


def _build_metrics(llm: Any, embeddings: BaseRagasEmbedding, config: JudgeConfig) -> dict[str, Any]:
    from ragas.metrics.collections import AnswerRelevancy, ContextPrecisionWithReference, Faithfulness

    builders = {
        "faithfulness": lambda: Faithfulness(llm=llm),
        "answer_relevancy": lambda: AnswerRelevancy(
            llm=llm, embeddings=embeddings, strictness=config.relevancy_strictness
        ),
        "context_precision_with_reference": lambda: ContextPrecisionWithReference(llm=llm),
    }
    return {name: builders[name]() for name in config.metrics}


async def _judge_all(
    records: list[dict[str, Any]],
    config: JudgeConfig,
    embeddings: BaseRagasEmbedding,
    progress: bool,
) -> tuple[list[dict[str, list]], list[dict[str, list]], dict[str, int]]:
    import httpx
    from openai import AsyncOpenAI
    from ragas.llms import llm_factory

    usage = {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0}

    async def count_usage(response: httpx.Response) -> None:
        usage["requests"] += 1
        await response.aread()
        try:
            reported = response.json().get("usage") or {}
        except (ValueError, AttributeError):
            return
        usage["prompt_tokens"] += int(reported.get("prompt_tokens") or 0)
        usage["completion_tokens"] += int(reported.get("completion_tokens") or 0)

    http_client = httpx.AsyncClient(timeout=config.timeout_s, event_hooks={"response": [count_usage]})
    client = AsyncOpenAI(
        base_url=config.url, api_key=config.api_key, max_retries=1, timeout=config.timeout_s, http_client=http_client
    )
    # Instructor's max_retries counts the re-asks after the first attempt
    llm = llm_factory(config.model, provider="openai", client=client, max_retries=config.max_attempts - 1)
    metrics = _build_metrics(llm, embeddings, config)

    values: list[dict[str, list]] = [{} for _ in records]
    errors: list[dict[str, list]] = [{} for _ in records]
    jobs = []
    for index, record in enumerate(records):
        for metric in config.metrics:
            inputs = judge_inputs(record, metric)
            if inputs is None:
                continue
            values[index][metric] = [None] * config.repeats
            errors[index][metric] = [None] * config.repeats
            jobs.extend((index, metric, repeat, inputs) for repeat in range(config.repeats))

    semaphore = asyncio.Semaphore(config.max_concurrency)
    bar = tqdm(total=len(jobs), desc="judge", unit="judgement", disable=not progress)

    async def judge(index: int, metric: str, repeat: int, inputs: dict[str, Any]) -> None:
        async with semaphore:
            try:
                value = float((await metrics[metric].ascore(**inputs)).value)
            except Exception as error:  # noqa: BLE001 - a failed judgement is a counted NaN, never a crash
                errors[index][metric][repeat] = error_reason(error)
            else:
                if math.isfinite(value):
                    values[index][metric][repeat] = value
                else:
                    errors[index][metric][repeat] = "returned NaN"
            finally:
                bar.update(1)

    # Instructor logs every judgement that ends without valid JSON; they are counted as NaN instead.
    instructor_logger = logging.getLogger("instructor")
    level = instructor_logger.level
    instructor_logger.setLevel(logging.CRITICAL)
    try:
        await asyncio.gather(*(judge(*job) for job in jobs))
    finally:
        instructor_logger.setLevel(level)
        bar.close()
        await client.close()
    return values, errors, usage


def run_judge(
    records: list[dict[str, Any]],
    config: JudgeConfig,
    *,
    dry_run: bool = False,
    progress: bool = False,
    embeddings: BaseRagasEmbedding | None = None,
    echo: Callable[[str], None] | None = print,
) -> dict[str, Any]:
    """
    Judge the records with the LLM metrics, `config.repeats` times each.

    :param records: Per-case records (see `gatehouse.eval.metrics`).
    :param config: The judge.
    :param dry_run: Only estimate tokens and cost; nothing is sent.
    :param progress: Show a progress bar.
    :param embeddings: Embeddings for response relevancy; None uses `GatehouseEmbeddings()`.
    :param echo: Where the estimate is printed before the run (None: not printed).
    :returns: `{estimate, records, usage, cost, duration_s, model}`: `records` are new records with `judge` and
        `judge_errors` (None on a dry run), `usage` the requests and tokens the endpoint reported, `cost` their
        price (None without prices).
    """
    summary = estimate(records, config)
    if echo is not None:
        echo(format_estimate(summary))
    if dry_run:
        return {
            "estimate": summary,
            "records": None,
            "usage": None,
            "cost": None,
            "duration_s": 0.0,
            "model": config.model,
        }
    from ragas.async_utils import run

    started = time.perf_counter()
    values, errors, usage = run(lambda: _judge_all(records, config, embeddings or GatehouseEmbeddings(), progress))
    judged = [
        {**record, "judge": case_values, "judge_errors": case_errors}
        for record, case_values, case_errors in zip(records, values, errors)
    ]
    return {
        "estimate": summary,
        "records": judged,
        "usage": usage,
        "cost": _cost(usage["prompt_tokens"], usage["completion_tokens"], config),
        "duration_s": round(time.perf_counter() - started, 3),
        "model": config.model,
    }
