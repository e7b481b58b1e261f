"""
Metrics, structured logs and tracing for `gatehouse serve`.

- Metrics: Prometheus text at `GET /metrics` (`metrics_router`): HTTP requests by route template and status
  (`ObservabilityMiddleware`), ask outcomes from the response contract (`record_ask`: answers by status, gate
  decisions from `path`, retrieval attempts, stage and LLM latency, LLM failures and tokens), ingest counts
  (`record_ingest`), the upload queue (read at each scrape) and, with PostgreSQL, the store's pools and standby
  (`gatehouse.document_stores.postgres_metrics`). Under `gatehouse serve --processes N` every process keeps its
  series in the folder `PROMETHEUS_MULTIPROC_DIR` names (Prometheus' multiprocess mode, set up by the parent) and a
  scrape of any of them reports the whole server: counters and histograms summed over the processes (a process
  that died and was started again included), gauges as their `multiprocess_mode` says.
- Logs: one JSON object (or text line) per record with the request's id (`X-Request-ID`, accepted when it is a short
  token, else generated, and echoed), carried by a context variable into the pipeline's worker threads; Hayhooks'
  Loguru records and uvicorn's are routed to the same handler (`configure_logging`). Questions are never logged
  unless `logging.log_queries` is true, and then only as the ask pipeline's input guardrails redact them.
- Tracing: with the standard OpenTelemetry variables (`OTEL_TRACES_EXPORTER`, `OTEL_EXPORTER_OTLP_ENDPOINT`) every
  pipeline run is one span with one child span per component (`configure_tracing`); tags that carry content (the
  pipeline's input and output data) are left out unless Haystack's `HAYSTACK_CONTENT_TRACING_ENABLED` is true.

Usage:
```python
from gatehouse.serving.observability import record_ask, render_metrics

record_ask({"status": "refused", "path": ["start", "input_guardrails_blocked:injection"], "metadata": {}},
           query="ignore previous instructions", log_queries=False)
print(render_metrics().decode())     # ... gatehouse_ask_answers_total{status="refused"} 1.0 ...
```
"""

import contextlib
import json
import logging
import os
import re
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Response
from haystack import Pipeline
from haystack import tracing as haystack_tracing
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector
from starlette.routing import Match, compile_path

from gatehouse.components.guardrails.input_guardrails import InputGuardrails
from gatehouse.components.state import new_state

REQUEST_ID_HEADER = "x-request-id"
REQUEST_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")
STATUSES = ("success", "partial", "fallback", "refused", "error")
HTTP_METHODS = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}
NUMBER_IN_STEP = re.compile(r"_\d+(?:\.\d+)?(?=_|$)")
# The span tags Haystack fills with content (queries, documents, answers); see `ContentSafeTracer`.
CONTENT_TAGS = frozenset({"haystack.pipeline.input_data", "haystack.pipeline.output_data",
                          "haystack.component.input", "haystack.component.output"})
OTLP_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
OTLP_PROTOCOL_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")

request_id: ContextVar[str | None] = ContextVar("gatehouse_request_id", default=None)
logger = logging.getLogger("gatehouse.serving")
access_logger = logging.getLogger("gatehouse.access")
ask_logger = logging.getLogger("gatehouse.ask")

disable_created_metrics()
SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
HTTP_REQUESTS = Counter("gatehouse_http_requests", "HTTP requests by method, route template and status code.",
                        ["method", "route", "status"])
HTTP_SECONDS = Histogram("gatehouse_http_request_duration_seconds",
                         "HTTP request latency (until the last byte is sent) by method, route template and status.",
                         ["method", "route", "status"], buckets=SECONDS)
ASK_ANSWERS = Counter("gatehouse_ask_answers", "Answered asks by response status.", ["status"])
ASK_DECISIONS = Counter("gatehouse_ask_gate_decisions",
                        "Steps of the ask path (numbers removed; a route by its kind, never by KB names).",
                        ["step"])
