"""
Ingest benchmark: what one caller's hostile uploads cost everyone else, in this checkout and, with
`--baseline-python`, in another checkout's environment measured in the same run (each side with its own servers and
data directories, one side after the other):

- stall: a keyless `gatehouse serve` (retrieve and index) where another tenant's knowledge base is indexed first; a
  42 KB markdown file of unclosed `{{ ` openers is then uploaded while `GET /status` and that other tenant's
  `POST /retrieve/run` are each called back to back (two clients) until its job ends: their slowest and P95 times
  during the upload, against the same calls before it;
- cli: `gatehouse ingest` of a 420 KB markdown file of every unclosed opener the cleaner meets (`{{`, `{%`,
  `{% comment %}`, `<!--`, `<?`, `</x`, `<a`, backticks, a table rule full of spaces), model loading included,
  stopped after `--cli-limit` seconds;
- fairness: one tenant's job of two Word files of 100,000 paragraphs that look empty (a zero-width space each, about
  280 KB a file), then another tenant's one-line upload: how long after its POST that upload is done.

Usage:
```
python -m gatehouse.eval.ingest_bench                                              # this checkout only
python -m gatehouse.eval.ingest_bench --baseline-python ../main/.venv/bin/python   # beside another checkout
```
"""

import argparse
import contextlib
import io
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import yaml

from gatehouse.eval.serving_bench import serve_process
from gatehouse.stats import percentile

OPENERS = ["{{ ", "{%a ", "{% comment %}", "<p>x</p>" + "<!--" * 40, "<?x", "</x ", "<a ", "`" * 40 + "a`" * 20]
OTHER_TENANT, OTHER_KB = "bystander", "handbook"
HANDBOOK = "# Handbook\n\n" + "\n\n".join(
    f"## Topic {n}\n\nThe gateway keeps request logs for {n + 10} days and rotates keys every {n + 1} months."
    for n in range(20))


