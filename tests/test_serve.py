"""
`gatehouse serve` end to end: a real server process on a free loopback port, real stores in a temp directory,
real HTTP (httpx), the official `openai` client and an MCP client.
"""

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from openai import OpenAI
from server_process import running_server

from gatehouse.settings import bundled_dir

PROJECT_ROOT = bundled_dir()  # the shipped pipelines, sample KBs and manifest

ADMIN_KEY = "admin-secret-for-tests"
ACME_KEY = "acme-secret-for-tests"
MAX_BODY = 1_000_000
QUESTION = "How do I rotate an API key?"
HOLIDAY = "# Holiday policy\n\nEmployees of Initech get 30 days of paid leave per year.\n"


def _manifest(tmp: Path, *, keys: bool) -> Path:
    pipelines = tmp / "pipelines"  # the server runs in `tmp`: this folder's YAML is what pipeline names resolve to
    shutil.copytree(PROJECT_ROOT / "pipelines", pipelines, dirs_exist_ok=True)
    manifest = {
        "pipelines": {
            "ask": {"pipeline": "pipelines/ask.yml", "kind": "ask"},
            "retrieve": {"pipeline": str(PROJECT_ROOT / "pipelines" / "retrieve.yml"), "kind": "retrieve"},
            "index": {"pipeline": str(PROJECT_ROOT / "pipelines" / "index.yml"), "kind": "index"},
        },
        "auth": {"keys": [
            {"env": "GATEHOUSE_TEST_ADMIN_KEY", "tenants": ["public", "initech"], "admin": True},
            {"env": "GATEHOUSE_TEST_ACME_KEY", "tenants": ["acme"]},
        ] if keys else []},
        "mcp": True,
        "limits": {"max_body_bytes": MAX_BODY},
    }
    path = tmp / "hayhooks.yml"
    path.write_text(yaml.safe_dump(manifest), encoding="utf-8")
    return path


def _env(tmp: Path) -> dict[str, str]:
    return {**os.environ, "GATEHOUSE_DATA_DIR": str(tmp / "data"), "GATEHOUSE_TEST_ADMIN_KEY": ADMIN_KEY,
            "GATEHOUSE_TEST_ACME_KEY": ACME_KEY}


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _without_root_override() -> list[str]:
    """Root writes anywhere: the server runs without the capabilities that bypass file permissions (when it can)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return []
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner", "--"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A keyed server with the sample knowledge bases uploaded over HTTP."""
    tmp = tmp_path_factory.mktemp("serve")
    manifest = _manifest(tmp, keys=True)
    env = {key: value for key, value in _env(tmp).items() if key not in ("HAYSTACK_TELEMETRY_ENABLED", "DO_NOT_TRACK")}
    with running_server(manifest, env={**env, "HOME": str(tmp)}, workdir=tmp, pipelines=3,
                        audit=tmp / "outbound.log", prefix=_without_root_override()) as url:
        with httpx.Client(base_url=url, headers=_auth(ADMIN_KEY), timeout=120) as client:
            for kb in ("faq", "ops", "product"):
                paths = sorted((PROJECT_ROOT / "kb" / kb).glob("*.md"))
                files = [("files", (p.name, p.read_bytes(), "text/markdown")) for p in paths]
                response = client.post("/index/run", files=files, data={"kb": kb, "wait": "true"})
                assert response.status_code == 200, response.text
                assert response.json()["result"]["written"] == len(paths)
        yield {"url": url, "tmp": tmp, "manifest": manifest}


@pytest.fixture
def admin(server):
    with httpx.Client(base_url=server["url"], headers=_auth(ADMIN_KEY), timeout=120) as client:
        yield client


def test_status_answers_without_a_key(server):
    response = httpx.get(f"{server['url']}/status")
    assert response.status_code == 200
    assert set(response.json()["pipelines"]) == {"ask", "retrieve", "index"}


@pytest.mark.parametrize(("method", "path"), [("POST", "/ask/run"), ("POST", "/retrieve/run"),
                                              ("GET", "/v1/models"), ("GET", "/openapi.json"), ("POST", "/mcp")])
def test_every_other_endpoint_needs_a_key(server, method, path):
    response = httpx.request(method, server["url"] + path, json={"query": QUESTION})
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    wrong = httpx.request(method, server["url"] + path, json={"query": QUESTION}, headers=_auth("not-a-key"))
    assert wrong.status_code == 401


