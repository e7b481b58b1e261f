"""
MCP over streamable HTTP at `/mcp`: the deployed pipelines that allow it (ask, retrieve) as tools.

- `tools/list` lists the pipelines Hayhooks lists as tools (not the index pipeline, which sets `skip_mcp`; none of
  Hayhooks' deploy and undeploy tools).
- `tools/call` calls only a listed tool: another name is a JSON-RPC error (-32602) naming it and the tools. The
  arguments are checked against the tool's request model first: a missing, unknown or mistyped argument is a tool
  error naming the argument; the wrapper's own refusals are tool errors with its HTTP status and detail; an
  unexpected failure is a tool error with the request id (the traceback goes to the log). No error text names a
  Python class or function.
- `GET /mcp` (a stream of the server's own messages, which a stateless server never sends) is 405.
- A POST body that is not one JSON-RPC message (not JSON, nested deeper than `MAX_DEPTH`, an integer too long, not
  JSON-RPC 2.0) is answered 400 with a JSON-RPC error before the MCP transport reads it.

What the tools return is what the wrappers return over REST, so it is made printable there (`printable_data`).

Usage (what `gatehouse serve` does when the manifest enables `mcp`):
```python
from gatehouse.serving.mcp import mount_mcp

mount_mcp(app)   # the Hayhooks FastAPI app, before it starts
```
"""

import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import HTTPException
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import McpError
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.routing import Route

from gatehouse.components.printable import printable
from gatehouse.serving.observability import request_id

logger = logging.getLogger(__name__)

#: The deepest nesting of arrays and objects a JSON-RPC message may have (a tool call with a history needs 6).
MAX_DEPTH = 64
#: The most digits an integer of a JSON-RPC message may have.
MAX_INTEGER_DIGITS = 64


class ToolError(Exception):
    """A tool call that cannot be answered; the message says why, for the caller."""


def mount_mcp(app: Any) -> None:
    """
    Serve the listed tools over streamable HTTP at `/mcp` (POST, DELETE), stateless, and run the MCP session
    manager with the app's lifespan. `GET /mcp` is 405, as the MCP specification allows a server that offers no stream
    of its own messages: stateless, the server has none to send, and an idle stream would hold one of its caller's
    concurrent requests (`limits.max_concurrent_requests`) for as long as it stayed open.

    :param app: The Hayhooks FastAPI app.
    """
    sessions = StreamableHTTPSessionManager(app=tool_server(), event_store=None, json_response=False, stateless=True)
    app.router.routes.append(Route("/mcp", endpoint=_CheckedBody(sessions.handle_request),
                                   methods=["POST", "DELETE"]))
    hayhooks_lifespan = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(application: Any) -> AsyncIterator[None]:
        async with hayhooks_lifespan(application), sessions.run():
            yield

    app.router.lifespan_context = lifespan


def tool_server() -> Server:
    """The MCP server: `tools/list` and `tools/call` over the pipelines deployed in Hayhooks' registry."""
    from hayhooks.server.pipelines.registry import registry
    from hayhooks.server.utils.mcp_utils import list_pipelines_as_tools

    server: Server = Server("gatehouse")

    @server.list_tools()
    async def list_tools() -> list[types.Tool]:
        return await list_pipelines_as_tools(registry)

    async def call_tool(request: types.CallToolRequest) -> types.ServerResult:
        name, arguments = request.params.name, request.params.arguments or {}
        listed = sorted(tool.name for tool in await list_pipelines_as_tools(registry))
        if name not in listed:
            raise McpError(types.ErrorData(code=types.INVALID_PARAMS,
                                           message=f"unknown tool {printable(name)[:100]!r}; the tools are "
                                                   f"{', '.join(listed) or 'none'}"))
        http_request = server.request_context.request
        headers = getattr(http_request, "headers", None)
        try:
            result = await call_pipeline(registry.get(name), registry.get_metadata(name)["request_model"], name,
                                         arguments, headers)
        except ToolError as error:
            return _tool_result(printable(str(error)), error=True)
        return _tool_result(json.dumps(result, ensure_ascii=False))

    server.request_handlers[types.CallToolRequest] = call_tool
    return server


