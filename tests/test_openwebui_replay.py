"""
Open WebUI as a client that cannot drift: the requests a real Open WebUI 0.12.4 sent to Gatehouse (recorded by
`tests/fixtures/openwebui/record.py`: a first question with the title, tags and follow-up prompts it sends around the
answer, a follow-up question with its history, streamed and with "Stream Chat Response" off; once against the server
before it gave Open WebUI sources, whose answers in the histories carry `[S#]` markers, once after, `sources-*`, whose
answers carry `[n]`) are replayed against a real `gatehouse serve` with the shipped manifest's defaults and an API
key, and each reply is read the way Open WebUI 0.12.4 reads it:

- a streamed reply line by line as `open_webui/utils/middleware.py` does (`streaming_chat_response_handler`, fed by
  `utils/session_pool.py`'s `stream_chunks_handler`): `data:` lines of JSON, `event` objects passed to the event
  emitter (a `source` event's `data` becomes one of the message's sources), `choices[0].delta.content` appended;
- a non-streamed reply as `non_streaming_chat_response_handler` and the chat page's `chatCompletionEventHandler` do:
  `choices[0].message.content` and the top-level `sources`;
- the sources as the chat page shows them: the inline `[n]` chips name the n-th distinct source
  (`ContentRenderer.svelte` `getSourceIds`), cut to 15 + "..." + 10 characters past 30 (`Source.svelte`), and a click
  opens the n-th entry of the citation list (`Citations.svelte`), which shows its documents;
- a background task's reply as `background_tasks_handler` and `utils/task.py` do: the text from the first `{` to the
  last `}`, parsed as JSON, and its `title`, `tags` or `follow_ups`.

The knowledge base is the sample FAQ's three documents the recorded questions were answered from.
"""

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from openai import OpenAI
from server_process import running_server

from gatehouse.settings import bundled_dir

PROJECT_ROOT = bundled_dir()
RECORDINGS = Path(__file__).parent / "fixtures" / "openwebui"
KEY = "openwebui-replay-key"
KB_FILES = ("api-keys.md", "payment-methods.md", "failed-payments.md")
#: What a background task's reply must hold, by the task's file-name kind, and the type Open WebUI accepts there.
TASK_KEYS = {"task-title": ("title", str), "task-tags": ("tags", list), "task-follow-ups": ("follow_ups", list)}
#: Open WebUI's inline citation token (`utils/marked/citation-extension.ts`): `[1]`, `[1,2]`, `[1#x]`, adjacent groups.
MARKER = re.compile(r"(\[(?:\d+(?:#[^,\]\s]+)?(?:,\s*\d+(?:#[^,\]\s]+)?)*)\])+")
#: A sentence this long (in words) that a marker ends must be in the cited source's documents word for word.
QUOTED_WORDS = 6


def _recordings() -> list[Path]:
    return sorted(RECORDINGS.glob("*.json"))


def _kind(path: Path) -> str:
    """`streamed-04-chat-stream.json` -> `chat-stream`: what follows the request's number (see record.py)."""
    return re.fullmatch(r".+?-\d{2,}-(.+)", path.stem).group(1)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The shipped manifest's defaults with one API key, and the three FAQ documents uploaded over HTTP."""
    tmp = tmp_path_factory.mktemp("openwebui")
    pipelines = PROJECT_ROOT / "pipelines"
    manifest = {
        "pipelines": {name: {"pipeline": str(pipelines / f"{name}.yml"), "kind": name}
                      for name in ("ask", "retrieve", "index")},
        "auth": {"keys": [{"env": "GATEHOUSE_TEST_OPENWEBUI_KEY", "tenants": ["public"]}]},
    }
    (tmp / "hayhooks.yml").write_text(yaml.safe_dump(manifest), encoding="utf-8")
    env = {**os.environ, "GATEHOUSE_DATA_DIR": str(tmp / "data"), "GATEHOUSE_TEST_OPENWEBUI_KEY": KEY}
    with running_server(tmp / "hayhooks.yml", env=env, workdir=tmp, pipelines=3) as url:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=300) as client:
            files = [("files", (name, (PROJECT_ROOT / "kb" / "faq" / name).read_bytes(), "text/markdown"))
                     for name in KB_FILES]
            response = client.post("/index/run", files=files, data={"kb": "faq", "wait": "true"})
            assert response.status_code == 200, response.text
            assert response.json()["result"]["written"] == len(KB_FILES)
            yield client


@pytest.fixture(scope="module")
def openai_client(server):
    """The official `openai` client on the same server."""
    return OpenAI(base_url=str(server.base_url.join("/v1")), api_key=KEY)