def test_ask_over_rest_returns_the_response_contract(admin):
    response = admin.post("/ask/run", json={"query": QUESTION})
    assert response.status_code == 200
    result = response.json()["result"]
    assert set(result) == {"answer", "citations", "metadata", "validation", "status", "error_message", "path"}
    assert result["status"] == "success"
    assert result["metadata"]["tenant"] == "public"
    assert "https://docs.corvio.example/faq/api-keys#rotate-an-api-key" in [c["url"] for c in result["citations"]]
    cited = set(re.findall(r"\[(S\d+)\]", result["answer"]))
    assert cited and cited <= {c["id"] for c in result["citations"]}


def test_openapi_documents_the_typed_endpoints(admin):
    spec = admin.get("/openapi.json").json()
    assert {"/ask/run", "/retrieve/run", "/index/run", "/v1/chat/completions"} <= set(spec["paths"])
    assert "AskResponse" in json.dumps(spec["paths"]["/ask/run"]) or "AskResponse" in spec["components"]["schemas"]


def test_retrieve_returns_scored_documents_with_metadata(admin):
    response = admin.post("/retrieve/run", json={"query": "rotate an API key", "kbs": ["faq"], "top_k": 3})
    assert response.status_code == 200
    documents = response.json()["result"]["documents"]
    assert len(documents) == 3
    assert all(d["meta"]["kb"] == "faq" and d["score"] is not None for d in documents)
    assert documents[0]["meta"]["source"] == "api-keys.md"


def test_a_key_cannot_name_a_tenant_it_does_not_hold(server):
    with httpx.Client(base_url=server["url"], headers=_auth(ACME_KEY), timeout=60) as acme:
        assert acme.post("/ask/run", json={"query": QUESTION, "tenant": "public"}).status_code == 403
        assert acme.post("/retrieve/run", json={"query": QUESTION, "tenant": "initech"}).status_code == 403
        upload = acme.post("/index/run", files=[("files", ("a.md", b"# A\n\ntext", "text/markdown"))],
                           data={"kb": "faq", "tenant": "public"})
        assert upload.status_code == 403
        own = acme.post("/ask/run", json={"query": QUESTION})
        assert own.status_code == 200
        assert own.json()["result"]["metadata"]["tenant"] == "acme"
        # acme has no documents of its own: it reads the public documentation (include_public), never initech's.
        citations = own.json()["result"]["citations"]
        assert citations and {c["kb"] for c in citations} <= {"faq", "ops", "product"}
        assert all(c["source"] != "holiday.md" for c in citations)
        assert acme.post("/deploy_files", json={"name": "ask", "files": {}}).status_code == 403


@pytest.mark.parametrize(
    ("payload", "status", "message"),
    [
        ({"query": "   "}, 422, "query must not be empty"),
        ({"query": "x" * 4001}, 422, "the limit is 4000 (max_query_chars of the ask pipeline's input guardrail)"),
        ({"query": QUESTION, "mode": "telepathy"}, 422, "full-corpus"),
        ({"query": QUESTION, "kb": "astrology"}, 422, "Unknown knowledge base 'astrology'"),
        ({"query": QUESTION, "kb": ""}, 422, "kb '' is not a valid knowledge base name"),
        ({"query": QUESTION, "kb": "   "}, 422, "kb '   ' is not a valid knowledge base name"),
        ({"query": QUESTION, "tenant": "Not A Tenant!"}, 422, "not a valid tenant name"),
        ({"question": QUESTION}, 422, "query"),
    ],
)
def test_bad_ask_input_is_a_4xx_naming_the_problem(admin, payload, status, message):
    response = admin.post("/ask/run", json=payload)
    assert response.status_code == status
    assert message in response.text
    assert "Traceback" not in response.text


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"tenant": 123}, "tenant must be a string"),
        ({"tenant": ["x"], "stream": True}, "tenant must be a string"),
        ({"kb": 123}, "kb must be a string"),
        ({"kb": {"a": 1}}, "kb must be a string"),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
         "messages[0].content[0] is not a text part"),
        ({"messages": [{"role": "user", "content": [
            {"type": "text", "text": QUESTION},
            {"type": "image_url", "image_url": {"url": "https://example.com/key.png"}}]}]},
         "messages[0].content[1] is not a text part"),
        ({"messages": [{"role": ["user"], "content": QUESTION}], "stream": True},
         "messages[0].role must be a string"),
    ],
)
def test_bad_chat_input_is_a_422_naming_the_field(admin, extra, message):
    body = {"model": "ask", "messages": [{"role": "user", "content": QUESTION}], **extra}
    response = admin.post("/v1/chat/completions", json=body)
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert message in detail
    assert "Pipeline execution failed" not in detail and " object at 0x" not in detail
    assert "Traceback" not in response.text