ASK_ATTEMPTS = Histogram("gatehouse_ask_retrieval_attempts", "Retrieval attempts per ask.",
                         buckets=(0, 1, 2, 3, 4, 5, 8))
ASK_STAGE_SECONDS = Histogram("gatehouse_ask_stage_seconds", "Time per ask pipeline stage.", ["stage"],
                              buckets=SECONDS)
LLM_SECONDS = Histogram("gatehouse_llm_seconds", "The LLM answerer's time per ask (retries included).", ["outcome"],
                        buckets=SECONDS)
LLM_ERRORS = Counter("gatehouse_llm_errors", "Asks whose language model call failed (generate_llm_failed).")
LLM_TOKENS = Counter("gatehouse_llm_tokens", "Language-model tokens reported by the server.", ["kind"])
CLIENT_TASKS = Counter("gatehouse_chat_client_tasks",
                       "Open WebUI background tasks (title, tags, follow-ups, queries) answered without the pipeline.",
                       ["task"])
SERVER_PROCESSES = Gauge("gatehouse_server_processes", "Server processes answering on the port (--processes N).",
                         multiprocess_mode="livesum")
SEARCH_REFUSALS = Counter("gatehouse_search_refusals",
                          "Searches (retrieve) the input guardrails refused, by violation (prompt_injection, ...).",
                          ["violation"])
INGEST_FILES = Counter("gatehouse_ingest_files", "Uploaded files by outcome.", ["outcome"])
INGEST_CHUNKS = Counter("gatehouse_ingest_chunks_written", "Chunks written by uploads.")
for _status in STATUSES:
    ASK_ANSWERS.labels(status=_status)
for _outcome in ("written", "skipped", "failed"):
    INGEST_FILES.labels(outcome=_outcome)
for _kind in ("prompt", "completion"):
    LLM_TOKENS.labels(kind=_kind)


class ObservabilityError(ValueError):
    """Tracing is asked for by the environment but cannot be set up (the message says what to change)."""


# -- metrics -----------------------------------------------------------------------------------------------------


def render_metrics(queues: Iterable[Mapping[str, int]] = ()) -> bytes:
    """
    The server's metrics in the Prometheus text format: this process's, or with `PROMETHEUS_MULTIPROC_DIR` set (the
    processes of `--processes N`) every process's, summed.

    :param queues: The upload queues' counts (`queued`, `running`, `tenants_waiting`), read at the scrape.
    """
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
    else:
        registry = REGISTRY
    text = generate_latest(registry)
    queues = list(queues)
    if queues:
        jobs = GaugeMetricFamily("gatehouse_ingest_jobs", "Upload jobs waiting and running (with PostgreSQL, every "
                                 "server's).", labels=["status"])
        for status in ("queued", "running"):
            jobs.add_metric([status], sum(queue[status] for queue in queues))
        tenants = GaugeMetricFamily("gatehouse_ingest_tenants_waiting", "Tenants with an upload job waiting.",
                                    value=sum(queue["tenants_waiting"] for queue in queues))
        extra = CollectorRegistry()
        extra.register(_Families([jobs, tenants]))
        text += generate_latest(extra)
    return text


class _Families:
    """A collector of metric families read at the scrape."""

    def __init__(self, families: list[Any]) -> None:
        self.families = families

    def collect(self) -> Iterator[Any]:
        """The families."""
        yield from self.families


def metrics_router(queues: Callable[[], Iterable[Mapping[str, int]]] = tuple) -> APIRouter:
    """
    `GET /metrics`: the Prometheus text format (behind the same auth as every route but `/status` and `/ready`).

    :param queues: Reads the upload queues' counts at each scrape (`IngestJobs.queue`); a store that cannot be read
        then leaves them out of that scrape.
    """
    from gatehouse.document_stores.errors import StoreUnavailableError

    router = APIRouter()
    SERVER_PROCESSES.set(1)

    @router.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        try:
            counts = list(queues())
        except StoreUnavailableError:
            counts = []
        return Response(content=render_metrics(counts), media_type=CONTENT_TYPE_LATEST)

    return router