def _replay(client: httpx.Client, path: Path) -> httpx.Response:
    """Send a recorded request as Open WebUI sent it, with this server's key."""
    recorded = json.loads(path.read_text(encoding="utf-8"))
    headers = {name: value.replace("<key>", KEY) for name, value in recorded["headers"].items()}
    body = None if recorded["body"] is None else json.dumps(recorded["body"]).encode()
    return client.request(recorded["method"], recorded["path"], headers=headers, content=body)


# -- Open WebUI's reading of a reply -------------------------------------------------------------------------------


@dataclass
class Message:
    """What Open WebUI makes of a chat reply: the text shown, the sources kept, and what it dropped."""

    content: str = ""
    sources: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False                                  # a `data: [DONE]` line was read
    after_done: list[str] = field(default_factory=list)  # lines after it
    ignored: list[str] = field(default_factory=list)     # lines Open WebUI skips (not `data:` JSON, no choices)
    errors: list[Any] = field(default_factory=list)


def _read_stream(body: bytes) -> Message:
    """A streamed reply, line by line, as Open WebUI 0.12.4's `streaming_chat_response_handler` reads it."""
    message = Message()
    for raw in body.split(b"\n"):
        line = raw.decode("utf-8", "replace")
        if not line or line.isspace():
            continue
        if message.done:
            message.after_done.append(line)
        if not line.startswith("data:"):
            message.ignored.append(line)  # a plain JSON `error` line would be shown as an error; anything else dropped
            continue
        try:
            data = json.loads(line[5:].strip())
        except ValueError:
            if "data: [DONE]" in line:
                message.done = True
            else:
                message.ignored.append(line)
            continue
        if not data:
            continue
        if "event" in data:
            _emit(message, data.get("event") or {})
        if "selected_model_id" in data or str(data.get("type", "")).startswith("response."):
            continue
        choices = data.get("choices") or []
        if not choices:
            if data.get("error"):
                message.errors.append(data["error"])
            elif "event" not in data:
                message.ignored.append(line)
            continue
        value = (choices[0].get("delta") or {}).get("content")
        if value:
            message.content += value if isinstance(value, str) else f"{value}"
    message.content = message.content.strip()  # the last message item's text is stripped when the stream ends
    return message


def _emit(message: Message, event: dict[str, Any]) -> None:
    """The event emitter and the chat page for a `source` (or `citation`) event: its data is one more source."""
    data = event.get("data")
    if event.get("type") in ("source", "citation") and isinstance(data, dict) and data.get("type") is None:
        message.sources.append(data)


def _read_completion(body: dict[str, Any]) -> Message:
    """A non-streamed reply as `chatCompletionEventHandler` reads it: the message text and the top-level `sources`."""
    choices = body.get("choices") or []
    content = (choices[0].get("message") or {}).get("content") or "" if choices else ""
    return Message(content=content, sources=list(body.get("sources") or []),
                   errors=[body["error"]] if "error" in body else [])


def _source_id(source: dict[str, Any], metadata: dict[str, Any] | None) -> str:
    """`metadata?.source ?? source?.source?.id ?? 'N/A'`: what both lists key a source by."""
    if metadata is not None and metadata.get("source") is not None:
        return str(metadata["source"])
    inner = source.get("source") or {}
    return str(inner["id"]) if inner.get("id") is not None else "N/A"


def _chips(sources: list[dict[str, Any]]) -> list[str]:
    """The name of each inline `[n]` chip, n = 1, 2, ... (`ContentRenderer.svelte` `getSourceIds`)."""
    names, seen = [], set()
    for source in sources:
        for index, _ in enumerate(source.get("document") or []):
            metadata = (source.get("metadata") or [None] * (index + 1))[index]
            key = _source_id(source, metadata)
            if key in seen:
                continue
            seen.add(key)
            if metadata and metadata.get("name"):
                names.append(metadata["name"])
            elif key.startswith(("http://", "https://")):
                names.append(key)
            else:
                names.append((source.get("source") or {}).get("name") or key)
    return names


