"""The ACP server in-process over OS pipes, on asyncio and trio, with a scripted model.

These cover what the echo model cannot produce (reasoning, a turn limit, a
failing provider, token limits) and the editor misbehaving (never answering a
permission or file request, answering with an error, going away mid-question).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import pytest

from kernel import Kernel
from kernel.model import Usage
from kernel.provider import FinishChunk, ReasoningChunk, TextChunk, UsageChunk
from kernel.settings import AgentSettings, SessionSettings, Settings
from kernel.testing import (
    ScriptedProvider,
    failing_turn,
    running_kernel,
    text_turn,
    tool_turn,
)
from plugins.tools.builtin import BUILTIN_TOOLS
from transports.acp import AcpConfig, AcpTransport
from transports.shared import LineReader, LineWriter

pytestmark = pytest.mark.anyio

Answerer = Callable[[dict[str, Any]], Any]


class PipeEditor:
    """The editor's end of the pipes: sends lines, reads lines, answers the gateway's requests."""

    def __init__(self, to_gateway: int, from_gateway: int) -> None:
        self.writer = LineWriter(to_gateway)
        self.to_gateway = to_gateway
        self.lines = LineReader(from_gateway).__aiter__()
        self.requests: list[dict[str, Any]] = []

    async def send(self, message: dict[str, Any]) -> None:
        await self.writer.write_line(json.dumps(message).encode())

    async def receive(self) -> dict[str, Any]:
        with anyio.fail_after(10):
            return json.loads(await self.lines.__anext__())

    async def call(self, rid: Any, method: str, params: Any, answer: Answerer | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        await self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return await self.until(rid, answer)

    async def until(self, rid: Any, answer: Answerer | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Read up to the response to ``rid``, answering the gateway's requests with ``answer``."""
        before: list[dict[str, Any]] = []
        while True:
            message = await self.receive()
            if "method" in message and "id" in message:
                self.requests.append(message)
                reply = answer(message) if answer else None
                if reply is not None:
                    await self.send({"jsonrpc": "2.0", "id": message["id"], **reply})
            elif "method" not in message and message.get("id") == rid:
                return message, before
            else:
                before.append(message)

    def close(self) -> None:
        self.writer.close()
        os.close(self.to_gateway)