def job_queues(index_pipelines: list[str]) -> Callable[[], list[dict[str, int]]]:
    """Reads the upload queues of the deployed index pipelines (their wrappers' `jobs.queue()`) for `/metrics`."""

    def read() -> list[dict[str, int]]:
        from hayhooks.server.pipelines.registry import registry

        wrappers = [registry.get(name) for name in index_pipelines]
        return [wrapper.jobs.queue() for wrapper in wrappers if wrapper is not None]

    return read


def gate_decisions(path: list[str], *, requested_kb: bool = False) -> list[str]:
    """
    The bounded metric labels of an ask's path, with nothing of a caller's or a document's in them: numbers removed
    (`attempt_0_score_0.41` -> `attempt_score`), and a route (`route_to_<kbs>`, also a part's `part_0_route_to_<kbs>`)
    labelled by its kind, since `/metrics` is read with any key and KB names are a tenant's own: `route_to_one_kb`,
    `route_to_several_kbs`, `route_to_all_kbs` (none chosen: every KB searched) or `route_to_requested_kb` (the
    request named the KB).

    :param path: The response's `path`.
    :param requested_kb: Whether the request named the knowledge base (`kb`).
    :returns: One label per step.
    """
    decisions = []
    for step in path:
        before, route, kbs = step.partition("route_to_")
        label = step if not route or before[-1:] not in ("", "_") else before + _route_kind(kbs, requested_kb)
        decisions.append(NUMBER_IN_STEP.sub("", label))
    return decisions


def _route_kind(kbs: str, requested_kb: bool) -> str:
    """The label of a route to `kbs` (`faq`, `faq+ops`, `all`) by its kind."""
    if requested_kb:
        return "route_to_requested_kb"
    if kbs == "all":
        return "route_to_all_kbs"
    return "route_to_several_kbs" if "+" in kbs else "route_to_one_kb"


def record_ask(response: Mapping[str, Any], *, query: str, log_queries: bool,
               pipeline: Pipeline | None = None, requested_kb: bool = False) -> None:
    """
    Count one ask's outcome from its response contract and log a one-line summary of it.

    :param response: The response contract (`status`, `path`, `metadata`).
    :param query: The question as the caller sent it; logged only when `log_queries`, redacted.
    :param log_queries: `logging.log_queries` of the manifest.
    :param pipeline: The ask pipeline, whose input guardrails redact a logged question (default guardrails without).
    :param requested_kb: Whether the request named the knowledge base (see `gate_decisions`).
    """
    status = str(response.get("status"))
    path = list(response.get("path") or [])
    metadata = response.get("metadata") or {}
    ASK_ANSWERS.labels(status=status).inc()
    for decision in gate_decisions(path, requested_kb=requested_kb):
        ASK_DECISIONS.labels(step=decision).inc()
    ASK_ATTEMPTS.observe(int(metadata.get("attempts") or 0))
    latency = metadata.get("latency_ms") or {}
    for stage, milliseconds in latency.items():
        if stage != "total":
            ASK_STAGE_SECONDS.labels(stage=stage).observe(float(milliseconds) / 1000.0)
    llm_failed = "generate_llm_failed" in path
    if llm_failed or "generate_llm" in path:
        LLM_SECONDS.labels(outcome="failed" if llm_failed else "replied").observe(
            float(latency.get("generation") or 0.0) / 1000.0)
    if llm_failed:
        LLM_ERRORS.inc()
    usage = metadata.get("usage") or {}
    for kind in ("prompt", "completion", "cached_prompt"):
        LLM_TOKENS.labels(kind=kind).inc(int(usage.get(f"{kind}_tokens") or 0))
    fields = {"status": status, "path": path, "attempts": metadata.get("attempts"), "kb": metadata.get("kb"),
              "tenant": metadata.get("tenant"), "generator": metadata.get("generator"),
              "latency_ms": latency.get("total")}
    if log_queries:
        fields["query"] = redact_query(query, pipeline)
    ask_logger.info("ask answered: %s", status, extra={"fields": fields})