def _citation_list(sources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The citation list under the message; `[n]` opens the n-th entry's popup (`Citations.svelte`)."""
    entries: list[dict[str, Any]] = []
    for source in sources:
        if not source:
            continue
        for index, document in enumerate(source.get("document") or []):
            metadata = (source.get("metadata") or [None] * (index + 1))[index]
            key = _source_id(source, metadata)
            shown = dict(source.get("source") or {})
            if metadata and metadata.get("name"):
                shown["name"] = metadata["name"]
            if key.startswith(("http://", "https://")):
                shown = {**shown, "name": shown.get("name") if (metadata or {}).get("external") else key, "url": key}
            entry = next((e for e in entries if e["id"] == key), None)
            if entry:
                entry["document"].append(document)
            else:
                entries.append({"id": key, "source": shown, "document": [document]})
    return entries


def _shown(name: str) -> str:
    """A chip's text (`Source.svelte` `getDisplayTitle`; a URL would show as its domain)."""
    return name[:15] + "..." + name[-10:] if len(name) > 30 else name


def _plain(text: str) -> str:
    """Text compared word for word: markdown emphasis and list markers removed, spaces collapsed, lower case."""
    text = re.sub(r"^\s*(?:[-*+]|\d+[.)])\s+", "", text, flags=re.MULTILINE)
    return " ".join(re.sub(r"[*_`]", "", text).split()).lower().rstrip(":")


def _cited_sentences(content: str) -> list[tuple[list[int], str]]:
    """Each marker's numbers with the text it ends: what came before it on its line, after any earlier marker."""
    cited = []
    for line in content.splitlines():
        start = 0
        for match in MARKER.finditer(line):
            numbers = [int(n) for n in re.findall(r"(\d+)(?:#[^,\]\s]+)?", match.group(0))]
            cited.append((numbers, line[start:match.start()]))
            start = match.end()
    return cited


def _check_sources(message: Message, final: dict[str, Any] | None) -> None:
    """Sources Open WebUI shows, distinct and readable, and markers that open the unit they stand for."""
    assert message.content, "Open WebUI shows an empty answer"
    assert not re.search(r"\[S\d+", message.content), f"raw [S#] markers: {message.content!r}"
    assert message.sources, f"no sources: Open WebUI shows none for {message.content!r}"
    chips, entries = _chips(message.sources), _citation_list(message.sources)
    assert len(chips) == len(entries) == len(message.sources), "sources that Open WebUI merges into one"
    shown = [_shown(name) for name in chips]
    assert shown == chips, f"chip names over 30 characters are cut by Open WebUI: {shown}"
    assert len(set(shown)) == len(shown), f"chips that read the same: {shown}"
    for entry in entries:
        documents = [d for d in entry["document"] if isinstance(d, str) and d.strip()]
        assert documents, f"an empty popup for {entry['source'].get('name')!r}"
        assert not any(d.rstrip().endswith(("…", "...")) for d in documents), f"a cut snippet: {documents}"
    cited = _cited_sentences(message.content)
    assert cited, f"no [n] marker in {message.content!r}"
    numbers = {n for ns, _ in cited for n in ns}
    assert numbers <= set(range(1, len(entries) + 1)), f"markers {sorted(numbers)} for {len(entries)} sources"
    assert numbers == set(range(1, len(entries) + 1)), f"announced sources no marker cites: {sorted(numbers)}"
    quoted = 0
    for ns, sentence in cited:
        if len(sentence.split()) < QUOTED_WORDS:
            continue  # a lead-in ("To rotate a key:") is not quoted from the unit
        popup = " ".join(_plain(d) for n in ns for d in entries[n - 1]["document"])
        assert _plain(sentence) in popup, f"the popup of {ns} does not hold {sentence!r}: {popup[:300]!r}"
        quoted += 1
    assert quoted, f"no cited sentence of {QUOTED_WORDS}+ words in {message.content!r}"
    if final and final.get("citations"):  # the response's citations: `text` is `<document title> › <section>`
        titles = {c.get("chunk_id"): c["text"].split(" › ")[0] for c in final["citations"] if c.get("text")}
        for entry in entries:
            popup = " ".join([entry["source"].get("name") or "", *entry["document"]])
            wanted = [titles[entry["id"]]] if entry["id"] in titles else list(titles.values())
            assert any(title in popup for title in wanted), f"no document title {wanted} in the popup: {popup[:200]!r}"


def _injection_alarms(client: httpx.Client) -> float:
    """The server's count of asks whose path says a prompt injection was blocked (`/metrics`)."""
    text = client.get("/metrics").text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("gatehouse_ask_gate_decisions_total{") and "injection" in line)


# -- the tests -----------------------------------------------------------------------------------------------------


def test_the_recordings_hold_every_request_kind():
    """A first question and a follow-up, streamed and not, with the background tasks; and the key is never stored."""
    kinds = {_kind(path) for path in _recordings()}
    assert {"models", "chat-stream", "chat", *TASK_KEYS} <= kinds, kinds
    bodies = {path.stem: json.loads(path.read_text(encoding="utf-8")) for path in _recordings()}
    with_history = {_kind(RECORDINGS / f"{stem}.json") for stem, recorded in bodies.items()
                    if any(m["role"] == "assistant" for m in (recorded["body"] or {}).get("messages", []))}
    assert {"chat-stream", "chat"} <= with_history
    for recorded in bodies.values():
        assert recorded["headers"].get("Authorization") == "Bearer <key>"


