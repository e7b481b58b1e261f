"""
The HTTP edge of `gatehouse serve`: requests refused before anything reads them.

`EdgeMiddleware` runs in front of the guard (`gatehouse.serving.auth.GuardMiddleware`) and answers:

- 400 for a request with `Authorization` or `Host` sent more than once (which one would count?);
- 400 for a `Host` the server does not answer: without keys (or with `allowed_hosts` set) only loopback names
  (`localhost`, `127.0.0.1`, `[::1]`, any port), the names in `allowed_hosts` and, on a server bound beyond
  loopback, IP addresses, so that a web page cannot reach the server through DNS rebinding (its requests carry the
  page's own host name);
- 403, without keys, for a write (any method but GET, HEAD, OPTIONS) from another origin: an `Origin` that is not the
  server's own and not in `cors.allow_origins`, or `Sec-Fetch-Site: cross-site`, so that a web page cannot post a form
  into the server (a browser sends such a form without asking first). Clients that send no `Origin` (curl, SDKs) are
  not affected.

`PrintableErrors` escapes what an error answer quotes of the request (control, format and surrogate characters).

`json_body_problem` finds what a JSON body cannot hold although Python's JSON reader takes it (a number that is not
finite: `NaN`, `Infinity`, `1e400`; a lone UTF-16 surrogate: `"\\ud800"`); the guard answers it with 422.

Usage:
```python
from gatehouse.serving.edge import EdgeMiddleware, json_body_problem

app = EdgeMiddleware(app, keyed=False, allowed_hosts=("gatehouse.internal",), remote=False, allowed_origins=())
json_body_problem(b'{"top_k": 1e400}')     # "top_k: 1e400 is not a finite number ..."
```
"""

import ipaddress
import json
import re
from typing import Any

from gatehouse.serving.manifest import LOOPBACK_HOSTS

SINGLE_HEADERS = (b"authorization", b"host")
SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}


