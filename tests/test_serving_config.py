"""The serving manifest, key ring, guard middleware and deployment folder, without starting a server."""

import asyncio
import json
from pathlib import Path

import pytest
import yaml

from gatehouse.settings import bundled_dir
from gatehouse.serving.auth import AccessDenied, GuardMiddleware, KeyRing, Principal, current_principal, rate_limiter
from gatehouse.serving.edge import EdgeMiddleware, PrintableErrors, json_body_problem
from gatehouse.serving.http_limits import connection_limit
from gatehouse.serving.manifest import ManifestError, load_manifest
from gatehouse.serving.server import ServeError, check_bind, is_loopback, prepare_deployments
from gatehouse.serving.wrappers import AskWrapper, IndexWrapper, RetrieveWrapper, wrapper_class

PROJECT_ROOT = bundled_dir()  # the shipped pipelines, sample KBs and manifest


def _write(tmp_path: Path, **overrides) -> Path:
    raw = {"pipelines": {"ask": {"pipeline": str(PROJECT_ROOT / "pipelines" / "ask.yml"), "kind": "ask"}}}
    raw.update(overrides)
    path = tmp_path / "hayhooks.yml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def test_the_project_manifest_loads():
    manifest = load_manifest(PROJECT_ROOT / "hayhooks.yml")
    assert (manifest.host, manifest.port) == ("127.0.0.1", 1416)
    assert {name: p.kind for name, p in manifest.pipelines.items()} == {
        "ask": "ask", "retrieve": "retrieve", "index": "index"}
    assert manifest.keys == ()
    assert manifest.allowed_modules == ()
    assert (manifest.max_body_bytes, manifest.max_query_chars, manifest.request_timeout_s) == (10485760, 4000, 300)
    assert (manifest.requests_per_minute, manifest.max_concurrent_requests) == (600, 2)
    assert manifest.max_queued_jobs_per_tenant == 5
    assert (manifest.allowed_hosts, manifest.trusted_proxies) == ((), ())
    assert (manifest.max_header_bytes, manifest.max_headers, manifest.header_timeout_s) == (65536, 100, 10.0)
    assert (manifest.body_timeout_s, manifest.max_connections) == (60.0, None)


def test_the_connection_cap_leaves_descriptors_for_the_rest():
    assert [connection_limit(limit) for limit in (256, 1024, 20000, 1_048_576)] == [192, 896, 4096, 4096]
    assert connection_limit(1024, 500) == 500
    with pytest.raises(ValueError, match=r"limits.max_connections is 1000, but this process may open 1024 files .* "
                                         r"set it to at most 960"):
        connection_limit(1024, 1000)