def test_models_lists_only_the_chat_pipelines(admin):
    assert [model["id"] for model in admin.get("/v1/models").json()["data"]] == ["ask"]
    assert [model["id"] for model in admin.get("/models").json()["data"]] == ["ask"]
    chat = admin.post("/v1/chat/completions", json={"model": "retrieve",
                                                    "messages": [{"role": "user", "content": QUESTION}]})
    assert chat.status_code == 501
    # No pipeline implements the Responses API (501): it is not advertised.
    assert admin.post("/v1/responses", json={"model": "ask", "input": QUESTION}).status_code == 501
    paths = admin.get("/openapi.json").json()["paths"]
    assert not {"/v1/responses", "/responses", "/draw/{pipeline_name}"} & set(paths)


def test_drawing_is_disabled_and_the_connection_stays_usable(server, admin):
    response = admin.get("/draw/ask")
    assert response.status_code == 404
    assert response.json() == {"detail": "drawing pipelines is disabled on this server"}
    assert response.headers.get("connection") != "close"
    assert admin.get("/status").status_code == 200
    assert "mermaid" not in (server["tmp"] / "server.log").read_text().lower()


def test_the_openai_file_upload_routes_are_gone(admin):
    for path in ("/v1/files", "/files"):
        response = admin.post(path, files=[("file", ("notes.txt", b"Some notes.", "text/plain"))],
                              data={"purpose": "assistants"})
        assert response.status_code == 404
        assert "POST /{name}/run" in response.json()["detail"]
    assert not {"/v1/files", "/files"} & set(admin.get("/openapi.json").json()["paths"])


def test_a_question_as_long_as_the_guardrail_allows_is_answered(admin):
    question = QUESTION + " Please give me every step." * 140
    assert len(question) == 3807
    response = admin.post("/ask/run", json={"query": question + "x" * (3999 - len(question))})
    assert response.status_code == 200, response.text  # the input guardrail's limit is the server's: 4000


def test_oversized_bodies_are_refused(admin):
    response = admin.post("/ask/run", json={"query": QUESTION, "context": "x" * (MAX_BODY + 10)})
    assert response.status_code == 413
    assert "limits.max_body_bytes" in response.json()["detail"]


def test_upload_stores_good_files_and_fails_bad_ones_alone(admin):
    files = [
        ("files", ("holiday.md", HOLIDAY.encode(), "text/markdown")),
        ("files", ("broken.pdf", b"not a pdf at all", "application/pdf")),
        ("files", ("tool.exe", b"MZ\x00\x01", "application/octet-stream")),
    ]
    response = admin.post("/index/run", files=files, data={"kb": "hr", "tenant": "initech", "wait": "true"})
    assert response.status_code == 200
    result = response.json()["result"]
    assert (result["written"], result["failed"]) == (1, 2)
    reasons = {item["file"]: item["reason"] for item in result["files"]["failed"]}
    assert "unsupported file type '.exe'" in reasons["tool.exe"]
    assert reasons["broken.pdf"]
    found = admin.post("/retrieve/run", json={"query": "paid leave", "kbs": ["hr"], "tenant": "initech"}).json()
    assert found["result"]["documents"][0]["meta"]["source"] == "holiday.md"
    again = admin.post("/index/run", files=files[:1],
                       data={"kb": "hr", "tenant": "initech", "wait": "true"}).json()["result"]
    assert (again["written"], again["skipped"]) == (0, 1)


def test_upload_with_duplicate_file_names_is_422_and_stores_nothing(admin):
    files = [("files", ("notes.md", b"# Notes\n\nThe quarterly offsite is in Lisbon.", "text/markdown")),
             ("files", ("notes.md", b"# Notes\n\nThe quarterly offsite is in Porto.", "text/markdown"))]
    response = admin.post("/index/run", files=files, data={"kb": "events", "tenant": "initech"})
    assert response.status_code == 422
    assert "duplicate file names in one upload: notes.md" in response.json()["detail"]
    found = admin.post("/retrieve/run", json={"query": "quarterly offsite", "kbs": ["events"], "tenant": "initech"})
    assert found.json()["result"]["documents"] == []


