"""
`gatehouse serve`: Hayhooks with Gatehouse's pipelines, configured by the serving manifest (`hayhooks.yml`).

It writes a Hayhooks pipelines folder (one directory per deployed pipeline: the generic `pipeline_wrapper.py`
and a `gatehouse.yml`), builds Hayhooks' FastAPI app over it, puts `PrintableErrors` (what error answers quote of
the request escaped), `EdgeMiddleware` (duplicate headers, `Host`, cross-origin writes), `GuardMiddleware` (auth,
tenants, body limit) and `StreamEnd` (`data: [DONE]` after a chat stream) in front, narrows Hayhooks' generic routes
(only chat pipelines in `/v1/models`, no drawing, deployment and traces for admin keys only), serves the docs pages
from local files, adds the knowledge-base routes (`/kbs`) over the index pipeline's stores, the ingest-job routes
(`/index/jobs`), `/metrics` and `/ready` (readiness; `/status` is Hayhooks' liveness), mounts MCP at `/mcp` when
enabled and runs it with uvicorn, with bounds on request headers, bodies and connections
(`gatehouse.serving.http_limits`) and forwarded headers believed only from `trusted_proxies`.

Usage:
```python
from gatehouse.serving.manifest import load_manifest
from gatehouse.serving.server import build_app, prepare_deployments

manifest = load_manifest()
app = build_app(manifest, prepare_deployments(manifest))   # an ASGI app; `serve(manifest)` also runs it
```
"""

import contextlib
import ipaddress
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import yaml

from gatehouse.settings import data_dir
from gatehouse.serving.auth import ADMIN_PATHS, OPEN_PATHS, GuardMiddleware, KeyRing, rate_limiter
from gatehouse.serving.edge import SAFE_METHODS, EdgeMiddleware, PrintableErrors
from gatehouse.serving.manifest import LOOPBACK_HOSTS, Manifest

GENERIC_WRAPPER = Path(__file__).with_name("pipeline_wrapper.py")
# Hayhooks' generic OpenAI file upload: no Gatehouse pipeline takes it (uploads are `POST /{index}/run`): refused.
REMOVED_PATHS = ("/v1/files", "/files")
UNADVERTISED_PATHS = ("/draw/{pipeline_name}", "/v1/responses", "/responses", *REMOVED_PATHS)
CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
# What the pipeline routes answer beyond Hayhooks' 200 and 422, by kind (`POST /{name}/run`; chat for `ask`). An index
# pipeline's 202 and 429 are documented with its jobs (`gatehouse.serving.jobs`).
NOT_THE_TENANT = "The API key does not hold the tenant"
LLM_FAILED = "The LLM endpoint failed and no fallback answer could be made"
DATA_DIR_UNUSABLE = "The data directory cannot be used (read-only, full): the detail says what to do"
PIPELINE_ANSWERS = {
    "ask": {"403": NOT_THE_TENANT, "502": LLM_FAILED, "503": DATA_DIR_UNUSABLE},
    "retrieve": {"403": NOT_THE_TENANT, "503": DATA_DIR_UNUSABLE},
    "index": {"403": NOT_THE_TENANT, "415": "No uploaded file has a supported type",
              "500": "With `wait=true`: the ingest job failed", "503": DATA_DIR_UNUSABLE},
}
CHAT_ANSWERS = {"403": NOT_THE_TENANT, "404": "No pipeline of that name is deployed (`GET /v1/models` lists them)",
                "501": "The model is a pipeline that does not chat (retrieve, index)", "502": LLM_FAILED,
                "503": DATA_DIR_UNUSABLE}
CHAT_MESSAGE = {"type": "object", "required": ["role", "content"], "properties": {
    "role": {"enum": ["system", "user", "assistant"]},
    "content": {"anyOf": [{"type": "string"}, {"type": "array", "items": {
        "type": "object", "required": ["type", "text"],
        "properties": {"type": {"const": "text"}, "text": {"type": "string"}}}}]}}}
