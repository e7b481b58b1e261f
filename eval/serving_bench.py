"""
Serving load benchmark: latency alone and under concurrent clients, and what one request waiting on a hanging LLM
endpoint does to the others.

It prints ratios rather than absolute numbers alone, since those depend on the machine:

- ask over REST, sequential: P50/P95 beside the pipeline's own time in the same calls (the serving overhead), and the
  time to the first streamed token;
- with `--concurrency N`: the same asks from 1 client and from N clients at once: P50/P95 of each, their ratios,
  the throughput ratio and the errors;
- with `--stream` only the streamed chats: the extractive `ask` (its first token comes when the pipeline has
  answered) and, with `--llm-url` (an OpenAI-compatible server such as `gatehouse llm serve`; the own server then
  deploys `ask_llm`, ask.yml with the `llm` generator profile at that URL), the LLM answer streamed sentence by
  sentence: time to the first token, when the first verified sentence was available on the server and how long after
  that the client had it, and when the whole answer was ready, which is when a stream of the finished answer
  (the post-hoc streaming) would have sent its first token;
- without `--url` the benchmark starts `gatehouse serve` itself over the data directory (ingest the sample knowledge
  bases first: `gatehouse ingest`), its ask pipelines without the answer cache (the questions repeat, and a cache
  hit would time the cache; `python -m gatehouse.eval.cache_bench` times hits against misses), with one more deployment, `ask_hanging`: ask.yml whose generator is an LLM at a
  loopback socket that accepts connections and never answers. It then measures asks and retrievals unloaded and
  while one `ask_hanging` request waits on that endpoint (ratios of P50/P95), and when that request is answered
  (its time budget, `--budget`); with `--upload-mb M`, retrievals unloaded and during the upload of an M MB markdown
  file into a scratch knowledge base (deleted afterwards);
- with `--flood THREADS` only: one key's sequential asks alone and while THREADS threads of another key ask back to
  back (never waiting on `Retry-After`), once from a key without limits and once from a key under the manifest's
  default per-key limits (`limits.requests_per_minute`, `limits.max_concurrent_requests`): the ratios of P50/P95 and
  the flooding key's answers by status; with `--flood-history-bytes B` each flooding ask sends a history of about B
  bytes (a question and an answer of B/2 characters each: both among the turns the pipeline reads); with
  `--flood-processes 1,2` (the PostgreSQL store) once per number of server processes (`gatehouse serve --processes`),
  then a table of the victim's ratios and the answered asks per second of both keys, against the first count's, the
  errors and the most connections the servers held to the database at once (`pg_stat_activity`).

Usage:
```
python -m gatehouse.eval.serving_bench --concurrency 16                         # its own server over GATEHOUSE_DATA_DIR
python -m gatehouse.eval.serving_bench --concurrency 16 --upload-mb 9           # ... and retrieval during a 9 MB upload
python -m gatehouse.eval.serving_bench --url http://127.0.0.1:1416 --calls 50 [--concurrency 16] [--key KEY]
python -m gatehouse.eval.serving_bench --stream --llm-url http://127.0.0.1:8080/v1 --streams 5   # verified streaming
python -m gatehouse.eval.serving_bench --flood 8         # one key's asks while another key floods, limited or not
python -m gatehouse.eval.serving_bench --flood 16 --flood-history-bytes 1000000   # ... each flooding ask with a 1 MB history
GATEHOUSE_POSTGRES_URL=... python -m gatehouse.eval.serving_bench --flood 16 --flood-processes 1,2   # 1 and 2 processes
```
"""

import argparse
import contextlib
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml
from openai import OpenAI

from gatehouse.pipelines import component_spec, generator_profile_path, pipeline_path, without_answer_cache
from gatehouse.settings import data_dir
from gatehouse.stats import percentile

QUESTIONS = [
    "How do I rotate an API key?",
    "What does error CGW-2003 mean?",
    "How much does the Business plan cost?",
    "How do I back up the gateway database?",
    "Can I get a refund if I cancel mid-month?",
]
HANGING_LLM_TIMEOUT_S = 600  # the hanging endpoint's client would wait this long: the budget answers first
UPLOAD_KB, UPLOAD_TENANT = "bench-upload", "bench"