def test_edge_settings_are_read_and_normalised(tmp_path):
    manifest = load_manifest(_write(tmp_path, allowed_hosts=["Gatehouse.Internal", "[fd00::5]", "10.1.2.3"],
                                    trusted_proxies=["10.0.0.0/8", "::1"],
                                    limits={"max_header_bytes": 8192, "max_headers": 40, "header_timeout_s": 2.5}))
    assert manifest.allowed_hosts == ("gatehouse.internal", "fd00::5", "10.1.2.3")
    assert manifest.trusted_proxies == ("10.0.0.0/8", "::1")
    assert (manifest.max_header_bytes, manifest.max_headers, manifest.header_timeout_s) == (8192, 40, 2.5)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"pipelines": {"ask": {"pipeline": "missing.yml"}}}, "no file at"),
        ({"pipelines": {"ask": {"pipeline": str(PROJECT_ROOT / "pipelines" / "ask.yml"), "kind": "chat"}}},
         "use one of ask, retrieve, index"),
        ({"auth": {"keys": [{"tenants": ["a"]}]}}, "auth.keys[0] needs `env`"),
        ({"auth": {"keys": [{"env": "K", "tenants": []}]}}, "auth.keys[0] needs `tenants`"),
        ({"allowed_modules": ["*"]}, "would allow any class"),
        ({"log_level": "chatty"}, "log_level 'chatty'"),
        ({"limits": {"request_timeout_s": 0}}, "limits must be positive"),
        ({"limits": {"requests_per_minute": -1}}, "limits.requests_per_minute must be a whole number"),
        ({"auth": {"keys": [{"env": "K", "tenants": ["a"], "max_concurrent_requests": "many"}]}},
         "auth.keys[0].max_concurrent_requests must be a whole number"),
        ({"allowed_hosts": "gatehouse.internal"}, "`allowed_hosts` must be a list"),
        ({"allowed_hosts": ["https://gatehouse.internal"]}, "allowed_hosts[0] is 'https://gatehouse.internal': "
                                                             "write a host name or IP address alone"),
        ({"allowed_hosts": ["ok.example", "*.example"]}, "allowed_hosts[1] is '*.example'"),
        ({"allowed_hosts": ["gatehouse.internal:8080"]}, "without scheme, port, path or wildcard"),
        ({"trusted_proxies": ["proxy.internal"]}, "trusted_proxies[0] is 'proxy.internal': write an IP address"),
        ({"limits": {"max_header_bytes": 100}}, "limits.max_header_bytes must be a whole number, at least 1024"),
        ({"limits": {"max_headers": 0}}, "limits.max_headers must be a whole number, at least 8"),
        ({"limits": {"header_timeout_s": "soon"}}, "limits.header_timeout_s must be a number, at least 0.1"),
        ({"limits": {"body_timeout_s": 0}}, "limits.body_timeout_s must be a number, at least 0.1"),
        ({"port": 99999}, "port must be a whole number from 1 to 65535, not 99999"),
        ({"limits": {"max_connections": 0}}, "limits.max_connections must be a whole number, at least 1"),
    ],
)
def test_a_bad_manifest_names_the_field(tmp_path, overrides, message):
    with pytest.raises(ManifestError, match="hayhooks.yml") as error:
        load_manifest(_write(tmp_path, **overrides))
    assert message in str(error.value)


def test_keys_come_from_the_environment_and_an_unset_one_refuses_to_start(tmp_path):
    manifest = load_manifest(_write(tmp_path, auth={"keys": [{"env": "K_ACME", "tenants": ["acme", "public"]}]}))
    ring = KeyRing.from_manifest(manifest, environ={"K_ACME": "s3cret"})
    assert ring.authenticate("Bearer s3cret") == Principal(name="K_ACME", tenants=("acme", "public"))
    assert ring.authenticate("Bearer nope") is None
    assert ring.authenticate("Basic s3cret") is None
    assert ring.authenticate(None) is None
    with pytest.raises(ManifestError, match="K_ACME is not set"):
        KeyRing.from_manifest(manifest, environ={})


def test_tenant_resolution():
    open_ring = KeyRing({})
    assert open_ring.tenant_for(None, None) == "public"
    assert open_ring.tenant_for(None, "acme") == "acme"
    ring = KeyRing({"k": Principal(name="K", tenants=("acme", "public"))})
    principal = ring.authenticate("Bearer k")
    assert ring.tenant_for(principal, None) == "acme"
    assert ring.tenant_for(principal, "public") == "public"
    with pytest.raises(AccessDenied) as denied:
        ring.tenant_for(principal, "globex")
    assert denied.value.status == 403
    with pytest.raises(AccessDenied) as missing:
        ring.tenant_for(None, None)
    assert missing.value.status == 401


def _call(middleware, method, path, headers=(), body=b"", client="127.0.0.1"):
    sent, seen = [], {}

    async def app(scope, receive, send):
        seen["principal"] = current_principal.get()
        seen["body"] = (await receive())["body"]
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    middleware.app = app
    scope = {"type": "http", "method": method, "path": path, "client": (client, 50000),
             "headers": [(k.encode(), v.encode()) for k, v in headers]}
    asyncio.run(middleware(scope, receive, send))
    if sent[0]["status"] == 429:
        assert int(dict(sent[0]["headers"])[b"retry-after"]) >= 1
    return sent[0]["status"], sent[1]["body"], seen


