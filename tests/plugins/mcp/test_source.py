"""MCP servers as a kernel's tool sources, against real servers written with the SDK's
``MCPServer``: one a child process on stdio (in the pre-2026 protocol era), one over
streamable HTTP on 127.0.0.1 (the 2026 era), on asyncio and trio."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from kernel import Kernel, McpServerSettings, RunFollower, Tool, ToolContext
from kernel import model as m
from kernel.testing import ScriptedProvider, running_kernel, text_turn, tool_turn
from plugins.mcp.source import McpServers

from ._support import http_server, serving_http, stdio_server

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def mcp_kernel(servers: list[McpServerSettings], provider: ScriptedProvider | None = None) -> AsyncIterator[tuple[Kernel, McpServers]]:
    """A kernel whose every session is offered the tools of ``servers`` (started first)."""
    async with anyio.create_task_group() as tasks:
        group = McpServers(servers)
        await tasks.start(group.run)
        async with running_kernel(provider, tool_sources=group.sources) as kernel:
            yield kernel, group
        group.close()


async def run_prompt(kernel: Kernel, text: str = "go", *, approve: bool | None = None, policy: m.ApprovalPolicy | None = None) -> list[m.Event]:
    """One run's events; a tool approval it asks is answered ``approve``."""
    events: list[m.Event] = []
    with anyio.fail_after(30):
        async with await RunFollower.start(kernel, m.Prompt(session_id="s", text=text), policy=policy or m.ApprovalPolicy()) as run:
            while run.end is None:
                events += await run.next_batch()
                if run.question is not None and approve is not None:
                    await run.answer(approve, None if approve else "not today")
    return events


def results(events: list[m.Event]) -> list[m.ToolResult]:
    return [e for e in events if isinstance(e, m.ToolResult)]


async def call(kernel: Kernel, name: str, **arguments: object) -> m.ToolOutput:
    reply = await kernel.execute(m.ExecuteTool(name=name, arguments=arguments))
    assert isinstance(reply, m.ToolOutput)
    return reply


async def test_servers_start_together_and_a_broken_one_is_named(tmp_path: Path) -> None:
    async with serving_http(tmp_path) as url:
        servers = [
            stdio_server("files", tmp_path, legacy=True, env={"MCP_TEST_GREETING": "hello"}, approved_tools=["add"], cwd=str(tmp_path)),
            http_server("web", url, tools=["add", "weather"], require_approval=False),
            McpServerSettings(name="missing", command=str(tmp_path / "no-such-server")),
            McpServerSettings(name="mute", command=sys.executable, args=["-c", "import sys; sys.stdin.read()"], connect_timeout_s=0.5),
            McpServerSettings(name="quits", command=sys.executable, args=["-c", "raise SystemExit('no config')"]),
        ]
        async with mcp_kernel(servers) as (kernel, group):
            assert [s.name for s in group.sources] == ["files", "web"]
            assert set(group.failures) == {"missing", "mute", "quits"}
            assert "No such file or directory" in group.failures["missing"] and group.failures["mute"] == "no answer within 0.5s"
            assert group.failures["quits"].startswith("it closed the connection before the handshake was done")
            listed = await kernel.execute(m.ListTools())
            assert isinstance(listed, m.ToolList)
            tools = {t.name: t for t in listed.tools}
            assert {"files__add", "files__picture", "files__whoami", "files__crash", "files__slow", "files__grow", "web__add", "web__weather"} <= set(tools)
            assert not {"web__picture", "web__crash"} & set(tools), "the allow-list of web lets two through"
            add = tools["files__add"]
            assert add.parameters["properties"] == {"a": {"title": "A", "type": "integer"}, "b": {"title": "B", "type": "integer"}}
            assert add.parameters["required"] == ["a", "b"] and add.description == "Add two whole numbers."
            assert (add.category, add.access, add.requires_approval) == ("mcp", "query", False)
            assert (tools["files__whoami"].access, tools["files__whoami"].requires_approval) == ("update", True)
            assert not tools["web__weather"].requires_approval
            who = await call(kernel, "files__whoami")
            assert f"cwd={tmp_path}" in who.result and "greeting=hello" in who.result
            assert (await call(kernel, "web__add", a=20, b=22)).result == "42"


