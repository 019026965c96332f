"""Drives toolgate's /mcp with the official MCP Python SDK (`mcp` 2.3), as an agent would.

Usage: python_client.py BASE_URL MODE CALLER_TOKEN APPROVER_TOKEN
  MODE: "legacy" (the 2025-11-25 initialize handshake) or "2026-07-28" (per-request _meta).
  Tokens may be "-" when the server has no keys.

Prints one JSON object of what it saw (for the Rust test to check further) and exits non-zero,
with the reason, on the first expectation that fails. The approver's part (finding the token of
a pending call, approving it) goes through REST, as a person's tool would: no MCP answer may
carry a token, and this script checks that none does.
"""

import asyncio
import json
import sys
import urllib.request
from typing import Any, ClassVar, Literal

import httpx2
import jsonschema
import mcp_types as types
from mcp import Client
from mcp.client.extension import ClientExtension, ResultClaim
from mcp.client.streamable_http import streamable_http_client
from pydantic import ConfigDict, TypeAdapter

BASE, MODE, CALLER, APPROVER = sys.argv[1:5]
MCP_URL = BASE + "/mcp"
seen: dict[str, Any] = {"answers": []}


def expect(condition: bool, what: str) -> None:
    if not condition:
        raise SystemExit(f"expectation failed ({MODE}): {what}")


def headers(token: str) -> dict[str, str]:
    return {} if token == "-" else {"Authorization": f"Bearer {token}"}


def rest(method: str, path: str, body: Any = None) -> Any:
    request = urllib.request.Request(
        BASE + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"content-type": "application/json", **headers(APPROVER)},
    )
    with urllib.request.urlopen(request) as response:
        return json.loads(response.read())


def token_of(call_id: str) -> str:
    """The approver's side: the token of the call's pending suspension, from REST."""
    for approval in rest("GET", "/approvals")["approvals"]:
        if approval["call_id"] == call_id:
            return approval["token"]
    raise SystemExit(f"no pending approval for call {call_id}")


def dumped(result: Any) -> dict[str, Any]:
    value = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    seen["answers"].append(value)
    return value


