"""Remote A2A agents as tools: against a2a-sdk's own reference server (in a thread), and
against a second gateway's A2A transport; streamed progress, questions both ways, cancel."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from gateway.app import installed_tools, load_registry
from kernel import A2AAgentSettings, Kernel, RunFollower
from kernel import model as m
from kernel.settings import AgentSettings, Settings
from kernel.testing import ScriptedProvider, running_kernel, text_turn, tool_turn
from plugins.a2a.source import A2AAgents
from tests.transports.a2a._helpers import a2a_server
from tests.transports.a2a.test_server import GatedProvider
from tests.transports.http._helpers import DANGER_TOOL

from ._reference import reference_server

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def agents(*configured: A2AAgentSettings) -> AsyncIterator[A2AAgents]:
    remote = A2AAgents(configured)
    async with anyio.create_task_group() as tg:
        await tg.start(remote.run)
        try:
            yield remote
        finally:
            remote.close()


def ask(name: str, message: str, **extra: str) -> list[Any]:
    return [tool_turn(f"{name}__ask", json.dumps({"message": message, **extra})), text_turn("relayed")]


async def run_to_end(kernel: Kernel, text: str, *, answers: list[tuple[bool, str | None]] | None = None) -> list[m.Event]:
    """Prompt and read the run to its end, answering its questions with ``answers`` in turn."""
    pending = list(answers or [])
    events: list[m.Event] = []
    async with await RunFollower.start(kernel, m.Prompt(text=text)) as run:
        with anyio.fail_after(30):
            while run.end is None:
                batch = await run.next_batch()
                events += batch
                if run.question is not None and any(isinstance(e, m.ToolApprovalRequested) for e in batch):
                    await run.answer(*pending.pop(0))
    return events


def of(events: list[m.Event], kind: type[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


async def test_the_reference_servers_answer_streams_as_tool_progress_and_is_the_result() -> None:
    with reference_server() as (url, _):
        async with agents(A2AAgentSettings(name="ref", url=url, require_approval=False)) as remote:
            [source] = remote.sources
            assert source.card_name == "Reference echo" and source.failure is None
            async with running_kernel(ScriptedProvider(ask("ref", "hello big world")), tool_sources=remote.sources) as kernel:
                events = await run_to_end(kernel, "ask it")
    assert [p.text for p in of(events, m.ToolProgress)] == ["hello ", "big ", "world "]
    [result] = of(events, m.ToolResult)
    assert result.outcome == "ok" and result.result.startswith("hello big world ") and "(context_id: " in result.result
    assert of(events, m.RunFinished)[0].text == "relayed"


async def test_a_remote_input_required_is_the_local_question_and_the_reply_goes_back() -> None:
    with reference_server() as (url, _):
        async with agents(A2AAgentSettings(name="ref", url=url, require_approval=False)) as remote:
            async with running_kernel(ScriptedProvider(ask("ref", "ask me")), tool_sources=remote.sources) as kernel:
                events = await run_to_end(kernel, "go", answers=[(True, "blue")])
    [question] = of(events, m.ToolApprovalRequested)
    assert question.name == "ref__ask" and "Which colour?" in question.description
    [result] = of(events, m.ToolResult)
    assert result.outcome == "ok" and result.result.startswith("you said blue")


async def test_an_interrupted_local_run_cancels_the_remote_task() -> None:
    with reference_server() as (url, executor):
        async with agents(A2AAgentSettings(name="ref", url=url, require_approval=False)) as remote:
            async with running_kernel(ScriptedProvider(ask("ref", "wait for it")), tool_sources=remote.sources) as kernel:
                async with await RunFollower.start(kernel, m.Prompt(text="go")) as run:
                    with anyio.fail_after(30):
                        while not any(isinstance(e, m.ToolProgress) for e in await run.next_batch()):
                            pass
                        await run.interrupt()
                        end = await run.wait()
    assert isinstance(end, m.RunFinished) and end.interrupted
    assert len(executor.canceled) == 1 and executor.canceled[0]


async def test_a_gateway_asks_another_gateway_and_the_remote_approval_is_asked_here() -> None:
    remote_settings = Settings(agents=[AgentSettings(name="Remote", tools=["danger"])])
    remote_provider = ScriptedProvider([tool_turn("danger"), text_turn("the remote did it")])
    async with running_kernel(remote_provider, settings=remote_settings, tools=[DANGER_TOOL]) as other, a2a_server(other) as url:
        async with agents(A2AAgentSettings(name="peer", url=url)) as remote:
            async with running_kernel(ScriptedProvider(ask("peer", "please do it")), tool_sources=remote.sources) as kernel:
                events = await run_to_end(kernel, "delegate", answers=[(True, None), (True, None)])
            sessions = await other.execute(m.ListSessions())
    first, second = of(events, m.ToolApprovalRequested)
    assert first.name == "peer__ask" and second.name == "peer__ask"  # local approval, then the remote's question
    assert "danger" in second.description
    [result] = of(events, m.ToolResult)
    assert result.outcome == "ok" and result.result.startswith("the remote did it")
    assert "(context_id: " in result.result and isinstance(sessions, m.SessionList) and len(sessions.sessions) == 1
    assert remote_provider.requests[1].messages[-1].content == "done"  # the remote tool ran


async def test_a_remote_gateways_cancel_follows_a_local_interrupt() -> None:
    provider = GatedProvider()
    async with running_kernel(provider) as other, a2a_server(other) as url:
        async with agents(A2AAgentSettings(name="peer", url=url, require_approval=False)) as remote:
            async with running_kernel(ScriptedProvider(ask("peer", "go on")), tool_sources=remote.sources) as kernel:
                async with await RunFollower.start(kernel, m.Prompt(text="go")) as run:
                    with anyio.fail_after(30):
                        while not any(isinstance(e, m.ToolProgress) for e in await run.next_batch()):
                            pass
                        await run.interrupt()
                        await run.wait()
        listed = await other.execute(m.ListSessions())
        assert isinstance(listed, m.SessionList)
        history = await other.execute(m.GetSession(session_id=listed.sessions[0].session_id))
    assert isinstance(history, m.SessionOpened) and history.session.state == "idle" and history.session.run_id is None


async def test_an_unreadable_card_is_reported_and_the_tool_fails_clearly_until_it_can_be_read() -> None:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    await listener.aclose()  # nothing listens there now
    async with agents(A2AAgentSettings(name="gone", url=f"http://127.0.0.1:{port}", require_approval=False, timeout_s=5)) as remote:
        [source] = remote.sources
        assert source.failure is not None and "could not be read" in source.failure
        async with running_kernel(ScriptedProvider(ask("gone", "hi")), tool_sources=remote.sources) as kernel:
            events = await run_to_end(kernel, "try")
    [result] = of(events, m.ToolResult)
    assert result.outcome == "error" and "card could not be read" in result.result


async def test_gateway_tools_lists_the_remote_agents() -> None:
    with reference_server() as (url, _):
        settings = Settings()
        settings.tools.a2a = [A2AAgentSettings(name="ref", url=url)]
        found, failures = await installed_tools(settings, load_registry(use_entry_points=False))
    listed = {tool.name: (origin, tool) for origin, tool in found}
    origin, tool = listed["ref__ask"]
    assert origin == "a2a ref" and tool.requires_approval and "Reference echo" in tool.description and failures == {}