RETRY_AFTER = {"Retry-After": {"schema": {"type": "integer"}, "description": "seconds"}}
# The docs pages (`/docs`, `/redoc`) load Swagger UI and ReDoc from the fastapi-offline package's copies under this
# path, and their Content-Security-Policy lets them load nothing from another host (ReDoc shows a logo from its CDN).
DOCS_ASSETS = "/docs/static"
DOCS_POLICY = ("default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
               "img-src 'self' data:; font-src 'self' data:; worker-src 'self' blob:; connect-src 'self'; "
               "frame-ancestors 'self'")
ERROR_DETAIL = {"title": "ErrorDetail", "type": "object", "properties": {"detail": {"type": "string"}},
                "required": ["detail"]}


class ServeError(RuntimeError):
    """The server must not start as configured (the message says why and what to change)."""


def default_deploy_dir() -> Path:
    """Where the Hayhooks pipelines folder is written: `<data dir>/serve/pipelines`."""
    return data_dir() / "serve" / "pipelines"


def prepare_deployments(manifest: Manifest, deploy_dir: Path | None = None) -> Path:
    """
    Write the Hayhooks pipelines folder for the manifest (stale deployments are removed).

    :param manifest: The serving manifest.
    :param deploy_dir: The folder; default `default_deploy_dir()`.
    :returns: The folder, ready for `hayhooks run --pipelines-dir`.
    """
    deploy_dir = (deploy_dir or default_deploy_dir()).resolve()
    deploy_dir.mkdir(parents=True, exist_ok=True)
    for stale in deploy_dir.iterdir():
        if stale.is_dir() and stale.name not in manifest.pipelines:
            shutil.rmtree(stale)
    for name, deployed in manifest.pipelines.items():
        target = deploy_dir / name
        target.mkdir(exist_ok=True)
        spec = {"kind": deployed.kind, "pipeline": str(deployed.pipeline), "manifest": str(manifest.path)}
        # written beside and renamed: servers sharing a data directory never read half a file
        _write_atomically(target / "pipeline_wrapper.py", GENERIC_WRAPPER.read_text(encoding="utf-8"))
        _write_atomically(target / "gatehouse.yml", yaml.safe_dump(spec, sort_keys=False))
    return deploy_dir


def _write_atomically(path: Path, text: str) -> None:
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_text(text, encoding="utf-8")
    partial.replace(path)


def is_loopback(host: str) -> bool:
    """Whether binding to `host` keeps the server reachable from this machine only."""
    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(manifest: Manifest, host: str, *, allow_remote_without_keys: bool = False) -> None:
    """
    Refuse to expose an unauthenticated server beyond loopback.

    :raises ServeError: when `host` is not loopback, no auth key is configured and nobody said it is intended.
    """
    if manifest.keys or is_loopback(host) or allow_remote_without_keys or manifest.allow_remote_without_keys:
        return
    raise ServeError(
        f"refusing to bind to {host} without auth keys: anyone who can reach it could query every tenant. "
        f"Add keys under auth.keys in {manifest.path}, bind to 127.0.0.1, or pass --allow-remote-without-keys."
    )


def _configure_hayhooks(manifest: Manifest, deploy_dir: Path, host: str, port: int, *, keyed: bool) -> None:
    from hayhooks.settings import StartupDeployStrategy, settings

    settings.pipelines_dir = str(deploy_dir)
    settings.tracing_enabled = keyed  # `/traces` shows every tenant's requests: an admin key's, absent without keys
    settings.monitoring_enabled = False  # durable executions only (Gatehouse has none)
    settings.host = host
    settings.port = port
    settings.show_tracebacks = False
    # Hayhooks' parallel start-up deploy loads the wrapper modules in threads and intermittently fails
    # ("dictionary changed size during iteration" in its module loader); three pipelines deploy in seconds one by one.
    settings.startup_deploy_strategy = StartupDeployStrategy.SEQUENTIAL
    settings.cors_allow_origins = list(manifest.cors_allow_origins)
    settings.cors_allow_methods = ["GET", "POST", "DELETE", "OPTIONS"]
    settings.cors_allow_headers = ["Authorization", "Content-Type"]


