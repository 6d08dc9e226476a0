"""The Agent-CLI transport against a real hypercorn server and a real `websockets` client."""

from __future__ import annotations

import asyncio
import base64
import json
from functools import partial
from typing import Any

import anyio
import pytest
from websockets.exceptions import ConnectionClosed

from kernel import model as m
from kernel.settings import AgentSettings
from kernel.testing import (
    ScriptedProvider,
    failing_turn,
    running_kernel,
    text_turn,
    tool_turn,
)
from plugins.commands.builtin import BUILTIN_COMMANDS
from tests.asyncio_clients import in_asyncio
from tests.cycles import garbage_of
from transports.agent_cli.codec import TURN_DECLINED

from .helpers import TOOLS, body, client, serve, text, unit

pytestmark = pytest.mark.anyio

SLOW = [text_turn(*[f"w{i} " for i in range(40)])]  # 40 chunks; with delay_s a stream to interrupt
USAGE = {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}


def names(frames: list[dict[str, Any]]) -> list[str]:
    return [body(f)[0] for f in frames]


async def test_stream_and_non_stream_with_usage() -> None:
    provider = ScriptedProvider([text_turn("Hello", " world")], delay_s=0.01)
    async with running_kernel(provider) as kernel, serve(kernel) as url:

        async def go() -> tuple[Any, Any]:
            async with client(url) as c:
                return await c.ask(text("a", "hi")), await c.ask(text("b", "hi", stream=True))

        plain, streamed = await in_asyncio(go)
    assert plain == [{"request_id": "a", "response": {"Text": "Hello world"}, "error": None, "token_usage": USAGE}]
    assert names(streamed)[-1] == "Complete" and set(names(streamed)[:-1]) == {"Stream"}
    assert "".join(body(f)[1] for f in streamed[:-1]) == "Hello world"
    assert all(f["request_id"] == "b" and f["token_usage"] is None and f["error"] is None for f in streamed)
    assert body(streamed[-1])[1] == {"token_usage": USAGE, "interrupted": False}


async def test_coalescing_window_makes_fewer_stream_frames_of_the_same_text() -> None:
    chunks = [f"{i:02d}-chunk. " for i in range(40)]  # 10 characters each, no delay between them
    counts = {}
    for coalesce_ms in (0.0, 200.0):
        provider = ScriptedProvider([text_turn(*chunks)], delay_s=0.0 if coalesce_ms else 0.005)
        async with running_kernel(provider) as kernel, serve(kernel, coalesce_ms=coalesce_ms, coalesce_chars=150) as url:

            async def go() -> Any:
                async with client(url) as c:
                    return await c.ask(text("a", "hi", stream=True))

            frames = await in_asyncio(go)
        assert names(frames)[-1] == "Complete" and "".join(body(f)[1] for f in frames[:-1]) == "".join(chunks)
        counts[coalesce_ms] = len(frames) - 1
    assert counts[200.0] <= 3 < 10 <= counts[0.0], counts


async def test_coalesced_text_goes_out_when_its_window_passes() -> None:
    """A model slower than the window: each chunk leaves on its own once the window ends
    (held until the run's end they would arrive merged, as one frame)."""
    provider = ScriptedProvider([text_turn("slow ", "model")], delay_s=0.3)
    async with running_kernel(provider) as kernel, serve(kernel, coalesce_ms=50) as url:

        async def go() -> Any:
            async with client(url) as c:
                return await c.ask(text("a", "hi", stream=True))

        frames = await in_asyncio(go)
    assert [body(f) for f in frames[:-1]] == [("Stream", "slow "), ("Stream", "model")]


async def test_stream_complete_tag_option() -> None:
    async with running_kernel() as kernel, serve(kernel, complete_tag="StreamComplete") as url:

        async def go() -> Any:
            async with client(url) as c:
                await c.send(text("s", "hi", stream=True))
                return await c.until(lambda f: "StreamComplete" in f["response"])

        frames = await in_asyncio(go)
    # The first token goes out on its own (a run's first delta is handed over to its writer).
    assert names(frames)[-1] == "StreamComplete" and set(names(frames)[:-1]) == {"Stream"}
    assert "".join(body(f)[1] for f in frames[:-1]) == "Hello world"