@dataclass
class Calls:
    """Latencies (ms) of a series of calls, their wall time (s) and how many failed."""

    latencies_ms: list[float]
    wall_s: float
    errors: int

    def percentile(self, share: float) -> float:
        """A latency percentile in ms."""
        return percentile(self.latencies_ms, share)

    @property
    def throughput(self) -> float:
        """Successful calls per second."""
        return (len(self.latencies_ms) - self.errors) / self.wall_s


def timed_calls(call: Callable[[int], httpx.Response], count: int, concurrency: int = 1) -> Calls:
    """
    Make `count` calls, `concurrency` at a time; a call fails on an exception or a status other than 200.

    :param call: Makes call number `i` (thread-safe).
    :param count: How many calls.
    :param concurrency: How many run at once (1: one after another).
    """

    def one(index: int) -> tuple[float, bool]:
        started = time.perf_counter()
        try:
            failed = call(index).status_code != 200
        except httpx.HTTPError:
            failed = True
        return (time.perf_counter() - started) * 1000, failed

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(one, range(count)))
    return Calls([ms for ms, _ in results], time.perf_counter() - started, sum(failed for _, failed in results))


def ask(client: httpx.Client, pipeline: str = "ask",
        history: list[dict[str, str]] | None = None) -> Callable[[int], httpx.Response]:
    """A call asking the `index`-th question (with `history`, when given)."""
    extra = {"history": history} if history else {}
    return lambda index: client.post(f"/{pipeline}/run", json={"query": QUESTIONS[index % len(QUESTIONS)], **extra})


