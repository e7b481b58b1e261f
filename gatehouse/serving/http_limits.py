"""
Bounds on what one HTTP connection may send before the application sees a request: uvicorn's httptools protocol
with a size limit on the request line and headers, a limit on the number of headers (both 431) and an idle-header
timeout.

uvicorn bounds none of these with httptools (h11 bounds the size only, answering 400, and parses requests three
times slower: see docs/benchmarks.md), and it times out only connections idle between requests, before their first
byte: a client that sends part of the headers and stops holds its connection, and a file descriptor, for ever.
Here a connection whose next request headers are not complete `header_timeout_s` after it opened, or after the last
response on it, is closed.

Usage:
```python
import uvicorn

from gatehouse.serving.http_limits import bounded_http_protocol

protocol = bounded_http_protocol(max_header_bytes=65536, max_headers=100, header_timeout_s=10.0)
uvicorn.run(app, http=protocol)
```
"""

import asyncio
import http
import json
from typing import Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol


class _Refused(Exception):
    """Stops the parser in a callback: the request is answered with the protocol's `refusal`."""


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """
    `HttpToolsProtocol` with header bounds; `bounded_http_protocol` sets them on a subclass.

    The size is counted twice: exactly, from the request target and each header as the parser completes them, and,
    for a line the parser has not finished (a 50 MB header value), from the bytes received while the headers are
    incomplete, so at most `max_header_bytes` and one read are held.
    """

    max_header_bytes = 65536
    max_headers = 100
    header_timeout_s = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.refusal: tuple[int, str] | None = None
        self.in_head = True  # receiving a request's line and headers (the first, or the next one)
        self.head_received = 0  # bytes received while the head is incomplete
        self.head_size = 0  # request target, header names and values parsed
        self.header_count = 0
        self.head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
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

    def on_message_complete(self) -> None:
        super().on_message_complete()
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
        body = json.dumps({"detail": reason}).encode()
        head = [STATUS_LINE[status]]
        head += [name + b": " + value + b"\r\n" for name, value in self.server_state.default_headers]
        head += [b"content-type: application/json\r\n", b"content-length: %d\r\n" % len(body),
                 b"connection: close\r\n\r\n"]
        self.logger.warning("Refused a request: %s", reason)
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

    def _disarm_head_timer(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def _head_timed_out(self) -> None:
        self.head_timer = None
        if not self.transport.is_closing():
            self.transport.close()


def bounded_http_protocol(*, max_header_bytes: int, max_headers: int,
                          header_timeout_s: float) -> type[BoundedHttpToolsProtocol]:
    """
    The protocol class for `uvicorn.run(http=...)` with these bounds.

    :param max_header_bytes: The request line and headers of one request, in bytes (`limits.max_header_bytes`).
    :param max_headers: Header lines in one request (`limits.max_headers`).
    :param header_timeout_s: Seconds a connection may take to send its next request's headers
        (`limits.header_timeout_s`).
    """
    return type("BoundedHttpToolsProtocol", (BoundedHttpToolsProtocol,), {
        "max_header_bytes": max_header_bytes, "max_headers": max_headers, "header_timeout_s": header_timeout_s})
