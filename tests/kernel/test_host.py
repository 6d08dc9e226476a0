"""A session and a run need only their :class:`kernel.SessionHost`: driven here by a small host
of this file (no Kernel), on a real SQLite store, with a scripted model that calls a tool."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from kernel import RunSession, SessionHost, SQLiteStore, Tool, ToolScope, WorkspaceFiles
from kernel import model as m
from kernel.host import seq_key
from kernel.jobs import ActiveRun, RunJob
from kernel.observe import Observers
from kernel.run import execute_run
from kernel.session import Session
from kernel.settings import AgentSettings, Settings
from kernel.testing import ScriptedProvider, text_turn, tool_turn
from kernel.tools import ToolContext, ToolExecution, invoke

pytestmark = pytest.mark.anyio


async def _shout(arguments: dict[str, Any], context: ToolContext) -> str:
    return f"{str(arguments['word']).upper()} in {context.session_id}"


SHOUT = Tool(name="shout", description="upper-cases a word", parameters={"type": "object"}, handler=_shout)


class FakeHost:
    """Everything a session asks of its host, recorded; nothing more (mypy checks it is a SessionHost)."""

    def __init__(self, store: SQLiteStore, provider: ScriptedProvider, *, clustered: bool) -> None:
        self.settings = Settings()
        self.observers = Observers()
        self.store = store
        self.provider = provider
        self._clustered = clustered
        self.invoked: list[tuple[str, str | None, str | None]] = []

    @property
    def clustered(self) -> bool:
        return self._clustered

    def provider_for(self, agent: AgentSettings | None = None) -> ScriptedProvider:
        return self.provider

    def tools_for(self, agent: AgentSettings, session: ToolScope | None = None) -> dict[str, Tool]:
        return {SHOUT.name: SHOUT}

    def agent_model(self, agent: AgentSettings) -> str:
        return "fake-model"

    async def invoke_tool(
        self, tool: Tool, arguments: dict[str, Any], session: ToolScope | None, *, call_id: str | None = None, progress: Any = None, ask: Any = None
    ) -> ToolExecution:
        self.invoked.append((tool.name, session.id if session is not None else None, call_id))
        files = WorkspaceFiles(self.settings.tools.workspace)
        context = ToolContext(session_id=session.id if session else "", agent_id="a", workspace=files.root, files=files, call_id=call_id, progress=progress, ask=ask)
        return await invoke(tool, arguments, context, timeout_s=5)


def _host(tmp_path: Path, *, clustered: bool) -> FakeHost:
    provider = ScriptedProvider([tool_turn("shout", '{"word": "hi"}', call_id="c1"), text_turn("said ", "HI")])
    host = FakeHost(SQLiteStore(tmp_path / "host.db"), provider, clustered=clustered)
    typed: SessionHost = host  # the protocol is all a session needs
    assert typed is host
    return host


async def test_a_session_runs_a_prompt_with_a_tool_against_a_fake_host(tmp_path: Path) -> None:
    host = _host(tmp_path, clustered=True)
    await host.store.open()
    try:
        session = Session(host, "s1", AgentSettings(name="agent"), label=None, created_at=1.0)
        sub = session.hub.subscribe(None)
        async with anyio.create_task_group() as tg:
            tg.start_soon(session.actor)
            assert session.enqueue(session.new_run("r1", parts=(m.TextPart(text="say hi"),))) is False
            events: list[m.Event] = []
            with anyio.fail_after(10):
                async for event in sub:
                    events.append(event)
                    if isinstance(event, m.RUN_END_EVENTS):
                        break
            session.close()
        end = events[-1]
        assert isinstance(end, m.RunFinished) and end.text == "said HI" and end.tool_calls == 1
        result = next(e for e in events if isinstance(e, m.ToolResult))
        assert result.result == "HI in s1" and result.outcome == "ok"
        assert host.invoked == [("shout", "s1", "c1")]
        assert session.model == "fake-model", "the model comes from the host's agent_info"
        stored = await host.store.load_messages("s1", 10)
        assert [msg.role for msg in stored] == ["user", "assistant", "tool", "assistant"]
        # Clustered: how far the seqs went when the answer was stored (just before its end event).
        assert await host.store.get_value(seq_key("s1")) == str(end.seq - 1).encode()
    finally:
        await host.store.close()


async def test_a_run_alone_needs_only_its_session_and_host(tmp_path: Path) -> None:
    host = _host(tmp_path, clustered=False)
    await host.store.open()
    try:
        session = Session(host, "s2", AgentSettings(name="agent"), label=None, created_at=1.0, ephemeral=True)
        typed: RunSession = session
        sub = session.hub.subscribe(None)
        await execute_run(typed, ActiveRun(RunJob("run-1", "req-1", parts=(m.TextPart(text="say hi"),))))
        session.close()  # ends the subscription after what the run published
        with anyio.fail_after(5):
            events = [event async for event in sub]
        assert [e.seq for e in events] == sorted({e.seq for e in events}), "in order (adjacent deltas may merge)"
        assert isinstance(events[0], m.RunStarted) and events[0].request_id == "req-1"
        assert isinstance(events[-1], m.RunFinished) and events[-1].text == "said HI"
        assert [msg.role for msg in session.context] == ["user", "assistant", "tool", "assistant"]
        assert host.provider.requests[1].messages[-1].role == "tool", "the tool's answer went back to the model"
        # Ephemeral and not clustered: nothing reached the store.
        assert await host.store.load_messages("s2", 10) == [] and await host.store.get_value(seq_key("s2")) is None
    finally:
        await host.store.close()