def error_answer(status: int, message: str, extra_headers: list[tuple[bytes, bytes]] | None = None) -> dict[str, Any]:
    """An error answer `{"detail": message}` as the ASGI messages' parts: status, headers and body."""
    body = json.dumps({"detail": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    return {"status": status, "headers": headers + (extra_headers or []), "body": body}


async def send_answer(send: Any, answer: dict[str, Any]) -> None:
    """Send an `error_answer`."""
    await send({"type": "http.response.start", "status": answer["status"], "headers": answer["headers"]})
    await send({"type": "http.response.body", "body": answer["body"]})


def split_host(value: str) -> tuple[str, str]:
    """
    A `Host` value's name (lower case, without brackets or a final dot) and port (`""` when none).

    :param value: e.g. `Example.org:8080`, `[::1]:1416`, `127.0.0.1`.
    """
    value = value.strip().lower()
    if value.startswith("["):
        name, _, rest = value[1:].partition("]")
        return name, rest.removeprefix(":")
    name, _, port = value.partition(":") if value.count(":") == 1 else (value, "", "")
    return name.removesuffix("."), port


def is_ip_address(name: str) -> bool:
    """Whether `name` is an IPv4 or IPv6 address."""
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def is_loopback_name(name: str) -> bool:
    """Whether `name` (from `split_host`) names this machine's loopback interface."""
    if name in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class EdgeMiddleware:
    """
    ASGI middleware: duplicate `Authorization` or `Host` (400), a `Host` the server does not answer (400) and, without
    keys, cross-origin writes (403).

    :param app: The application.
    :param keyed: Whether API keys are configured (then the `Host` is checked only when `allowed_hosts` is set, and
        cross-origin writes are left to CORS: a browser cannot send another site's key).
    :param allowed_hosts: Names answered besides loopback ones (`allowed_hosts` in the manifest).
    :param remote: Whether the server listens beyond loopback (then IP addresses are answered too).
    :param allowed_origins: `cors.allow_origins`, whose pages may write.
    """

    def __init__(self, app: Any, *, keyed: bool, allowed_hosts: tuple[str, ...], remote: bool,
                 allowed_origins: tuple[str, ...]) -> None:
        self.app = app
        self.keyed = keyed
        self.allowed_hosts = frozenset(allowed_hosts)
        self.remote = remote
        self.allowed_origins = frozenset(allowed_origins)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self.refusal(scope)
        if refusal is not None:
            await send_answer(send, refusal)
            return
        await self.app(scope, receive, send)

    def refusal(self, scope: dict[str, Any]) -> dict[str, Any] | None:
        """The error answer for a request refused here, else None."""
        headers: dict[bytes, list[str]] = {}
        for name, value in scope["headers"]:
            headers.setdefault(name.lower(), []).append(value.decode("latin-1"))
        for name in SINGLE_HEADERS:
            if len(headers.get(name, ())) > 1:
                return error_answer(400, f"the {name.decode().title()} header was sent {len(headers[name])} times: "
                                         "send it once")
        host = headers.get(b"host", [None])[0]
        if host is not None and (not self.keyed or self.allowed_hosts) and not self.answers(host):
            return error_answer(400, f"this server does not answer requests for Host {host!r}: it answers loopback "
                                     "names (localhost, 127.0.0.1, [::1]) and the names listed under allowed_hosts in "
                                     "hayhooks.yml" + (", and IP addresses" if self.remote else ""))
        if not self.keyed and scope["method"] not in SAFE_METHODS:
            return self.cross_origin_refusal(scope, host, headers)
        return None

    def answers(self, host: str) -> bool:
        """Whether a request for `host` (a `Host` header's value) is answered."""
        name, _ = split_host(host)
        return is_loopback_name(name) or name in self.allowed_hosts or (self.remote and is_ip_address(name))

    def cross_origin_refusal(self, scope: dict[str, Any], host: str | None,
                             headers: dict[bytes, list[str]]) -> dict[str, Any] | None:
        """The 403 for a write from a page of another origin, else None."""
        origins = headers.get(b"origin")
        if origins is None:
            if headers.get(b"sec-fetch-site", [""])[0].strip().lower() != "cross-site":
                return None
            sender = "a page of another site (Sec-Fetch-Site: cross-site)"
        else:
            origin = origins[0].strip()
            if "*" in self.allowed_origins or origin in self.allowed_origins or self.own_origin(scope, host, origin):
                return None
            sender = f"a page of origin {origin!r}"
        return error_answer(403, f"refused a {scope['method']} request from {sender}: without API keys this server "
                                 "accepts writes only from its own pages, from the origins listed under "
                                 "cors.allow_origins in hayhooks.yml and from clients that send no Origin header")

    @staticmethod
    def own_origin(scope: dict[str, Any], host: str | None, origin: str) -> bool:
        """Whether `origin` is the server's own: the request's scheme and `Host`, or a loopback name on its port."""
        scheme, _, authority = origin.partition("://")
        if not authority or "/" in authority:
            return False
        if host is not None and origin.lower() == f"{scope.get('scheme', 'http')}://{host.strip().lower()}":
            return True
        name, port = split_host(authority)
        server = scope.get("server")
        own_port = str(server[1]) if server and server[1] else ""
        return scheme.lower() in ("http", "https") and is_loopback_name(name) and bool(own_port) and port == own_port


class PrintableErrors:
    """
    ASGI middleware: in the JSON body of every error answer (status 400 and above) each string, keys included, is
    `shown`: control characters (escape sequences), bidirectional and other format characters and lone surrogates
    written as escapes (`\\u202e`), so that a 422 quoting the caller's input (FastAPI's `input` and `loc`) cannot
    reorder or recolour what a client shows. Other answers pass as they are.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start: dict[str, Any] | None = None
        parts: list[bytes] = []

        async def send_printable(message: dict[str, Any]) -> None:
            nonlocal start
            if message["type"] == "http.response.start" and message["status"] >= 400 and any(
                    name.lower() == b"content-type" and b"json" in value.lower()
                    for name, value in message.get("headers", ())):
                start = message  # held until the body is complete
                return
            if start is None or message["type"] != "http.response.body":
                await send(message)
                return
            parts.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            body = b"".join(parts)
            try:
                body = json.dumps(_shown_data(json.loads(body)), ensure_ascii=False).encode()
            except (ValueError, RecursionError):  # not JSON after all: as it was
                pass
            headers = [(name, value) for name, value in start.get("headers", ()) if name.lower() != b"content-length"]
            await send({**start, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, send_printable)


def _shown_data(value: Any) -> Any:
    """`shown` applied to every string of a parsed JSON value, keys included."""
    if isinstance(value, str):
        return shown(value)
    if isinstance(value, dict):
        return {shown(key): _shown_data(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_shown_data(item) for item in value]
    return value


class _NonFinite:
    """Stands for a number a JSON body cannot hold while `json_body_problem` looks for where it was."""

    def __init__(self, text: str) -> None:
        self.text = text


#: A JSON escape of a UTF-16 surrogate (`\\ud800`), or one encoded as UTF-8 bytes (which the JSON reader passes on).
_SURROGATE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def shown(text: str) -> str:
    """
    Text of a request quoted in an error answer: characters that are not printable (controls, bidirectional and
    other format characters, lone surrogates) written as Python escapes (`\\x1b`, `\\u202e`, `\\ud800`).

    :param text: e.g. a field name from the request.
    """
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else char.encode("unicode_escape").decode("ascii") for char in text)


def _where(value: Any, path: str, found: Any) -> tuple[str, str] | None:
    """The path (`messages[0].content`) of the first value `found` returns a text for, and that text."""
    text = found(value)
    if text is not None:
        return path or "the body", text
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if isinstance(key, str) and (text := found(key)) is not None:
            return f"{path}.{shown(key)}" if path else shown(key), text
        where = f"{path}[{key}]" if isinstance(key, int) else f"{path}.{shown(key)}" if path else shown(key)
        located = _where(item, where, found)
        if located is not None:
            return located
    return None


def json_body_problem(body: bytes) -> str | None:
    """
    What is wrong with a body that Python's JSON reader takes but that no route can use: a number that is not finite
    (`NaN`, `Infinity`, `-Infinity`, or beyond the range of a float: `1e400`), or a string (a value or a key) holding
    a lone UTF-16 surrogate (`"\\ud800"`, or its UTF-8 bytes), which is no character and cannot be encoded.

    :param body: The request body, whatever its `Content-Type` says (a client may send two).
    :returns: A message naming the field and the problem, or None (also for a body that is not JSON at all: whoever
        reads it refuses that).
    """
    non_finite = False

    def constant(text: str) -> _NonFinite:
        nonlocal non_finite
        non_finite = True
        return _NonFinite(text)

    def number(text: str) -> float | _NonFinite:
        value = float(text)
        return value if value - value == 0 else constant(text)

    try:
        parsed = json.loads(body, parse_constant=constant, parse_float=number)
    except (ValueError, RecursionError):
        return None
    try:
        if non_finite:
            field, text = _where(parsed, "", lambda v: v.text if isinstance(v, _NonFinite) else None) or (
                "the body", "?")
            return (f"{field}: {text} is not a finite number; JSON numbers must be finite (NaN, Infinity and numbers "
                    "beyond 1.8e308 are refused)")
        if _SURROGATE_BYTES.search(body):
            located = _where(parsed, "", lambda v: (match := _SURROGATE.search(v)) and shown(match.group())
                             if isinstance(v, str) else None)
            if located is not None:
                field, text = located
                return (f"{field}: a lone UTF-16 surrogate ({text}) is not a character; send text as UTF-8, and a "
                        "character beyond U+FFFF as a surrogate pair")
    except RecursionError:  # nested about as deep as the JSON reader allows: the field is not named
        return ("the body: holds a number that is not finite or a lone UTF-16 surrogate; JSON numbers must be "
                "finite and text must be characters")
    return None