@pytest.mark.parametrize("path", [p for p in _recordings() if _kind(p) == "models"], ids=lambda p: p.stem)
def test_the_model_list_offers_ask(server, path):
    response = _replay(server, path)
    assert response.status_code == 200, response.text
    assert "ask" in [model["id"] for model in response.json()["data"]]


@pytest.mark.parametrize("path", [p for p in _recordings() if _kind(p) == "chat-stream"], ids=lambda p: p.stem)
def test_a_streamed_answer_shows_its_sources(server, path):
    response = _replay(server, path)
    assert response.status_code == 200, response.text
    assert "text/event-stream" in response.headers["content-type"]  # else Open WebUI reads the body as JSON
    message = _read_stream(response.content)
    assert not message.errors and not message.ignored, (message.errors, message.ignored)
    assert message.done and not message.after_done, "the stream must end with `data: [DONE]`"
    chunks = [json.loads(line[6:]) for line in response.text.splitlines()
              if line.startswith("data: {") and '"choices"' in line]
    _check_sources(message, chunks[-1] if chunks else None)


@pytest.mark.parametrize("path", [p for p in _recordings() if _kind(p) == "chat"], ids=lambda p: p.stem)
def test_an_answer_not_streamed_shows_its_sources(server, path):
    response = _replay(server, path)
    assert response.status_code == 200, response.text
    assert "text/event-stream" not in response.headers["content-type"]
    body = response.json()
    message = _read_completion(body)
    assert not message.errors, message.errors
    _check_sources(message, body)


@pytest.mark.parametrize("path", [p for p in _recordings() if _kind(p) in TASK_KEYS], ids=lambda p: p.stem)
def test_a_background_task_gets_a_reply_open_webui_takes_and_no_injection_alarm(server, path):
    key, kind = TASK_KEYS[_kind(path)]
    response = _replay(server, path)
    assert response.status_code == 200, response.text
    body = response.json()
    message = _read_completion(body)
    assert not message.errors, message.errors
    text = message.content[message.content.find("{"):message.content.rfind("}") + 1]
    value = json.loads(text)[key] if text else None  # Open WebUI's parse; a failure is a missing title or tags
    assert isinstance(value, kind), f"{key} in {message.content!r}"
    assert kind is str or all(isinstance(item, str) for item in value)
    path_steps = (body.get("gatehouse") or {}).get("path") or []
    assert not [step for step in path_steps if "injection" in step], path_steps
    assert _injection_alarms(server) == 0, "a replayed request was counted as a prompt injection"


@pytest.mark.parametrize("path", [p for p in _recordings() if _kind(p) in ("chat-stream", "chat")],
                         ids=lambda p: p.stem)
def test_the_official_openai_client_reads_the_same_chats_streamed_and_not(server, openai_client, path):
    """Every line of the stream Open WebUI reads is a chat completion chunk the `openai` client parses."""
    body = json.loads(path.read_text(encoding="utf-8"))["body"]
    streamed = _read_stream(_replay(server, path).content) if body.get("stream") else None
    chunks = list(openai_client.chat.completions.create(**{**body, "stream": True}))
    assert chunks and all(chunk.choices for chunk in chunks)
    assert [c.choices[0].finish_reason for c in chunks][-1] == "stop"
    text = "".join(c.choices[0].delta.content or "" for c in chunks).strip()
    completion = openai_client.chat.completions.create(**{**body, "stream": False})
    assert completion.choices[0].finish_reason == "stop"
    assert text and completion.choices[0].message.content == text
    if streamed is not None:
        assert streamed.content == text


@pytest.mark.parametrize("path", [p for p in _recordings() if _kind(p) in ("chat-stream", "chat")
                                  and "revoke it" in json.dumps(json.loads(p.read_text(encoding="utf-8"))["body"])],
                         ids=lambda p: p.stem)
def test_the_recorded_follow_up_about_revoking_is_answered_from_the_revoke_section(server, path):
    """The demo's follow-up ("and how do I revoke it?" after rotating) as Open WebUI sent it: the revoke steps, not
    the rotation steps the earlier turn was about, and the source shown is the revoke section."""
    response = _replay(server, path)
    assert response.status_code == 200, response.text
    streamed = "text/event-stream" in response.headers["content-type"]
    message = _read_stream(response.content) if streamed else _read_completion(response.json())
    assert "choose Revoke" in message.content, message.content
    assert "choose Rotate" not in message.content, message.content
    popups = [" ".join(entry["document"]) for entry in _citation_list(message.sources)]
    assert popups and all("› Revoke an API key" in popup for popup in popups), popups
