"""The stdio transport in-process on two pipes: EOF, approval policy, other sessions."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import msgspec
import pytest

from kernel import Kernel
from kernel import model as m
from kernel.testing import ScriptedProvider, running_kernel, text_turn, tool_turn
from kernel.tools import Tool, ToolContext
from tests.reliability._support import PipeReader
from transports.stdio import StdioConfig, StdioTransport

pytestmark = pytest.mark.anyio

SLOW = [text_turn(*[f"w{i} " for i in range(40)])]


async def _add(args: dict[str, Any], ctx: ToolContext) -> str:
    return str(args["a"] + args["b"])


GUARDED = Tool(name="guarded", description="Needs approval", parameters={"type": "object"}, handler=_add, requires_approval=True)


class Pipes:
    def __init__(self) -> None:
        self.stdin_r, self.stdin_w = os.pipe()
        self.stdout_r, self.stdout_w = os.pipe()
        self.reader = PipeReader(self.stdout_r)
        self.served = anyio.Event()

    def send(self, obj: Any) -> None:
        os.write(self.stdin_w, msgspec.json.encode(obj) + b"\n")

    def eof(self) -> None:
        os.close(self.stdin_w)
        self.stdin_w = -1

    async def until(self, predicate: Any, timeout_s: float = 10.0) -> list[dict[str, Any]]:
        return await self.reader.until(predicate, timeout_s)


@asynccontextmanager
async def stdio(kernel: Kernel, **config: Any) -> AsyncIterator[Pipes]:
    """The transport on two pipes; :attr:`Pipes.served` is set once ``serve`` returned."""
    pipes = Pipes()

    async def serve(*, task_status: Any) -> None:
        await StdioTransport(pipes.stdin_r, pipes.stdout_w).serve(kernel, StdioConfig(**config), task_status=task_status)
        pipes.served.set()

    try:
        async with anyio.create_task_group() as tg:
            await tg.start(serve)
            try:
                yield pipes
            finally:
                tg.cancel_scope.cancel()
    finally:
        for fd in (pipes.stdin_r, pipes.stdin_w, pipes.stdout_r, pipes.stdout_w):
            if fd >= 0:
                os.close(fd)


def run_end(request_id: str) -> Any:
    return lambda x: x.get("request_id") == request_id and x["type"] in ("run_finished", "run_failed")


async def test_eof_interrupts_this_clients_run_after_the_grace_and_writes_its_end() -> None:
    async with running_kernel(ScriptedProvider(SLOW, delay_s=0.05)) as kernel, stdio(kernel, session_id="s", eof_grace_s=0.3) as pipes:
        pipes.send({"type": "prompt", "text": "go", "request_id": "p1"})
        await pipes.until(lambda x: x["type"] == "text_delta")
        pipes.eof()
        with anyio.fail_after(5):
            await pipes.served.wait()
        lines = await pipes.until(run_end("p1"))
    end = lines[-1]
    assert end["type"] == "run_finished" and end["interrupted"] is True and 0 < len(end["text"]) < len("".join(f"w{i} " for i in range(40)))


async def test_eof_lets_this_clients_runs_finish_and_leaves_other_clients_runs_alone() -> None:
    async with running_kernel(ScriptedProvider(SLOW, delay_s=0.05)) as kernel, stdio(kernel, session_id="s", eof_grace_s=30) as pipes:
        pipes.send({"type": "prompt", "text": "mine", "request_id": "mine"})
        await pipes.until(lambda x: x["type"] == "text_delta")
        # Another client (another transport) queues a run in the same session.
        other = await kernel.execute(m.Prompt(session_id="s", text="theirs", request_id="theirs"))
        assert isinstance(other, m.Accepted) and other.queued
        pipes.eof()
        with anyio.fail_after(10):  # mine ends by itself; theirs is not waited for
            await pipes.served.wait()
        lines = await pipes.until(run_end("mine"))
        info = await kernel.execute(m.GetSession(session_id="s"))
    (mine,) = [line for line in lines if run_end("mine")(line)]  # "theirs" may have started in the same write
    assert mine["type"] == "run_finished" and "interrupted" not in mine  # false: left out
    assert isinstance(info, m.SessionOpened) and info.session.request_id == "theirs"  # still running, not interrupted


async def test_tool_approval_policy_and_a_commands_own_policy() -> None:
    turns = [tool_turn("guarded", '{"a":1,"b":2}', call_id="g1"), text_turn("one"), tool_turn("guarded", '{"a":2,"b":2}', call_id="g2"), text_turn("two")]
    async with running_kernel(ScriptedProvider(turns), tools=[GUARDED]) as kernel, stdio(kernel, session_id="s", tool_approval="reject") as pipes:
        pipes.send({"type": "prompt", "text": "go", "request_id": "p1"})
        await pipes.until(run_end("p1"))
        pipes.send({"type": "prompt", "text": "again", "request_id": "p2", "options": {"approval": {"mode": "approve"}}})
        lines = await pipes.until(run_end("p2"))
    assert not [x for x in lines if x["type"] == "tool_approval_requested"]
    first, second = (x for x in lines if x["type"] == "tool_result")
    assert first["outcome"] == "rejected" and first["error"] == "the user declined to run guarded (declined by [transports.stdio] tool_approval)"
    assert "outcome" not in second and second["result"] == "4"  # "ok": left out


async def test_a_command_naming_another_session_follows_it() -> None:
    async with running_kernel(ScriptedProvider([text_turn("hi")])) as kernel, stdio(kernel, session_id="s") as pipes:
        pipes.send({"type": "interrupt", "session_id": "nowhere", "request_id": "h"})
        await pipes.until(lambda x: x.get("request_id") == "h")
        pipes.send({"type": "prompt", "text": "x", "session_id": "other", "request_id": "o"})
        await pipes.until(run_end("o"))
        pipes.send({"type": "open_session", "session_id": "third", "request_id": "t"})
        pipes.send({"type": "prompt", "text": "y", "session_id": "third", "request_id": "t2"})
        lines = await pipes.until(run_end("t2"))
    (missing,) = [x for x in lines if x.get("request_id") == "h"]
    assert missing["type"] == "error" and missing["error"]["code"] == "not_found"
    (other,) = [x for x in lines if x.get("request_id") == "o" and x["type"] == "run_finished"]
    assert other["session_id"] == "other" and other["text"] == "hi"
    assert [x["session_id"] for x in lines if x.get("request_id") == "t2" and x["type"] == "run_started"] == ["third"]  # once, not twice
