"""
What the header bounds of `gatehouse serve` cost: the time one small request (20 headers) takes over a kept-alive
loopback connection with uvicorn's httptools protocol, with Gatehouse's bounded one (`gatehouse.serving.http_limits`)
and with uvicorn's h11 protocol (which bounds the header size only), each serving a trivial ASGI app in this process;
printed as µs per request and as the ratio of the medians to httptools, all measured in the same run.

Usage:
```
python -m gatehouse.eval.protocol_bench --requests 3000 --rounds 3
```
```python
from gatehouse.eval.protocol_bench import measure

times = measure(requests=500, rounds=1)      # {"httptools": [µs per request], "bounded": [...], "h11": [...]}
```
"""

import argparse
import socket
import statistics
import threading
import time
from typing import Any

import uvicorn

from gatehouse.serving.http_limits import bounded_http_protocol

ANSWER = b"ok"


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(ANSWER)).encode())]})
    await send({"type": "http.response.body", "body": ANSWER})


def _per_request_us(port: int, requests: int) -> float:
    request = (b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               + b"".join(b"X-Header-%d: %s\r\n" % (number, b"v" * 40) for number in range(20)) + b"\r\n")
    with socket.create_connection(("127.0.0.1", port), timeout=30) as connection:
        started = time.perf_counter()
        for _ in range(requests):
            connection.sendall(request)
            answer = b""
            while not answer.endswith(ANSWER):
                answer += connection.recv(65536)
        return (time.perf_counter() - started) / requests * 1e6


def _time_protocol(http: Any, requests: int) -> float:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(_app, http=http, log_level="error", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.01)
        port = listener.getsockname()[1]
        _per_request_us(port, max(1, requests // 10))  # warm-up
        return _per_request_us(port, requests)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        listener.close()


def measure(*, requests: int, rounds: int) -> dict[str, list[float]]:
    """
    µs per request of each protocol, the protocols taking turns in each round.

    :param requests: Requests per protocol and round.
    :param rounds: Rounds.
    """
    protocols = {"httptools": "httptools",
                 "bounded": bounded_http_protocol(max_header_bytes=65536, max_headers=100, header_timeout_s=10.0,
                                                  body_timeout_s=60.0, max_connections=4096),
                 "h11": "h11"}
    times: dict[str, list[float]] = {name: [] for name in protocols}
    for _ in range(rounds):
        for name, http in protocols.items():
            times[name].append(_time_protocol(http, requests))
    return times


def report(times: dict[str, list[float]]) -> list[str]:
    """One line per protocol: its times, their median and the ratio of that to httptools' median."""
    baseline = statistics.median(times["httptools"])
    return [f"{name:<10} median {statistics.median(values):7.1f} µs/request  "
            f"x{statistics.median(values) / baseline:.2f}  ({' '.join(f'{value:.0f}' for value in values)})"
            for name, values in times.items()]


def main() -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3000, help="requests per protocol and round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print("\n".join(report(measure(requests=args.requests, rounds=args.rounds))))


if __name__ == "__main__":
    main()
