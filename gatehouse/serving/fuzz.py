"""
Schema fuzzing of the served REST API: schemathesis generates requests from the server's own OpenAPI document and
runs all its checks on every answer.

The routes fuzzed are ask, retrieve and index (`POST /index/run`, `GET /index/jobs`, `GET /index/jobs/{job_id}`),
the knowledge-base routes (`GET /kbs`, `DELETE /kbs/{kb}`), `POST /v1/chat/completions` and `GET /v1/models`. Each
route gets its share of the cases, half valid for the schema (positive) and half not (negative), and every answer
goes through all of schemathesis' checks (`--checks all`: no server error, status, content type, headers and body
as documented, negative data rejected, positive data accepted, ...); error bodies must not name internals (a
traceback, a Python exception, Haystack, Hayhooks, the stores). Every fourth case with a JSON body is sent a second
time with one of its values (or a new field) replaced by a number JSON cannot hold (`NaN`, `Infinity`, `-Infinity`,
`1e400`, which schemathesis never generates): that must be refused with a 4xx. It prints per route the cases, the
statuses seen, the server errors (5xx, or no answer), the undocumented statuses, the error bodies naming internals,
the other checks' failures and the non-finite cases (and how many were accepted), each distinct problem with one
`curl` that reproduces it (for a non-finite case, its body). It exits with status 1 on a server error, an
undocumented status, an error body naming internals, an accepted non-finite number or a route it could not fuzz; the
other checks' failures (e.g. a schema-valid question about a knowledge base that does not exist is a 422) are
reported only.

Without `--url` it starts `gatehouse serve` on a free loopback port over a copy of the data directory (the fuzzer
uploads files and deletes knowledge bases: never point `--url` at a server whose data matters), with one bearer key
holding the `public` tenant, so tenant refusals (403) are fuzzed too.

Usage:
```
python -m gatehouse.serving.fuzz --cases 1000                                  # own server over GATEHOUSE_DATA_DIR
python -m gatehouse.serving.fuzz --cases 1000 --url http://127.0.0.1:1416 [--key KEY]   # a running scratch server
```
```python
from gatehouse.serving.fuzz import fuzz, report

results = fuzz("http://127.0.0.1:1416", cases=100, key=None)
print("\\n".join(report(results)))        # results["POST /ask/run"].server_errors == 0, ...
```
"""

import argparse
import contextlib
import json
import math
import os
import random
import re
import secrets
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import schemathesis
import yaml
import hypothesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from hypothesis.reporting import with_reporter
from schemathesis.checks import CHECKS, load_all_checks
from schemathesis.core.failures import Failure, FailureGroup, ServerError
from schemathesis.generation import GenerationMode
from schemathesis.openapi.checks import UndefinedStatusCode

from gatehouse.pipelines import pipeline_path
from gatehouse.serving.bench import serve_process
from gatehouse.settings import data_dir

FUZZED_OPERATIONS = (
    "POST /ask/run",
    "POST /retrieve/run",
    "POST /index/run",
    "GET /index/jobs",
    "GET /index/jobs/{job_id}",
    "GET /kbs",
    "DELETE /kbs/{kb}",
    "POST /v1/chat/completions",
    "GET /v1/models",
)
FUZZ_KEY_VARIABLE = "GATEHOUSE_FUZZ_KEY"
# What an error body must not name (unless the request itself said it): tracebacks, Python exceptions, the libraries
# and stores behind the API, and Hayhooks' wrappers (the manifest's file name, `hayhooks.yml`, is the user's own).
INTERNAL_NAMES = re.compile(r"Traceback|File \"|\b[A-Z]\w*(Error|Exception)\b|"
                            r"(?i:pipeline ?wrapper|haystack|hayhooks(?!\.yml)|qdrant|sqlite|bm25|fastapi|starlette|uvicorn)")
REQUEST_TIMEOUT_S = 120.0
NON_FINITE = ("NaN", "Infinity", "-Infinity", "1e400")
NON_FINITE_EVERY = 4  # every this many cases with a JSON body, one more with a non-finite number in it