def _require_deployed(app: Any, manifest: Manifest) -> None:
    """Fail the start-up when a pipeline of the manifest did not deploy (Hayhooks only logs a warning)."""
    from hayhooks.server.pipelines.registry import registry

    hayhooks_lifespan = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(application: Any) -> AsyncIterator[None]:
        async with hayhooks_lifespan(application):
            missing = sorted(set(manifest.pipelines) - set(registry.get_names()))
            if missing:
                raise ServeError(f"pipelines failed to deploy: {', '.join(missing)} (see the log above)")
            yield

    app.router.lifespan_context = lifespan


def _restrict_hayhooks_routes(app: Any) -> None:
    """
    Narrow Hayhooks' generic routes to what Gatehouse serves.

    `/v1/models` (and `/models`) list only the pipelines that answer chat (`ask`; the others answer it with 501);
    `/draw/{name}`, which renders through an internet service, is disabled (404, no outbound connection); neither
    drawing nor `/v1/responses` (no Gatehouse pipeline implements it: 501) is in the OpenAPI document; `/v1/files`
    and `/files` (`REMOVED_PATHS`: Hayhooks' file upload, which stores nothing here) answer 404 and are not in it. The
    replacements are put in front of Hayhooks' routes, which match in order. The document states chat's `model` (one
    of the chat pipelines), message shape (`CHAT_MESSAGE`) and streamed answer (server-sent events), and chat with an
    unknown model is a 404 naming `/v1/models` rather than Hayhooks' wrappers.
    """
    from fastapi import HTTPException
    from fastapi.exception_handlers import http_exception_handler
    from fastapi_openai_compat.models_router import create_models_router
    from starlette.exceptions import HTTPException as StarletteHTTPException

    registry = app.state.pipeline_registry

    def chat_models() -> list[str]:
        """The deployed pipelines that implement chat (as Hayhooks' `/status` reports them)."""
        wrappers = {name: registry.get(name) for name in registry.get_names()}
        return [name for name, wrapper in wrappers.items()
                if getattr(wrapper, "_is_run_chat_completion_implemented", False)
                or getattr(wrapper, "_is_run_chat_completion_async_implemented", False)]

    replacements = create_models_router(list_models=chat_models, owned_by="hayhooks", tags=["openai"])

    @replacements.get("/draw/{pipeline_name}")
    def draw_disabled() -> None:
        """Refuse Hayhooks' pipeline drawing."""
        raise HTTPException(status_code=404, detail="drawing pipelines is disabled on this server")

    def file_upload_removed() -> None:
        """Refuse Hayhooks' generic file upload, which would answer "processed" and store nothing."""
        raise HTTPException(status_code=404, detail="no such route: files are uploaded into a knowledge base with the "
                                                    "index pipeline's POST /{name}/run")

    for path in REMOVED_PATHS:
        replacements.add_api_route(path, file_upload_removed, methods=["POST"])
    for route in replacements.routes:
        route.include_in_schema = False  # Hayhooks' own entries document the models listing
    app.router.routes[:0] = replacements.routes
    hayhooks_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        """Hayhooks' OpenAPI document without the routes Gatehouse does not serve."""
        schema = hayhooks_openapi()
        for path in UNADVERTISED_PATHS:
            schema["paths"].pop(path, None)
        chat = schema.get("components", {}).get("schemas", {}).get("ChatRequest")
        if chat is not None:
            chat["properties"]["model"]["enum"] = chat_models()
            chat["properties"]["messages"].update(items=CHAT_MESSAGE, minItems=1)
        for path in CHAT_PATHS:
            answer = schema["paths"].get(path, {}).get("post", {}).get("responses", {}).get("200")
            if answer is not None:
                answer.setdefault("content", {})["text/event-stream"] = {"schema": {"description": (
                    "With `stream: true`: chat.completion.chunk events (those announcing a cited passage carry an "
                    "Open WebUI source event in `event`), the last with `citations` and `gatehouse`, then "
                    "`data: [DONE]`")}}
        return schema

    async def unknown_model(request: Any, error: StarletteHTTPException) -> Any:
        if error.status_code == 404 and request.url.path in CHAT_PATHS:
            error = HTTPException(status_code=404, detail="no such model: GET /v1/models lists the models")
        return await http_exception_handler(request, error)

    app.openapi = openapi
    app.add_exception_handler(StarletteHTTPException, unknown_model)


