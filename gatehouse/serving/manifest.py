"""
The serving manifest (`hayhooks.yml`): what `gatehouse serve` deploys and how it guards it.

Usage:
```python
from gatehouse.serving.manifest import load_manifest

manifest = load_manifest()            # <project>/hayhooks.yml, or GATEHOUSE_SERVE_MANIFEST
manifest.pipelines["ask"].kind        # "ask"
```
"""

import inspect
import ipaddress
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gatehouse.settings import project_path

KINDS = ("ask", "retrieve", "index")
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("json", "text")
LOOPBACK_HOSTS = {"127.0.0.1", "::1", "localhost"}
HOST_NAME = re.compile(r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)*")


class ManifestError(ValueError):
    """The manifest is missing, unreadable or names something invalid."""


@dataclass(frozen=True)
class DeployedPipeline:
    """One pipeline to deploy: its Hayhooks name, its YAML file and what it serves."""

    name: str
    pipeline: Path
    kind: str


@dataclass(frozen=True)
class KeySpec:
    """An auth key: the environment variable holding the secret, its tenants, whether it may deploy."""

    env: str
    tenants: tuple[str, ...]
    admin: bool = False
    requests_per_minute: int | None = None  # None: the manifest's limits.requests_per_minute
    max_concurrent_requests: int | None = None  # None: the manifest's limits.max_concurrent_requests


@dataclass(frozen=True)
class LogSettings:
    """The `logging` section: the log line format and whether questions are logged (redacted) for debugging."""

    format: str = "json"
    log_queries: bool = False


@dataclass(frozen=True)
class Manifest:
    """The parsed `hayhooks.yml`."""

    path: Path
    host: str = "127.0.0.1"
    port: int = 1416
    log_level: str = "info"
    logging: LogSettings = field(default_factory=LogSettings)
    pipelines: dict[str, DeployedPipeline] = field(default_factory=dict)
    allowed_modules: tuple[str, ...] = ()  # besides Gatehouse's own (gatehouse.pipelines.ALLOWED_MODULES)
    keys: tuple[KeySpec, ...] = ()
    allow_remote_without_keys: bool = False
    allowed_hosts: tuple[str, ...] = ()  # Host names answered besides loopback ones (lower case, no port)
    trusted_proxies: tuple[str, ...] = ()  # addresses or networks whose X-Forwarded-For/-Proto are believed
    mcp: bool = True
    cors_allow_origins: tuple[str, ...] = ()
    max_body_bytes: int = 10 * 1024 * 1024
    max_header_bytes: int = 65536  # the request line and headers of one request
    max_headers: int = 100  # header lines in one request
    header_timeout_s: float = 10.0  # a connection's next request headers must be complete this soon
    body_timeout_s: float = 60.0  # a request's body must be complete this soon after its headers
    max_connections: int | None = None  # connections open at once; None: from the descriptor limit (http_limits)
    max_query_chars: int = 2000  # the ask pipeline's input guardrail's max_query_chars (see `question_limit`)
    request_timeout_s: float = 300.0  # an ask's whole time budget, LLM calls and retries included
    requests_per_minute: int = 600  # per caller (API key, or client address without keys); 0 = no limit
    max_concurrent_requests: int = 2  # per caller, requests running at once; 0 = no cap
    ingest_workers: int = 1  # files of upload jobs indexing at once
    max_queued_jobs: int = 10  # upload jobs waiting for a worker; one more is refused with 429
    max_queued_jobs_per_tenant: int = 5  # of those, how many one tenant may hold
    ingest_job_history: int = 1000  # finished upload jobs kept in memory (and reported); older ones are forgotten
    ingest_job_lease_s: float = 30.0  # PostgreSQL jobs: a running job's lease; one not renewed is taken over
    processes: int = 1  # server processes on one port (more than 1 needs the PostgreSQL store)


def default_manifest_path() -> Path:
    """`GATEHOUSE_SERVE_MANIFEST`, else `<project>/hayhooks.yml`."""
    return Path(os.environ.get("GATEHOUSE_SERVE_MANIFEST") or project_path("hayhooks.yml")).resolve()