@dataclass
class RouteResult:
    """What fuzzing one route found: cases sent, statuses seen and each distinct problem with one reproduction."""

    cases: int = 0
    statuses: Counter = field(default_factory=Counter)
    server_errors: int = 0
    undocumented: Counter = field(default_factory=Counter)
    leaks: int = 0
    other_failures: Counter = field(default_factory=Counter)
    non_finite: Counter = field(default_factory=Counter)  # statuses of the cases with a non-finite number
    non_finite_accepted: int = 0
    examples: dict[str, str] = field(default_factory=dict)
    not_generated: str | None = None

    @property
    def failed(self) -> bool:
        """Whether the route answered with a server error, an undocumented status, an error naming internals or
        accepted a non-finite number."""
        return bool(self.server_errors or self.undocumented or self.leaks or self.non_finite_accepted)


class _Fuzzer:
    """Sends generated cases to one server and checks every answer with all of schemathesis' checks."""

    def __init__(self, *, url: str, headers: dict[str, str], session: requests.Session, seed: int | None) -> None:
        load_all_checks()
        self.url = url
        self.seed = seed
        self.headers = headers
        self.session = session
        self.checks = CHECKS.get_all()
        self.random = random.Random(seed)
        self.json_cases = 0

    def operation(self, operation: schemathesis.APIOperation, budget: int, result: RouteResult) -> int:
        """Up to `budget` cases, half positive and half negative; returns how many were sent."""
        before = result.cases
        positive = budget - budget // 2
        for mode, share in ((GenerationMode.POSITIVE, positive), (GenerationMode.NEGATIVE, budget - positive)):
            if share <= 0:
                continue
            try:
                self.cases(operation, mode, share, result)
            except Unsatisfiable:  # e.g. no negative case: the route takes no input, or any string
                result.not_generated = f"no {mode.value} cases possible"
        return result.cases - before

    def cases(self, operation: schemathesis.APIOperation, mode: GenerationMode, budget: int,
              result: RouteResult) -> None:
        """Up to `budget` generated cases of one mode."""

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=budget, deadline=None, database=None, phases=[Phase.explicit, Phase.generate],
                  suppress_health_check=list(HealthCheck), report_multiple_bugs=False)
        def one(case: schemathesis.Case) -> None:
            self.check(case, result)

        if self.seed is not None:
            one = hypothesis.seed(self.seed)(one)
        with with_reporter(lambda _message: None):  # Hypothesis' own notes (a seed to reproduce) would only confuse
            one()

    def check(self, case: schemathesis.Case, result: RouteResult) -> None:
        """Send one case and record its status and every problem its answer shows."""
        result.cases += 1
        curl = case.as_curl_command(headers=self.headers, base_url=self.url)
        try:
            response = case.call(base_url=self.url, session=self.session, headers=self.headers,
                                 timeout=REQUEST_TIMEOUT_S)
        except requests.RequestException as error:
            result.server_errors += 1
            _record(result, f"no answer: {type(error).__name__}", curl)
            return
        result.statuses[response.status_code] += 1
        if response.status_code >= 500:
            result.server_errors += 1
            _record(result, f"server error {response.status_code}: {response.text[:200]}", curl)
        leak = _internal_name(response)
        if leak:
            result.leaks += 1
            _record(result, f"error body names {leak!r}", f"{response.text[:200]}\n    {curl}")
        try:
            case.validate_response(response, checks=self.checks, headers=self.headers,
                                   transport_kwargs={"base_url": self.url, "headers": self.headers})
        except FailureGroup as group:
            for failure in group.exceptions:
                _classify(failure, result, curl)
        if isinstance(case.body, (dict, list)) and "json" in (case.media_type or ""):
            self.json_cases += 1
            if self.json_cases % NON_FINITE_EVERY == 0:
                self.check_non_finite(case, result)

    def check_non_finite(self, case: schemathesis.Case, result: RouteResult) -> None:
        """Send the case again with a number JSON cannot hold in its body, and record whether it was refused."""
        body = non_finite_body(case.body, self.random)
        request = case.as_transport_kwargs(base_url=self.url, headers=self.headers)
        request.pop("json", None)
        request.update(data=body, headers={**request["headers"], "Content-Type": "application/json"})
        example = f"{request['method']} {request['url']} {body[:200]!r}"
        try:
            response = self.session.request(**request, timeout=REQUEST_TIMEOUT_S)
        except requests.RequestException as error:
            result.server_errors += 1
            _record(result, f"no answer to a non-finite number: {type(error).__name__}", example)
            return
        result.non_finite[response.status_code] += 1
        if response.status_code >= 500:
            result.server_errors += 1
            _record(result, f"server error {response.status_code} for a non-finite number: {response.text[:200]}",
                    example)
        elif response.status_code < 400:
            result.non_finite_accepted += 1
            _record(result, f"non-finite number accepted: {response.status_code}", example)
        leak = _internal_name(response)
        if leak:
            result.leaks += 1
            _record(result, f"error body names {leak!r}", f"{response.text[:200]}\n    {example}")


