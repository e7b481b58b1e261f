"""
Schema fuzzing of the served API: schemathesis generates requests from the server's own OpenAPI document and runs all
its checks on every answer; every case is sent once more with one field made hostile, and the ask and retrieve
bodies go to the MCP tools too.

The routes fuzzed are ask, retrieve and index (`POST /index/run`, `GET /index/jobs`, `GET /index/jobs/{job_id}`),
the knowledge-base routes (`GET /kbs`, `DELETE /kbs/{kb}`), `POST /v1/chat/completions`, `GET /v1/models` and MCP
(`POST /mcp`, not in the OpenAPI document: each generated ask and retrieve body as the arguments of a `tools/call` of
that tool). Each OpenAPI route gets its share of the cases, half valid for the schema (positive) and half not
(negative), and every answer goes through all of schemathesis' checks (`--checks all`: no server error, status,
content type, headers and body as documented, negative data rejected, positive data accepted, ...); error bodies must
not name internals (a traceback, a Python exception, Haystack, Hayhooks, the stores), and no MCP tool may fail
unexpectedly.

Every case, MCP's too, is then sent once more with one mutation schemathesis never makes (`MUTATIONS`, in turn; each
takes the route's fields in turn, so every field of every route gets each): a number JSON cannot hold (`NaN`,
`Infinity`, `-Infinity`, `1e400`), a lone UTF-16 surrogate as a JSON escape (`"\\ud800"`) or as its UTF-8 bytes, a
non-finite number in a JSON body sent with two `Content-Type` headers (`application/json`, then `text/plain`), or a
second `Authorization` or `Host` header. In a JSON body, and as a second header, it must be refused with a 4xx; in a
query, path or form field (where a surrogate's bytes are no text) it must not be a server error.

It prints per route the cases, the statuses seen, the server errors (5xx, no answer, an MCP tool failing
unexpectedly), the undocumented statuses, the error bodies naming internals, the other checks' failures and the
mutated cases (their statuses, how many were accepted, the fields they covered), each distinct problem with one
`curl` or raw request that reproduces it. It exits with status 1 on a server error, an undocumented status, an error
body naming internals, an accepted mutation or a route it could not fuzz; the other checks' failures (e.g. a
schema-valid question about a knowledge base that does not exist is a 422) are reported only.

Without `--url` it starts `gatehouse serve` on a free loopback port over a copy of the data directory (the fuzzer
uploads files and deletes knowledge bases: never point `--url` at a server whose data matters), with MCP and one
bearer key holding the `public` tenant (no rate limit), so tenant refusals (403) are fuzzed too.

Usage:
```
python -m gatehouse.eval.fuzz --cases 1000                                  # own server over GATEHOUSE_DATA_DIR
python -m gatehouse.eval.fuzz --cases 1000 --url http://127.0.0.1:1416 [--key KEY]   # a running scratch server
```
```python
from gatehouse.eval.fuzz import fuzz, report

results = fuzz("http://127.0.0.1:1416", cases=100, key=None)
print("\\n".join(report(results)))        # results["POST /ask/run"].server_errors == 0, ...
```
"""

import argparse
import contextlib
import http.client
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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

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

from gatehouse.eval.serving_bench import serve_process
from gatehouse.pipelines import pipeline_path
from gatehouse.settings import data_dir

MCP = "POST /mcp"
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
    MCP,
)
MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
FUZZ_KEY_VARIABLE = "GATEHOUSE_FUZZ_KEY"
# What an error body must not name (unless the request itself said it): tracebacks, Python exceptions, the libraries
# and stores behind the API, and Hayhooks' wrappers (the manifest's file name, `hayhooks.yml`, is the user's own).
INTERNAL_NAMES = re.compile(r"Traceback|File \"|\b[A-Z]\w*(Error|Exception)\b|"
                            r"(?i:pipeline ?wrapper|haystack|hayhooks(?!\.yml)|qdrant|sqlite|bm25|fastapi|starlette|uvicorn)")
#: What an MCP tool answers when its pipeline failed with an unexpected error (a server error in a tool result).
TOOL_FAILED = "failed unexpectedly"
REQUEST_TIMEOUT_S = 120.0
NON_FINITE = ("NaN", "Infinity", "-Infinity", "1e400")
#: What each case is sent once more with, in turn (see the module's description).
MUTATIONS = ("non_finite", "surrogate_escape", "surrogate_bytes", "two_content_types", "duplicate_header")
#: Stands for the mutated value while the request is built, then replaced in its target and body.
MARKER = "\x00mutated\x00"
_URL_MARKER = quote(MARKER, safe="")