def long_history(size: int) -> list[dict[str, str]]:
    """A question and an answer of about `size` characters together (words, as a pasted text would be)."""
    words = "The gateway keeps a log of every request it forwards, rotated daily. "
    text = (words * (size // (2 * len(words)) + 1))[: size // 2]
    return [{"role": "user", "content": text}, {"role": "assistant", "content": text}]


def retrieve(client: httpx.Client) -> Callable[[int], httpx.Response]:
    """A call retrieving for the `index`-th question."""
    return lambda index: client.post("/retrieve/run", json={"query": QUESTIONS[index % len(QUESTIONS)], "top_k": 5})


def sequential(client: httpx.Client, calls: int) -> dict[str, float]:
    """Sequential asks: HTTP P50/P95 beside the pipeline's own time (`metadata.latency_ms.total`)."""
    http_ms, pipeline_ms = [], []
    for index in range(calls):
        started = time.perf_counter()
        response = ask(client)(index)
        http_ms.append((time.perf_counter() - started) * 1000)
        response.raise_for_status()
        pipeline_ms.append(response.json()["result"]["metadata"]["latency_ms"]["total"])
    return {"http_p50": percentile(http_ms, 0.5), "http_p95": percentile(http_ms, 0.95),
            "pipeline_p50": percentile(pipeline_ms, 0.5)}


def streamed(url: str, key: str | None, streams: int, model: str = "ask") -> dict[str, Any]:
    """
    Streamed chat completions, P50s in ms: time to the first token, to the end of the stream, to when the server had
    the whole answer (`gatehouse.stream.answer_ms`) and, for an answer streamed sentence by sentence, to when the
    server had its first verified sentence and how long the client waited for it after that.
    """
    chat = OpenAI(base_url=f"{url}/v1", api_key=key or "none")
    first_ms, total_ms, answer_ms, sentence_ms, delay_ms, sent, dropped, calls = [], [], [], [], [], 0, 0, []
    for index in range(streams):
        started = time.perf_counter()
        first = received_at = None
        for chunk in chat.chat.completions.create(
            model=model, stream=True, messages=[{"role": "user", "content": QUESTIONS[index % len(QUESTIONS)]}]
        ):
            if first is None and chunk.choices and chunk.choices[0].delta.content:
                first, received_at = (time.perf_counter() - started) * 1000, time.time()
        total_ms.append((time.perf_counter() - started) * 1000)
        first_ms.append(first or total_ms[-1])
        stream = chunk.model_extra["gatehouse"]["stream"]
        answer_ms.append(stream["answer_ms"])
        sent, dropped = sent + stream["sentences_sent"], dropped + stream["sentences_dropped"]
        if stream["first_sentence_at"] and received_at:
            sentence_ms.append(stream["first_sentence_ms"])
            delay_ms.append((received_at - stream["first_sentence_at"]) * 1000)
        available = f" (the first available at {stream['first_sentence_ms']:.0f} ms)" if stream["first_sentence_ms"] else ""
        calls.append(f"  call {index + 1}: first token {first_ms[-1]:.0f} ms, whole answer ready {stream['answer_ms']:.0f}"
                     f" ms; verified sentences sent while the model wrote: {stream['sentences_sent']}{available}, "
                     f"dropped: {stream['sentences_dropped']}; final answer "
                     f"{'replaced what was sent' if stream['answer_differs'] else 'as streamed'}")
    return {"calls": calls, "ttft_p50": percentile(first_ms, 0.5), "total_p50": percentile(total_ms, 0.5),
            "answer_p50": percentile(answer_ms, 0.5), "sentence_streams": len(sentence_ms),
            "sentence_p50": percentile(sentence_ms, 0.5) if sentence_ms else 0.0,
            "delay_p50": percentile(delay_ms, 0.5) if delay_ms else 0.0,
            "delay_max": max(delay_ms, default=0.0), "sent": sent, "dropped": dropped}


def stream_report(url: str, key: str | None, streams: int, llm: bool) -> list[str]:
    """The extractive answer's streaming and, with `llm`, `ask_llm`'s sentence-by-sentence streaming."""
    extractive = streamed(url, key, streams)
    lines = [f"streamed chat (extractive ask), {streams} calls: time to first token P50 {extractive['ttft_p50']:.1f} "
             f"ms; the pipeline's answer was ready at P50 {extractive['answer_p50']:.1f} ms into the stream (made at "
             f"once, then streamed); whole stream P50 {extractive['total_p50']:.1f} ms"]
    if llm:
        verified = streamed(url, key, streams, model="ask_llm")
        lines += [
            f"streamed chat (ask_llm, sentence by sentence), {streams} calls: time to first token P50 "
            f"{verified['ttft_p50']:.1f} ms; whole answer ready P50 {verified['answer_p50']:.1f} ms into the stream "
            f"(the post-hoc stream's first token), whole stream P50 {verified['total_p50']:.1f} ms",
            f"  {verified['sentence_streams']} of {streams} streams sent a verified sentence before the answer was "
            f"complete ({verified['sent']} sentences sent, {verified['dropped']} dropped): first verified sentence "
            f"available P50 {verified['sentence_p50']:.1f} ms into the stream, received by the client "
            f"{verified['delay_p50']:.1f} ms later (P50; max {verified['delay_max']:.1f} ms)",
            *verified["calls"],
        ]
    return lines


def _ratio_line(name: str, alone: Calls, loaded: Calls, label: str) -> str:
    p50, p95 = (alone.percentile(0.5), loaded.percentile(0.5)), (alone.percentile(0.95), loaded.percentile(0.95))
    return (f"{name}: P50 {p50[0]:.0f} -> {p50[1]:.0f} ms (x{p50[1] / p50[0]:.2f}), "
            f"P95 {p95[0]:.0f} -> {p95[1]:.0f} ms (x{p95[1] / p95[0]:.2f}) {label}; "
            f"errors {alone.errors + loaded.errors}")


def concurrency_report(client: httpx.Client, calls: int, concurrency: int) -> list[str]:
    """The same asks from 1 client, then from `concurrency` clients at once."""
    alone = timed_calls(ask(client), calls)
    together = timed_calls(ask(client), calls, concurrency)
    return [
        _ratio_line(f"ask, {calls} calls, 1 vs {concurrency} clients", alone, together, f"at {concurrency} clients"),
        f"  throughput {alone.throughput:.2f} -> {together.throughput:.2f} asks/s "
        f"(x{together.throughput / alone.throughput:.2f} with {concurrency} clients)",
    ]


def hang_report(client: httpx.Client, listener: socket.socket, calls: int, budget: float) -> list[str]:
    """Asks and retrievals unloaded, then while one `ask_hanging` request waits on the hanging LLM endpoint."""
    unloaded_ask = timed_calls(ask(client), calls)
    unloaded_retrieve = timed_calls(retrieve(client), calls)
    with ThreadPoolExecutor(1) as pool:
        started = time.perf_counter()
        hanging = pool.submit(ask(client, "ask_hanging"), 0)
        connection, _ = listener.accept()  # the request now waits on the LLM endpoint
        with connection:
            during_ask = timed_calls(ask(client), calls)
            during_retrieve = timed_calls(retrieve(client), calls)
            pending = not hanging.done()
            result = hanging.result().json()["result"]
        answered_s = time.perf_counter() - started
    return [
        _ratio_line(f"ask, {calls} calls", unloaded_ask, during_ask, "while one request waits on a hanging LLM"),
        _ratio_line(f"retrieve, {calls} calls", unloaded_retrieve, during_retrieve,
                    "while one request waits on a hanging LLM"),
        f"  all {2 * calls} finished while that request still waited: {pending}",
        f"  the waiting request was answered after {answered_s:.1f} s (budget {budget:g} s, its LLM client's timeout "
        f"{HANGING_LLM_TIMEOUT_S} s): status {result['status']}, "
        f"warnings {result['validation']['confidence_warnings']}",
    ]


def _flood(client: httpx.Client, stop: threading.Event, counts: dict[int, int], lock: threading.Lock,
           history: list[dict[str, str]] | None = None) -> None:
    """Ask back to back, never waiting on Retry-After, until `stop`; count the answers by status (0: no answer)."""
    index = 0
    while not stop.is_set():
        try:
            status = ask(client, history=history)(index).status_code
        except httpx.HTTPError:
            status = 0
        with lock:
            counts[status] = counts.get(status, 0) + 1
        index += 1


def flood_report(url: str, keys: dict[str, str], calls: int, flooders: int, history_bytes: int = 0,
                 measured: dict[str, Any] | None = None) -> list[str]:
    """
    A victim key's sequential asks alone, then while `flooders` threads of another key ask back to back: once with
    a key that has no limits (the baseline) and once with a key under the manifest's default limits.

    :param keys: `victim`, `unlimited` and `limited` to their secrets.
    :param history_bytes: With each flooding ask, a history of about this many bytes (`long_history`); 0: none.
    :param measured: Filled with the victim's series (`alone`, `unlimited`, `limited`: `Calls`) and the answered
        asks per second of both keys during each flood (`throughput_unlimited`, `throughput_limited`).
    """
    measured = {} if measured is None else measured
    history = long_history(history_bytes) if history_bytes else None
    sending = f" with {history_bytes:,}-byte histories" if history_bytes else ""
    def client(key: str) -> httpx.Client:
        return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=HANGING_LLM_TIMEOUT_S,
                            limits=httpx.Limits(max_connections=flooders + 2))

    lines = []
    with client(keys["victim"]) as victim:
        for index in range(len(QUESTIONS)):  # warm-up, not counted
            ask(victim)(index).raise_for_status()
        alone = timed_calls(ask(victim), calls)
        measured["alone"] = alone
        for label in ("unlimited", "limited"):
            stop, lock, counts = threading.Event(), threading.Lock(), {}
            with client(keys[label]) as flooding, ThreadPoolExecutor(flooders) as pool:
                for _ in range(flooders):
                    pool.submit(_flood, flooding, stop, counts, lock, history)
                time.sleep(1)  # the flood is under way
                with lock:
                    before = counts.get(200, 0)
                during = timed_calls(ask(victim), calls)
                with lock:
                    flooded = counts.get(200, 0) - before
                stop.set()
            measured[label] = during
            measured[f"answers_{label}"] = dict(counts)
            measured[f"throughput_{label}"] = (flooded + len(during.latencies_ms) - during.errors) / during.wall_s
            answered = ", ".join(f"{status or 'no answer'}: {count}" for status, count in sorted(counts.items()))
            lines += [_ratio_line(f"victim's ask, {calls} calls", alone, during,
                                  f"while {flooders} threads of a key {'with' if label == 'limited' else 'without'} "
                                  f"limits ask back to back{sending}"),
                      f"  the flooding key's answers: {answered}; both keys answered "
                      f"{measured[f'throughput_{label}']:.2f} asks/s during the victim's series"]
    return lines


@contextlib.contextmanager
def database_connections(url: str | None) -> Iterator[dict[str, int]]:
    """
    While the block runs, the most connections (`peak`) to the database at `url` (PostgreSQL), sampled every 0.1 s
    from `pg_stat_activity` (the sampler's own left out); nothing without `url`.
    """
    seen = {"peak": 0}
    if not url:
        yield seen
        return
    import psycopg

    stop = threading.Event()

    def sample() -> None:
        with psycopg.connect(url, autocommit=True) as connection:
            while not stop.is_set():
                count = connection.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                           "AND pid <> pg_backend_pid()").fetchone()[0]
                seen["peak"] = max(seen["peak"], count)
                stop.wait(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield seen
    finally:
        stop.set()
        sampler.join()


def flood_processes_report(folder: Path, calls: int, flooders: int, processes: list[int],
                           history_bytes: int = 0) -> list[str]:
    """
    The flood benchmark once per number of server processes (`gatehouse serve --processes N`, which needs the
    PostgreSQL store), then a table of the victim's P50/P95 ratios (flooded / quiet), the throughput, with each
    count's throughput against the first's, the answers that were errors (5xx or none; 429s are the limits) and the
    most connections the servers held to the database at once.
    """
    from gatehouse.settings import postgres_url

    rows, lines = [], []
    for count in processes:
        print(f"starting gatehouse serve --processes {count} ...", flush=True)
        measured: dict[str, Any] = {}
        with flood_server(folder / f"processes-{count}", processes=count) as served, \
                database_connections(postgres_url()) as connections:
            report = [f"{count} process(es):", *flood_report(*served, calls=calls, flooders=flooders,
                                                             history_bytes=history_bytes, measured=measured)]
        report.append(f"  at most {connections['peak']} connection(s) to the database at once")
        print("\n".join(report), flush=True)
        rows.append((count, measured, connections["peak"]))
    first = rows[0][1]["throughput_unlimited"]
    lines += ["", "| processes | victim quiet P50 / P95 ms | flood without limits: P50 x, P95 x | with limits: P50 x, "
                  "P95 x | asks/s (without limits) | vs first | errors (5xx, none) | database connections, most |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for count, measured, peak in rows:
        alone = measured["alone"]

        def ratios(label: str) -> str:
            during = measured[label]
            return (f"{during.percentile(0.5) / alone.percentile(0.5):.2f}, "
                    f"{during.percentile(0.95) / alone.percentile(0.95):.2f}")

        errors = sum(measured[label].errors for label in ("alone", "unlimited", "limited")) + sum(
            number for label in ("unlimited", "limited") for status, number in measured[f"answers_{label}"].items()
            if status == 0 or status >= 500)
        versus = f"x{measured['throughput_unlimited'] / first:.2f}" if first else "no answers"
        lines.append(f"| {count} | {alone.percentile(0.5):.0f} / {alone.percentile(0.95):.0f} | "
                     f"{ratios('unlimited')} | {ratios('limited')} | {measured['throughput_unlimited']:.2f} | "
                     f"{versus} | {errors} | {peak} |")
    return lines


@contextlib.contextmanager
def flood_server(folder: Path, processes: int = 1) -> Iterator[tuple[str, dict[str, str]]]:
    """`gatehouse serve` with ask (uncached) and three keys: `victim` and `limited` under the default limits,
    `unlimited` without; yields its URL and the keys' secrets. `processes`: its `processes` setting."""
    folder.mkdir(parents=True, exist_ok=True)
    names = {"victim": "BENCH_KEY_VICTIM", "unlimited": "BENCH_KEY_UNLIMITED", "limited": "BENCH_KEY_LIMITED"}
    secrets = {label: uuid.uuid4().hex for label in names}
    manifest = folder / "hayhooks.yml"
    manifest.write_text(yaml.safe_dump({
        "pipelines": {"ask": {"pipeline": str(uncached_ask_pipeline(folder)), "kind": "ask"}},
        "mcp": False,
        "auth": {"keys": [{"env": names["victim"], "tenants": ["public"]},
                          {"env": names["limited"], "tenants": ["public"]},
                          {"env": names["unlimited"], "tenants": ["public"], "requests_per_minute": 0,
                           "max_concurrent_requests": 0}]},
        "processes": processes,
    }), encoding="utf-8")
    env = {**os.environ, **{names[label]: secret for label, secret in secrets.items()}}
    with serve_process(manifest, folder / "server.log", deployments=1, what="the flood benchmark", env=env) as url:
        yield url, secrets


def _markdown(megabytes: float) -> bytes:
    """A markdown document of about `megabytes` MB: headed sections of seeded pseudo-text."""
    rng = random.Random(0)
    words = [f"{syllable}{ending}" for syllable in ("gate", "key", "node", "plan", "log", "vault", "route", "shard")
             for ending in ("", "s", "ing", "er", "ed", "way", "ly")]
    parts, size, section = [], 0, 0
    while size < megabytes * 1_000_000:
        section += 1
        paragraphs = "\n\n".join(" ".join(rng.choices(words, k=60)) + "." for _ in range(4))
        parts.append(f"## Section {section}\n\n{paragraphs}\n")
        size += len(parts[-1])
    return ("# Benchmark upload\n\n" + "\n".join(parts)).encode()


def upload_report(client: httpx.Client, calls: int, megabytes: float) -> list[str]:
    """Retrievals unloaded, then one after another for as long as an upload of `megabytes` MB runs."""
    unloaded = timed_calls(retrieve(client), calls)
    latencies: list[float] = []
    errors = 0
    with ThreadPoolExecutor(1) as pool:
        started = time.perf_counter()
        uploading = pool.submit(client.post, "/index/run",
                                data={"kb": UPLOAD_KB, "tenant": UPLOAD_TENANT, "wait": "true"},
                                files=[("files", ("bench-upload.md", _markdown(megabytes), "text/markdown"))],
                                timeout=None)
        while not uploading.done():
            one = timed_calls(retrieve(client), 1)
            latencies += one.latencies_ms
            errors += one.errors
        upload = uploading.result()
        upload_s = time.perf_counter() - started
    client.delete(f"/kbs/{UPLOAD_KB}", params={"tenant": UPLOAD_TENANT})
    loaded = Calls(latencies, upload_s, errors)
    chunks = upload.json()["result"]["chunks_written"] if upload.status_code == 200 else f"failed: {upload.text}"
    return [
        _ratio_line(f"retrieve, {calls} unloaded vs {len(loaded.latencies_ms)} during the upload", unloaded, loaded,
                    f"during a {megabytes:g} MB upload"),
        f"  slowest retrieval during the upload {max(loaded.latencies_ms, default=0):.0f} ms; the upload took "
        f"{upload_s:.1f} s: {chunks} chunks",
    ]


def _uncached_ask() -> dict[str, Any]:
    """ask.yml without its answer cache: the benchmark repeats its questions, and must time the pipeline's work."""
    return without_answer_cache(yaml.safe_load(pipeline_path("ask").read_text(encoding="utf-8")))


def uncached_ask_pipeline(folder: Path) -> Path:
    """ask.yml without its answer cache, written into `folder`."""
    path = folder / "ask.yml"
    path.write_text(yaml.safe_dump(_uncached_ask(), sort_keys=False), encoding="utf-8")
    return path


def hanging_ask_pipeline(folder: Path, port: int, *, timeout: float = HANGING_LLM_TIMEOUT_S, max_retries: int = 0) -> Path:
    """ask.yml (without its cache) with an LLM generator at `port` (which never answers), waiting `timeout` per try."""
    spec = _uncached_ask()
    generator = component_spec(spec, "generator")
    generator.clear()
    generator.update({
        "type": "gatehouse.components.generators.llm_answerer.LLMAnswerer",
        "init_parameters": {"chat_generator": {
            "type": "gatehouse.components.generators.openai_compatible_generator.OpenAICompatibleChatGenerator",
            "init_parameters": {"api_base_url": f"http://127.0.0.1:{port}/v1", "model": "hanging",
                                "timeout": timeout, "max_retries": max_retries},
        }},
    })
    path = folder / "ask_hanging.yml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


def llm_ask_pipeline(folder: Path, llm_url: str) -> Path:
    """ask.yml (without its cache) with the `llm` generator profile answering from the server at `llm_url`."""
    spec = _uncached_ask()
    generator = component_spec(spec, "generator")
    generator.clear()
    generator.update(yaml.safe_load(generator_profile_path("llm").read_text(encoding="utf-8")))
    generator["init_parameters"]["chat_generator"]["init_parameters"]["api_base_url"] = llm_url
    path = folder / "ask_llm.yml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


@contextlib.contextmanager
def own_server(folder: Path, llm_port: int, budget: float, llm_url: str | None = None) -> Iterator[str]:
    """
    `gatehouse serve` over the data directory with ask, `ask_hanging`, retrieve and index (and `ask_llm` answering
    from `llm_url`), on a free loopback port.

    :returns: (yields) Its base URL.
    :raises RuntimeError: When it exits before it serves (its log says why: e.g. the data directory is in use).
    """
    manifest = folder / "hayhooks.yml"
    pipelines = {"ask": {"pipeline": str(uncached_ask_pipeline(folder)), "kind": "ask"},
                 "ask_hanging": {"pipeline": str(hanging_ask_pipeline(folder, llm_port)), "kind": "ask"},
                 "retrieve": {"pipeline": str(pipeline_path("retrieve")), "kind": "retrieve"},
                 "index": {"pipeline": str(pipeline_path("index")), "kind": "index"}}
    if llm_url:
        pipelines["ask_llm"] = {"pipeline": str(llm_ask_pipeline(folder, llm_url)), "kind": "ask"}
    manifest.write_text(yaml.safe_dump({
        "pipelines": pipelines,
        "mcp": False,
        "limits": {"request_timeout_s": budget, "max_body_bytes": 100_000_000,
                   "requests_per_minute": 0, "max_concurrent_requests": 0},  # N clients from one address
    }), encoding="utf-8")
    with serve_process(manifest, folder / "server.log", deployments=len(pipelines), what="the benchmark") as url:
        yield url


@contextlib.contextmanager
def serve_process(manifest: Path, log: Path, *, deployments: int, what: str, env: dict[str, str] | None = None,
                  cwd: Path | None = None, python: str = sys.executable) -> Iterator[str]:
    """
    `gatehouse serve --manifest manifest` on a free loopback port, its output in `log`, stopped afterwards.

    :param deployments: Pipelines the manifest deploys: the URL is yielded once `/status` lists that many.
    :param what: Who runs it, for the error message.
    :param env: The server's environment (default: this process's).
    :param cwd: The server's working directory (default: this one).
    :param python: The interpreter whose Gatehouse serves (another checkout's environment; default this one).
    :returns: (yields) Its base URL.
    :raises RuntimeError: When it exits before it serves (its log says why: e.g. the data directory is in use).
    """
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with log.open("w") as output:
        process = subprocess.Popen(
            [python, "-m", "gatehouse.cli", "serve", "--port", str(port), "--manifest", str(manifest)],
            stdout=output, stderr=subprocess.STDOUT, env=env, cwd=cwd,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        while len(_deployed(url)) < deployments:
            if process.poll() is not None:
                raise RuntimeError(f"{what}'s server exited; its log ({log}):\n{log.read_text()[-2000:]}")
            time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:  # a request still running (an upload) holds up the graceful shutdown
            process.kill()
            process.wait()


def _deployed(url: str) -> list[str]:
    try:
        return httpx.get(f"{url}/status", timeout=2).json()["pipelines"]
    except httpx.HTTPError:
        return []


def run(url: str, args: argparse.Namespace, listener: socket.socket | None) -> None:
    """
    Measure against `url` and print each part's figures as soon as it is done; the hanging-LLM and upload runs need
    the benchmark's own server (`listener`: its hanging LLM endpoint).
    """
    headers = {"Authorization": f"Bearer {args.key}"} if args.key else {}
    if args.stream:
        _print(stream_report(url, args.key, args.streams, llm=bool(args.llm_url)))
        return
    with httpx.Client(base_url=url, headers=headers, timeout=HANGING_LLM_TIMEOUT_S,
                      limits=httpx.Limits(max_connections=max(args.concurrency, 1) + 2)) as client:
        for index in range(len(QUESTIONS)):  # warm-up, not counted
            ask(client)(index).raise_for_status()
            retrieve(client)(index).raise_for_status()
        alone = sequential(client, args.calls)
        stream = streamed(url, args.key, args.streams)
        _print([
            f"ask over REST, {args.calls} sequential calls: P50 {alone['http_p50']:.1f} ms, "
            f"P95 {alone['http_p95']:.1f} ms",
            f"  pipeline time inside those calls: P50 {alone['pipeline_p50']:.1f} ms "
            f"(HTTP/serving overhead x{alone['http_p50'] / alone['pipeline_p50']:.2f})",
            f"streamed chat, {args.streams} calls: time to first token P50 {stream['ttft_p50']:.1f} ms, "
            f"whole stream P50 {stream['total_p50']:.1f} ms",
        ])
        if args.concurrency > 1:
            _print(concurrency_report(client, args.calls, args.concurrency))
        if listener is not None:
            _print(hang_report(client, listener, args.hang_calls, args.budget))
            if args.upload_mb:
                _print(upload_report(client, args.hang_calls, args.upload_mb))


def _print(lines: list[str]) -> None:
    print("\n".join(lines), flush=True)


def main() -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running server (default: start one over the data directory)")
    parser.add_argument("--calls", type=int, default=40, help="asks per series (sequential, concurrent)")
    parser.add_argument("--concurrency", type=int, default=1, help="clients at once in the concurrent series")
    parser.add_argument("--streams", type=int, default=5, help="streamed chat completions for time to first token")
    parser.add_argument("--hang-calls", type=int, default=20,
                        help="asks and retrievals, unloaded and while one request waits on a hanging LLM")
    parser.add_argument("--budget", type=float, default=120.0,
                        help="the own server's request time budget in s (longer than the calls made during the hang)")
    parser.add_argument("--upload-mb", type=float, default=0.0,
                        help="also measure retrieval during an upload of this many MB (own server only)")
    parser.add_argument("--key", help="bearer key, when the server has keys")
    parser.add_argument("--stream", action="store_true", help="measure only the streamed chats (see --llm-url)")
    parser.add_argument("--llm-url", help="an OpenAI-compatible LLM server (e.g. http://127.0.0.1:8080/v1): the own "
                                          "server deploys ask_llm answering from it; with --url, the server must "
                                          "deploy ask_llm itself")
    parser.add_argument("--flood", type=int, default=0, metavar="THREADS",
                        help="only measure one key's asks while THREADS threads of another key ask back to back, "
                             "with and without the default per-key limits (own server only)")
    parser.add_argument("--flood-history-bytes", type=int, default=0, metavar="BYTES",
                        help="with --flood: each flooding ask sends a history of about BYTES bytes")
    parser.add_argument("--flood-processes", metavar="N,M",
                        help="with --flood: run it once per number of server processes (e.g. 1,2: gatehouse serve "
                             "--processes N, which needs GATEHOUSE_POSTGRES_URL) and compare their throughput")
    args = parser.parse_args()
    if args.flood and args.flood_processes:
        counts = [int(count) for count in args.flood_processes.split(",")]
        with tempfile.TemporaryDirectory(prefix="gatehouse-bench-") as folder:
            _print(flood_processes_report(Path(folder), calls=args.hang_calls, flooders=args.flood, processes=counts,
                                          history_bytes=args.flood_history_bytes))
        return
    if args.flood:
        print(f"starting gatehouse serve over {data_dir()} with three keys ...", flush=True)
        with tempfile.TemporaryDirectory(prefix="gatehouse-bench-") as folder, flood_server(Path(folder)) as served:
            _print(flood_report(*served, calls=args.hang_calls, flooders=args.flood,
                                history_bytes=args.flood_history_bytes))
        return
    if args.url:
        run(args.url, args, None)
        return
    print(f"starting gatehouse serve over {data_dir()} ...", flush=True)
    with (tempfile.TemporaryDirectory(prefix="gatehouse-bench-") as folder,
          socket.create_server(("127.0.0.1", 0), backlog=16) as listener):
        listener.settimeout(args.budget)
        with own_server(Path(folder), listener.getsockname()[1], args.budget, args.llm_url) as url:
            run(url, args, listener)


if __name__ == "__main__":
    main()