def test_guard_middleware():
    ring = KeyRing({"user": Principal(name="U", tenants=("acme",)), "root": Principal("R", ("public",), admin=True)})
    guard = GuardMiddleware(None, keyring=ring, max_body_bytes=10)
    assert _call(guard, "GET", "/status")[0] == 200
    status, body, _ = _call(guard, "POST", "/ask/run")
    assert status == 401
    assert "Bearer" in json.loads(body)["detail"]
    status, _, seen = _call(guard, "POST", "/ask/run", [("authorization", "Bearer user")], b"{}")
    assert status == 200
    assert seen == {"principal": Principal(name="U", tenants=("acme",)), "body": b"{}"}
    assert _call(guard, "POST", "/deploy_files", [("authorization", "Bearer user")])[0] == 403
    assert _call(guard, "POST", "/deploy_files", [("authorization", "Bearer root")])[0] == 200
    status, body, _ = _call(guard, "POST", "/ask/run", [("authorization", "Bearer user")], b"x" * 11)
    assert status == 413
    assert current_principal.get() is None
    assert _call(guard, "GET", "/traces", [("authorization", "Bearer user")])[0] == 403
    assert _call(guard, "GET", "/traces", [("authorization", "Bearer root")])[0] == 200


def test_without_keys_the_guard_serves_no_deployment_or_traces():
    guard = GuardMiddleware(None, keyring=KeyRing({}), max_body_bytes=100)
    for path in ("/deploy_files", "/deploy-yaml", "/undeploy/ask", "/traces"):
        assert _call(guard, "POST", path)[:2] == (404, b'{"detail": "Not Found"}')
    assert _call(guard, "POST", "/deployments/run")[0] == 200  # a pipeline may be named so


def test_the_guard_refuses_non_finite_numbers_in_json_bodies():
    guard = GuardMiddleware(None, keyring=KeyRing({}), max_body_bytes=1000)
    json_body = [("content-type", "application/json; charset=utf-8")]
    status, body, _ = _call(guard, "POST", "/retrieve/run", json_body, b'{"query": "x", "top_k": 1e400}')
    assert status == 422 and json.loads(body)["detail"].startswith("top_k: 1e400 is not a finite number")
    assert _call(guard, "POST", "/mcp", [("content-type", "application/vnd.x+json")], b"[NaN]")[0] == 422
    assert _call(guard, "POST", "/ask/run", json_body, b'{"query": "NaN", "top_k": 1e300}')[0] == 200
    assert _call(guard, "POST", "/index/run", [("content-type", "multipart/form-data; boundary=b")],
                 b"--b\r\nContent-Disposition: form-data; name=\"kb\"\r\n\r\nNaN\r\n--b--\r\n")[0] == 200
    assert _call(guard, "POST", "/ask/run", json_body, b"{not json")[0] == 200  # the route says what is wrong


def test_the_guard_reads_a_json_body_whatever_its_content_type_says():
    guard = GuardMiddleware(None, keyring=KeyRing({}), max_body_bytes=1000)
    # FastAPI reads the first Content-Type, a guard reading the last would take this body for text
    two_types = [("content-type", "application/json"), ("content-type", "text/plain")]
    status, body, _ = _call(guard, "POST", "/retrieve/run", two_types, b'{"query": "x", "top_k": NaN}')
    assert status == 422 and json.loads(body)["detail"].startswith("top_k: NaN is not a finite number")
    assert _call(guard, "POST", "/retrieve/run", [], b'{"query": "x", "top_k": Infinity}')[0] == 422