@dataclass
class RouteResult:
    """What fuzzing one route found: cases sent, statuses seen and each distinct problem with one reproduction."""

    cases: int = 0
    statuses: Counter = field(default_factory=Counter)
    server_errors: int = 0
    undocumented: Counter = field(default_factory=Counter)
    leaks: int = 0
    other_failures: Counter = field(default_factory=Counter)
    mutated: dict[str, Counter] = field(default_factory=dict)  # per mutation, the statuses of the mutated cases
    mutated_accepted: int = 0
    mutated_fields: set[str] = field(default_factory=set)
    examples: dict[str, str] = field(default_factory=dict)
    not_generated: str | None = None

    @property
    def failed(self) -> bool:
        """Whether the route answered with a server error, an undocumented status, an error naming internals or
        accepted a mutation it had to refuse."""
        return bool(self.server_errors or self.undocumented or self.leaks or self.mutated_accepted)


@dataclass
class Mutation:
    """A request made hostile: which mutation, where, the raw request, and whether it must be refused (4xx)."""

    kind: str
    where: str
    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes
    must_refuse: bool

    def shown(self) -> str:
        """The request, to reproduce it (without the key)."""
        headers = "; ".join(f"{name}: {value}" for name, value in self.headers if name.lower() != "authorization")
        return f"{self.method} {self.target} [{headers}] {self.body[:200]!r}"


class _Fuzzer:
    """Sends generated cases to one server, checks every answer with all of schemathesis' checks, sends each case
    once more mutated, and the ask and retrieve bodies to their MCP tools."""

    def __init__(self, *, url: str, headers: dict[str, str], session: requests.Session, seed: int | None,
                 mcp: RouteResult | None, tools: set[str]) -> None:
        load_all_checks()
        self.url = url
        self.seed = seed
        self.headers = headers
        self.session = session
        self.checks = CHECKS.get_all()
        self.random = random.Random(seed)
        self.mcp = mcp
        self.tools = tools
        self.turns: Counter = Counter()  # per route and mutation, how many were sent: the next field to mutate
        self.known: dict[str, dict[str, None]] = {}  # per route, the named fields its cases have had (in order)

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
        """Send one case, record its status and every problem its answer shows, then send it mutated; an ask or
        retrieve body goes to its MCP tool as well."""
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
        _check_answer(result, response.status_code, response.text, f"{response.request.url} {response.request.body!r}",
                      curl, must_refuse=False, what="")
        try:
            case.validate_response(response, checks=self.checks, headers=self.headers,
                                   transport_kwargs={"base_url": self.url, "headers": self.headers})
        except FailureGroup as group:
            for failure in group.exceptions:
                _classify(failure, result, curl)
        kwargs = case.as_transport_kwargs(base_url=self.url, headers=self.headers)
        self.mutate(_request(kwargs), f"{case.method.upper()} {case.path}", result)
        tool = case.path.strip("/").removesuffix("/run")
        if self.mcp is not None and tool in self.tools and case.path == f"/{tool}/run" and isinstance(case.body, dict):
            self.call_tool(tool, case.body)

    def call_tool(self, tool: str, arguments: dict[str, Any]) -> None:
        """Call an MCP tool with a generated body as its arguments, record the answer, then send the call mutated."""
        result = self.mcp
        result.cases += 1
        call = {"jsonrpc": "2.0", "id": result.cases, "method": "tools/call",
                "params": {"name": tool, "arguments": arguments}}
        body = json.dumps(call).encode()
        example = f"POST /mcp {body[:300]!r}"
        try:
            response = self.session.post(f"{self.url}/mcp", data=body, headers={**self.headers, **MCP_HEADERS},
                                         timeout=REQUEST_TIMEOUT_S)
        except requests.RequestException as error:
            result.server_errors += 1
            _record(result, f"no answer: {type(error).__name__}", example)
            return
        result.statuses[response.status_code] += 1
        _check_answer(result, response.status_code, response.text, body.decode(), example, must_refuse=False,
                      what="")
        self.mutate(_request({"method": "POST", "url": f"{self.url}/mcp", "headers": {**self.headers, **MCP_HEADERS},
                              "json": call}), MCP, result)

    def mutate(self, request: dict[str, Any], route: str, result: RouteResult) -> None:
        """Send the request once more with the route's next mutation, in its next field, and record the answer."""
        kind = MUTATIONS[sum(self.turns[(route, other)] for other in MUTATIONS) % len(MUTATIONS)]
        turn = self.turns[(route, kind)]
        self.turns[(route, kind)] += 1
        known = self.known.setdefault(route, {})
        known.update(dict.fromkeys(named_fields(request)))
        mutation = mutated(request, kind, turn, self.random, known=list(known))
        if mutation is None:
            return
        result.mutated_fields.add(mutation.where)
        statuses = result.mutated.setdefault(kind, Counter())
        try:
            status, text = send_raw(self.url, mutation)
        except OSError as error:
            result.server_errors += 1
            _record(result, f"no answer to {kind}: {type(error).__name__}", mutation.shown())
            return
        statuses[status] += 1
        _check_answer(result, status, text, mutation.body.decode("latin-1") + mutation.target, mutation.shown(),
                      must_refuse=mutation.must_refuse, what=f" for {kind} in {mutation.where}")