def test_upload_of_only_unsupported_files_is_415(admin):
    response = admin.post("/index/run", files=[("files", ("x.exe", b"MZ", "application/octet-stream"))],
                          data={"kb": "faq"})
    assert response.status_code == 415
    assert "x.exe" in response.json()["detail"]


def _multipart(file_name: bytes, data: bytes, fields: dict[str, str]) -> tuple[bytes, dict[str, str]]:
    """A multipart body with one file under `file_name` exactly as given (HTTP clients escape what they send)."""
    parts = [b'Content-Disposition: form-data; name="files"; filename="' + file_name + b'"\r\n'
             b"Content-Type: text/plain\r\n\r\n" + data]
    parts += [f'Content-Disposition: form-data; name="{key}"\r\n\r\n{value}'.encode() for key, value in fields.items()]
    body = b"".join(b"--BOUNDARY\r\n" + part + b"\r\n" for part in parts) + b"--BOUNDARY--\r\n"
    return body, {"Content-Type": "multipart/form-data; boundary=BOUNDARY"}


def test_upload_names_lose_control_and_bidi_characters_and_folders(admin):
    fields = {"kb": "names", "tenant": "initech", "wait": "true"}
    raw = "C:\\Users\\me\\offsite\u202etxt.md\x00\x07".encode()
    body, headers = _multipart(raw, b"# Offsite\n\nThe quarterly offsite is in Lisbon.\n", fields)
    response = admin.post("/index/run", content=body, headers=headers)
    assert response.status_code == 200, response.text
    assert response.json()["result"]["files"]["written"] == [{"file": "offsitetxt.md", "reason": None}]
    found = admin.post("/retrieve/run", json={"query": "quarterly offsite", "kbs": ["names"], "tenant": "initech"})
    meta = found.json()["result"]["documents"][0]["meta"]
    assert (meta["source"], meta["doc_id"]) == ("offsitetxt.md", "initech/names/offsitetxt.md")

    body, headers = _multipart("..\\\u202e\x01".encode(), b"Some text.", fields)
    refused = admin.post("/index/run", content=body, headers=headers)
    assert refused.status_code == 422
    assert refused.json()["detail"].startswith("files: no usable file name in '..\\\\\\u202e\\x01'")


def test_an_upload_in_an_8_bit_encoding_is_decoded(admin):
    text = "Die Kantine öffnet um 11:30 Uhr; das Menü kostet 7 €.\n"
    response = admin.post("/index/run", files=[("files", ("kantine.txt", text.encode("cp1252"), "text/plain"))],
                          data={"kb": "kantine", "tenant": "initech", "wait": "true"})
    assert response.status_code == 200
    assert response.json()["result"]["written"] == 1, response.text
    found = admin.post("/retrieve/run", json={"query": "Kantine Menü", "kbs": ["kantine"], "tenant": "initech"})
    assert found.json()["result"]["documents"][0]["content"] == text.strip()


def test_chat_needs_a_user_message_last(server):
    client = OpenAI(base_url=f"{server['url']}/v1", api_key=ADMIN_KEY)
    with pytest.raises(Exception, match="422"):
        client.chat.completions.create(model="ask", messages=[{"role": "assistant", "content": "hi"}])


def _mcp(server, key, action):
    async def session():
        async with (
            httpx.AsyncClient(headers=_auth(key), timeout=120) as http,
            streamable_http_client(f"{server['url']}/mcp", http_client=http) as (read, write, _),
            ClientSession(read, write) as mcp,
        ):
            await mcp.initialize()
            return await action(mcp)

    return asyncio.run(session())


def test_mcp_lists_ask_and_retrieve_and_answers_a_call(server):
    async def action(mcp):
        tools = await mcp.list_tools()
        result = await mcp.call_tool("ask", {"query": QUESTION})
        return tools, result

    tools, result = _mcp(server, ADMIN_KEY, action)
    assert {tool.name for tool in tools.tools} == {"ask", "retrieve"}
    assert not result.isError
    response = json.loads(result.content[0].text)
    assert response["status"] == "success"
    assert response["citations"]


def test_mcp_calls_keep_the_key_to_its_tenants(server):
    async def action(mcp):
        return await mcp.call_tool("retrieve", {"query": QUESTION, "tenant": "public"})

    result = _mcp(server, ACME_KEY, action)
    assert result.isError
    assert "403" in result.content[0].text