async def test_results_and_outcomes_reach_the_model(tmp_path: Path) -> None:
    provider = ScriptedProvider(
        [
            tool_turn("t__picture", call_id="c1"),
            tool_turn("t__weather", '{"city": "Oslo"}', call_id="c2"),
            tool_turn("t__fail", '{"why": "the disk is full"}', call_id="c3"),
            tool_turn("t__add", '{"a": "many"}', call_id="c4"),
            text_turn("done"),
        ]
    )
    async with mcp_kernel([stdio_server("t", tmp_path, require_approval=False)], provider) as (kernel, _):
        events = await run_prompt(kernel)
    picture, weather, fail, bad = results(events)
    assert (picture.outcome, picture.result) == ("ok", "a red pixel\n[image image/png, 68 bytes, not shown to the model]")
    assert (weather.outcome, weather.result) == ("ok", '{"city":"Oslo","celsius":21}')
    assert fail.outcome == "error" and fail.error is not None and "the disk is full" in fail.error
    assert bad.outcome == "error" and bad.error is not None and "validation error" in bad.error
    sent = [msg for msg in provider.requests[-1].messages if msg.role == "tool"]
    assert [msg.content for msg in sent] == [picture.result, weather.result, fail.result, bad.result]
    assert [msg.outcome for msg in sent] == ["ok", "ok", "error", "error"]


@pytest.mark.parametrize("era", ["legacy-stdio", "http"])
async def test_a_changed_tool_list_is_offered_once_the_server_says_so(tmp_path: Path, era: str) -> None:
    provider = ScriptedProvider([tool_turn("t__grow", call_id="g"), text_turn("grown"), tool_turn("t__fresh", call_id="f"), text_turn("ok")])
    async with serving_http(tmp_path) as url:
        server = stdio_server("t", tmp_path, legacy=True) if era == "legacy-stdio" else http_server("t", url)
        async with mcp_kernel([server], provider) as (kernel, group):
            [source] = group.sources
            assert "t__fresh" not in {t.name for t in source.tools()}
            grown = await run_prompt(kernel, policy=m.ApprovalPolicy(mode="approve"))
            with anyio.fail_after(10):
                while "t__fresh" not in {t.name for t in source.tools()}:
                    await anyio.sleep(0.02)
            fresh = await run_prompt(kernel, policy=m.ApprovalPolicy(mode="approve"))
    offered = [{spec.name for spec in request.tools} for request in provider.requests]
    assert "t__grow" in offered[0] and "t__fresh" not in offered[0] and "t__fresh" in offered[2]
    assert [(r.name, r.outcome, r.result) for r in results(grown + fresh)] == [("t__grow", "ok", "grown"), ("t__fresh", "ok", "fresh and new")]


class ChangingSource:
    """A tool source whose list changes while one of its tools runs (as an MCP server's may)."""

    def __init__(self) -> None:
        self.offered: tuple[Tool, ...] = (Tool(name="unlock", description="Offers another tool", parameters={"type": "object"}, handler=self.unlock),)

    def tools(self) -> tuple[Tool, ...]:
        return self.offered

    async def unlock(self, args: dict[str, object], ctx: ToolContext) -> str:
        self.offered += (Tool(name="unlocked", description="Appeared mid-run", parameters={"type": "object"}, handler=self.unlock),)
        return "unlocked"


async def test_tool_sources_are_asked_again_at_every_model_call_of_a_run() -> None:
    provider = ScriptedProvider([tool_turn("unlock", call_id="u"), text_turn("there it is")])
    async with running_kernel(provider, tool_sources=[ChangingSource()]) as kernel:
        await run_prompt(kernel)
    assert [{spec.name for spec in request.tools} >= {"unlocked"} for request in provider.requests] == [False, True]


