"""
Bounds on what one HTTP connection may send and hold: uvicorn's httptools protocol with a size limit on the request
line and headers, a limit on the number of headers (both 431), a deadline for the headers, a deadline for the body,
and a cap on the connections open at once; and the process's descriptor limit raised to what the system allows.

uvicorn bounds none of these with httptools (h11 bounds the size only, answering 400, and parses requests three
times slower: see docs/benchmarks.md), and it times out only connections idle between requests, before their first
byte: a client that sends part of the headers, or part of a body, and stops holds its connection, and a file
descriptor, for ever. Here:

- a connection whose next request headers are not complete `header_timeout_s` after it opened, or after the last
  response on it, is closed;
- a request whose body is not complete `body_timeout_s` after its headers is answered 408 (or, once the application
  has answered, its connection is closed);
- at most `max_connections` connections are open: one more closes the connection that has waited longest for its
  next request's headers (an idle keep-alive connection, one opened and left silent, one sending headers slowly),
  provided it has waited `EVICTION_GRACE_S` (a new connection's first bytes are read before it may be closed); when
  none has, the new connection is answered 503 and closed. Requests being read or answered are never closed for a
  new connection.

`raise_descriptor_limit` raises the soft limit on open files to the hard one, and `connection_limit` is the cap that
leaves room below it for the store's files, database connections and logs.

Usage:
```python
import uvicorn

from gatehouse.serving.http_limits import bounded_http_protocol, connection_limit, raise_descriptor_limit

protocol = bounded_http_protocol(max_header_bytes=65536, max_headers=100, header_timeout_s=10.0,
                                 body_timeout_s=60.0, max_connections=connection_limit(raise_descriptor_limit()))
uvicorn.run(app, http=protocol)
```
"""

import asyncio
import http
import json
import resource
import time
from collections import OrderedDict
from typing import Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol, RequestResponseCycle

#: A connection waiting for its headers may be closed for a new one only after waiting this long (seconds).
EVICTION_GRACE_S = 1.0
#: Descriptors kept free of connections: at least this many, or an eighth of the limit.
RESERVED_DESCRIPTORS = 64
#: The cap on connections when nothing else sets it (`limits.max_connections`), however high the descriptor limit.
DEFAULT_MAX_CONNECTIONS = 4096
#: A connection refused for the cap is logged at most this often (seconds).
REFUSAL_LOG_EVERY_S = 60.0
#: The soft limit is raised at most this far when the hard limit is unlimited.
UNLIMITED_RAISE = 65536


class _Refused(Exception):
    """Stops the parser in a callback: the request is answered with the protocol's `refusal`."""


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """
    `HttpToolsProtocol` with header and body bounds and a connection cap; `bounded_http_protocol` sets them on a
    subclass, whose `waiting` (connections waiting for their next request's headers, the longest waiting first) is
    shared by its connections.

    The size is counted twice: exactly, from the request target and each header as the parser completes them, and,
    for a line the parser has not finished (a 50 MB header value), from the bytes received while the headers are
    incomplete, so at most `max_header_bytes` and one read are held.
    """

    max_header_bytes = 65536
    max_headers = 100
    header_timeout_s = 10.0
    body_timeout_s = 60.0
    max_connections = DEFAULT_MAX_CONNECTIONS
    waiting: "OrderedDict[BoundedHttpToolsProtocol, float]" = OrderedDict()
    last_refusal_logged = float("-inf")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.refusal: tuple[int, str] | None = None
        self.in_head = True  # receiving a request's line and headers (the first, or the next one)
        self.head_received = 0  # bytes received while the head is incomplete
        self.head_size = 0  # request target, header names and values parsed
        self.header_count = 0
        self.head_timer: asyncio.TimerHandle | None = None
        self.body_timer: asyncio.TimerHandle | None = None
        self.body_cycle: RequestResponseCycle | None = None  # the running request whose body is being received

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections and not self._close_longest_waiting():
            reason = (f"the server holds {self.max_connections} connections, each busy with a request "
                      "(limits.max_connections in hayhooks.yml); try again in a moment")
            now = time.monotonic()
            if now - type(self).last_refusal_logged >= REFUSAL_LOG_EVERY_S:  # not once per connection of a flood
                type(self).last_refusal_logged = now
                self.logger.warning("Refused connections: %s", reason)
            self._answer_and_close(http.HTTPStatus.SERVICE_UNAVAILABLE.value, reason)
            return
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        self._disarm_body_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.in_head:
            self.head_received += len(data)  # the head's bytes, unless the head ends in this read (reset then)
        super().data_received(data)
        if self.in_head and self.head_received > self.max_header_bytes and not self.transport.is_closing():
            self._refuse_too_large()
            self.send_400_response("")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.head_size = self.header_count = 0

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.header_count += 1
        if self.header_count > self.max_headers:
            self.refusal = (431, f"the request has more than {self.max_headers} headers "
                                 "(limits.max_headers in hayhooks.yml)")
            raise _Refused
        self._count(len(name) + len(value) + 4)  # as sent: "name: value\r\n"
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self.in_head = False
        self.head_received = 0
        self._disarm_head_timer()
        super().on_headers_complete()

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        super()._start_asgi_task(cycle, app)
        if cycle.more_body:  # its body has not all arrived (a queued request's has, or it waits unread)
            self.body_cycle = cycle
            self.body_timer = self.loop.call_later(self.body_timeout_s, self._body_timed_out)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        if self.cycle is self.body_cycle:
            self._disarm_body_timer()
        self.in_head = True  # the next request's head follows (its timer starts once this one is answered)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.cycle.response_complete:  # no later request is waiting
            self._arm_head_timer()

    def send_400_response(self, msg: str) -> None:
        """Answer a refused request with its status and reason (as JSON); a malformed one as uvicorn does."""
        if self.refusal is None:
            super().send_400_response(msg)
            return
        status, reason = self.refusal
        self.logger.warning("Refused a request: %s", reason)
        self._answer_and_close(status, reason)

    def _answer_and_close(self, status: int, reason: str) -> None:
        body = json.dumps({"detail": reason}).encode()
        head = [STATUS_LINE[status]]
        head += [name + b": " + value + b"\r\n" for name, value in self.server_state.default_headers]
        if status == http.HTTPStatus.SERVICE_UNAVAILABLE:
            head.append(b"retry-after: 1\r\n")
        head += [b"content-type: application/json\r\n", b"content-length: %d\r\n" % len(body),
                 b"connection: close\r\n\r\n"]
        self.transport.write(b"".join(head) + body)
        self.transport.close()

    def _count(self, size: int) -> None:
        self.head_size += size
        if self.head_size > self.max_header_bytes:
            self._refuse_too_large()
            raise _Refused

    def _refuse_too_large(self) -> None:
        self.refusal = (http.HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE.value,
                        f"the request line and headers exceed {self.max_header_bytes} bytes "
                        "(limits.max_header_bytes in hayhooks.yml)")

    def _arm_head_timer(self) -> None:
        self._disarm_head_timer()
        self.head_timer = self.loop.call_later(self.header_timeout_s, self._head_timed_out)
        self.waiting[self] = time.monotonic()

    def _disarm_head_timer(self) -> None:
        self.waiting.pop(self, None)
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def _head_timed_out(self) -> None:
        self.head_timer = None
        self.waiting.pop(self, None)
        if not self.transport.is_closing():
            self.transport.close()

    def _disarm_body_timer(self) -> None:
        self.body_cycle = None
        if self.body_timer is not None:
            self.body_timer.cancel()
            self.body_timer = None

    def _body_timed_out(self) -> None:
        """The body did not arrive in time: 408 when nothing has been answered yet, and the connection closed."""
        cycle, self.body_timer, self.body_cycle = self.body_cycle, None, None
        if cycle is None or self.transport.is_closing():
            return
        cycle.disconnected = True  # the application's next receive() is a disconnect; what it sends is dropped
        cycle.message_event.set()
        if cycle.response_started:
            self.transport.close()
            return
        self._answer_and_close(http.HTTPStatus.REQUEST_TIMEOUT.value,
                               f"the request body did not arrive within {self.body_timeout_s:g} s of its headers "
                               "(limits.body_timeout_s in hayhooks.yml)")

    def _close_longest_waiting(self) -> bool:
        """Close the connection that has waited longest for its next request's headers, if it has waited
        `EVICTION_GRACE_S`; returns whether one was closed."""
        if not self.waiting:
            return False
        connection, since = next(iter(self.waiting.items()))
        if time.monotonic() - since < EVICTION_GRACE_S:
            return False
        connection._disarm_head_timer()
        connection.transport.close()
        return True