async def test_every_input_variant() -> None:
    provider = ScriptedProvider([text_turn("ok")])
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n1234").decode()
    source = base64.b64encode(b"fn main() {}\n").decode()
    async with running_kernel(provider, commands=BUILTIN_COMMANDS) as kernel, serve(kernel, max_file_bytes=100) as url:

        async def go() -> dict[str, Any]:
            async with client(url) as c:
                out: dict[str, Any] = {}
                out["image"] = await c.ask({"request_id": "i", "input": {"Image": {"data": png, "mime_type": "image/png"}}})
                out["file"] = await c.ask({"request_id": "f", "input": {"File": {"filename": "main.rs", "content_type": "text/x-rust", "data": source}}})
                archive = base64.b64encode(b"PK\x03\x04\x14\x00\x00\x00\x08\x00\xb7\xac").decode()
                out["binary"] = await c.ask({"request_id": "fb", "input": {"File": {"filename": "a.zip", "content_type": "application/zip", "data": archive}}})
                big = base64.b64encode(b"x" * 101).decode()
                out["big"] = await c.ask({"request_id": "fo", "input": {"File": {"filename": "a.txt", "content_type": "text/plain", "data": big}}})
                out["multi"] = await c.ask({"request_id": "m", "input": {"Multi": [{"Text": "look at"}, {"Image": {"data": png}}]}})
                out["help"] = await c.ask({"request_id": "h", "input": {"Instruction": {"command": "help", "parameters": {}}}})
                out["unknown"] = await c.ask({"request_id": "u", "input": {"Instruction": {"command": "nope", "parameters": None}}})
                out["short"] = await c.ask(unit("g1", "GetCommands"))
                out["long"] = await c.ask({"request_id": "g2", "input": {"GetCommands": None}})
                out["bad_unit"] = await c.ask({"request_id": "g3", "input": {"GetCommands": {}}})
                return out

        out = await in_asyncio(go)
    assert out["image"][-1]["response"] == {"Text": "ok"}
    image_message = provider.requests[0].messages[-1]
    assert image_message.parts == (m.ImagePart(data=b"\x89PNG\r\n\x1a\n1234", mime_type="image/png"),)
    assert provider.requests[1].messages[-1].content == "File: main.rs (text/x-rust)\n```\nfn main() {}\n\n```"
    assert out["binary"][-1]["error"].startswith("processing_error: file 'a.zip' (application/zip) is not text the model can read")
    assert out["big"][-1]["error"] == "processing_error: file 'a.txt' of 101 bytes is over the 100-byte limit"
    assert [type(p).__name__ for p in provider.requests[2].messages[-1].parts] == ["TextPart", "ImagePart"]
    assert len(provider.requests) == 3  # rejected inputs never reached the model
    assert out["help"][-1]["response"]["Text"].startswith("Available commands:\n/help")
    assert out["unknown"][-1]["error"] == "processing_error: Unknown command: /nope. Try /help."
    listing = json.loads(out["short"][-1]["response"]["Text"])
    assert listing == json.loads(out["long"][-1]["response"]["Text"])
    assert listing["count"] == len(BUILTIN_COMMANDS) == len(listing["commands"])
    assert {"name": "help", "description": "List the available commands"} in listing["commands"]
    assert out["bad_unit"][-1]["error"].startswith("Failed to parse request: unit variant `GetCommands` takes null")