def _request(kwargs: dict[str, Any]) -> dict[str, Any]:
    """A request as schemathesis would send it (`as_transport_kwargs`), in the parts `mutated` changes."""
    return {"method": kwargs["method"], "url": kwargs["url"], "headers": dict(kwargs.get("headers") or {}),
            "json_body": "json" in kwargs, "json": kwargs.get("json"), "data": kwargs.get("data"),
            "files": list(kwargs["files"]) if kwargs.get("files") else None, "params": kwargs.get("params")}


def _check_answer(result: RouteResult, status: int, text: str, sent: str, example: str, *, must_refuse: bool,
                  what: str) -> None:
    """Record the problems of one answer: a server error (an MCP tool failing unexpectedly is one), a mutation that
    had to be refused and was not, an error body naming internals."""
    if status >= 500 or TOOL_FAILED in text:
        result.server_errors += 1
        _record(result, f"server error {status}{what}: {text[:200]}", example)
    elif must_refuse and status < 400:
        result.mutated_accepted += 1
        _record(result, f"accepted{what}: {status}", example)
    leak = _internal_name(status, text, sent)
    if leak:
        result.leaks += 1
        _record(result, f"error body names {leak!r}{what}", f"{text[:200]}\n    {example}")


_NAME = re.compile(r"[a-z][a-z_]*")
#: A mutated field named as a schema names them: `body.messages[0].content`, `query.tenant`, `header Host`.
_FIELD = re.compile(r"header \w+|(body|form|query|path)(\.[a-z][a-z_]*(\[\d+\])*)*")


def named_fields(request: dict[str, Any]) -> list[str]:
    """
    The request's fields named as a schema names them (lower-case words: `body.params.arguments.top_k`,
    `query.tenant`, `form.kb`), JSON objects followed down through named keys, not through lists.
    """
    names = [f"query.{key}" for key in request["params"] or {} if _NAME.fullmatch(str(key))]
    names += [f"form.{name}" for name, part in request["files"] or () if isinstance(part, tuple) and part[0] is None
              and _NAME.fullmatch(str(name))]
    pending: list[tuple[str, Any]] = [("body", request["json"])] if request["json_body"] else []
    while pending:
        path, value = pending.pop(0)
        if isinstance(value, dict) and path.count(".") < 4:
            for key, item in value.items():
                if _NAME.fullmatch(str(key)):
                    names.append(f"{path}.{key}")
                    pending.append((f"{path}.{key}", item))
    return names