@pytest.mark.parametrize("body", [b'{"query": "\\ud800"}', b'{"query": "a\xed\xa0\x80b"}'])
def test_the_guard_refuses_a_lone_surrogate_naming_the_field(body):
    guard = GuardMiddleware(None, keyring=KeyRing({}), max_body_bytes=1000)
    status, answer, _ = _call(guard, "POST", "/ask/run", [("content-type", "application/json")], body)
    assert status == 422
    assert json.loads(answer)["detail"].startswith("query: a lone UTF-16 surrogate (\\ud800) is not a character")


def test_json_bodies_are_checked_for_numbers_and_characters_no_route_can_use():
    assert json_body_problem(b'{"messages": [{"role": "user", "content": -Infinity}]}').startswith(
        "messages[0].content: -Infinity is not a finite number")
    assert json_body_problem(b"NaN").startswith("the body: NaN")
    assert json_body_problem(b"[" * 100_000 + b"]" * 100_000) is None  # too deep for the JSON reader: its route says
    assert json_body_problem(b'{"big": 123456789012345678901234567890, "small": 1e-400}') is None
    assert json_body_problem(b'{"messages": [{"\\u202ekey": "\\udc00"}]}').startswith(
        "messages[0].\\u202ekey: a lone UTF-16 surrogate (\\udc00)")  # the key escaped too
    assert json_body_problem(b'{"emoji": "\\ud83d\\ude00", "text": "\\\\ud800"}') is None  # a pair; a backslash


def test_the_guard_counts_a_request_against_its_caller_once_its_body_has_arrived(tmp_path):
    limiter = rate_limiter(load_manifest(_write(tmp_path, limits={"max_concurrent_requests": 1})))
    guard = GuardMiddleware(None, keyring=KeyRing({}), max_body_bytes=1000, limiter=limiter)

    async def scenario() -> tuple[int, int]:
        rest = asyncio.Event()
        stalled_sent: list[dict] = []

        async def app(scope, receive, send):
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})

        async def stalled_receive():
            if not rest.is_set():
                await rest.wait()
                return {"type": "http.disconnect"}  # the protocol's body deadline closed the connection
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send_stalled(message):
            stalled_sent.append(message)

        guard.app = app
        scope = {"type": "http", "method": "POST", "path": "/retrieve/run", "client": ("127.0.0.1", 5), "headers": []}
        stalled = asyncio.create_task(guard(scope, stalled_receive, send_stalled))
        await asyncio.sleep(0.01)  # the stalled request waits for its body
        other_sent: list[dict] = []

        async def receive():
            return {"type": "http.request", "body": b"{}", "more_body": False}

        async def send_other(message):
            other_sent.append(message)

        await guard(scope, receive, send_other)
        rest.set()
        await stalled
        return other_sent[0]["status"], len(stalled_sent)

    assert asyncio.run(scenario()) == (200, 0)  # the other request ran; the stalled one was never answered or counted


def _edge(middleware, method="GET", headers=(), server=("127.0.0.1", 1416)):
    sent = []

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})

    async def send(message):
        sent.append(message)

    middleware.app = app
    scope = {"type": "http", "method": method, "path": "/kbs", "scheme": "http", "server": server,
             "headers": [(k.encode(), v.encode()) for k, v in headers]}
    asyncio.run(middleware(scope, None, send))
    return sent[0]["status"]


def test_the_edge_answers_hosts_by_how_the_server_is_exposed():
    local = EdgeMiddleware(None, keyed=False, allowed_hosts=("gatehouse.internal",), remote=False, allowed_origins=())
    assert [_edge(local, headers=[("host", host)]) for host in (
        "127.0.0.1:1416", "127.8.9.10", "localhost", "[::1]:1416", "gatehouse.internal:80", "Gatehouse.Internal.")
            ] == [200] * 6
    assert [_edge(local, headers=[("host", host)]) for host in (
        "rebind.evil.example:1416", "localhost.evil.example", "10.0.0.5:1416", "[fd00::1]")] == [400] * 4
    assert _edge(local) == 200  # HTTP/1.0 without Host: no page sends that
    # `--allow-remote-without-keys`: reached at its addresses too; names must still be listed (DNS rebinding)
    remote = EdgeMiddleware(None, keyed=False, allowed_hosts=(), remote=True, allowed_origins=())
    assert [_edge(remote, headers=[("host", host)]) for host in ("10.0.0.5:1416", "[fd00::1]:1416", "localhost")
            ] == [200] * 3
    assert _edge(remote, headers=[("host", "laptop.lan:1416")]) == 400
    keyed = EdgeMiddleware(None, keyed=True, allowed_hosts=(), remote=True, allowed_origins=())
    assert _edge(keyed, headers=[("host", "anything.example")]) == 200
    listed = EdgeMiddleware(None, keyed=True, allowed_hosts=("api.example",), remote=True, allowed_origins=())
    assert [_edge(listed, headers=[("host", host)]) for host in ("api.example", "other.example")] == [200, 400]


