"""The protocol document's examples, replayed against a live server as transcripts.

Requests are the document's JSON verbatim (including the ``""`` key left where the
word ``stream`` was lost: an unknown field, ignored); responses are checked for the
exact shapes the document shows, with this server's own text and token counts.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from kernel.settings import AgentSettings
from kernel.testing import ScriptedProvider, running_kernel, text_turn, tool_turn
from plugins.commands.builtin import BUILTIN_COMMANDS
from tests.asyncio_clients import in_asyncio
from transports.agent_cli.codec import TURN_DECLINED

from .helpers import TOOLS, body, client, serve

pytestmark = pytest.mark.anyio

QUICKSTART = """{"request_id": "test_001", "input": {"Text": "你好，请介绍一下这个项目"}, "": false, "use_tools": true}"""
EXAMPLE_1 = """{"request_id": "chat_001", "input": {"Text": "你好，请介绍一下 Rust 语言的特点"}, "use_tools": true}"""
EXAMPLE_2 = """{"request_id": "stream_001", "input": {"Text": "写一个简单的 Rust Hello World 程序"}, "stream": true, "use_tools": false}"""
EXAMPLE_3 = """{"request_id": "config_001", "input": {"Text": "分析这个项目的代码结构"},
  "config": {"max_tokens": 1000, "ask_before_tool_execution": false, "prompt": "你是一个代码分析专家，请详细分析代码结构"},
  "": false, "use_tools": true}"""
EXAMPLE_4 = """{"request_id": "commands_001", "input": "GetCommands", "": false, "use_tools": false}"""
TOOL_CONFIRMATION = """{"request_id": "confirm_1", "input": {"ToolConfirmationResponse": {"name": "add",
  "arguments": {"a": 1, "b": 2}, "approved": true, "reason": "可选原因说明"}}, "": false, "use_tools": true}"""
TURN_CONFIRM = """{"request_id": "confirm_456", "input": {"TurnConfirmationResponse": {"confirmed": true, "reason": "继续对话"}}, "": false, "use_tools": true}"""
TURN_DECLINE = """{"request_id": "confirm_456", "input": {"TurnConfirmationResponse": {"confirmed": false, "reason": "结束当前对话"}}, "": false, "use_tools": true}"""
RUST = ["fn", " main", "()", " {", "\n    ", "println", "!", '("', "Hello", ", ", "World", "!", '")', ";", "\n", "}"]
USAGE = {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}


async def test_quickstart_and_example_1_one_text_with_usage() -> None:
    provider = ScriptedProvider([text_turn("Rust 是一种系统编程语言")])
    async with running_kernel(provider, tools=TOOLS) as kernel, serve(kernel) as url:

        async def go() -> tuple[Any, Any]:
            async with client(url) as c:
                await c.send(QUICKSTART)
                first = await c.recv()  # the quick start's client does exactly one recv()
                await c.send(EXAMPLE_1)
                return first, await c.recv()

        first, example = await in_asyncio(go)
    assert first == {"request_id": "test_001", "response": {"Text": "Rust 是一种系统编程语言"}, "error": None, "token_usage": USAGE}
    assert example == {"request_id": "chat_001", "response": {"Text": "Rust 是一种系统编程语言"}, "error": None, "token_usage": USAGE}
    assert [t.name for t in provider.requests[1].tools] == ["add", "boom", "guarded"]


async def test_example_2_stream_then_complete_marker() -> None:
    provider = ScriptedProvider([text_turn(*RUST, usage=(15, 45))], delay_s=0.005)
    async with running_kernel(provider, tools=TOOLS) as kernel, serve(kernel) as url:

        async def go() -> Any:
            async with client(url) as c:
                await c.send(EXAMPLE_2)
                return await c.until(lambda f: "Complete" in f["response"])

        frames = await in_asyncio(go)
    chunks, end = frames[:-1], frames[-1]
    assert all(f == {"request_id": "stream_001", "response": {"Stream": body(f)[1]}, "error": None, "token_usage": None} for f in chunks)
    assert "".join(body(f)[1] for f in chunks) == "".join(RUST)
    assert end == {
        "request_id": "stream_001",
        "response": {"Complete": {"token_usage": {"prompt_tokens": 15, "completion_tokens": 45, "total_tokens": 60}, "interrupted": False}},
        "error": None,
        "token_usage": None,
    }
    assert provider.requests[0].tools == ()  # "use_tools": false


async def test_example_3_config_overrides_reach_the_model() -> None:
    provider = ScriptedProvider([text_turn("结构如下")])
    async with running_kernel(provider) as kernel, serve(kernel) as url:

        async def go() -> Any:
            async with client(url) as c:
                await c.send(EXAMPLE_3)
                return await c.recv()

        frame = await in_asyncio(go)
    assert frame["request_id"] == "config_001" and frame["response"] == {"Text": "结构如下"}
    request = provider.requests[0]
    assert request.max_tokens == 1000
    assert request.messages[0].role == "system" and request.messages[0].content == "你是一个代码分析专家，请详细分析代码结构"


async def test_example_4_get_commands() -> None:
    async with running_kernel(commands=BUILTIN_COMMANDS) as kernel, serve(kernel) as url:

        async def go() -> Any:
            async with client(url) as c:
                await c.send(EXAMPLE_4)
                return await c.recv()

        frame = await in_asyncio(go)
    assert frame["request_id"] == "commands_001" and frame["error"] is None
    assert frame["token_usage"] == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    listing = json.loads(frame["response"]["Text"])
    assert listing == {"commands": [{"name": c.name, "description": c.description} for c in BUILTIN_COMMANDS], "count": len(BUILTIN_COMMANDS)}


async def test_error_example_shape() -> None:
    async with running_kernel() as kernel, serve(kernel) as url:

        async def go() -> Any:
            async with client(url) as c:
                await c.send("")
                empty = await c.recv()
                await c.send('{"request_id": "error_001", "input": {"Txt": "x"}}')
                return empty, await c.recv()

        empty, named = await in_asyncio(go)
    assert empty == {"request_id": "parse_error", "response": {"Text": ""}, "error": "Failed to parse request: Input data was truncated", "token_usage": None}
    assert named["request_id"] == "error_001" and named["error"].startswith("Failed to parse request: unknown variant `Txt`")


async def test_tool_confirmation_protocol_example() -> None:
    provider = ScriptedProvider([tool_turn("add", '{"a": 1, "b": 2}', call_id="c1"), text_turn("1 + 2 = 3")])
    async with running_kernel(provider, tools=TOOLS) as kernel, serve(kernel) as url:

        async def go() -> Any:
            async with client(url) as c:
                await c.send({"request_id": "chat_123", "input": {"Text": "1+2?"}, "config": {"ask_before_tool_execution": True}})
                asked = await c.recv()  # a non-streaming request: the question, then its one reply
                await c.send(TOOL_CONFIRMATION)
                return asked, await c.recv()

        asked, answer = await in_asyncio(go)
    assert asked == {
        "request_id": "chat_123",
        "response": {"ToolConfirmationRequest": {"name": "add", "arguments": {"a": 1, "b": 2}, "description": "Add two numbers"}},
        "error": None,
        "token_usage": None,
    }
    assert answer == {"request_id": "chat_123", "response": {"Text": "1 + 2 = 3"}, "error": None, "token_usage": {"prompt_tokens": 7, "completion_tokens": 7, "total_tokens": 14}}
    assert provider.requests[1].messages[-1].content == "3"  # approved: the tool ran


@pytest.mark.parametrize("answer", [TURN_CONFIRM, TURN_DECLINE])
async def test_turn_confirmation_protocol_examples(answer: str) -> None:
    provider = ScriptedProvider([text_turn("第一轮"), text_turn("继续对话的文本...")])
    async with running_kernel(provider, agent=AgentSettings(max_turns=1)) as kernel, serve(kernel) as url:

        async def go() -> Any:
            async with client(url) as c:
                await c.send({"request_id": "chat_1", "input": {"Text": "你好"}})
                await c.recv()
                await c.send({"request_id": "chat_123", "input": {"Text": "继续"}, "stream": True})
                asked = await c.recv()
                await c.send(answer)
                return asked, await c.until(lambda f: "Complete" in f["response"])

        asked, rest = await in_asyncio(go)
    assert asked["request_id"] == "chat_123" and asked["error"] is None and asked["token_usage"] is None
    assert set(asked["response"]["TurnConfirmationRequest"]) == {"current_turns", "max_turns", "reason"}
    if answer is TURN_CONFIRM:
        assert rest[0] == {"request_id": "chat_123", "response": {"Stream": "继续对话的文本..."}, "error": None, "token_usage": None}
    else:
        assert rest[0]["request_id"] == "chat_123" and rest[0]["response"] == {"Text": TURN_DECLINED}