def _restrict_admin_routes(app: Any, keyring: KeyRing) -> None:
    """
    Hayhooks' deployment routes (`ADMIN_PATHS`: `/deploy_files`, `/deploy-yaml`, `/undeploy/{name}`) and its trace
    buffer (`/traces`) are an admin key's (`GuardMiddleware` refuses other keys with 403); the admin key replaces
    Hayhooks' own trace credential, so that is not asked for. Without keys `GuardMiddleware` answers them 404 (nobody
    could be told apart from a web page's request) and they are not in the OpenAPI document.
    """
    from hayhooks.dashboard_auth import require_tracing_access

    if keyring.enabled:
        app.dependency_overrides[require_tracing_access] = lambda: None
        return
    previous_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        schema = previous_openapi()
        for path in ADMIN_PATHS:
            schema["paths"].pop(path, None)
        return schema

    app.openapi = openapi


def _offline_docs(app: Any) -> None:
    """
    Serve `/docs` (Swagger UI) and `/redoc` (ReDoc) with the scripts, styles and icon of the fastapi-offline package
    under `DOCS_ASSETS` instead of public CDNs and Google Fonts, Swagger UI's online validator off, and `DOCS_POLICY`
    as their Content-Security-Policy, so that viewing them reaches no other host.
    """
    from importlib.resources import files

    from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
    from fastapi.staticfiles import StaticFiles
    from starlette.routing import Mount, Route

    def swagger_ui(request: Any) -> Any:
        root = request.scope.get("root_path", "").rstrip("/")
        assets = f"{root}{DOCS_ASSETS}"
        page = get_swagger_ui_html(
            openapi_url=root + app.openapi_url, title=f"{app.title} - Swagger UI",
            oauth2_redirect_url=root + app.swagger_ui_oauth2_redirect_url,
            swagger_js_url=f"{assets}/swagger-ui-bundle.js", swagger_css_url=f"{assets}/swagger-ui.css",
            swagger_favicon_url=f"{assets}/favicon.png",
            swagger_ui_parameters={**(app.swagger_ui_parameters or {}), "validatorUrl": None})
        page.headers["Content-Security-Policy"] = DOCS_POLICY
        return page

    def redoc(request: Any) -> Any:
        root = request.scope.get("root_path", "").rstrip("/")
        page = get_redoc_html(openapi_url=root + app.openapi_url, title=f"{app.title} - ReDoc",
                              redoc_js_url=f"{root}{DOCS_ASSETS}/redoc.standalone.js",
                              redoc_favicon_url=f"{root}{DOCS_ASSETS}/favicon.png", with_google_fonts=False)
        page.headers["Content-Security-Policy"] = DOCS_POLICY
        return page

    pages = {app.docs_url: swagger_ui, app.redoc_url: redoc}
    app.router.routes[:] = [Route(route.path, pages[route.path], include_in_schema=False)
                            if getattr(route, "path", None) in pages else route for route in app.router.routes]
    assets = StaticFiles(directory=str(files("fastapi_offline") / "static"))
    app.router.routes.insert(0, Mount(DOCS_ASSETS, app=assets, name="docs-assets"))