def test_the_edge_refuses_writes_from_other_origins_without_keys():
    edge = EdgeMiddleware(None, keyed=False, allowed_hosts=(), remote=False, allowed_origins=("http://ui.test:3000",))
    host = [("host", "127.0.0.1:1416")]
    for origin, status in (("http://evil.example", 403), ("null", 403), ("http://127.0.0.1:1416", 200),
                           ("http://localhost:1416", 200), ("http://localhost:3000", 403),
                           ("http://ui.test:3000", 200), ("http://127.0.0.1:1416/path", 403)):
        assert _edge(edge, "POST", [*host, ("origin", origin)]) == status, origin
    assert _edge(edge, "POST", [*host, ("sec-fetch-site", "cross-site")]) == 403
    assert _edge(edge, "POST", [*host, ("sec-fetch-site", "same-origin")]) == 200
    assert _edge(edge, "GET", [*host, ("origin", "http://evil.example")]) == 200  # a read: CORS keeps its answer
    assert _edge(edge, "DELETE", host) == 200  # no Origin: curl, an SDK
    keyed = EdgeMiddleware(None, keyed=True, allowed_hosts=(), remote=False, allowed_origins=())
    assert _edge(keyed, "POST", [*host, ("origin", "http://evil.example")]) == 200  # a page cannot send the key


def test_the_edge_refuses_duplicate_authorization_and_host():
    edge = EdgeMiddleware(None, keyed=True, allowed_hosts=(), remote=False, allowed_origins=())
    assert _edge(edge, headers=[("authorization", "Bearer a"), ("Authorization", "Bearer b")]) == 400
    assert _edge(edge, headers=[("host", "127.0.0.1"), ("host", "127.0.0.1")]) == 400
    assert _edge(edge, headers=[("x-forwarded-for", "10.0.0.1"), ("x-forwarded-for", "10.0.0.2")]) == 200


def test_guard_middleware_refuses_a_caller_over_its_limits_with_retry_after(tmp_path, monkeypatch):
    monkeypatch.setattr("gatehouse.serving.auth.REFUSAL_PAUSE_S", 0.01)
    manifest = load_manifest(_write(tmp_path, limits={"requests_per_minute": 2}, auth={"keys": [
        {"env": "K_USER", "tenants": ["acme"]}, {"env": "K_BULK", "tenants": ["acme"], "requests_per_minute": 0}]}))
    ring = KeyRing.from_manifest(manifest, environ={"K_USER": "user", "K_BULK": "bulk"})
    guard = GuardMiddleware(None, keyring=ring, max_body_bytes=100, limiter=rate_limiter(manifest))
    user = [("authorization", "Bearer user")]
    assert [_call(guard, "POST", "/ask/run", user)[0] for _ in range(3)] == [200, 200, 429]
    status, body, _ = _call(guard, "POST", "/ask/run", user)
    assert status == 429 and "limits.requests_per_minute" in json.loads(body)["detail"]
    assert all(_call(guard, "POST", "/ask/run", [("authorization", "Bearer bulk")])[0] == 200 for _ in range(5))
    assert _call(guard, "GET", "/status")[0] == 200  # the health check is never limited
    nobody = [_call(guard, "POST", "/ask/run", [("authorization", "Bearer guess")], client="10.0.0.9")[0]
              for _ in range(3)]
    assert nobody == [401, 401, 429]  # without a valid key a request counts against its address

    open_guard = GuardMiddleware(None, keyring=KeyRing({}), max_body_bytes=100, limiter=rate_limiter(manifest))
    assert [_call(open_guard, "POST", "/ask/run", client="10.0.0.1")[0] for _ in range(3)] == [200, 200, 429]
    assert _call(open_guard, "POST", "/ask/run", client="10.0.0.2")[0] == 200  # without keys: per client address


