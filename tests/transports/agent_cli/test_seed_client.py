"""The protocol document's own Python clients against a model that calls tools.

Both clients of the seed document (``000_3d7e96e81ea4b68a.txt``) read exactly one frame
per request: the quick start's ``send_request(uri, request_data)`` (one connection per
request) and ``AgentCLIClient.send_request`` of its client guide (one connection reused).
Their code is run as the document prints it; the only change is the quick start's
signature, which is not valid Python as printed (a parameter without a default after one
with a default). Non-streaming means one request, one reply: the final ``Text`` with its
``token_usage`` — so what the client reads is the answer, and nothing is left behind on
the connection for the next request to read by mistake.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kernel.testing import ScriptedProvider, running_kernel, text_turn, tool_turn
from tests.asyncio_clients import in_asyncio

from .helpers import TOOLS, serve

pytestmark = pytest.mark.anyio

QUICK_START = """
import asyncio
import websockets
import json

async def send_request(uri='ws://127.0.0.1:8080', request_data):
    async with websockets.connect(uri) as websocket:
        # 发送请求
        request_json = json.dumps(request_data)
        await websocket.send(request_json)
        
        # 接收响应
        response_data = await websocket.recv()
        return json.loads(response_data)
""".replace("uri='ws://127.0.0.1:8080', request_data", "uri, request_data")

CLIENT_GUIDE = """
import asyncio
import websockets
import json

class AgentCLIClient:
    def __init__(self, uri='ws://127.0.0.1:8080'):
        self.uri = uri
        self.websocket = None
        
    async def connect(self):
        self.websocket = await websockets.connect(self.uri)
        
    async def send_request(self, request_data):
        if not self.websocket:
            await self.connect()
            
        request_json = json.dumps(request_data)
        await self.websocket.send(request_json)
        
        # 接收响应
        response_data = await self.websocket.recv()
        return json.loads(response_data)
    
    async def close(self):
        if self.websocket:
            await self.websocket.close()
            self.websocket = None
"""

#: Two tools in one run (one succeeds, one fails), then the answer; the next request's answer.
TOOL_RUN = [tool_turn("add", '{"a": 1, "b": 2}', call_id="c1"), tool_turn("boom", '{"x": 1}', call_id="c2"), text_turn("1 + 2 = 3"), text_turn("next answer")]
RUN_USAGE = {"prompt_tokens": 11, "completion_tokens": 9, "total_tokens": 20}  # 4+4+3 in, 2+2+5 out
NEXT_USAGE = {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}


def document_code(source: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "agent_cli_document"}
    exec(compile(source, "agent_cli_document", "exec"), namespace)
    return namespace


def request(request_id: str, text: str, **extra: Any) -> dict[str, Any]:
    """A request as the document writes it (``"stream": False`` spelled out)."""
    return {"request_id": request_id, "input": {"Text": text}, "stream": False, "use_tools": True, **extra}


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The document's clients take proxies from the environment: keep them on loopback."""
    monkeypatch.setenv("no_proxy", "127.0.0.1")


async def test_quick_start_client_reads_the_answer_of_a_tool_calling_run() -> None:
    provider = ScriptedProvider(TOOL_RUN)
    async with running_kernel(provider, tools=TOOLS) as kernel, serve(kernel) as url:
        send_request = document_code(QUICK_START)["send_request"]

        async def go() -> Any:
            return await asyncio.wait_for(send_request(url, request("test_001", "1+2? then break something")), 10)

        response = await in_asyncio(go)
    assert response == {"request_id": "test_001", "response": {"Text": "1 + 2 = 3"}, "error": None, "token_usage": RUN_USAGE}
    tool_messages = [msg for msg in provider.requests[2].messages if msg.role == "tool"]
    assert [msg.content for msg in tool_messages] == ["3", "tool error: disk on fire"]  # both tools did run