class TaskHandle(types.Result):
    """The tasks extension's CreateTaskResult (`resultType: "task"`)."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = "task"


async def no_resolve(result: TaskHandle, ctx: Any) -> types.CallToolResult:
    raise AssertionError("tasks are driven by hand in this test")


class Tasks(ClientExtension):
    """Declares `io.modelcontextprotocol/tasks`; the test polls by hand."""

    identifier = "io.modelcontextprotocol/tasks"

    def claims(self):
        return [ResultClaim(result_type="task", model=TaskHandle, resolve=no_resolve)]


class TaskRequest(types.Request[dict[str, Any], str]):
    """`tasks/get` or `tasks/cancel`, which the SDK sends but does not model for 2026-07-28."""

    name_param: ClassVar[str | None] = "taskId"


async def task_request(client: Client, method: str, task_id: str) -> dict[str, Any]:
    request = TaskRequest(method=method, params={"taskId": task_id})
    result = await client.session.send_request(request, TypeAdapter(dict[str, Any]))
    seen["answers"].append(result)
    return result


def client(token: str, **options: Any) -> Client:
    http = httpx2.AsyncClient(headers=headers(token), timeout=60)
    return Client(streamable_http_client(MCP_URL, http_client=http), mode=MODE, **options)


async def main() -> None:
    async with client(CALLER) as mcp:
        listed = await mcp.list_tools()
        tools = {tool.name: tool for tool in listed.tools}
        names = [tool.name for tool in listed.tools]
        expect(names == sorted(names), f"tools in name order: {names}")
        expect("toolgate_await_call" in tools, "the await tool is listed")
        for tool in listed.tools:
            jsonschema.Draft202012Validator.check_schema(tool.input_schema)
            if tool.output_schema is not None:
                jsonschema.Draft202012Validator.check_schema(tool.output_schema)
        echo = tools["echo"]
        expect(echo.annotations is not None and echo.annotations.read_only_hint is True, "echo is read-only")
        expect(tools["send_email"].annotations.idempotent_hint is False, "send_email is not idempotent")
        seen["tools"] = [dumped(tool) for tool in listed.tools]

        # A call that completes: the output, and one text block holding it as JSON.
        result = await mcp.call_tool("echo", {"text": "hello over MCP"})
        answer = dumped(result)
        expect(not result.is_error, f"echo succeeds: {answer}")
        expect(result.structured_content == {"text": "hello over MCP"}, f"echo's output: {answer}")
        expect(json.loads(result.content[0].text) == {"text": "hello over MCP"}, "its text is the JSON")
        if echo.output_schema is not None:
            jsonschema.validate(result.structured_content, echo.output_schema)

        # Input that does not fit: a tool error, with the violation; nothing ran.
        result = await mcp.call_tool("echo", {"text": 5})
        answer = dumped(result)
        expect(result.is_error is True, f"a bad input is a tool error: {answer}")
        expect("/text" in result.content[0].text, f"it names the field: {answer}")

        # A call that waits for a person: pending, with the call id, and no token.
        result = await mcp.call_tool("ask_human", {"question": "Ship it?"})
        answer = dumped(result)
        expect(not result.is_error, f"a pending call is no error: {answer}")
        pending = result.structured_content
        expect(pending["status"] == "pending_approval", f"pending: {answer}")
        expect(pending["reason"] == "Ship it?", f"the reason: {answer}")
        call_id = pending["call_id"]
        expect(call_id in result.content[0].text, "the text names the call")
        seen["pending_call_id"] = call_id

        # Not decided yet: awaiting for a second answers pending again.
        result = await mcp.call_tool("toolgate_await_call", {"call_id": call_id, "wait_seconds": 1})
        answer = dumped(result)
        expect(result.structured_content["status"] == "pending_approval", f"still pending: {answer}")

        # A person approves over REST; the await tool answers what the approval produced.
        token = token_of(call_id)
        seen["token"] = token
        rest("POST", f"/approvals/{token}/approve", {"input": {"answer": "Yes, ship it."}})
        result = await mcp.call_tool("toolgate_await_call", {"call_id": call_id, "wait_seconds": 10})
        answer = dumped(result)
        expect(not result.is_error, f"the approved call completed: {answer}")
        expect(result.structured_content == {"answer": "Yes, ship it."}, f"its output: {answer}")

        # An unknown tool is a protocol error, -32602.
        try:
            await mcp.call_tool("no_such_tool", {})
            raise SystemExit("an unknown tool must be a JSON-RPC error")
        except Exception as error:  # the SDK's MCPError
            code = getattr(getattr(error, "error", None), "code", None)
            expect(code == -32602, f"unknown tool: -32602, got {error!r}")

    if MODE != "legacy":
        # With the tasks extension declared, a suspension becomes a task.
        async with client(CALLER, extensions=[Tasks()]) as mcp:
            handle = await mcp.session.call_tool("ask_human", {"question": "Deploy?"}, allow_claimed=True)
            handle = handle.model_dump(by_alias=True, mode="json", exclude_none=True)
            seen["answers"].append(handle)
            expect(handle.get("resultType") == "task", f"a task: {handle}")
            expect(handle["status"] == "working", f"working: {handle}")
            expect(handle["statusMessage"] == "awaiting a person's decision: Deploy?", f"message: {handle}")
            expect(handle["pollIntervalMs"] > 0, f"a poll interval: {handle}")
            task_id = handle["taskId"]
            task = await task_request(mcp, "tasks/get", task_id)
            expect(task["status"] == "working", f"tasks/get while pending: {task}")
            try:
                await task_request(mcp, "tasks/cancel", task_id)
                raise SystemExit("cancelling a pending approval must be refused")
            except Exception as error:
                expect("approver" in str(error), f"the refusal says who decides: {error!r}")
            rest("POST", f"/approvals/{token_of(task_id)}/approve", {"input": {"answer": "Deployed."}})
            task = await task_request(mcp, "tasks/get", task_id)
            expect(task["status"] == "completed", f"tasks/get after approval: {task}")
            expect(task["result"]["structuredContent"] == {"answer": "Deployed."}, f"result: {task}")
            expect(task["result"].get("isError") is not True, f"not an error: {task}")
            seen["task_id"] = task_id

    print(json.dumps(seen))


asyncio.run(main())
