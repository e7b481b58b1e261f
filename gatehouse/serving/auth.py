"""
Bearer-key authentication, tenant permissions and request-size limits for the Gatehouse server.

Keys are named in the manifest by the environment variable that holds each secret; a key maps to its tenants.
`GuardMiddleware` runs in front of every Hayhooks route: it answers 413 for oversized bodies, 401 without a
valid key (except `GET /status`), 403 for deploy/undeploy and traces without an admin key (404 on a server without
keys, where they are not served), and leaves the caller's `Principal` in a context variable for the pipeline
wrappers, which enforce tenants (403). A JSON body (whatever its `Content-Type` says) holding a number that is not
finite (`NaN`, `Infinity`, `1e400`) or a lone UTF-16 surrogate (`"\\ud800"`) gets 422 before anything parses it. The
body is read before the caller's limits count the request (429), so a client sending its body slowly holds none of
its caller's concurrent requests (the protocol's `limits.body_timeout_s` bounds how long it takes).

Usage:
```python
from gatehouse.serving.auth import KeyRing
from gatehouse.serving.manifest import load_manifest

keyring = KeyRing.from_manifest(load_manifest())
principal = keyring.authenticate("Bearer s3cret")    # None when the key is unknown
keyring.tenant_for(principal, requested="acme")     # raises AccessDenied when the key lacks the tenant
```
"""

import asyncio
import hmac
import os
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastapi import HTTPException

from gatehouse.components.state import PUBLIC_TENANT
from gatehouse.serving.edge import error_answer, json_body_problem, send_answer
from gatehouse.serving.manifest import Manifest, ManifestError
from gatehouse.serving.rate_limits import CallerLimits, RateLimiter

if TYPE_CHECKING:
    from gatehouse.serving.db_rate_limits import DatabaseRateLimiter

OPEN_PATHS = {("GET", "/status"), ("HEAD", "/status"), ("GET", "/ready"), ("HEAD", "/ready")}
# Hayhooks' routes that deploy code or show every tenant's requests: an admin key's (absent without keys).
ADMIN_PATHS = ("/deploy_files", "/deploy-yaml", "/undeploy/{pipeline_name}", "/traces")
REFUSAL_PAUSE_S = 1.0  # a request over its caller's limits is answered (429) after this pause, at most Retry-After
MISSING_KEY = "missing or invalid API key: send `Authorization: Bearer <key>`"


@dataclass(frozen=True)
class Principal:
    """Who is calling: the key's name (its environment variable), its tenants and whether it is an admin key."""

    name: str
    tenants: tuple[str, ...]
    admin: bool = False


current_principal: ContextVar[Principal | None] = ContextVar("gatehouse_principal", default=None)