def test_editing_the_yaml_and_redeploying_changes_what_is_served(server, admin):
    upload = admin.post("/index/run", files=[("files", ("holiday.md", HOLIDAY.encode(), "text/markdown"))],
                        data={"kb": "hr", "tenant": "initech", "wait": "true"})
    assert upload.status_code == 200
    question = {"query": "How many days of paid leave do Initech employees get?", "kb": "hr", "tenant": "initech"}
    # An undeclared KB holding the caller's own documents is the caller's to ask; another tenant does not see it.
    own = admin.post("/ask/run", json=question)
    assert own.status_code == 200 and own.json()["result"]["status"] == "success"
    assert [c["source"] for c in own.json()["result"]["citations"]] == ["holiday.md"]
    other = admin.post("/ask/run", json={**question, "tenant": "public"})
    assert other.status_code == 422 and "Unknown knowledge base 'hr'" in other.json()["detail"]

    unanswerable = {"query": "How much does the Platinum plan cost?", "tenant": "initech"}
    assert admin.post("/ask/run", json=unanswerable).json()["result"]["status"] == "fallback"
    answer_yml = server["tmp"] / "pipelines" / "answer.yml"  # ask.yml's answering, edited in its own file
    spec = yaml.safe_load(answer_yml.read_text(encoding="utf-8"))
    spec["components"]["answerability"]["init_parameters"]["fallback_message"] = "Initech's documents do not say."
    answer_yml.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    deployed = server["tmp"] / "data" / "serve" / "pipelines" / "ask"
    files = {name: (deployed / name).read_text(encoding="utf-8") for name in ("pipeline_wrapper.py", "gatehouse.yml")}
    redeploy = admin.post("/deploy_files", json={"name": "ask", "files": files, "overwrite": True})
    assert redeploy.status_code == 200, redeploy.text

    after = admin.post("/ask/run", json=unanswerable)
    assert after.status_code == 200
    result = after.json()["result"]
    assert result["status"] == "fallback" and result["answer"] == "Initech's documents do not say."


def test_refuses_to_bind_beyond_loopback_without_keys(tmp_path):
    manifest = _manifest(tmp_path, keys=False)
    done = subprocess.run(
        [sys.executable, "-m", "gatehouse.cli", "serve", "--host", "0.0.0.0", "--manifest", str(manifest)],
        check=False, env=_env(tmp_path), capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 2
    assert "refusing to bind to 0.0.0.0 without auth keys" in done.stderr


def test_a_data_dir_made_read_only_answers_reads_and_refuses_writes_with_503(server, admin):
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: a read-only folder cannot be simulated")
    data = server["tmp"] / "data"
    upload = [("files", ("rota.md", b"# Rota\n\nThe on-call rota changes on Mondays.\n", "text/markdown"))]
    subprocess.run(["chmod", "-R", "a-w", str(data)], check=True)
    try:
        reads = [admin.post("/ask/run", json={"query": "How do I revoke an API key?"}),  # asked for the first time
                 admin.post("/v1/chat/completions", json={"model": "ask", "messages": [
                     {"role": "user", "content": "Which grace periods can an old API key get?"}]}),
                 admin.post("/retrieve/run", json={"query": "revoke a key"}),
                 admin.get("/kbs")]
        writes = [admin.delete("/kbs/faq"),
                  admin.post("/index/run", files=upload, data={"kb": "rota", "wait": "true"}),
                  admin.post("/index/run", files=upload, data={"kb": "rota"})]
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(data)], check=True)
    assert [read.status_code for read in reads] == [200] * 4, [read.text for read in reads]
    for write in writes:
        assert write.status_code == 503, write.text
        assert write.json() == {"detail": f"the data directory {data.resolve()} is read-only (not every file in it can "
                                          "be written): make it writable for this user or point GATEHOUSE_DATA_DIR at "
                                          "another folder"}
    assert "faq" in {kb["kb"] for kb in admin.get("/kbs").json()["knowledge_bases"]}  # nothing was deleted
    assert admin.get("/index/jobs").json()["jobs"][0]["kb"] != "rota"  # nothing was queued


def test_served_asks_reach_no_other_machine(server):
    """Run last in this module: every request above went through a server under an outbound-connection audit hook."""
    with httpx.Client(base_url=server["url"], headers=_auth(ADMIN_KEY), timeout=120) as client:
        assert client.post("/ask/run", json={"query": QUESTION}).status_code == 200
    log = server["tmp"] / "outbound.log"
    assert not log.exists() or log.read_text() == ""
    assert not (server["tmp"] / ".haystack").exists()  # no telemetry id written to the server's home