def _require(condition: bool, path: Path, message: str) -> None:
    if not condition:
        raise ManifestError(f"{path}: {message}")


def _pipelines(raw: Any, path: Path) -> dict[str, DeployedPipeline]:
    _require(isinstance(raw, dict) and raw, path, "`pipelines` must map names to {pipeline, kind}.")
    pipelines = {}
    for name, entry in raw.items():
        _require(isinstance(name, str) and name.replace("_", "").replace("-", "").isalnum(), path,
                 f"pipeline name {name!r} must be letters, digits, '-' or '_'.")
        _require(isinstance(entry, dict) and "pipeline" in entry, path, f"pipelines.{name} needs a `pipeline` file.")
        kind = entry.get("kind", name)
        _require(kind in KINDS, path, f"pipelines.{name}.kind is {kind!r}; use one of {', '.join(KINDS)}.")
        file = (path.parent / str(entry["pipeline"])).resolve()
        _require(file.is_file(), path, f"pipelines.{name}.pipeline: no file at {file}.")
        pipelines[name] = DeployedPipeline(name=name, pipeline=file, kind=kind)
    return pipelines


def input_guardrails_specs(pipelines: dict[str, DeployedPipeline], path: Path) -> list[dict[str, Any]]:
    """
    The input guardrails of the deployed ask pipelines, as their YAML declares them (`type`, `init_parameters`): the
    server applies their rules where a request does not reach them (the longest question, a search's query, an Open
    WebUI task's instructions).

    :param pipelines: The manifest's pipelines.
    :param path: The manifest, named in an error.
    :raises ManifestError: When an ask pipeline's YAML cannot be read.
    """
    from gatehouse.components.guardrails.input_guardrails import InputGuardrails

    guardrails = f"{InputGuardrails.__module__}.{InputGuardrails.__name__}"
    specs = []
    for name, deployed in pipelines.items():
        if deployed.kind != "ask":
            continue
        try:
            spec = yaml.safe_load(deployed.pipeline.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as error:
            raise ManifestError(f"{path}: pipelines.{name}.pipeline cannot be read: {error}") from error
        components = (spec.get("components") if isinstance(spec, dict) else None) or {}
        specs += [{"type": guardrails, "init_parameters": component.get("init_parameters") or {}}
                  for component in components.values()
                  if isinstance(component, dict) and component.get("type") == guardrails]
    return specs


def question_limit(pipelines: dict[str, DeployedPipeline], path: Path) -> int:
    """
    The longest question the server accepts: `max_query_chars` of the input guardrail of the deployed ask pipeline (the
    smallest, should there be several), read from its YAML, so the server refuses exactly the questions that guardrail
    would and the limit is one number in one place; the guardrail's default when no ask pipeline states one.

    :param pipelines: The manifest's pipelines.
    :param path: The manifest, named in an error.
    :raises ManifestError: When an ask pipeline's YAML cannot be read.
    """
    from gatehouse.components.guardrails.input_guardrails import InputGuardrails

    default = inspect.signature(InputGuardrails.__init__).parameters["max_query_chars"].default
    return min((int(spec["init_parameters"].get("max_query_chars", default))
                for spec in input_guardrails_specs(pipelines, path)), default=default)


def _keys(raw: Any, path: Path) -> tuple[KeySpec, ...]:
    _require(isinstance(raw, list), path, "`auth.keys` must be a list.")
    keys = []
    for index, entry in enumerate(raw):
        where = f"auth.keys[{index}]"
        _require(isinstance(entry, dict) and isinstance(entry.get("env"), str), path,
                 f"{where} needs `env`: the NAME of the environment variable holding the key.")
        tenants = entry.get("tenants")
        _require(isinstance(tenants, list) and tenants and all(isinstance(t, str) for t in tenants), path,
                 f"{where} needs `tenants`: a non-empty list of tenant names.")
        limits = {name: _count(entry.get(name), path, f"{where}.{name}")
                  for name in ("requests_per_minute", "max_concurrent_requests") if entry.get(name) is not None}
        keys.append(KeySpec(env=entry["env"], tenants=tuple(tenants), admin=bool(entry.get("admin", False)), **limits))
    return tuple(keys)


def _count(value: Any, path: Path, where: str) -> int:
    """A limit that is a whole number, 0 or more (0 switches it off)."""
    _require(isinstance(value, int) and not isinstance(value, bool) and value >= 0, path,
             f"{where} must be a whole number, 0 or more (0: no limit), not {value!r}.")
    return value


def _allowed_hosts(raw: Any, path: Path) -> tuple[str, ...]:
    """Host names and IP addresses, lower case, without brackets (an IPv6 address may be written `[::1]`)."""
    _require(isinstance(raw, list), path, "`allowed_hosts` must be a list of host names.")
    hosts = []
    for index, entry in enumerate(raw):
        host = str(entry).strip().lower().removeprefix("[").removesuffix("]").removesuffix(".")
        try:
            ipaddress.ip_address(host)
        except ValueError:
            _require(isinstance(entry, str) and len(host) <= 253 and HOST_NAME.fullmatch(host) is not None, path,
                     f"allowed_hosts[{index}] is {entry!r}: write a host name or IP address alone, without scheme, "
                     "port, path or wildcard (e.g. gatehouse.internal).")
        hosts.append(host)
    return tuple(hosts)


def _trusted_proxies(raw: Any, path: Path) -> tuple[str, ...]:
    """IP addresses or networks (`10.0.0.0/8`)."""
    _require(isinstance(raw, list), path, "`trusted_proxies` must be a list of IP addresses or networks.")
    for index, entry in enumerate(raw):
        try:
            ipaddress.ip_network(str(entry), strict=False)
        except ValueError:
            raise ManifestError(f"{path}: trusted_proxies[{index}] is {entry!r}: write an IP address (10.0.0.5) or "
                                "network (10.0.0.0/8) of a reverse proxy in front of the server.") from None
    return tuple(str(entry) for entry in raw)


def _port(value: Any, path: Path) -> int:
    """A TCP port, 1 to 65535."""
    _require(isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 65535, path,
             f"port must be a whole number from 1 to 65535, not {value!r}.")
    return value


def _at_least(value: Any, minimum: float, path: Path, where: str, *, whole: bool = True) -> Any:
    """A limit that cannot be switched off: a number (whole, unless `whole` is false), at least `minimum`."""
    kinds = int if whole else (int, float)
    _require(isinstance(value, kinds) and not isinstance(value, bool) and value >= minimum, path,
             f"{where} must be a {'whole ' if whole else ''}number, at least {minimum}, not {value!r}.")
    return value


def _log_settings(raw: Any, path: Path) -> LogSettings:
    _require(isinstance(raw, dict), path, "`logging` must be a mapping {format, log_queries}.")
    log_format = str(raw.get("format", "json")).lower()
    _require(log_format in LOG_FORMATS, path, f"logging.format {log_format!r}; use one of {', '.join(LOG_FORMATS)}.")
    log_queries = raw.get("log_queries", False)
    _require(isinstance(log_queries, bool), path, f"logging.log_queries must be true or false, not {log_queries!r}.")
    return LogSettings(format=log_format, log_queries=log_queries)


def load_manifest(path: str | Path | None = None) -> Manifest:
    """
    Read and validate a serving manifest.

    :param path: The YAML file; default `default_manifest_path()`.
    :returns: The manifest, pipeline files resolved relative to it.
    :raises ManifestError: naming the file and the field at fault.
    """
    path = Path(path).resolve() if path else default_manifest_path()
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as error:
        raise ManifestError(f"cannot read the serving manifest {path}: {error}") from error
    _require(isinstance(raw, dict), path, "the manifest must be a mapping.")
    auth = raw.get("auth") or {}
    cors = raw.get("cors") or {}
    limits = raw.get("limits") or {}
    log_level = str(raw.get("log_level", "info")).lower()
    _require(log_level in LOG_LEVELS, path, f"log_level {log_level!r}; use one of {', '.join(LOG_LEVELS)}.")
    modules = raw.get("allowed_modules") or []
    _require(isinstance(modules, list) and "*" not in modules, path,
             "`allowed_modules` must list module patterns (a bare '*' would allow any class).")
    _require("max_query_chars" not in limits, path,
             "limits.max_query_chars is no longer read: the longest question is max_query_chars of the ask pipeline's "
             "input guardrail (input_guard in pipelines/ask.yml), which the server applies too; set it there.")
    _require("openwebui_sources" not in raw, path,
             "openwebui_sources is no longer read: every chat answer, streamed or not, carries Open WebUI sources and "
             "[n] markers (docs/serving.md, Open WebUI); remove the line.")
    pipelines = _pipelines(raw.get("pipelines"), path)
    manifest = Manifest(
        path=path,
        host=str(raw.get("host", "127.0.0.1")),
        port=_port(raw.get("port", 1416), path),
        log_level=log_level,
        logging=_log_settings(raw.get("logging") or {}, path),
        pipelines=pipelines,
        allowed_modules=tuple(modules),
        keys=_keys(auth.get("keys") or [], path),
        allow_remote_without_keys=bool(auth.get("allow_remote_without_keys", False)),
        allowed_hosts=_allowed_hosts(raw.get("allowed_hosts") or [], path),
        trusted_proxies=_trusted_proxies(raw.get("trusted_proxies") or [], path),
        mcp=bool(raw.get("mcp", True)),
        cors_allow_origins=tuple(cors.get("allow_origins") or ()),
        max_body_bytes=int(limits.get("max_body_bytes", 10 * 1024 * 1024)),
        max_header_bytes=_at_least(limits.get("max_header_bytes", 65536), 1024, path, "limits.max_header_bytes"),
        max_headers=_at_least(limits.get("max_headers", 100), 8, path, "limits.max_headers"),
        header_timeout_s=float(_at_least(limits.get("header_timeout_s", 10.0), 0.1, path, "limits.header_timeout_s",
                                         whole=False)),
        body_timeout_s=float(_at_least(limits.get("body_timeout_s", 60.0), 0.1, path, "limits.body_timeout_s",
                                       whole=False)),
        max_connections=None if limits.get("max_connections") is None else _at_least(
            limits["max_connections"], 1, path, "limits.max_connections"),
        max_query_chars=question_limit(pipelines, path),
        request_timeout_s=float(limits.get("request_timeout_s", 300.0)),
        requests_per_minute=_count(limits.get("requests_per_minute", 600), path, "limits.requests_per_minute"),
        max_concurrent_requests=_count(limits.get("max_concurrent_requests", 2), path,
                                       "limits.max_concurrent_requests"),
        ingest_workers=int(limits.get("ingest_workers", 1)),
        max_queued_jobs=int(limits.get("max_queued_jobs", 10)),
        max_queued_jobs_per_tenant=_count(limits.get("max_queued_jobs_per_tenant", 5), path,
                                          "limits.max_queued_jobs_per_tenant"),
        ingest_job_history=int(limits.get("ingest_job_history", 1000)),
        ingest_job_lease_s=float(_at_least(limits.get("ingest_job_lease_s", 30.0), 1, path,
                                           "limits.ingest_job_lease_s", whole=False)),
        processes=_at_least(raw.get("processes", 1), 1, path, "processes"),
    )
    _require(manifest.max_body_bytes > 0 and manifest.request_timeout_s > 0, path,
             "limits must be positive.")
    _require(manifest.ingest_workers >= 1 and manifest.ingest_job_history >= 1 and manifest.max_queued_jobs >= 0,
             path, "limits.ingest_workers and limits.ingest_job_history must be at least 1, limits.max_queued_jobs "
                   "at least 0.")
    return manifest