def mutated(request: dict[str, Any], kind: str, turn: int, rng: random.Random,
            known: list[str] = ()) -> Mutation | None:
    """
    The request with one mutation (`MUTATIONS`): for a value, in its `(turn + k) % n`-th field of the n it has (k the
    mutation's place in `MUTATIONS`; JSON values,
    form fields, query and path parameters, and the `known` fields it lacks, added); for `duplicate_header`, a second
    `Authorization` (when it has one) or `Host`, in turn.

    :param request: The parts of the request (`_request`); changed.
    :param kind: The mutation.
    :param turn: How many of this kind the route has had.
    :param rng: Picks the number and the surrogate.
    :param known: Named fields (`named_fields`) the route's other cases had: each is mutated even when this case
        lacks it, so that every field of a route gets every mutation.
    :returns: The raw request, or None when there is nothing to mutate (no field; no JSON body for two types).
    """
    if kind == "duplicate_header":
        names = [name for name in ("Authorization", "Host") if name == "Host" or name in request["headers"]]
        name = names[turn % len(names)]
        method, target, headers, body = _prepared(request)
        if name == "Host":
            headers.append(("Host", urlsplit(request["url"]).netloc))
        headers.append((name, "Bearer not-the-key" if name == "Authorization" else "other.example:1"))
        return Mutation(kind, f"header {name}", method, target, headers, body, must_refuse=True)
    if kind == "two_content_types" and not request["json_body"]:
        return None
    slots = _slots(request, known)
    if not slots:
        return None
    where, put = slots[(turn + MUTATIONS.index(kind)) % len(slots)]  # the kinds of one round on different fields
    put(MARKER)
    method, target, headers, body = _prepared(request)
    number, code = rng.choice(NON_FINITE), rng.randrange(0xD800, 0xE000)
    surrogate = chr(code).encode("utf-8", "surrogatepass")
    in_json = where.startswith("body") and request["json_body"]
    if in_json:
        value = {"non_finite": number.encode(), "two_content_types": number.encode(),
                 "surrogate_escape": f'"\\u{code:04x}"'.encode(), "surrogate_bytes": b'"' + surrogate + b'"'}[kind]
        body = body.replace(json.dumps(MARKER).encode(), value)
    else:
        raw = surrogate if kind.startswith("surrogate") else number.encode()
        body = body.replace(MARKER.encode(), raw)
        target = target.replace(_URL_MARKER, "".join(f"%{byte:02X}" for byte in raw))
    if kind == "two_content_types":
        headers = [(name, value) for name, value in headers if name.lower() != "content-type"]
        headers += [("Content-Type", "application/json"), ("Content-Type", "text/plain")]
    return Mutation(kind, where, method, target, headers, body, must_refuse=in_json)


def _slots(request: dict[str, Any], known: list[str]) -> list[tuple[str, Callable[[Any], None]]]:
    """Each field of a request and each `known` one it lacks, in a fixed order, as (where, a function putting a value
    there)."""
    slots: list[tuple[str, Callable[[Any], None]]] = []

    def setter(container: Any, key: Any) -> Callable[[Any], None]:
        return lambda value: container.__setitem__(key, value)

    if request["json_body"]:
        request["json"] = json.loads(json.dumps(request["json"]))  # a copy
        if isinstance(request["json"], (dict, list)):
            pending: list[tuple[str, Any]] = [("body", request["json"])]
            while pending:
                path, value = pending.pop(0)
                items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) \
                    else ()
                for key, item in items:
                    where = f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}"
                    slots.append((where, setter(value, key)))
                    pending.append((where, item))
        if not slots:  # a scalar, an empty object or list: the body itself
            slots.append(("body", setter(request, "json")))
    for index, (name, part) in enumerate(request["files"] or ()):
        if isinstance(part, tuple) and part[0] is None:  # a form field, not a file
            slots.append((f"form.{name}", lambda value, index=index, name=name: request["files"].__setitem__(
                index, (name, (None, value)))))
    if isinstance(request["params"], dict):
        request["params"] = dict(request["params"])
        slots += [(f"query.{key}", setter(request["params"], key)) for key in sorted(request["params"])]
    segments = urlsplit(request["url"]).path.split("/")
    for index in range(2, len(segments)):
        if segments[index] and segments[index - 1] in ("kbs", "jobs"):  # `/kbs/{kb}`, `/index/jobs/{job_id}`

            def put_segment(value: Any, index: int = index) -> None:
                parts = urlsplit(request["url"])
                path = "/".join([*segments[:index], quote(value, safe=""), *segments[index + 1:]])
                request["url"] = parts._replace(path=path).geturl()

            slots.append((f"path.{segments[index - 1]}", put_segment))
    present = {where for where, _ in slots}
    for where in known:
        if where in present:
            continue
        location, _, rest = where.partition(".")
        if location == "query":
            request["params"] = dict(request["params"] or {})
            slots.append((where, setter(request["params"], rest)))
        elif location == "form" and request["files"] is not None:
            slots.append((where, lambda value, name=rest: request["files"].append((name, (None, value)))))
        elif location == "body" and request["json_body"]:
            *parents, key = rest.split(".")
            parent = request["json"]
            for part in parents:
                parent = parent.get(part) if isinstance(parent, dict) else None
            if isinstance(parent, dict):
                slots.append((where, setter(parent, key)))
    return slots