async def test_interrupt_mid_stream_and_when_idle() -> None:
    provider = ScriptedProvider(SLOW, delay_s=0.02)
    async with running_kernel(provider) as kernel, serve(kernel) as url:

        async def go() -> dict[str, Any]:
            async with client(url) as c:
                out: dict[str, Any] = {}
                await c.send(text("s", "go", stream=True))
                out["first"] = await c.until(lambda f: "Stream" in f["response"])
                await c.send(unit("stop", "Interrupt"))
                out["stream"] = await c.until_end("s")
                await c.send(text("n", "go"))
                await asyncio.sleep(0.15)
                await c.send(unit("stop2", "Interrupt"))
                out["plain"] = await c.until_end("n")
                out["idle"] = await c.ask(unit("idle", "Interrupt"))
                out["quiet"] = await c.silent(0.2)
                return out

        out = await in_asyncio(go)
    end = out["stream"][-1]
    assert body(end)[0] == "Complete" and body(end)[1]["interrupted"] is True
    assert all(f["request_id"] == "s" for f in out["stream"])  # the Interrupt itself gets no reply
    streamed = "".join(body(f)[1] for f in out["first"] + out["stream"][:-1])
    assert 0 < len(streamed) < len("".join(f"w{i} " for i in range(40)))
    plain = out["plain"][-1]
    assert plain["error"] == "interrupted" and "w0" in plain["response"]["Text"] and "w39" not in plain["response"]["Text"]
    assert out["idle"] == [{"request_id": "idle", "response": {"Text": ""}, "error": "No active model output to interrupt", "token_usage": None}]
    assert out["quiet"]


