"""
A scripted OpenAI-compatible chat server on loopback (`ScriptedLLM`) and an ask pipeline whose LLM generator points at
it (`llm_pipeline`): the end-to-end tests of streamed chat get a model whose replies, and so the sentence decisions,
are deterministic.
"""

import json
import re
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

from gatehouse.pipelines import component_spec
from gatehouse.settings import bundled_dir

PROJECT_ROOT = bundled_dir()


class ScriptedLLM(ThreadingHTTPServer):
    """
    An OpenAI-compatible chat server on loopback that streams a scripted reply word by word as server-sent events.

    The script is chosen by the first path segment (`/kept/v1/chat/completions` plays `scripts["kept"]`): strings
    are sent word by word, a float is a pause (s); `<<phrase>>` becomes the `[S#]` marker of the prompt's passage that
    contains the phrase, so the reply cites whatever the retrieval numbered.
    """

    daemon_threads = True

    def __init__(self, scripts: dict[str, list[str | float]]) -> None:
        super().__init__(("127.0.0.1", 0), _ScriptedHandler)
        self.scripts = scripts
        self.requests: list[dict] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _ScriptedHandler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(body)
        script = self.server.scripts[self.path.strip("/").split("/")[0]]
        prompt = body["messages"][-1]["content"]
        passages = dict(re.findall(r"^\[(S\d+)\] [^\n]*\n(.*?)(?=\n\n\[S\d+\] |\n\nQuestion: )", prompt, re.DOTALL | re.MULTILINE))

        def marker(match: re.Match) -> str:
            return next(f"[{sid}]" for sid, text in passages.items() if match.group(1) in text)

        replies = [step if isinstance(step, float) else re.sub(r"\s*<<(.+?)>>", lambda m: " " + marker(m), step)
                   for step in script]
        usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": 40, "total_tokens": len(prompt.split()) + 40}
        if not body.get("stream"):
            reply = "".join(step for step in replies if isinstance(step, str))
            self._send(200, "application/json", json.dumps({
                "id": "chatcmpl-scripted", "object": "chat.completion", "created": int(time.time()), "model": "scripted",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
                "usage": usage}).encode())
            return
        self._send(200, "text/event-stream")
        for step in replies:
            if isinstance(step, float):
                time.sleep(step)
                continue
            for word in re.findall(r"\s*\S+", step):
                self._event({"choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}]})
                time.sleep(0.01)
        self._event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        if (body.get("stream_options") or {}).get("include_usage"):
            self._event({"choices": [], "usage": usage})
        self.wfile.write(b"data: [DONE]\n\n")

    def _send(self, status: int, content_type: str, body: bytes | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        if body is not None:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body is not None:
            self.wfile.write(body)

    def _event(self, data: dict) -> None:
        chunk = {"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": int(time.time()),
                 "model": "scripted", **data}
        try:
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        except OSError:  # the client gave up (the time budget test)
            pass


def llm_pipeline(folder: Path, name: str, base_url: str, *, timeout: float = 60.0) -> Path:
    """The shipped ask pipeline with the `llm` generator profile pointed at `base_url` (model `name`), written to
    `folder/<name>.yml`."""
    spec = yaml.safe_load((PROJECT_ROOT / "pipelines" / "ask.yml").read_text(encoding="utf-8"))
    profile = yaml.safe_load((PROJECT_ROOT / "pipelines" / "generators" / "llm.yml").read_text(encoding="utf-8"))
    generator = profile["init_parameters"]["chat_generator"]["init_parameters"]
    generator.update(api_base_url=base_url, model=name, timeout=timeout)
    target = component_spec(spec, "generator")
    target.clear()
    target.update(profile)
    path = folder / f"{name}.yml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path