def _prepared(request: dict[str, Any]) -> tuple[str, str, list[tuple[str, str]], bytes]:
    """The request as `requests` would send it: method, target (path and query), headers (no length), body."""
    prepared = requests.Request(method=request["method"], url=request["url"], headers=request["headers"],
                                json=request["json"] if request["json_body"] else None, data=request["data"],
                                files=request["files"], params=request["params"]).prepare()
    parts = urlsplit(prepared.url)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    headers = [(name, value) for name, value in prepared.headers.items() if name.lower() != "content-length"]
    body = prepared.body or b""
    return prepared.method, target, headers, body if isinstance(body, bytes) else body.encode()


def send_raw(url: str, mutation: Mutation) -> tuple[int, str]:
    """Send a mutated request as it is (duplicate headers and raw bytes kept); its status and text."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=REQUEST_TIMEOUT_S)
    try:
        connection.putrequest(mutation.method, mutation.target, skip_host=True, skip_accept_encoding=True)
        if not any(name.lower() == "host" for name, _ in mutation.headers):
            connection.putheader("Host", parts.netloc)
        for name, value in mutation.headers:
            connection.putheader(name, value)
        connection.putheader("Content-Length", str(len(mutation.body)))
        connection.endheaders(mutation.body)
        response = connection.getresponse()
        return response.status, response.read().decode("utf-8", "replace")
    finally:
        connection.close()


def _record(result: RouteResult, problem: str, example: str) -> None:
    result.examples.setdefault(problem, example)


def _internal_name(status: int, text: str, sent: str) -> str | None:
    """The first internal name an error answer's body says and its request (`sent`) did not, if any."""
    if status < 400:
        return None
    sent = sent.lower()
    for match in INTERNAL_NAMES.finditer(text):
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


def mcp_tools(url: str, headers: dict[str, str], session: requests.Session) -> set[str] | None:
    """The names of the server's MCP tools (`tools/list`), or None when it serves no MCP."""
    call = {"jsonrpc": "2.0", "id": 0, "method": "tools/list"}
    try:
        response = session.post(f"{url}/mcp", json=call, headers={**headers, **MCP_HEADERS}, timeout=REQUEST_TIMEOUT_S)
    except requests.RequestException:
        return None
    data = next((line[5:] for line in response.text.splitlines() if line.startswith("data:")), response.text)
    try:
        return {tool["name"] for tool in json.loads(data)["result"]["tools"]}
    except (ValueError, KeyError, TypeError):
        return None


def fuzz(url: str, *, cases: int, key: str | None, operations: Iterable[str] = FUZZED_OPERATIONS,
         seed: int | None = None) -> dict[str, RouteResult]:
    """
    Fuzz the routes of a running server from its OpenAPI document with all of schemathesis' checks, each case sent
    once more mutated, and the MCP tools with the bodies of their routes.

    The cases are shared out between the OpenAPI routes; a route whose inputs run out (`GET /v1/models` has none)
    leaves its share to the others. MCP's cases (`POST /mcp` among `operations`) come on top: one per generated ask
    and retrieve body.

    :param url: The server's base URL.
    :param cases: How many generated requests to send to the OpenAPI routes in all.
    :param key: The bearer key, when the server has keys.
    :param operations: The routes, as `METHOD /path` of the OpenAPI document, and `POST /mcp`.
    :param seed: Generate the same cases each time (None: new ones each run).
    :returns: Per route, what was found; a route missing from the document (or MCP when not served) has
        `not_generated` set and no cases.
    """
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json", config=schemathesis.Config(), headers=headers)
    results = {label: RouteResult() for label in operations}
    pending = []
    for label, result in results.items():
        if label == MCP:
            continue
        method, path = label.split(" ", 1)
        try:
            pending.append((label, schema[path][method]))
        except LookupError:  # schemathesis' OperationNotFound, or no such method
            result.not_generated = "not in the OpenAPI document"
    remaining = cases
    with requests.Session() as session:
        tools = mcp_tools(url, headers, session) if MCP in results else None
        if MCP in results and tools is None:
            results[MCP].not_generated = "no MCP tools served (tools/list)"
        fuzzer = _Fuzzer(url=url, headers=headers, session=session, seed=seed,
                         mcp=results[MCP] if tools else None, tools=tools or set())
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


def _statuses(counter: Counter) -> str:
    return " ".join(f"{status}x{count}" for status, count in sorted(counter.items()))