def record_client_task(task: str) -> None:
    """Count one Open WebUI background task answered without the ask pipeline, and log it (its kind only)."""
    CLIENT_TASKS.labels(task=task).inc()
    ask_logger.info("client task answered: %s", task, extra={"fields": {"task": task}})


def record_search_refusal(violation: str) -> None:
    """Count one search the input guardrails refused, and log it (the violation only, never the query)."""
    SEARCH_REFUSALS.labels(violation=violation).inc()
    ask_logger.info("search refused: %s", violation, extra={"fields": {"violation": violation}})


def record_ingest(report: Mapping[str, Any]) -> None:
    """
    Count one upload from the index pipeline's writer report (`written`, `skipped`, `failed`, `totals`).

    :param report: `IndexWriter`'s report.
    """
    for outcome in ("written", "skipped", "failed"):
        INGEST_FILES.labels(outcome=outcome).inc(len(report.get(outcome) or []))
    INGEST_CHUNKS.inc(int((report.get("totals") or {}).get("chunks_written") or 0))


def redact_query(query: str, pipeline: Pipeline | None = None) -> str:
    """
    The question as the ask pipeline's input guardrails pass it on: cleaned, personal data and secrets replaced.

    :param query: The raw question.
    :param pipeline: The ask pipeline; its first `InputGuardrails` redacts (default `InputGuardrails()` without).
    :returns: The redacted question.
    """
    guard = next((instance for _, instance in (pipeline.walk() if pipeline is not None else [])
                  if isinstance(instance, InputGuardrails)), None) or InputGuardrails()
    routed = guard.run(state=new_state(query))
    return next(iter(routed.values()))["query"]


# -- HTTP: request ids, route templates, request metrics --------------------------------------------------------


def route_template(scope: dict[str, Any]) -> str:
    """
    The path template of the route that served `scope` (`/ask/run`, `/kbs/{kb}`): the router's choice, else (a request
    the guard refused before routing) the first of the app's own routes that matches; `unmatched` for none, `other`
    for a route of a router included under a prefix (FastAPI reports its template without the prefix).
    """
    route = scope.get("route")
    if route is None:
        router = getattr(scope.get("app"), "router", None)
        candidates = [r for r in getattr(router, "routes", []) if getattr(r, "path_format", None)]
        route = next((r for r in candidates if r.matches(scope)[0] is Match.FULL), None)
    template = getattr(route, "path_format", None)
    if template is None:
        return "unmatched"
    return template if compile_path(template)[0].fullmatch(scope["path"]) else "other"


def incoming_request_id(headers: list[tuple[bytes, bytes]]) -> str:
    """The caller's `X-Request-ID` when it is a short token (letters, digits, `._:-`, up to 64), else a new one."""
    for name, value in headers:
        if name.lower() == REQUEST_ID_HEADER.encode():
            candidate = value.decode("latin-1").strip()
            if REQUEST_ID_PATTERN.fullmatch(candidate):
                return candidate
    return uuid.uuid4().hex