async def call_pipeline(wrapper: Any, request_model: type[BaseModel], name: str, arguments: dict[str, Any],
                        headers: Any) -> Any:
    """
    Run a tool's pipeline wrapper (`run_api`) with checked arguments.

    :param wrapper: The deployed pipeline wrapper.
    :param request_model: Its request model (Hayhooks derives it from `run_api`), against which the arguments are
        checked strictly (no conversion: `"5"` is not an integer).
    :param name: The tool's name, for the messages.
    :param arguments: The call's arguments.
    :param headers: The HTTP request's headers (the wrapper reads the caller's key from them when no middleware did).
    :returns: What `run_api` returned.
    :raises ToolError: For bad arguments, a refusal of the wrapper (its HTTP status and detail) or an unexpected
        failure (logged with its traceback).
    """
    fields = list(request_model.model_fields)
    unknown = [key for key in arguments if key not in fields]
    if unknown:
        raise ToolError(f"unknown argument{'s' if len(unknown) > 1 else ''} "
                        f"{', '.join(repr(printable(key)[:100]) for key in unknown)} for tool {name!r}; it takes "
                        f"{', '.join(fields)}")
    try:
        request_model.model_validate(arguments, strict=True)
    except ValidationError as error:
        raise ToolError(f"invalid arguments for tool {name!r}: {_argument_errors(error)}") from error
    try:
        return await run_in_threadpool(wrapper.run_api, **arguments, headers=headers)
    except HTTPException as error:
        raise ToolError(f"HTTP {error.status_code}: {error.detail}") from error
    except Exception as error:
        logger.exception("MCP tool %s failed", name)
        raise ToolError(f"the {name} tool failed unexpectedly; the server log has the details (request id "
                        f"{request_id.get()})") from error


def _argument_errors(error: ValidationError) -> str:
    """What is wrong with each argument: `missing argument 'query'`, `argument 'top_k': Input should be ...`."""
    problems = []
    for problem in error.errors(include_url=False):
        where = ".".join(str(part) for part in problem["loc"])
        if problem["type"] == "missing":
            problems.append(f"missing argument {where!r}")
        else:
            problems.append(f"argument {where!r}: {problem['msg']}")
    return "; ".join(problems)


def _tool_result(text: str, *, error: bool = False) -> types.ServerResult:
    return types.ServerResult(types.CallToolResult(content=[types.TextContent(type="text", text=text)], isError=error))


class _CheckedBody:
    """
    The `/mcp` endpoint: a POST body that is not one JSON-RPC message is answered 400 here with a JSON-RPC error
    (the MCP transport would answer a JSON nested too deeply with a 500, and its messages name pydantic's models);
    every other request goes to the MCP session manager with the body as read.
    """

    def __init__(self, handler: Any) -> None:
        self.handler = handler

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["method"] != "POST":
            await self.handler(scope, receive, send)
            return
        messages = []
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request" or not message.get("more_body", False):
                break
        problem = malformed(b"".join(m.get("body", b"") for m in messages))
        if problem is not None:
            code, text = problem
            body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": text}}).encode()
            await send({"type": "http.response.start", "status": 400, "headers": [
                (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return

        async def replay() -> dict[str, Any]:
            return messages.pop(0) if messages else await receive()

        await self.handler(scope, replay, send)


def malformed(body: bytes) -> tuple[int, str] | None:
    """
    Why a POST body is not one JSON-RPC message, as a JSON-RPC error code and message; None when it is one.

    :param body: The request body.
    :returns: `(-32700, "Parse error: ...")` for a body that is not UTF-8 JSON, holds an integer of more than
        `MAX_INTEGER_DIGITS` digits or is nested deeper than `MAX_DEPTH`; `(-32600, "Invalid Request: ...")` for JSON
        that is not a JSON-RPC 2.0 message. (A non-finite number never gets here: the guard answers it with 422.)
    """
    try:
        parsed = json.loads(body, parse_int=_integer)
    except RecursionError:
        return types.PARSE_ERROR, f"Parse error: the JSON is nested deeper than {MAX_DEPTH} levels"
    except json.JSONDecodeError as error:
        return types.PARSE_ERROR, f"Parse error: {error.msg} at character {error.pos}"
    except UnicodeDecodeError:
        return types.PARSE_ERROR, "Parse error: the body is not UTF-8 text"
    except ValueError as error:  # an integer refused by `_integer`
        return types.PARSE_ERROR, f"Parse error: {error}"
    if _depth(parsed) > MAX_DEPTH:
        return types.PARSE_ERROR, f"Parse error: the JSON is nested deeper than {MAX_DEPTH} levels"
    try:
        types.JSONRPCMessage.model_validate(parsed)
    except ValidationError:
        return types.INVALID_REQUEST, ("Invalid Request: the body is not a JSON-RPC 2.0 request, notification or "
                                       'response (one object with "jsonrpc": "2.0", and "method" or "result")')
    return None


def _integer(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INTEGER_DIGITS:
        raise ValueError(f"an integer of {len(text.lstrip('-'))} digits is too large")
    return int(text)


def _depth(value: Any) -> int:
    """How deeply arrays and objects nest in a parsed JSON value (a scalar is 0), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, level)
        if level <= MAX_DEPTH:
            stack.extend((child, level + 1) for child in children)
    return deepest