def non_finite_body(body: Any, rng: random.Random) -> bytes:
    """
    A JSON body with one of its values (or, when it has none, a new one) replaced by a number JSON cannot hold.

    :param body: A generated JSON body (an object or array).
    :param rng: Chooses the value and the number (`NON_FINITE`).
    :returns: The body as JSON text, e.g. `{"query": "x", "top_k": NaN}`.
    """
    marker = "\x00non-finite\x00"
    copy = json.loads(json.dumps(body))
    slots: list[tuple[Any, Any]] = []
    pending = [copy]
    while pending:
        value = pending.pop()
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for key, item in items:
            slots.append((value, key))
            pending.append(item)
    if slots:
        container, key = rng.choice(slots)
        container[key] = marker
    elif isinstance(copy, dict):
        copy["value"] = marker
    else:
        copy.append(marker)
    return json.dumps(copy).replace(json.dumps(marker), rng.choice(NON_FINITE)).encode()


def _record(result: RouteResult, problem: str, example: str) -> None:
    result.examples.setdefault(problem, example)


def _internal_name(response: schemathesis.Response) -> str | None:
    """The first internal name an error answer's body says and its request did not, if any."""
    if response.status_code < 400:
        return None
    sent = f"{response.request.url} {response.request.body!r}".lower()
    for match in INTERNAL_NAMES.finditer(response.text):
        if match.group(0).lower() not in sent:
            return match.group(0)
    return None


def _classify(failure: Failure, result: RouteResult, curl: str) -> None:
    if isinstance(failure, ServerError):
        return  # counted from the status itself, with the answer's text
    if isinstance(failure, UndefinedStatusCode):
        result.undocumented[failure.status_code] += 1
        _record(result, f"undocumented status {failure.status_code}", curl)
        return
    result.other_failures[failure.title] += 1
    first_line = failure.message.splitlines()[0] if failure.message else ""
    _record(result, f"{failure.title} ({type(failure).__name__})", f"{first_line[:160]}\n    {curl}")


def fuzz(url: str, *, cases: int, key: str | None, operations: Iterable[str] = FUZZED_OPERATIONS,
         seed: int | None = None) -> dict[str, RouteResult]:
    """
    Fuzz the routes of a running server from its OpenAPI document with all of schemathesis' checks.

    The cases are shared out between the routes; a route whose inputs run out (`GET /v1/models` has none) leaves
    its share to the others.

    :param url: The server's base URL.
    :param cases: How many requests to send in all.
    :param key: The bearer key, when the server has keys.
    :param operations: The routes, as `METHOD /path` of the OpenAPI document.
    :param seed: Generate the same cases each time (None: new ones each run).
    :returns: Per route, what was found; a route missing from the document has `not_generated` set and no cases.
    """
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json", config=schemathesis.Config(), headers=headers)
    results = {label: RouteResult() for label in operations}
    pending = []
    for label, result in results.items():
        method, path = label.split(" ", 1)
        try:
            pending.append((label, schema[path][method]))
        except LookupError:  # schemathesis' OperationNotFound, or no such method
            result.not_generated = "not in the OpenAPI document"
    remaining = cases
    with requests.Session() as session:
        fuzzer = _Fuzzer(url=url, headers=headers, session=session, seed=seed)
        while remaining > 0 and pending:
            share = math.ceil(remaining / len(pending))
            unexhausted = []
            for label, operation in pending:
                sent = fuzzer.operation(operation, min(share, remaining), results[label])
                remaining -= sent
                if sent >= share:
                    unexhausted.append((label, operation))
            pending = unexhausted
    return results