def raise_descriptor_limit() -> int:
    """
    Raise this process's soft limit on open files (`RLIMIT_NOFILE`) to its hard limit (to `UNLIMITED_RAISE` when that
    is unlimited), so that the common soft limit of 1,024 does not bound the connections a server can hold.

    :returns: The soft limit now.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = UNLIMITED_RAISE if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):  # not allowed here: the soft limit stays
            pass
    return UNLIMITED_RAISE if soft == resource.RLIM_INFINITY else soft


def connection_limit(descriptors: int, configured: int | None = None) -> int:
    """
    The most connections a server process holds: `configured` (`limits.max_connections`), else the descriptor limit
    less what the process needs besides connections (`RESERVED_DESCRIPTORS`, or an eighth), at most
    `DEFAULT_MAX_CONNECTIONS`.

    :param descriptors: The soft limit on open files (`raise_descriptor_limit()`).
    :param configured: The manifest's setting, if any.
    :raises ValueError: When `configured` leaves fewer than `RESERVED_DESCRIPTORS` descriptors for the rest.
    """
    room = descriptors - max(RESERVED_DESCRIPTORS, descriptors // 8)
    if configured is None:
        return max(1, min(DEFAULT_MAX_CONNECTIONS, room))
    if configured > descriptors - RESERVED_DESCRIPTORS:
        raise ValueError(f"limits.max_connections is {configured}, but this process may open {descriptors} files "
                         f"(its hard limit, RLIMIT_NOFILE), of which {RESERVED_DESCRIPTORS} are kept for the store, "
                         f"databases and logs: set it to at most {descriptors - RESERVED_DESCRIPTORS}, or raise the "
                         "hard limit (ulimit -Hn, LimitNOFILE= in a systemd unit)")
    return configured


def bounded_http_protocol(*, max_header_bytes: int, max_headers: int, header_timeout_s: float,
                          body_timeout_s: float, max_connections: int) -> type[BoundedHttpToolsProtocol]:
    """
    The protocol class for `uvicorn.run(http=...)` with these bounds (one class per server: its connections share
    the cap).

    :param max_header_bytes: The request line and headers of one request, in bytes (`limits.max_header_bytes`).
    :param max_headers: Header lines in one request (`limits.max_headers`).
    :param header_timeout_s: Seconds a connection may take to send its next request's headers
        (`limits.header_timeout_s`).
    :param body_timeout_s: Seconds a request's body may take to arrive after its headers (`limits.body_timeout_s`).
    :param max_connections: Connections open at once (`connection_limit`).
    """
    return type("BoundedHttpToolsProtocol", (BoundedHttpToolsProtocol,), {
        "max_header_bytes": max_header_bytes, "max_headers": max_headers, "header_timeout_s": header_timeout_s,
        "body_timeout_s": body_timeout_s, "max_connections": max_connections, "waiting": OrderedDict()})