class AccessDenied(Exception):
    """A request the caller may not make; `status` is 401 (who are you?) or 403 (not allowed)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def denied(error: AccessDenied) -> HTTPException:
    """
    The HTTP error of a refused request.

    :param error: Why the request is refused.
    :returns: A 401 (asking for a bearer key) or 403 with the reason as `detail`.
    """
    headers = {"WWW-Authenticate": "Bearer"} if error.status == 401 else None
    return HTTPException(status_code=error.status, detail=error.message, headers=headers)


class KeyRing:
    """The configured keys, with their secrets read from the environment."""

    def __init__(self, keys: dict[str, Principal]) -> None:
        self._keys = keys

    @classmethod
    def from_manifest(cls, manifest: Manifest, environ: dict[str, str] | None = None) -> "KeyRing":
        """
        Read each key's secret from its environment variable.

        :raises ManifestError: when a named variable is unset or empty (a misconfigured key must not open the server).
        """
        environ = os.environ if environ is None else environ
        keys: dict[str, Principal] = {}
        for spec in manifest.keys:
            secret = environ.get(spec.env, "")
            if not secret:
                raise ManifestError(f"{manifest.path}: auth key variable {spec.env} is not set in the environment.")
            keys[secret] = Principal(name=spec.env, tenants=spec.tenants, admin=spec.admin)
        return cls(keys)

    @property
    def enabled(self) -> bool:
        """Whether any key is configured (then every route but `GET /status` needs one)."""
        return bool(self._keys)

    def authenticate(self, authorization: str | None) -> Principal | None:
        """The principal of an `Authorization: Bearer <key>` header, or None."""
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        token = token.strip()
        for secret, principal in self._keys.items():
            if hmac.compare_digest(secret.encode(), token.encode()):
                return principal
        return None

    def tenant_for(self, principal: Principal | None, requested: str | None) -> str:
        """
        The tenant a request runs as.

        With keys configured: the requested tenant if the key holds it (else 403), or the key's first tenant.
        Without keys: the requested tenant, or `public`.

        :raises AccessDenied: 401 when keys are configured but the caller has none, 403 for a tenant it lacks.
        """
        if not self.enabled:
            return requested or PUBLIC_TENANT
        if principal is None:
            raise AccessDenied(401, MISSING_KEY)
        if requested is None:
            return principal.tenants[0]
        if requested not in principal.tenants:
            raise AccessDenied(403, f"this API key may not act for tenant {requested!r}")
        return requested

    def managed_tenants(self, principal: Principal | None) -> tuple[str, ...] | None:
        """
        The tenants whose knowledge bases a caller may list and delete.

        :param principal: The caller.
        :returns: None for every tenant (an admin key, or no keys configured), else the key's tenants.
        :raises AccessDenied: 401 when keys are configured but the caller has none.
        """
        if not self.enabled:
            return None
        if principal is None:
            raise AccessDenied(401, MISSING_KEY)
        return None if principal.admin else principal.tenants

    def managed_tenant(self, principal: Principal | None, requested: str | None) -> str:
        """
        The tenant a knowledge-base request acts on: the requested one, else the key's first tenant (`public`
        without keys). An admin key may name any tenant, another key only one of its own.

        :param principal: The caller.
        :param requested: The tenant the request names, if any.
        :returns: The tenant.
        :raises AccessDenied: 401 when keys are configured but the caller has none, 403 for a tenant it may not manage.
        """
        allowed = self.managed_tenants(principal)
        tenant = requested or (principal.tenants[0] if principal else PUBLIC_TENANT)
        if allowed is not None and tenant not in allowed:
            raise AccessDenied(403, f"this API key may not act for tenant {tenant!r}")
        return tenant


def resolve_principal(keyring: KeyRing, headers: Any) -> Principal | None:
    """The caller: set by `GuardMiddleware`, else authenticated from the request headers (plain `hayhooks run`)."""
    principal = current_principal.get()
    if principal is None and headers is not None:
        principal = keyring.authenticate(headers.get("authorization"))
    return principal


def is_admin_path(path: str) -> bool:
    """Whether `path` is one of `ADMIN_PATHS` (deployment, undeployment, Hayhooks' trace buffer)."""
    return path in ("/deploy_files", "/deploy-yaml", "/traces") or path.startswith(("/undeploy/", "/traces/"))


def rate_limiter(manifest: Manifest, *, database_url: str | None = None) -> "RateLimiter | DatabaseRateLimiter":
    """The manifest's per-caller limits: `limits.requests_per_minute` and `limits.max_concurrent_requests`, and a
    key's own where `auth.keys` gives it; kept in the PostgreSQL database at `database_url` when there is one (shared
    by every server over it), else in this process."""
    default = CallerLimits(manifest.requests_per_minute, manifest.max_concurrent_requests)
    per_key = {spec.env: CallerLimits(
        default.requests_per_minute if spec.requests_per_minute is None else spec.requests_per_minute,
        default.max_concurrent if spec.max_concurrent_requests is None else spec.max_concurrent_requests,
    ) for spec in manifest.keys}
    if database_url is None:
        return RateLimiter(default, per_key)
    from gatehouse.serving.db_rate_limits import DatabaseRateLimiter

    return DatabaseRateLimiter(default, per_key, url=database_url)


class GuardMiddleware:
    """
    ASGI middleware: bearer authentication, admin-only deployment routes, body-size limit, finite numbers and
    characters in JSON bodies, per-caller request limits (429 with `Retry-After`) once the body is read.
    """

    def __init__(self, app: Any, *, keyring: KeyRing, max_body_bytes: int,
                 limiter: "RateLimiter | DatabaseRateLimiter | None" = None) -> None:
        self.app = app
        self.keyring = keyring
        self.max_body_bytes = max_body_bytes
        self.limiter = limiter

    def _check_access(self, scope: dict[str, Any]) -> tuple[Principal | None, dict[str, Any] | None]:
        method, path = scope["method"], scope["path"]
        if not self.keyring.enabled and is_admin_path(path):
            return None, error_answer(404, "Not Found")  # without keys, deployment and traces are not served
        if not self.keyring.enabled or (method, path) in OPEN_PATHS or method == "OPTIONS":
            return None, None
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        principal = self.keyring.authenticate(headers.get("authorization"))
        if principal is None:
            return None, error_answer(401, MISSING_KEY, [(b"www-authenticate", b"Bearer")])
        if is_admin_path(path) and not principal.admin:
            return None, error_answer(403, "deploying and undeploying pipelines and reading traces need an admin key")
        return principal, None

    async def _read_body(self, scope: dict[str, Any], receive: Any
                         ) -> tuple[list[dict[str, Any]], dict[str, Any] | None] | None:
        """
        Buffer the body, bounded by the limit (its arrival is bounded by the protocol's `limits.body_timeout_s`).

        :returns: The messages to replay and the error answer of a body that is too large or not usable (413, 422),
            or None when the client went away before its body was complete.
        """
        declared = dict(scope["headers"]).get(b"content-length")
        too_large = error_answer(413, f"request body exceeds the limit of {self.max_body_bytes} bytes "
                                      "(limits.max_body_bytes in hayhooks.yml)")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            return [], too_large
        messages, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None
            messages.append(message)
            size += len(message.get("body", b""))
            if size > self.max_body_bytes:
                return [], too_large
            if not message.get("more_body", False):
                break
        problem = json_body_problem(b"".join(m.get("body", b"") for m in messages))
        return messages, None if problem is None else error_answer(422, problem)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        principal, error = self._check_access(scope)
        messages: list[dict[str, Any]] = []
        if error is None:  # the body is read before the caller's limits count the request: a slow body holds no slot
            read = await self._read_body(scope, receive)
            if read is None:
                return
            messages, error = read
        caller = self._caller(scope, principal)  # a request without a valid key counts against its address
        if caller is not None:
            refusal = await self._call_limiter(self.limiter.admit, caller)
            if refusal is not None:
                # a client that ignores Retry-After and asks again at once must not keep the server busy refusing it
                await asyncio.sleep(min(refusal.retry_after, REFUSAL_PAUSE_S))
                await send_answer(send, error_answer(429, refusal.message,
                                                     [(b"retry-after", str(refusal.retry_after).encode())]))
                return
        released = caller is None

        async def release() -> None:
            nonlocal released
            if not released:
                released = True
                await self._call_limiter(self.limiter.release, caller)

        async def send_released(message: dict[str, Any]) -> None:
            # counted out before the answer's end leaves, so the caller's next request never finds this one running
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                await release()
            await send(message)

        async def replay() -> dict[str, Any]:
            return messages.pop(0) if messages else await receive()

        token = current_principal.set(principal)
        try:
            if error is not None:
                await send_answer(send_released, error)
            else:
                await self.app(scope, replay, send_released)
        finally:
            current_principal.reset(token)
            await release()

    async def _call_limiter(self, method: Any, caller: str) -> Any:
        """`method(caller)`: at once for the in-memory limiter, in a thread for one that asks the database."""
        if isinstance(self.limiter, RateLimiter):
            return method(caller)
        return await asyncio.to_thread(method, caller)

    def _caller(self, scope: dict[str, Any], principal: Principal | None) -> str | None:
        """Whom the request counts against: its key, else (no keys, or no valid key) the client address; None when not
        limited."""
        if self.limiter is None or (scope["method"], scope["path"]) in OPEN_PATHS or scope["method"] == "OPTIONS":
            return None
        if principal is not None:
            return principal.name  # an environment variable's name: never `address:...`
        client = scope.get("client")
        return f"address:{client[0] if client else 'unknown'}"