def _document_error_answers(app: Any, manifest: Manifest, keyring: KeyRing) -> None:
    """
    State in the OpenAPI document the answers the routes give beyond what FastAPI and Hayhooks derive.

    The edge's 400 (a duplicate header, a `Host` not answered) and 403 (without keys, a write from another origin), the
    guard's 401 (with keys, every route but `/status`) and 413 (a route with a body), 400 for a body that cannot be
    parsed, 422 for a body holding a number that is not finite, each pipeline's own (`PIPELINE_ANSWERS`,
    `CHAT_ANSWERS`), and the body of every error answer: `{"detail": <message>}`, for a 422 also FastAPI's list of
    validation errors.
    """
    previous_openapi = app.openapi
    by_path = {f"/{name}/run": PIPELINE_ANSWERS[deployed.kind] for name, deployed in manifest.pipelines.items()}
    if any(deployed.kind == "ask" for deployed in manifest.pipelines.values()):
        by_path.update(dict.fromkeys(CHAT_PATHS, CHAT_ANSWERS))
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorDetail"}}}
    invalid = {"application/json": {"schema": {"anyOf": [{"$ref": "#/components/schemas/HTTPValidationError"},
                                                         {"$ref": "#/components/schemas/ErrorDetail"}]}}}

    def openapi() -> dict[str, Any]:
        schema = previous_openapi()
        schema.setdefault("components", {}).setdefault("schemas", {})["ErrorDetail"] = ERROR_DETAIL
        for path, operations in schema["paths"].items():
            for method, operation in operations.items():
                answers = operation["responses"]
                for status, description in by_path.get(path, {}).items():
                    answers.setdefault(status, {"description": description})
                if keyring.enabled and (method.upper(), path) not in OPEN_PATHS:
                    answers.setdefault("401", {"description": "Missing or invalid API key"})
                unread = "Authorization or Host sent twice, or a Host this server does not answer (allowed_hosts)"
                answers.setdefault("400", {"description": unread + ("; or the body cannot be parsed"
                                                                    if "requestBody" in operation else "")})
                if not keyring.enabled and method.upper() not in SAFE_METHODS:
                    answers.setdefault("403", {"description": "A write from a page of another origin "
                                                              "(cors.allow_origins)"})
                if (method.upper(), path) not in OPEN_PATHS:
                    answers.setdefault("429", {"description": "Over the caller's limits.requests_per_minute or "
                                                              "limits.max_concurrent_requests; see Retry-After",
                                               "headers": RETRY_AFTER})
                if "requestBody" in operation:
                    answers.setdefault("413", {"description": "The body exceeds limits.max_body_bytes"})
                    answers.setdefault("422", {"description": "A field is invalid, or a number is not finite"})
                for status, answer in answers.items():
                    documented = answer.get("content", {}).get("application/json", {}).get("schema")
                    if status == "422":
                        answer["content"] = invalid
                    elif status.startswith(("4", "5")) and not documented:
                        answer["content"] = error
        return schema

    app.openapi = openapi


def build_app(manifest: Manifest, deploy_dir: Path, *, host: str | None = None, port: int | None = None) -> Any:
    """
    Hayhooks' FastAPI app over `deploy_dir`, guarded by `GuardMiddleware`, with its generic routes trimmed
    (`_restrict_hayhooks_routes`), the `/kbs` and `/{name}/jobs` routes when the manifest deploys an index pipeline
    and MCP when it enables it.

    The pipelines deploy when the app starts (its lifespan), as with `hayhooks run`; the start fails if one does not.
    """
    from hayhooks import create_app

    from gatehouse.serving.jobs import ingest_job_routes
    from gatehouse.serving.knowledge_bases import knowledge_base_routes
    from gatehouse.serving.mcp import mount_mcp
    from gatehouse.serving.observability import (
        ObservabilityError,
        ObservabilityMiddleware,
        configure_tracing,
        job_queues,
        metrics_router,
    )
    from gatehouse.serving.readiness import readiness_router
    from gatehouse.serving.streaming import StreamEnd

    keyring = KeyRing.from_manifest(manifest)
    host = host or manifest.host
    _configure_hayhooks(manifest, deploy_dir, host, port or manifest.port, keyed=keyring.enabled)
    try:
        configure_tracing()  # before Hayhooks' own set-up, which keeps a tracer that is already enabled
    except ObservabilityError as error:
        raise ServeError(str(error)) from error
    app = create_app()
    _restrict_hayhooks_routes(app)
    _restrict_admin_routes(app, keyring)
    _offline_docs(app)
    _require_deployed(app, manifest)
    index_pipeline = next((name for name, deployed in manifest.pipelines.items() if deployed.kind == "index"), None)
    if index_pipeline is not None:
        app.include_router(knowledge_base_routes(keyring=keyring, index_pipeline=index_pipeline))
    index_pipelines = [name for name, deployed in manifest.pipelines.items() if deployed.kind == "index"]
    ingest_job_routes(app, keyring=keyring, index_pipelines=index_pipelines)
    _document_error_answers(app, manifest, keyring)
    if manifest.mcp:
        mount_mcp(app)
    app.include_router(metrics_router(job_queues(index_pipelines)))
    app.include_router(readiness_router(manifest))
    app.add_middleware(StreamEnd, paths=CHAT_PATHS)
    app.add_middleware(GuardMiddleware, keyring=keyring, max_body_bytes=manifest.max_body_bytes,
                       limiter=rate_limiter(manifest, database_url=shared_database_url(manifest)))
    app.add_middleware(EdgeMiddleware, keyed=keyring.enabled, allowed_hosts=manifest.allowed_hosts,
                       remote=not is_loopback(host), allowed_origins=manifest.cors_allow_origins)
    app.add_middleware(PrintableErrors)
    app.add_middleware(ObservabilityMiddleware)  # outermost: request ids and metrics for refused requests too
    return app