@contextlib.asynccontextmanager
async def editor(kernel: Kernel, config: AcpConfig | None = None, *, fs: bool = False) -> AsyncIterator[tuple[PipeEditor, str]]:
    """Serve ACP over two pipes; yields the editor end and an open session. Closing = EOF."""
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()

    async def serve(*, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        try:
            await AcpTransport(stdin_fd=in_r, stdout_fd=out_w).serve(kernel, config or AcpConfig(), task_status=task_status)
        finally:
            os.close(out_w)  # like a process exiting: the editor sees EOF on the gateway's stdout

    try:
        async with anyio.create_task_group() as tg:
            await tg.start(serve)
            pipe = PipeEditor(in_w, out_r)
            caps = {"fs": {"readTextFile": fs, "writeTextFile": fs}}
            await pipe.call(0, "initialize", {"protocolVersion": 1, "clientCapabilities": caps})
            reply, _ = await pipe.call(1, "session/new", {"cwd": "/project", "mcpServers": []})
            try:
                yield pipe, reply["result"]["sessionId"]
            finally:
                pipe.close()
                with anyio.fail_after(15):
                    while True:  # drain until the gateway closes its end (serve returned)
                        try:
                            await pipe.lines.__anext__()
                        except StopAsyncIteration:
                            break
    finally:
        for fd in (in_r, out_r):
            with contextlib.suppress(OSError):
                os.close(fd)


def prompt(session: str, text: str) -> dict[str, Any]:
    return {"sessionId": session, "prompt": [{"type": "text", "text": text}]}


def updates(messages: list[dict[str, Any]], kind: str | None = None) -> list[dict[str, Any]]:
    found = [m["params"]["update"] for m in messages if m.get("method") == "session/update"]
    return [u for u in found if kind is None or u["sessionUpdate"] == kind]


async def test_reasoning_and_max_tokens() -> None:
    turn = [ReasoningChunk("thinking hard"), TextChunk("partial"), UsageChunk(Usage(input_tokens=2, output_tokens=1)), FinishChunk("length")]
    async with running_kernel(ScriptedProvider([turn])) as kernel, editor(kernel) as (pipe, session):
        reply, before = await pipe.call(2, "session/prompt", prompt(session, "go"))
    assert reply["result"]["stopReason"] == "max_tokens"
    assert [u["content"]["text"] for u in updates(before, "agent_thought_chunk")] == ["thinking hard"]
    assert updates(before, "usage_update")[-1] == {"sessionUpdate": "usage_update", "used": 3, "size": 128000}


async def test_turn_limit_ends_with_max_turn_requests() -> None:
    provider = ScriptedProvider([tool_turn("current_time", "{}"), text_turn("never")])
    async with running_kernel(provider, tools=BUILTIN_TOOLS, agent=AgentSettings(max_turns=1)) as kernel, editor(kernel) as (pipe, session):
        reply, before = await pipe.call(2, "session/prompt", prompt(session, "what time is it"))
    assert reply["result"]["stopReason"] == "max_turn_requests"
    assert [u["status"] for u in updates(before, "tool_call_update")] == ["in_progress", "completed"]
    assert len(provider.requests) == 1


async def test_failed_run_is_a_json_rpc_error() -> None:
    async with running_kernel(ScriptedProvider([failing_turn("upstream exploded")])) as kernel, editor(kernel) as (pipe, session):
        reply, _ = await pipe.call(2, "session/prompt", prompt(session, "go"))
        error = reply["error"]
        assert error["code"] == -32603 and "upstream exploded" in error["message"]
        assert error["data"]["code"] == "provider_error"
        empty, _ = await pipe.call(3, "session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "  "}]})
        audio, _ = await pipe.call(4, "session/prompt", {"sessionId": session, "prompt": [{"type": "audio", "data": "AA==", "mimeType": "audio/wav"}]})
    assert empty["error"]["code"] == -32602 and audio["error"]["code"] == -32602


async def test_file_requests_time_out_or_fail_as_tool_errors() -> None:
    provider = ScriptedProvider([tool_turn("read_file", '{"path": "src/a.py"}'), text_turn("ok")])
    config = AcpConfig(fs_timeout_s=0.2)
    async with running_kernel(provider, tools=BUILTIN_TOOLS) as kernel, editor(kernel, config, fs=True) as (pipe, session):
        silent, before = await pipe.call(2, "session/prompt", prompt(session, "read it"))
        assert pipe.requests[-1]["method"] == "fs/read_text_file"
        assert pipe.requests[-1]["params"] == {"sessionId": session, "path": "/project/src/a.py"}
        provider.requests.clear()
        refused, after = await pipe.call(3, "session/prompt", prompt(session, "again"), lambda _m: {"error": {"code": -32002, "message": "no such buffer"}})
    assert silent["result"]["stopReason"] == "end_turn" and refused["result"]["stopReason"] == "end_turn"
    [timed_out] = [u for u in updates(before, "tool_call_update") if u["status"] == "failed"]
    assert "did not answer fs/read_text_file within 0.2s" in timed_out["content"][0]["content"]["text"]
    [error] = [u for u in updates(after, "tool_call_update") if u["status"] == "failed"]
    assert "no such buffer" in error["content"][0]["content"]["text"]


async def test_permission_timeout_rejects_and_late_answer_is_ignored() -> None:
    provider = ScriptedProvider([tool_turn("write_file", '{"path": "a.txt", "content": "x"}'), text_turn("ok")])
    async with running_kernel(provider, tools=BUILTIN_TOOLS) as kernel, editor(kernel, AcpConfig(permission_timeout_s=0.2)) as (pipe, session):
        reply, before = await pipe.call(2, "session/prompt", prompt(session, "write"))
        [question] = pipe.requests
        assert question["id"] == 0 and question["method"] == "session/request_permission"
        await pipe.send({"jsonrpc": "2.0", "id": 0, "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}})
        provider.requests.clear()
        again, _ = await pipe.call(3, "session/prompt", prompt(session, "hello"))
    assert reply["result"]["stopReason"] == "end_turn" and again["result"]["stopReason"] == "end_turn"
    assert updates(before, "tool_call_update")[-1]["status"] == "failed"


async def test_reject_always_is_remembered() -> None:
    provider = ScriptedProvider([tool_turn("write_file", '{"path": "a.txt", "content": "x"}'), text_turn("ok")])
    answer = lambda _m: {"result": {"outcome": {"outcome": "selected", "optionId": "reject_always"}}}
    async with running_kernel(provider, tools=BUILTIN_TOOLS) as kernel, editor(kernel) as (pipe, session):
        first, _ = await pipe.call(2, "session/prompt", prompt(session, "write"), answer)
        provider.requests.clear()
        second, before = await pipe.call(3, "session/prompt", prompt(session, "write again"), answer)
    assert len(pipe.requests) == 1
    assert [u["status"] for u in updates(before, "tool_call_update")] == ["failed"]
    assert first["result"]["stopReason"] == second["result"]["stopReason"] == "end_turn"


async def test_cancel_while_asking_and_queued_prompts_all_answer_cancelled() -> None:
    provider = ScriptedProvider([tool_turn("write_file", '{"path": "a.txt", "content": "x"}'), text_turn("ok")], delay_s=0.01)
    async with running_kernel(provider, tools=BUILTIN_TOOLS) as kernel, editor(kernel) as (pipe, session):
        await pipe.send({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": prompt(session, "write")})
        await pipe.send({"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": prompt(session, "queued")})
        while (message := await pipe.receive()).get("method") != "session/request_permission":
            pass
        await pipe.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}})
        answers = {}
        while len(answers) < 2:
            message = await pipe.receive()
            if "method" not in message:
                assert message["id"] not in answers, "a prompt was answered twice"
                answers[message["id"]] = message
        # The editor answers the stale question late; nothing breaks.
        await pipe.send({"jsonrpc": "2.0", "id": 0, "result": {"outcome": {"outcome": "cancelled"}}})
        after, _ = await pipe.call(4, "session/set_mode", {"sessionId": session, "modeId": "ask"})
    assert answers[2]["result"] == {"stopReason": "cancelled"} and answers[3]["result"] == {"stopReason": "cancelled"}
    assert after["result"] == {}


async def test_eof_while_asking_rejects_and_returns() -> None:
    provider = ScriptedProvider([tool_turn("write_file", '{"path": "a.txt", "content": "x"}'), text_turn("ok")])
    async with running_kernel(provider, tools=BUILTIN_TOOLS) as kernel:
        with anyio.fail_after(15):
            async with editor(kernel) as (pipe, session):
                await pipe.send({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": prompt(session, "write")})
                while (await pipe.receive()).get("method") != "session/request_permission":
                    pass
            # editor() closed stdin and waited for the gateway to close stdout: serve returned.
        live = kernel.sessions[session]
        assert not live.busy and live.files is None
        history = [m.content for m in live.context if m.role == "tool"]
    assert history and "declined" in history[0]


async def test_request_limit_refuses_at_once_and_cancel_still_works() -> None:
    provider = ScriptedProvider([text_turn(*[f"w{i} " for i in range(200)])], delay_s=0.01)
    async with running_kernel(provider) as kernel, editor(kernel, AcpConfig(max_concurrent_requests=1)) as (pipe, session):
        await pipe.send({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": prompt(session, "long")})
        refused, _ = await pipe.call(3, "session/prompt", prompt(session, "second"))
        assert refused["error"]["code"] == -32603 and refused["error"]["data"] == {"code": "busy"}
        await pipe.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}})
        cancelled, _ = await pipe.until(2)
        assert cancelled["result"] == {"stopReason": "cancelled"}
        as_request, _ = await pipe.call(4, "session/cancel", {"sessionId": session})
    assert as_request == {"jsonrpc": "2.0", "id": 4, "result": None}


async def test_a_prompt_whose_run_end_was_lost_is_answered_cancelled() -> None:
    settings = Settings()
    settings.session = SessionSettings(subscriber_buffer=8, subscriber_buffer_bytes=8192, lag_grace_s=0.2, event_retention=4, event_retention_bytes=4096)
    provider = ScriptedProvider([text_turn(*["x" * 1000 for _ in range(300)])])
    async with running_kernel(provider, settings=settings) as kernel, editor(kernel) as (pipe, session):
        await pipe.send({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": prompt(session, "flood")})
        # The editor stops reading: stdout fills, the forwarder falls behind and is cut off,
        # and the run ends while its events are gone for good.
        live = kernel.sessions[session]
        with anyio.fail_after(10):
            while live.usage.output_tokens == 0 or live.busy:
                await anyio.sleep(0.05)
        lost, _ = await pipe.until(2)
        assert lost["result"] == {"stopReason": "cancelled"}
        provider.turns = [text_turn("back")]
        again, before = await pipe.call(3, "session/prompt", prompt(session, "again"))
    assert again["result"]["stopReason"] == "end_turn"
    assert "back" in "".join(u["content"]["text"] for u in updates(before, "agent_message_chunk"))