def report(results: dict[str, RouteResult], seconds: float | None = None) -> list[str]:
    """The per-route table, the totals and each distinct problem with its reproduction."""
    width = max(len(label) for label in results)
    lines = [f"{'route':<{width}}  {'cases':>5}  {'5xx':>4}  {'undoc':>5}  {'leaks':>5}  {'other':>5}  {'nonfin':>6}  "
             "statuses (non-finite cases: statuses)"]
    for label, result in results.items():
        statuses = " ".join(f"{status}x{count}" for status, count in sorted(result.statuses.items()))
        if result.non_finite:
            statuses += f" ({' '.join(f'{status}x{count}' for status, count in sorted(result.non_finite.items()))})"
        lines.append(f"{label:<{width}}  {result.cases:>5}  {result.server_errors:>4}  "
                     f"{sum(result.undocumented.values()):>5}  {result.leaks:>5}  "
                     f"{sum(result.other_failures.values()):>5}  {sum(result.non_finite.values()):>6}  {statuses}")
    total = sum(r.cases for r in results.values())
    errors = sum(r.server_errors for r in results.values())
    undocumented = sum(sum(r.undocumented.values()) for r in results.values())
    leaks = sum(r.leaks for r in results.values())
    other = sum(sum(r.other_failures.values()) for r in results.values())
    non_finite = sum(sum(r.non_finite.values()) for r in results.values())
    accepted = sum(r.non_finite_accepted for r in results.values())
    took = f" in {seconds:.0f} s" if seconds is not None else ""
    lines.append(f"{total} cases{took}: {errors} server errors, {undocumented} undocumented statuses, "
                 f"{leaks} error bodies naming internals, {other} other check failures; "
                 f"{non_finite} more with a non-finite number, {accepted} of them accepted")
    for label, result in results.items():
        if result.not_generated:
            lines.append(f"{label}: {result.not_generated}")
        for problem, example in result.examples.items():
            lines.append(f"{label}: {problem}\n    {example}")
    return lines


@contextlib.contextmanager
def own_server(folder: Path) -> Iterator[tuple[str, str]]:
    """
    `gatehouse serve` with ask, retrieve and index over a copy of the data directory, on a free loopback port, with
    one bearer key (tenant `public`).

    :param folder: A scratch folder for the copy, the manifest and the server's log.
    :returns: (yields) Its base URL and its key.
    :raises RuntimeError: When it exits before it serves (its log says why).
    """
    data = folder / "data"
    if data_dir().is_dir():
        shutil.copytree(data_dir(), data, ignore=shutil.ignore_patterns("serve", "*.lock", ".lock"))
    key = secrets.token_urlsafe(24)
    manifest = folder / "hayhooks.yml"
    manifest.write_text(yaml.safe_dump({
        "pipelines": {kind: {"pipeline": str(pipeline_path(kind)), "kind": kind}
                      for kind in ("ask", "retrieve", "index")},
        "auth": {"keys": [{"env": FUZZ_KEY_VARIABLE, "tenants": ["public"]}]},
        "mcp": False,
    }), encoding="utf-8")
    env = {**os.environ, "GATEHOUSE_DATA_DIR": str(data), FUZZ_KEY_VARIABLE: key}
    with serve_process(manifest, folder / "server.log", deployments=3, what="the fuzzer", env=env, cwd=folder) as url:
        yield url, key


def main() -> None:
    """Command line entry point: exit status 1 on a server error, an undocumented status, an error body naming
    internals, an accepted non-finite number or a route that could not be fuzzed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=1000, help="requests to send in all, shared out between routes")
    parser.add_argument("--url", help="a running scratch server (default: start one over a copy of the data dir)")
    parser.add_argument("--key", help="bearer key, when the --url server has keys")
    parser.add_argument("--seed", type=int, help="generate the same cases as a run with this seed (default: new ones)")
    args = parser.parse_args()
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        if args.url:
            url, key = args.url.rstrip("/"), args.key
        else:
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gatehouse-fuzz-")))
            print(f"starting gatehouse serve over a copy of {data_dir()} ...", flush=True)
            url, key = stack.enter_context(own_server(folder))
        fuzzing = time.monotonic()
        results = fuzz(url, cases=args.cases, key=key, seed=args.seed)
        print("\n".join(report(results, time.monotonic() - fuzzing)), flush=True)
    print(f"total time {time.monotonic() - started:.0f} s (server start included)")
    sys.exit(1 if any(result.failed or not result.cases for result in results.values()) else 0)


if __name__ == "__main__":
    main()