class ObservabilityMiddleware:
    """
    ASGI middleware: a request id per HTTP request (context variable, `X-Request-ID` response header), request
    count and latency by route template and status, and one access log record.

    Added last in `build_app`, so it is outermost: requests refused by the guard (401, 413) are counted too.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = incoming_request_id(scope.get("headers") or [])
        token = request_id.set(rid)
        started = time.perf_counter()
        status = 500

        async def send_with_id(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != REQUEST_ID_HEADER.encode()]
                message = {**message, "headers": [*headers, (REQUEST_ID_HEADER.encode(), rid.encode())]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            elapsed = time.perf_counter() - started
            method = scope["method"] if scope["method"] in HTTP_METHODS else "other"
            route = route_template(scope)
            HTTP_REQUESTS.labels(method=method, route=route, status=str(status)).inc()
            HTTP_SECONDS.labels(method=method, route=route, status=str(status)).observe(elapsed)
            access_logger.info("%s %s %s", method, route, status, extra={"fields": {
                "method": method, "route": route, "status": status, "duration_ms": round(elapsed * 1000.0, 1)}})
            request_id.reset(token)


# -- logs --------------------------------------------------------------------------------------------------------


class RequestIdFilter(logging.Filter):
    """Stamps every record with the current request id (None outside a request)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Add `record.request_id`; never drops a record."""
        record.request_id = request_id.get()
        return True


def _message(record: logging.LogRecord) -> str:
    """The record's message; a message whose `%` arguments do not fit is kept as written, never lost."""
    try:
        return record.getMessage()
    except (TypeError, ValueError):
        return f"{record.msg} {record.args!r}"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: timestamp, level, logger, message, request_id, pid, the record's fields, trace
    ids."""

    def format(self, record: logging.LogRecord) -> str:
        """Render `record` as one line of JSON."""
        entry: dict[str, Any] = {
            "timestamp": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": _message(record),
            "request_id": getattr(record, "request_id", None),
            "pid": record.process,  # which process of `gatehouse serve --processes N`
        }
        entry.update(getattr(record, "fields", None) or {})
        span = haystack_tracing.tracer.current_span()
        if span is not None:
            entry.update({key: f"{value:0{32 if key == 'trace_id' else 16}x}" if isinstance(value, int) else str(value)
                          for key, value in span.get_correlation_data_for_logs().items()})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """`time level logger [request id] message key=value ...` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        """Render `record` as one line of text (an exception follows on its own lines)."""
        created = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        fields = " ".join(f"{key}={value}" for key, value in (getattr(record, "fields", None) or {}).items())
        line = (f"{created} {record.levelname} {record.name} [{getattr(record, 'request_id', None) or '-'}] "
                f"{_message(record)}{' ' + fields if fields else ''}")
        return f"{line}\n{self.formatException(record.exc_info)}" if record.exc_info else line


def configure_logging(*, log_format: str = "json", level: str = "info") -> logging.Handler:
    """
    Send the process's log records to stderr in one format: the standard library's (Gatehouse, uvicorn through
    Hayhooks' interception) and Hayhooks' Loguru records alike, each stamped with the request id.

    Hayhooks' MCP module logs tool arguments (the question) at debug level: its records below info are dropped.
    Call it before the app is built: Hayhooks' set-up then leaves uvicorn's loggers alone (only `fastapi`'s are routed
    through Loguru), so uvicorn's records keep their names and reach the handler directly (run uvicorn with
    `log_config=None`).

    :param log_format: `json` (one object per line) or `text`.
    :param level: The lowest level logged (`debug`, `info`, `warning`, `error`).
    :returns: The handler.
    """
    from hayhooks.server.logger import log
    from hayhooks.settings import settings

    settings.intercepted_loggers = ["fastapi"]  # an empty list would mean Hayhooks' default, uvicorn's included
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    handler.addFilter(RequestIdFilter())
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(level.upper())
    log.remove()
    # a format function: Loguru then leaves the traceback to the handler instead of appending it to the message
    log.add(handler, level=level.upper(), format=lambda _record: "{message}",
            filter={"hayhooks.server.utils.mcp_utils": "INFO"})
    return handler


# -- tracing -----------------------------------------------------------------------------------------------------


class ContentSafeTracer(haystack_tracing.Tracer):
    """
    A Haystack tracer that leaves out the span tags carrying content (`CONTENT_TAGS`: the pipeline's input data, the
    question among it) unless Haystack's content tracing (`HAYSTACK_CONTENT_TRACING_ENABLED=true`) is on.

    Haystack keeps `set_content_tag` behind that switch but passes a pipeline run's input as an ordinary tag.
    """

    def __init__(self, delegate: haystack_tracing.Tracer) -> None:
        self.delegate = delegate

    @contextlib.contextmanager
    def trace(self, operation_name: str, tags: dict[str, Any] | None = None,
              parent_span: haystack_tracing.Span | None = None) -> Iterator[haystack_tracing.Span]:
        """A span of the delegate, with the content tags removed."""
        if tags and not haystack_tracing.tracer.is_content_tracing_enabled:
            tags = {key: value for key, value in tags.items() if key not in CONTENT_TAGS}
        with self.delegate.trace(operation_name, tags=tags, parent_span=parent_span) as span:
            yield span

    def current_span(self) -> haystack_tracing.Span | None:
        """The delegate's current span."""
        return self.delegate.current_span()