def hayhooks_command(deploy_dir: Path, host: str, port: int) -> str:
    """The equivalent plain `hayhooks run` invocation (without Gatehouse's middleware: see docs/serving.md)."""
    return f"hayhooks run --pipelines-dir {deploy_dir} --host {host} --port {port}"


def serve(manifest: Manifest, *, host: str | None = None, port: int | None = None,
          allow_remote_without_keys: bool = False, processes: int | None = None, fd: int | None = None) -> None:
    """
    Check the bind address, write the deployments and run the server until interrupted: uvicorn with the manifest's
    header, body and connection bounds (`http_limits`; the descriptor limit raised to the hard one), believing
    `X-Forwarded-For` and `X-Forwarded-Proto` only from `trusted_proxies` (uvicorn's default believes them from any
    local process, which could then choose its rate-limit bucket).

    :param processes: Server processes on the port (default the manifest's `processes`); more than one runs
        `serve_processes`.
    :param fd: A listening socket inherited from `serve_processes` (one of its processes), instead of binding.
    """
    import uvicorn

    from gatehouse.serving.http_limits import bounded_http_protocol, connection_limit, raise_descriptor_limit
    from gatehouse.serving.observability import configure_logging

    host = host or manifest.host
    port = port or manifest.port
    check_bind(manifest, host, allow_remote_without_keys=allow_remote_without_keys)
    processes = manifest.processes if processes is None else processes
    if processes < 1:
        raise ServeError(f"--processes is {processes}; use 1 or more")
    if fd is None and processes > 1:
        serve_processes(manifest, host=host, port=port, processes=processes,
                        allow_remote_without_keys=allow_remote_without_keys)
        return
    try:  # before the pipelines open their files
        descriptors = raise_descriptor_limit()
        max_connections = connection_limit(descriptors, manifest.max_connections)
    except ValueError as error:
        raise ServeError(f"{manifest.path}: {error}") from error
    configure_logging(log_format=manifest.logging.format, level=manifest.log_level)
    logging.getLogger("gatehouse.serving").info(
        "at most %d connections at once (limits.max_connections; this process may open %d files)", max_connections,
        descriptors)
    deploy_dir = prepare_deployments(manifest) if fd is None else default_deploy_dir().resolve()
    app = build_app(manifest, deploy_dir, host=host, port=port)
    # uvicorn's own records go to that handler unformatted by it; ObservabilityMiddleware writes the access records
    protocol = bounded_http_protocol(max_header_bytes=manifest.max_header_bytes, max_headers=manifest.max_headers,
                                     header_timeout_s=manifest.header_timeout_s,
                                     body_timeout_s=manifest.body_timeout_s, max_connections=max_connections)
    config = uvicorn.Config(app, host=host, port=port, log_level=manifest.log_level, log_config=None,
                            access_log=False, http=protocol, proxy_headers=bool(manifest.trusted_proxies),
                            forwarded_allow_ips=list(manifest.trusted_proxies))
    server = uvicorn.Server(config)
    if fd is None:
        server.run()
    else:  # the socket's own family (uvicorn's `fd` option would take it for a Unix socket)
        server.run(sockets=[socket.socket(fileno=fd)])
    if not server.started:  # uvicorn.run's exit status 3, which `serve_processes` does not restart either
        sys.exit(3)