def worst_case_markdown(size: int, openers: list[str]) -> bytes:
    """About `size` bytes of markdown: equal parts of each opener repeated, never closed."""
    part = size // len(openers)
    return "".join((opener * (part // len(opener) + 1))[:part] for opener in openers).encode()


def table_rule_markdown(size: int) -> bytes:
    """A pipe table's header row over a rule row of `size` spaces (the rule pattern read them again from each)."""
    return ("|a|\n" + " " * size + "x\n").encode()


def look_empty_docx(paragraphs: int = 100_000, seed: int = 0) -> bytes:
    """A Word file of `paragraphs` paragraphs of one zero-width space each, with Word's random revision ids."""
    import docx

    rng = random.Random(seed)
    base = io.BytesIO()
    docx.Document().save(base)
    body = "".join(f'<w:p w:rsidR="00{rng.getrandbits(16):04X}"><w:r><w:t>\u200b</w:t></w:r></w:p>'
                   for _ in range(paragraphs))
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(base.getvalue())) as template, \
            zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as made:
        for info in template.infolist():
            data = template.read(info.filename)
            if info.filename == "word/document.xml":
                text = data.decode()
                start = text.index("<w:body>") + len("<w:body>")
                data = (text[:start] + body + text[start:]).encode()
            made.writestr(info, data)
    return out.getvalue()


def _bundled_pipelines(python: str, folder: Path) -> Path:
    """The pipelines folder of the checkout `python` runs (asked from `folder`: no checkout's own folder)."""
    found = subprocess.run([python, "-c", "from gatehouse.settings import bundled_dir; print(bundled_dir())"],
                           capture_output=True, text=True, check=True, cwd=folder)
    return Path(found.stdout.strip()) / "pipelines"


@contextlib.contextmanager
def keyless_server(python: str, folder: Path) -> Iterator[str]:
    """A keyless `gatehouse serve` of `python`'s checkout (retrieve and index, one ingest worker) over `folder`."""
    pipelines = _bundled_pipelines(python, folder)
    manifest = folder / "hayhooks.yml"
    manifest.write_text(yaml.safe_dump({
        "pipelines": {kind: {"pipeline": str(pipelines / f"{kind}.yml"), "kind": kind}
                      for kind in ("retrieve", "index")},
        "mcp": False, "limits": {"requests_per_minute": 0, "max_concurrent_requests": 0},
    }), encoding="utf-8")
    env = {**os.environ, "GATEHOUSE_DATA_DIR": str(folder / "data")}
    log = folder / "server.log"
    with serve_process(manifest, log, deployments=2, what="the ingest benchmark", env=env, cwd=folder,
                       python=python) as url:
        try:
            yield url
        except httpx.HTTPError as error:  # the server went away: say why
            raise RuntimeError(f"{url}: {error}; the end of its log ({log}):\n{log.read_text()[-3000:]}") from error


def _upload(client: httpx.Client, tenant: str, kb: str, files: list[tuple[str, bytes]], wait: bool) -> httpx.Response:
    return client.post("/index/run", data={"kb": kb, "tenant": tenant, "wait": str(wait).lower()},
                       files=[("files", (name, data, "application/octet-stream")) for name, data in files])


def _wait_done(client: httpx.Client, status_url: str, limit_s: float) -> dict:
    deadline = time.monotonic() + limit_s
    while True:
        job = client.get(status_url).json()
        if job["status"] in ("done", "failed", "cancelled") or time.monotonic() > deadline:
            return job
        time.sleep(0.1)


def _timed(call) -> float:
    started = time.perf_counter()
    response = call()
    response.raise_for_status()
    return time.perf_counter() - started


def stall(python: str, folder: Path, size: int, limit_s: float) -> dict:
    """The slowest and P95 `/status` and other-tenant `/retrieve/run` times (s) before and during an upload."""
    with keyless_server(python, folder) as url, httpx.Client(base_url=url, timeout=None) as client:
        indexed = _upload(client, OTHER_TENANT, OTHER_KB, [("handbook.md", HANDBOOK.encode())], wait=True)
        indexed.raise_for_status()
        status = lambda: client.get("/status")  # noqa: E731
        retrieve = lambda: client.post("/retrieve/run", json={  # noqa: E731
            "query": "How long are request logs kept?", "tenant": OTHER_TENANT, "top_k": 5})
        before = {"status": [_timed(status) for _ in range(10)], "retrieve": [_timed(retrieve) for _ in range(10)]}
        started = time.perf_counter()
        posted = _upload(client, "attacker", "notes", [("openers.md", worst_case_markdown(size, ["{{ "]))],
                         wait=False)
        posted.raise_for_status()
        finished = threading.Event()
        during: dict[str, list[float]] = {"status": [], "retrieve": []}

        def calls(name: str, call) -> None:  # back to back until the upload's job ends
            while not finished.is_set():
                during[name].append(_timed(call))

        callers = [threading.Thread(target=calls, args=(name, call), daemon=True)
                   for name, call in (("status", status), ("retrieve", retrieve))]
        for caller in callers:
            caller.start()
        job = _wait_done(client, posted.json()["status_url"], limit_s)
        upload_s = time.perf_counter() - started
        finished.set()
        for caller in callers:
            caller.join()
    return {"before": before, "during": during, "upload_s": upload_s, "job": job["status"]}


def cli(python: str, folder: Path, size: int, limit_s: float) -> tuple[float | None, str]:
    """Seconds `gatehouse ingest` of the worst-case file took (None: stopped at `limit_s`), and its summary line."""
    path = folder / "openers.md"
    path.write_bytes(worst_case_markdown(size - size // 10, OPENERS) + table_rule_markdown(size // 10))
    env = {**os.environ, "GATEHOUSE_DATA_DIR": str(folder / "data")}
    started = time.perf_counter()
    try:
        done = subprocess.run([python, "-m", "gatehouse.cli", "ingest", str(path), "--kb", "notes"], cwd=folder,
                              env=env, capture_output=True, text=True, timeout=limit_s, check=False)
    except subprocess.TimeoutExpired:
        return None, "stopped"
    lines = [line for line in done.stderr.splitlines() if line.startswith("[")]
    return time.perf_counter() - started, (lines[-1] if lines else done.stderr.strip()[-200:])


def fairness(python: str, folder: Path, limit_s: float) -> dict:
    """When another tenant's one-line upload is done, after its POST, behind a job of two look-empty Word files."""
    with keyless_server(python, folder) as url, httpx.Client(base_url=url, timeout=None) as client:
        heavy = look_empty_docx()
        flood = _upload(client, "flooder", "reports", [("one.docx", heavy), ("two.docx", heavy)], wait=False)
        flood.raise_for_status()
        time.sleep(1.0)  # the worker has taken the flooder's job
        started = time.perf_counter()
        posted = _upload(client, "bystander", "notes", [("note.md", b"# Note\n\nThe door code is 4711.\n")],
                         wait=False)
        posted.raise_for_status()
        job = _wait_done(client, posted.json()["status_url"], limit_s)
        waited = time.perf_counter() - started
        flood_job = _wait_done(client, flood.json()["status_url"], limit_s)
    return {"waited_s": waited, "status": job["status"], "docx_kb": len(heavy) // 1024,
            "flood": {"status": flood_job["status"], "failed": flood_job["result"]["files"]["failed"]}}


def _side(python: str, args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="gatehouse-ingest-bench-") as scratch:
        root = Path(scratch)
        for name in ("stall", "cli", "fairness"):
            (root / name).mkdir()
        return {"stall": stall(python, root / "stall", args.stall_kb * 1000, args.limit),
                "cli": cli(python, root / "cli", args.cli_kb * 1000, args.cli_limit),
                "fairness": fairness(python, root / "fairness", args.limit)}


def _seconds(values: list[float]) -> str:
    return f"max {max(values):.2f} s, P95 {percentile(values, 0.95):.2f} s ({len(values)} calls)" if values else \
        "no calls"


def report(label: str, measured: dict, args: argparse.Namespace) -> list[str]:
    """The lines of one side's figures."""
    stalled, (cli_s, cli_line), fair = measured["stall"], measured["cli"], measured["fairness"]
    return [
        f"{label}:",
        f"  stall, {args.stall_kb} KB of '{{{{ ' uploaded (job {stalled['job']} after {stalled['upload_s']:.1f} s):",
        f"    GET /status          before {_seconds(stalled['before']['status'])}; "
        f"during {_seconds(stalled['during']['status'])}",
        f"    POST /retrieve/run   before {_seconds(stalled['before']['retrieve'])}; "
        f"during {_seconds(stalled['during']['retrieve'])}",
        f"  cli, gatehouse ingest of {args.cli_kb} KB of openers: "
        + (f"{cli_s:.1f} s, {cli_line}" if cli_s is not None else f"over {args.cli_limit:.0f} s (stopped)"),
        f"  fairness, a one-line upload behind two {fair['docx_kb']} KB Word files of another tenant: done after "
        f"{fair['waited_s']:.1f} s ({fair['status']}); their job {fair['flood']['status']}, failed files: "
        f"{[item['reason'] for item in fair['flood']['failed']] or 'none'}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline-python", help="the python of another checkout's environment, measured first")
    parser.add_argument("--stall-kb", type=int, default=42, help="size of the upload of the stall measurement")
    parser.add_argument("--cli-kb", type=int, default=420, help="size of the file `gatehouse ingest` reads")
    parser.add_argument("--cli-limit", type=float, default=300, help="seconds after which the ingest is stopped")
    parser.add_argument("--limit", type=float, default=600, help="seconds a job is waited for")
    args = parser.parse_args()
    sides = ([("baseline", args.baseline_python)] if args.baseline_python else []) + [("this checkout", sys.executable)]
    for label, python in sides:
        lines = report(f"{label} ({python})", _side(python, args), args)
        print("\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