def test_binding_beyond_loopback_needs_keys_or_an_explicit_yes(tmp_path):
    manifest = load_manifest(_write(tmp_path))
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost") and is_loopback("127.0.0.2")
    check_bind(manifest, "127.0.0.1")
    check_bind(manifest, "0.0.0.0", allow_remote_without_keys=True)
    with pytest.raises(ServeError, match="refusing to bind to 0.0.0.0"):
        check_bind(manifest, "0.0.0.0")
    keyed = load_manifest(_write(tmp_path, auth={"keys": [{"env": "K", "tenants": ["a"]}]}))
    check_bind(keyed, "0.0.0.0")


def test_prepare_deployments_writes_one_generic_wrapper_per_pipeline(tmp_path):
    manifest = load_manifest(PROJECT_ROOT / "hayhooks.yml")
    (tmp_path / "old").mkdir()
    folder = prepare_deployments(manifest, tmp_path)
    assert sorted(p.name for p in folder.iterdir()) == ["ask", "index", "retrieve"]
    wrappers = {(folder / name / "pipeline_wrapper.py").read_text() for name in ("ask", "index", "retrieve")}
    assert len(wrappers) == 1
    bases = {name: wrapper_class(folder / name / "gatehouse.yml").__mro__[1] for name in ("ask", "index", "retrieve")}
    assert bases == {"ask": AskWrapper, "index": IndexWrapper, "retrieve": RetrieveWrapper}
    spec = yaml.safe_load((folder / "ask" / "gatehouse.yml").read_text())
    assert spec == {"kind": "ask", "pipeline": str(PROJECT_ROOT / "pipelines" / "ask.yml"),
                    "manifest": str(PROJECT_ROOT / "hayhooks.yml")}


def test_the_longest_question_is_the_ask_pipelines_input_guardrail_limit(tmp_path):
    assert load_manifest(PROJECT_ROOT / "hayhooks.yml").max_query_chars == 4000  # input_guard in pipelines/ask.yml
    spec = yaml.safe_load((PROJECT_ROOT / "pipelines" / "ask.yml").read_text(encoding="utf-8"))
    guard = spec["components"]["input_guard"]["init_parameters"]
    ask = tmp_path / "ask.yml"
    for limit, expected in ((1234, 1234), (None, 2000)):  # unset: the guardrail's own default
        guard.pop("max_query_chars", None)
        if limit is not None:
            guard["max_query_chars"] = limit
        ask.write_text(yaml.safe_dump(spec), encoding="utf-8")
        manifest = load_manifest(_write(tmp_path, pipelines={"ask": {"pipeline": str(ask), "kind": "ask"}}))
        assert manifest.max_query_chars == expected
    with pytest.raises(ManifestError, match=r"limits.max_query_chars is no longer read: .* \(input_guard in "
                                            r"pipelines/ask.yml\), which the server applies too; set it there"):
        load_manifest(_write(tmp_path, limits={"max_query_chars": 4000}))


def test_openwebui_sources_is_refused_now_that_every_chat_answer_has_sources(tmp_path):
    for value in (True, False):
        with pytest.raises(ManifestError, match=r"openwebui_sources is no longer read: every chat answer, streamed or "
                                                r"not, carries Open WebUI sources and \[n\] markers"):
            load_manifest(_write(tmp_path, openwebui_sources=value))