async def test_approval_is_asked_and_honoured(tmp_path: Path) -> None:
    provider = ScriptedProvider([tool_turn("t__whoami", call_id="w1"), text_turn("one"), tool_turn("t__whoami", call_id="w2"), text_turn("two")])
    async with mcp_kernel([stdio_server("t", tmp_path)], provider) as (kernel, _):
        approved = await run_prompt(kernel, approve=True)
        declined = await run_prompt(kernel, approve=False)
    for events in (approved, declined):
        started = next(e for e in events if isinstance(e, m.ToolCallStarted))
        assert started.needs_approval and started.category == "mcp"
        assert any(isinstance(e, m.ToolApprovalRequested) for e in events)
    [ran] = results(approved)
    assert ran.outcome == "ok" and ran.result.startswith("pid=")
    [refused] = results(declined)
    assert refused.outcome == "rejected" and refused.error == "the user declined to run t__whoami (not today)"


async def test_a_crashed_server_fails_the_call_clearly_and_starts_again_at_next_use(tmp_path: Path) -> None:
    async with mcp_kernel([stdio_server("t", tmp_path, legacy=True, require_approval=False)]) as (kernel, _):
        first = int((await call(kernel, "t__whoami")).result.split()[0].removeprefix("pid="))
        crashed = await call(kernel, "t__crash")
        assert crashed.is_error
        assert crashed.result == "tool error: the MCP server t stopped while running crash (Connection closed); it is started again at its next use"
        assert int((tmp_path / "crashed").read_text()) == first
        again = await call(kernel, "t__whoami")
        second = int(again.result.split()[0].removeprefix("pid="))
        assert not again.is_error and second != first
        with pytest.raises(ProcessLookupError):
            os.kill(first, 0)


@pytest.mark.parametrize("legacy", [True, False])
async def test_a_server_that_died_while_idle_is_started_again_by_the_next_call(tmp_path: Path, legacy: bool) -> None:
    async with mcp_kernel([stdio_server("t", tmp_path, legacy=legacy, require_approval=False)]) as (kernel, group):
        [source] = group.sources
        first = int((await call(kernel, "t__whoami")).result.split()[0].removeprefix("pid="))
        os.kill(first, signal.SIGKILL)
        with anyio.fail_after(10):
            while source.connected:
                await anyio.sleep(0.02)
        again = await call(kernel, "t__whoami")
        assert not again.is_error and int(again.result.split()[0].removeprefix("pid=")) != first
        assert source.connected


async def test_an_http_server_that_went_away_is_reached_again_when_it_is_back(tmp_path: Path) -> None:
    async with anyio.create_task_group() as tasks:
        async with serving_http(tmp_path) as url:
            group = McpServers([http_server("web", url, require_approval=False)])
            await tasks.start(group.run)
            [source] = group.sources
            add = {t.name: t for t in source.tools()}["web__add"]
            async with running_kernel(tool_sources=group.sources) as kernel:
                assert (await call(kernel, "web__add", a=1, b=2)).result == "3"
        async with running_kernel(tool_sources=group.sources) as kernel:
            down = await call(kernel, "web__add", a=1, b=2)
            assert down.is_error and "the MCP server web is not running and could not be started again" in down.result
            assert {t.name for t in source.tools()} >= {add.name}, "its tools stay offered meanwhile"
            port = int(url.rsplit(":", 1)[1].split("/")[0])
            async with serving_http(tmp_path, port):
                back = await call(kernel, "web__add", a=2, b=3)
        assert (back.is_error, back.result) == (False, "5")
        group.close()


async def test_an_interrupted_call_is_cancelled_on_the_server(tmp_path: Path) -> None:
    provider = ScriptedProvider([tool_turn("t__slow", '{"seconds": 120}', call_id="s1"), text_turn("never")])
    async with mcp_kernel([stdio_server("t", tmp_path, require_approval=False)], provider) as (kernel, _):
        with anyio.fail_after(30):
            async with await RunFollower.start(kernel, m.Prompt(session_id="s", text="wait")) as run:
                while not (tmp_path / "slow-started").exists():
                    await run.next_batch(anyio.current_time() + 0.05)
                assert await run.interrupt()
                end = await run.wait()
            assert isinstance(end, m.RunFinished) and end.interrupted
            while not (tmp_path / "slow-cancelled").exists():
                await anyio.sleep(0.02)
            history = await kernel.execute(m.GetHistory(session_id="s"))
        assert isinstance(history, m.HistoryView)
        assert [msg.outcome for msg in history.messages if msg.role == "tool"] == ["interrupted"]
        assert len(provider.requests) == 1