def shared_database_url(manifest: Manifest) -> str | None:
    """
    The PostgreSQL database the deployed pipelines keep their data in (the first `postgres: {url}` in a deployed
    pipeline's YAML, else `GATEHOUSE_POSTGRES_URL`, as the store reads them), which several server processes may
    share, upload jobs and per-caller limits included; None for the embedded store.
    """
    from gatehouse.settings import postgres_url

    def database_of(node: Any) -> str | None:
        if isinstance(node, dict):
            postgres = node.get("postgres")
            if isinstance(postgres, dict) and postgres.get("url"):
                return str(postgres["url"])
            return next(filter(None, map(database_of, node.values())), None)
        if isinstance(node, list):
            return next(filter(None, map(database_of, node)), None)
        return None

    for deployed in manifest.pipelines.values():
        try:
            if url := database_of(yaml.safe_load(deployed.pipeline.read_text(encoding="utf-8"))):
                return url
        except (OSError, yaml.YAMLError):
            continue
    return postgres_url()


def _die_with_parent() -> None:
    """In a `serve_processes` child before it runs: end it when its parent dies, even by `kill -9` (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def serve_processes(manifest: Manifest, *, host: str, port: int, processes: int,
                    allow_remote_without_keys: bool = False) -> None:
    """
    Run `processes` server processes on one listening socket (the kernel hands each connection to one of them) until
    interrupted; a process that dies (a crash, `kill -9`) is started again, one that exits with status 2 (it cannot
    start as configured) stops them all. Their metrics go to one temporary folder (`PROMETHEUS_MULTIPROC_DIR`), so a
    scrape of any process reports them all.

    :raises ServeError: When the store is the embedded one (only one process may open it), or the address cannot be
        bound.
    """
    from prometheus_client import multiprocess

    if shared_database_url(manifest) is None:
        raise ServeError(f"processes is {processes}, but the store is the embedded one, which only one process may "
                         "open: set GATEHOUSE_POSTGRES_URL (or postgres: {url} in the pipelines), or run one process")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(2048)
    except OSError as error:
        listener.close()
        raise ServeError(f"cannot listen on {host}:{port}: {error.strerror or error}") from error
    prepare_deployments(manifest)
    metrics_dir = tempfile.mkdtemp(prefix="gatehouse-metrics-")  # new each start: no stale process's series
    environment = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": metrics_dir}  # one /metrics view of every process
    command = [sys.executable, "-m", "gatehouse.cli", "serve", "--manifest", str(manifest.path), "--host", host,
               "--port", str(port), "--processes", "1", "--fd", str(listener.fileno()),
               *(["--allow-remote-without-keys"] if allow_remote_without_keys else [])]
    stopping = threading.Event()

    def stop(signum: int, frame: Any) -> None:
        stopping.set()

    previous = {signum: signal.signal(signum, stop) for signum in (signal.SIGINT, signal.SIGTERM)}
    def start() -> subprocess.Popen:
        return subprocess.Popen(command, pass_fds=[listener.fileno()], preexec_fn=_die_with_parent, env=environment)

    children = [start() for _ in range(processes)]
    print(f"gatehouse serve: {processes} processes on http://{host}:{port} (pids "
          f"{', '.join(str(child.pid) for child in children)})", file=sys.stderr, flush=True)
    failed = None
    try:
        while not stopping.wait(0.5):
            for index, child in enumerate(children):
                status = child.poll()
                if status is None:
                    continue
                if status in (2, 3):  # a configuration error, a failed start: starting again would fail again
                    failed = f"process {index + 1} of {processes} could not start (see its message above)"
                    stopping.set()
                    break
                multiprocess.mark_process_dead(child.pid, metrics_dir)  # its gauges go; its counters stay summed
                children[index] = start()
                print(f"gatehouse serve: process {index + 1} of {processes} (pid {child.pid}) exited with status "
                      f"{status}; started pid {children[index].pid}", file=sys.stderr, flush=True)
    finally:
        for child in children:
            if child.poll() is None:
                child.terminate()
        for child in children:
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()
        listener.close()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        shutil.rmtree(metrics_dir, ignore_errors=True)
    if failed:
        raise ServeError(failed)