async def test_client_guide_one_reply_per_request_on_one_connection() -> None:
    provider = ScriptedProvider(TOOL_RUN)
    async with running_kernel(provider, tools=TOOLS) as kernel, serve(kernel) as url:
        client_class = document_code(CLIENT_GUIDE)["AgentCLIClient"]

        async def go() -> list[Any]:
            client = client_class(url)
            try:
                first = await asyncio.wait_for(client.send_request(request("t1", "use the tools")), 10)
                second = await asyncio.wait_for(client.send_request(request("t2", "and now?")), 10)
                return [first, second]
            finally:
                await client.close()

        first, second = await in_asyncio(go)
    assert first == {"request_id": "t1", "response": {"Text": "1 + 2 = 3"}, "error": None, "token_usage": RUN_USAGE}
    # Had the first run sent its tool frames, this recv() would have read one of them.
    assert second == {"request_id": "t2", "response": {"Text": "next answer"}, "error": None, "token_usage": NEXT_USAGE}


async def test_multi_option_puts_the_tool_activity_inside_the_one_reply() -> None:
    provider = ScriptedProvider(TOOL_RUN)
    async with running_kernel(provider, tools=TOOLS) as kernel, serve(kernel, non_stream_tool_activity="multi") as url:
        client_class = document_code(CLIENT_GUIDE)["AgentCLIClient"]

        async def go() -> list[Any]:
            client = client_class(url)
            try:
                first = await asyncio.wait_for(client.send_request(request("m1", "use the tools")), 10)
                second = await asyncio.wait_for(client.send_request(request("m2", "no tools this time")), 10)
                return [first, second]
            finally:
                await client.close()

        first, second = await in_asyncio(go)
    failure = {"type": "tool_execution_error", "message": "Tool 'boom' execution failed", "details": {"tool": "boom", "error": "disk on fire", "arguments": {"x": 1}}}
    assert first == {
        "request_id": "m1",
        "response": {
            "Multi": [
                {"ToolCall": {"name": "add", "arguments": {"a": 1, "b": 2}}},
                {"ToolResult": {"name": "add", "result": "3"}},
                {"ToolCall": {"name": "boom", "arguments": {"x": 1}}},
                {"ToolResult": {"name": "boom", "result": failure}},
                {"Text": "1 + 2 = 3"},
            ]
        },
        "error": None,
        "token_usage": RUN_USAGE,
    }
    assert second["response"] == {"Text": "next answer"}  # no tool activity: a plain Text


async def test_a_confirmation_request_comes_first_then_the_one_answer() -> None:
    provider = ScriptedProvider([tool_turn("add", '{"a": 1, "b": 2}', call_id="c1"), text_turn("1 + 2 = 3"), text_turn("after")])
    async with running_kernel(provider, tools=TOOLS) as kernel, serve(kernel) as url:
        client_class = document_code(CLIENT_GUIDE)["AgentCLIClient"]

        async def go() -> list[Any]:
            client = client_class(url)
            try:
                asked = await asyncio.wait_for(client.send_request(request("chat_123", "1+2?", config={"ask_before_tool_execution": True})), 10)
                name, arguments = asked["response"]["ToolConfirmationRequest"]["name"], asked["response"]["ToolConfirmationRequest"]["arguments"]
                answer = {"ToolConfirmationResponse": {"name": name, "arguments": arguments, "approved": True, "reason": "ok"}}
                answered = await asyncio.wait_for(client.send_request({"request_id": "confirm_1", "input": answer, "stream": False, "use_tools": True}), 10)
                after = await asyncio.wait_for(client.send_request(request("t3", "more")), 10)
                return [asked, answered, after]
            finally:
                await client.close()

        asked, answered, after = await in_asyncio(go)
    assert asked == {
        "request_id": "chat_123",
        "response": {"ToolConfirmationRequest": {"name": "add", "arguments": {"a": 1, "b": 2}, "description": "Add two numbers"}},
        "error": None,
        "token_usage": None,
    }
    # The answer to the confirmation is the run's one reply, under the run's request id.
    assert answered == {"request_id": "chat_123", "response": {"Text": "1 + 2 = 3"}, "error": None, "token_usage": {"prompt_tokens": 7, "completion_tokens": 7, "total_tokens": 14}}
    assert after["request_id"] == "t3" and after["response"] == {"Text": "after"}
    assert provider.requests[1].messages[-1].content == "3"  # approved: the tool ran