def trace_exporters(environ: Mapping[str, str]) -> list[str]:
    """
    The span exporters the standard OpenTelemetry variables ask for: `OTEL_TRACES_EXPORTER` (comma-separated `otlp`,
    `console`, `none`), else `otlp` when an OTLP endpoint variable is set; none with `OTEL_SDK_DISABLED=true`.
    """
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    names = [name.strip().lower() for name in environ.get("OTEL_TRACES_EXPORTER", "").split(",") if name.strip()]
    if not names and any(environ.get(variable) for variable in OTLP_ENDPOINT_VARIABLES):
        names = ["otlp"]
    return [name for name in names if name != "none"]


def enable_haystack_tracing(provider: Any) -> None:
    """
    Trace Haystack pipelines (one span per run, one per component) to an OpenTelemetry tracer provider, without
    content tags (`ContentSafeTracer`).

    :param provider: An `opentelemetry.sdk.trace.TracerProvider`.
    """
    from haystack_integrations.tracing.opentelemetry import OpenTelemetryTracer

    haystack_tracing.enable_tracing(ContentSafeTracer(OpenTelemetryTracer(provider.get_tracer("gatehouse"))))


def configure_tracing(environ: Mapping[str, str] | None = None) -> bool:
    """
    Set up OpenTelemetry tracing when the standard variables ask for it (see `trace_exporters`): a tracer provider
    named `OTEL_SERVICE_NAME` (default `gatehouse`) with a batch processor per exporter, used by Haystack.

    Hayhooks' local trace buffer (`/traces`) is kept to Hayhooks' own request spans, which carry no content: it would
    record Haystack's pipeline span with the question in its tags.

    :param environ: The environment; default `os.environ`.
    :returns: Whether tracing was enabled.
    :raises ObservabilityError: for an unknown exporter or OTLP protocol, or when `gatehouse[otel]` is not installed.
    """
    from hayhooks.settings import settings

    environ = os.environ if environ is None else environ
    settings.tracing_include_haystack_spans = False
    exporters = trace_exporters(environ)
    if not exporters:
        return False
    unknown = sorted(set(exporters) - {"otlp", "console"})
    if unknown:
        raise ObservabilityError(f"OTEL_TRACES_EXPORTER names {', '.join(unknown)}; use otlp, console or none")
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError as error:
        raise ObservabilityError('tracing is configured by OTEL_* variables but OpenTelemetry is not installed: '
                                 'pip install "gatehouse[otel]"') from error
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: environ.get("OTEL_SERVICE_NAME", "gatehouse")}))
    for name in exporters:
        provider.add_span_processor(BatchSpanProcessor(_otlp_exporter(environ) if name == "otlp"
                                                       else ConsoleSpanExporter()))
    trace.set_tracer_provider(provider)
    enable_haystack_tracing(provider)
    logger.info("tracing enabled: %s", ", ".join(exporters))
    return True


def _otlp_exporter(environ: Mapping[str, str]) -> Any:
    """The OTLP/HTTP span exporter; it reads its endpoint, headers and timeout from the standard variables."""
    protocol = next((environ[variable] for variable in OTLP_PROTOCOL_VARIABLES if environ.get(variable)),
                    "http/protobuf").strip().lower()
    if protocol != "http/protobuf":
        raise ObservabilityError(f"OTLP protocol {protocol!r} (OTEL_EXPORTER_OTLP_PROTOCOL) is not supported; "
                                 "use http/protobuf")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()