def report(results: dict[str, RouteResult], seconds: float | None = None) -> list[str]:
    """The per-route table, the mutations' statuses and fields, the totals and each distinct problem with its
    reproduction."""
    width = max(len(label) for label in results)
    lines = [f"{'route':<{width}}  {'cases':>5}  {'5xx':>4}  {'undoc':>5}  {'leaks':>5}  {'other':>5}  "
             f"{'mutated':>7}  {'accepted':>8}  statuses"]
    for label, result in results.items():
        mutated_count = sum(sum(counter.values()) for counter in result.mutated.values())
        lines.append(f"{label:<{width}}  {result.cases:>5}  {result.server_errors:>4}  "
                     f"{sum(result.undocumented.values()):>5}  {result.leaks:>5}  "
                     f"{sum(result.other_failures.values()):>5}  {mutated_count:>7}  {result.mutated_accepted:>8}  "
                     f"{_statuses(result.statuses)}")
    by_kind = {kind: sum((r.mutated.get(kind, Counter()) for r in results.values()), Counter()) for kind in MUTATIONS}
    lines.append("mutations: " + "; ".join(f"{kind} {sum(counter.values())} ({_statuses(counter)})"
                                           for kind, counter in by_kind.items()))
    for label, result in results.items():
        if result.mutated_fields:
            named = sorted(where for where in result.mutated_fields if _FIELD.fullmatch(where))
            others = len(result.mutated_fields) - len(named)
            lines.append(f"{label} mutated in: {', '.join(named)}"
                         + (f" and {others} fields of generated names" if others else ""))
    total = sum(r.cases for r in results.values())
    errors = sum(r.server_errors for r in results.values())
    undocumented = sum(sum(r.undocumented.values()) for r in results.values())
    leaks = sum(r.leaks for r in results.values())
    other = sum(sum(r.other_failures.values()) for r in results.values())
    mutated_total = sum(sum(counter.values()) for counter in by_kind.values())
    accepted = sum(r.mutated_accepted for r in results.values())
    took = f" in {seconds:.0f} s" if seconds is not None else ""
    mcp = f" ({results[MCP].cases} of them MCP tool calls)" if MCP in results else ""
    lines.append(f"{total} cases{mcp} and {mutated_total} mutated ones{took}: {errors} server errors, {undocumented} "
                 f"undocumented statuses, {leaks} error bodies naming internals, {accepted} mutations accepted, "
                 f"{other} other check failures")
    for label, result in results.items():
        if result.not_generated:
            lines.append(f"{label}: {result.not_generated}")
        for problem, example in result.examples.items():
            lines.append(f"{label}: {problem}\n    {example}")
    return lines


@contextlib.contextmanager
def own_server(folder: Path) -> Iterator[tuple[str, str]]:
    """
    `gatehouse serve` with ask, retrieve, index and MCP over a copy of the data directory, on a free loopback port,
    with one bearer key (tenant `public`, no request rate limit: the fuzzer sends more than the default 600 a minute).

    :param folder: A scratch folder for the copy, the manifest and the server's log.
    :returns: (yields) Its base URL and its key.
    :raises RuntimeError: When it exits before it serves (its log says why).
    """
    data = folder / "data"
    if data_dir().is_dir():
        shutil.copytree(data_dir(), data, ignore=shutil.ignore_patterns("serve", "*.lock", ".lock"))
    key = secrets.token_urlsafe(24)
    manifest = folder / "hayhooks.yml"
    manifest.write_text(yaml.safe_dump(fuzz_manifest(FUZZ_KEY_VARIABLE)), encoding="utf-8")
    env = {**os.environ, "GATEHOUSE_DATA_DIR": str(data), FUZZ_KEY_VARIABLE: key}
    with serve_process(manifest, folder / "server.log", deployments=3, what="the fuzzer", env=env, cwd=folder) as url:
        yield url, key


def fuzz_manifest(key_variable: str) -> dict[str, Any]:
    """The serving manifest of a server to fuzz: ask, retrieve, index and MCP, one key (tenant `public`) whose
    requests are not rate-limited."""
    return {
        "pipelines": {kind: {"pipeline": str(pipeline_path(kind)), "kind": kind}
                      for kind in ("ask", "retrieve", "index")},
        "auth": {"keys": [{"env": key_variable, "tenants": ["public"], "requests_per_minute": 0}]},
        "mcp": True,
    }


def main() -> None:
    """Command line entry point: exit status 1 on a server error, an undocumented status, an error body naming
    internals, an accepted mutation or a route that could not be fuzzed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=1000,
                        help="generated requests to send to the OpenAPI routes, shared out between them (each is sent "
                             "once more mutated; MCP's come on top)")
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