async def test_regenerate_and_clear_context() -> None:
    provider = ScriptedProvider([text_turn("first"), text_turn("second"), text_turn("third"), text_turn("fourth")])
    async with running_kernel(provider) as kernel, serve(kernel) as url:

        async def go() -> dict[str, Any]:
            async with client(url) as c:
                out: dict[str, Any] = {"empty": await c.ask(unit("r0", "Regenerate"))}
                out["a"] = await c.ask(text("a", "question"))
                out["regen"] = await c.ask({"request_id": "r", "input": {"Regenerate": None}, "stream": True})
                out["clear"] = await c.ask(unit("c", "ClearContext"))
                out["after"] = await c.ask(text("b", "new topic"))
                return out

        out = await in_asyncio(go)
    assert out["empty"][-1]["error"] == "processing_error: nothing to regenerate: the session has no user message"
    assert out["a"][-1]["response"] == {"Text": "first"}
    assert names(out["regen"]) == ["Stream", "Complete"] and body(out["regen"][0])[1] == "second"
    regen_request = provider.requests[1].messages
    assert [msg.role for msg in regen_request] == ["system", "user"]  # "first" was dropped
    assert out["clear"] == [{"request_id": "c", "response": {"Text": "Context cleared."}, "error": None, "token_usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}]
    assert [msg.content for msg in provider.requests[2].messages] == ["You are a helpful assistant.", "new topic"]


async def test_tool_calls_results_and_structured_error() -> None:
    provider = ScriptedProvider([tool_turn("add", '{"a":1,"b":2}', call_id="c1"), tool_turn("boom", '{"x":1}', call_id="c2"), text_turn("done")])
    async with running_kernel(provider, tools=TOOLS) as kernel, serve(kernel) as url:

        async def go() -> Any:
            async with client(url) as c:
                return await c.ask(text("t", "use tools", stream=True))

        frames = await in_asyncio(go)
    assert names(frames) == ["ToolCall", "ToolResult", "ToolCall", "Text", "Stream", "Complete"]
    assert body(frames[0])[1] == {"name": "add", "arguments": {"a": 1, "b": 2}}
    assert body(frames[1])[1] == {"name": "add", "result": "3"}
    assert json.loads(frames[3]["error"]) == {
        "type": "tool_execution_error", "message": "Tool 'boom' execution failed",
        "details": {"tool": "boom", "error": "disk on fire", "arguments": {"x": 1}},
    }
    assert body(frames[-1])[1]["token_usage"] == {"prompt_tokens": 11, "completion_tokens": 9, "total_tokens": 20}


def confirm(rid: str, approved: bool, reason: str | None = None, name: str = "add") -> dict[str, Any]:
    answer = {"name": name, "arguments": {"a": 1, "b": 2}, "approved": approved, "reason": reason}
    return {"request_id": rid, "input": {"ToolConfirmationResponse": answer}}


@pytest.mark.parametrize("mode", ["approve", "reject", "timeout"])
async def test_tool_confirmation(mode: str) -> None:
    provider = ScriptedProvider([tool_turn("add", '{"a":1,"b":2}', call_id="c1"), text_turn("finished")])
    async with running_kernel(provider, tools=TOOLS) as kernel, serve(kernel, approval_timeout_s=0.3) as url:

        async def go() -> dict[str, Any]:
            async with client(url) as c:
                out: dict[str, Any] = {}
                await c.send(text("chat_123", "add", config={"ask_before_tool_execution": True}))
                out["ask"] = await c.until(lambda f: "ToolConfirmationRequest" in f["response"])
                if mode == "approve":
                    await c.send(confirm("confirm_1", True))
                elif mode == "reject":
                    out["wrong"] = await c.ask(confirm("confirm_0", True, name="other"))
                    await c.send(confirm("confirm_1", False, "not now"))
                out["rest"] = await c.until_end("chat_123")
                out["late"] = await c.ask(confirm("confirm_2", True))
                return out

        out = await in_asyncio(go)
    ask = out["ask"][-1]
    assert names(out["ask"]) == ["ToolConfirmationRequest"]  # non-streaming: no ToolCall frame before it
    assert ask["request_id"] == "chat_123"
    assert body(ask)[1] == {"name": "add", "arguments": {"a": 1, "b": 2}, "description": "Add two numbers"}
    # Then the run's one reply (no ToolResult frame), under the run's own request id.
    assert out["rest"] == [{"request_id": "chat_123", "response": {"Text": "finished"}, "error": None, "token_usage": {"prompt_tokens": 7, "completion_tokens": 7, "total_tokens": 14}}]
    tool_message = provider.requests[1].messages[-1]
    if mode == "approve":
        assert tool_message.content == "3"
    elif mode == "reject":
        assert out["wrong"][-1]["error"] == "processing_error: no pending confirmation for tool 'other' (waiting for 'add')"
        assert tool_message.content == "tool call rejected: the user declined to run add (not now)"
    else:
        assert tool_message.content == "tool call rejected: the user declined to run add (approval timed out)"
    assert out["late"][-1]["error"] == "processing_error: no tool confirmation is pending"


async def test_tool_requiring_approval_asks_without_the_request_flag() -> None:
    provider = ScriptedProvider([tool_turn("guarded", '{"a":2,"b":2}', call_id="g1"), text_turn("ok")])
    async with running_kernel(provider, tools=TOOLS) as kernel, serve(kernel) as url:

        async def go() -> Any:
            async with client(url) as c:
                await c.send(text("g", "go", stream=True))
                asked = await c.until(lambda f: "ToolConfirmationRequest" in f["response"])
                await c.send(confirm("yes", True, name="guarded"))
                return asked, await c.until_end("g")

        asked, frames = await in_asyncio(go)
    assert names(asked) == ["ToolCall", "ToolConfirmationRequest"]  # a stream keeps its per-event frames
    assert names(frames) == ["ToolResult", "Stream", "Complete"] and body(frames[0])[1]["result"] == "4"


@pytest.mark.parametrize("policy", ["approve", "reject", {"mode": "reject", "allow_tools": ["guarded"]}])
async def test_tool_approval_policy_answers_without_asking(policy: Any) -> None:
    provider = ScriptedProvider([tool_turn("guarded", '{"a":2,"b":2}', call_id="g1"), text_turn("ok")])
    async with running_kernel(provider, tools=TOOLS) as kernel, serve(kernel, tool_approval=policy) as url:

        async def go() -> Any:
            async with client(url) as c:
                return await c.ask(text("g", "go", stream=True))

        frames = await in_asyncio(go)
    assert names(frames) == ["ToolCall", "ToolResult", "Stream", "Complete"]  # no ToolConfirmationRequest
    if policy == "reject":
        assert body(frames[1])[1]["result"] == "tool call rejected: the user declined to run guarded (declined by [transports.agent_cli] tool_approval)"
    else:
        assert body(frames[1])[1]["result"] == "4"


@pytest.mark.parametrize("confirmed", [True, False])
async def test_turn_confirmation(confirmed: bool) -> None:
    provider = ScriptedProvider([text_turn("one"), text_turn("two")])
    agent = AgentSettings(max_turns=1)
    async with running_kernel(provider, agent=agent) as kernel, serve(kernel) as url:

        async def go() -> dict[str, Any]:
            async with client(url) as c:
                out: dict[str, Any] = {"first": await c.ask(text("chat_1", "hi"))}
                await c.send(text("chat_123", "again", stream=True))
                out["ask"] = await c.until(lambda f: "TurnConfirmationRequest" in f["response"])
                await c.send({"request_id": "confirm_456", "input": {"TurnConfirmationResponse": {"confirmed": confirmed, "reason": "r"}}})
                out["rest"] = await c.until(lambda f: f["request_id"] == "chat_123" and "Complete" in f["response"])
                out["quiet"] = await c.silent(0.2)
                return out

        out = await in_asyncio(go)
    assert out["first"][-1]["response"] == {"Text": "one"}
    ask = out["ask"][-1]
    assert ask["request_id"] == "chat_123"
    assert body(ask)[1] == {"current_turns": 1, "max_turns": 1, "reason": "Reached the maximum number of conversation turns (1 turns). Reset the turn count to continue?"}
    rest = out["rest"]
    assert all(f["request_id"] == "chat_123" for f in rest)  # never under the confirmation's id
    if confirmed:
        assert names(rest) == ["Stream", "Complete"] and body(rest[0])[1] == "two"
    else:
        assert names(rest) == ["Text", "Complete"] and body(rest[0])[1] == TURN_DECLINED
        assert len(provider.requests) == 1
    assert out["quiet"]


async def test_max_turns_option_overrides_the_agent() -> None:
    async with running_kernel(ScriptedProvider([text_turn("x")])) as kernel, serve(kernel, max_turns=1) as url:

        async def go() -> Any:
            async with client(url) as c:
                await c.ask(text("a", "1"))
                await c.send(text("b", "2"))
                await c.until(lambda f: "TurnConfirmationRequest" in f["response"])
                await c.send({"request_id": "no", "input": {"TurnConfirmationResponse": {"confirmed": False}}})
                return await c.until_end("b")

        frames = await in_asyncio(go)
    assert frames == [{"request_id": "b", "response": {"Text": TURN_DECLINED}, "error": None, "token_usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}]


async def test_prompts_queue_behind_a_running_one_and_control_requests_act_at_once() -> None:
    provider = ScriptedProvider([text_turn("a1 ", "a2 ", "a3 ", "a4 ", "a5"), text_turn("b")], delay_s=0.05)
    async with running_kernel(provider, commands=BUILTIN_COMMANDS) as kernel, serve(kernel, max_queued_requests=1) as url:

        async def go() -> list[dict[str, Any]]:
            async with client(url) as c:
                await c.send(text("A", "first", stream=True))
                await c.until(lambda f: "Stream" in f["response"])
                await c.send(text("B", "second"))
                await c.send(text("C", "third"))  # over the bound: busy
                await c.send(unit("G", "GetCommands"))  # answered while A streams
                return await c.until_end("B", timeout=10)

        frames = await in_asyncio(go)
    order = [(f["request_id"], body(f)[0]) for f in frames]
    assert order.index(("C", "Text")) < order.index(("A", "Complete")) and order.index(("G", "Text")) < order.index(("A", "Complete"))
    assert order.index(("A", "Complete")) < order.index(("B", "Text"))
    busy = next(f for f in frames if f["request_id"] == "C")
    assert busy["error"].startswith("processing_error: busy:")
    assert frames[-1]["response"] == {"Text": "b"}


async def test_provider_failure_is_a_processing_error() -> None:
    async with running_kernel(ScriptedProvider([failing_turn("upstream exploded")])) as kernel, serve(kernel) as url:

        async def go() -> Any:
            async with client(url) as c:
                return await c.ask(text("f", "hi", stream=True))

        frames = await in_asyncio(go)
    assert frames == [{"request_id": "f", "response": {"Text": ""}, "error": "processing_error: upstream exploded", "token_usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}]


async def test_bad_frames_keep_the_connection_usable() -> None:
    async with running_kernel() as kernel, serve(kernel, max_message_bytes=2048) as url:

        async def go() -> dict[str, Any]:
            async with client(url) as c:
                out: dict[str, Any] = {}
                await c.send("{not json")
                out["garbage"] = await c.recv()
                await c.send(b"\xff\xfe\xfd")
                out["binary"] = await c.recv()
                await c.send(json.dumps(text("big", "x" * 4000)))
                out["big"] = await c.recv()
                await c.send(json.dumps(text("bin", "hi")).encode())
                out["bytes_ok"] = await c.until_end("bin")
                pong = await c.ws.ping()
                out["pong"] = await asyncio.wait_for(pong, 2) is not None
                out["after"] = await c.ask(text("ok", "hi"))
                return out

        out = await in_asyncio(go)
    assert out["garbage"]["request_id"] == "parse_error" and out["garbage"]["error"].startswith("Failed to parse request: JSON is malformed")
    assert out["binary"] == {"request_id": "parse_error", "response": {"Text": ""}, "error": "Failed to parse request: Binary frame is not valid UTF-8", "token_usage": None}
    assert out["big"]["error"].startswith("Failed to parse request: message of 40") and out["big"]["error"].endswith("over the 2048-byte limit")
    assert out["bytes_ok"][-1]["response"] == {"Text": "Hello world"}
    assert out["pong"] and out["after"][-1]["response"] == {"Text": "Hello world"}


async def test_rate_limit_is_reported_not_fatal() -> None:
    async with running_kernel(commands=BUILTIN_COMMANDS) as kernel, serve(kernel, rate_limit_per_minute=2) as url:

        async def go() -> list[dict[str, Any]]:
            async with client(url) as c:
                for n in range(3):
                    await c.send(unit(f"g{n}", "GetCommands"))
                return [await c.recv() for _ in range(3)]

        frames = await in_asyncio(go)
    limited = [f for f in frames if f["request_id"] == "parse_error"]
    assert len(limited) == 1 and limited[0]["error"].startswith("processing_error: rate limited: more than 2 requests a minute")


async def test_each_connection_gets_its_own_session_released_on_close() -> None:
    provider = ScriptedProvider([text_turn("x")])
    async with running_kernel(provider) as kernel, serve(kernel) as url:

        async def go() -> None:
            for rid in ("one", "two"):
                async with client(url) as c:
                    await c.ask(text(rid, rid))

        await in_asyncio(go)
        assert [msg.content for msg in provider.requests[1].messages] == ["You are a helpful assistant.", "two"]
        for _ in range(100):
            if not kernel.sessions:
                break
            await anyio.sleep(0.02)
        assert kernel.sessions == {}
        assert len(await kernel.store.list_sessions(None)) == 2  # unloaded, not deleted


async def test_disconnect_mid_stream_interrupts_the_run() -> None:
    provider = ScriptedProvider(SLOW, delay_s=0.02)
    async with running_kernel(provider) as kernel, serve(kernel) as url:

        async def go() -> None:
            async with client(url) as c:
                await c.send(text("s", "go", stream=True))
                await c.send(text("q", "queued"))
                await c.until(lambda f: "Stream" in f["response"])

        await in_asyncio(go)
        for _ in range(100):
            if not kernel.sessions:
                break
            await anyio.sleep(0.02)
        assert kernel.sessions == {}
        (record,) = await kernel.store.list_sessions(None)
        history = await kernel.store.load_messages(record.session_id, 100)
    # Both runs ended as interrupted: the queued one never produced an answer.
    assert [(msg.role, msg.content.split(" ")[0]) for msg in history] == [("user", "go"), ("assistant", "w0"), ("user", "queued")]


async def test_server_shutdown_closes_with_1001() -> None:
    codes: list[int | None] = []

    async def go(url: str) -> None:
        async with client(url) as c:
            await c.ask(text("x", "hi"))
            try:
                await c.ws.recv()
            except ConnectionClosed as exc:
                codes.append(exc.rcvd.code if exc.rcvd else None)

    async with running_kernel() as kernel, anyio.create_task_group() as tg:
        async with serve(kernel) as url:
            tg.start_soon(in_asyncio, partial(go, url))
            with anyio.fail_after(5):
                while not any(len(s.context) == 2 for s in kernel.sessions.values()):
                    await anyio.sleep(0.02)
            await anyio.sleep(0.1)
    assert codes == [1001]


async def test_token_and_origin_checks_before_the_upgrade() -> None:
    from websockets.exceptions import InvalidStatus

    async with running_kernel() as kernel, serve(kernel, token="s3cret") as url:

        async def status(target: str, **kw: Any) -> int:
            try:
                async with client(target, **kw) as c:
                    await c.ask(text("t", "hi"))
                    return 101
            except InvalidStatus as exc:
                return exc.response.status_code

        async def go() -> list[int]:
            return [
                await status(url),
                await status(url + "?token=wrong"),
                await status(url + "?token=s3cret"),
                await status(url + "?token=s3cret", origin="https://evil.example"),
                await status(url.rstrip("/") + "/other?token=s3cret"),
            ]

        assert await in_asyncio(go) == [401, 401, 101, 403, 404]


async def test_idle_connection_is_closed_but_not_while_a_run_waits() -> None:
    provider = ScriptedProvider([tool_turn("guarded", '{"a":1,"b":1}', call_id="g1"), text_turn("ok")])
    async with running_kernel(provider, tools=TOOLS) as kernel, serve(kernel, idle_timeout_s=0.3) as url:

        async def go() -> tuple[Any, int | None]:
            async with client(url) as c:
                await c.send(text("w", "go"))
                await c.until(lambda f: "ToolConfirmationRequest" in f["response"])
                await asyncio.sleep(0.8)  # idle, but a confirmation is pending: stays open
                await c.send(confirm("yes", True, name="guarded"))
                frames = await c.until_end("w")
                try:
                    await asyncio.wait_for(c.ws.recv(), 3)
                except ConnectionClosed as exc:
                    return frames, exc.rcvd.code if exc.rcvd else None
                return frames, None

        frames, code = await in_asyncio(go)
    assert frames[-1]["response"] == {"Text": "ok"} and code == 1000


async def test_a_connection_that_ends_leaves_no_task_of_its_own_in_a_reference_cycle() -> None:
    """Its writer and its commands are stopped, not cancelled from outside, when the client
    goes (kernel/companions.py): no frame, no ``CancelledError`` is left for the garbage
    collector. (What the socket libraries leave when a connection closes is theirs.)"""
    async with running_kernel(ScriptedProvider([text_turn("Hello", " world")])) as kernel, serve(kernel) as url:

        async def connections() -> None:
            async def go() -> None:
                for index in range(3):
                    async with client(url) as c:
                        assert (await c.ask(text(f"r{index}", "hi")))[-1]["response"] == {"Text": "Hello world"}

            await in_asyncio(go)
            with anyio.fail_after(5):
                while kernel.sessions:  # each connection's session is released when it closes
                    await anyio.sleep(0.01)

        garbage = await garbage_of(connections)
    assert garbage["frame"] == 0 and garbage["CancelledError"] == 0, garbage.most_common(12)
