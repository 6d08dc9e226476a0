"""Kernel queries and session management commands."""

from __future__ import annotations

import pytest

from kernel import KernelError, SlashCommand
from kernel import model as m
from kernel.settings import Settings
from kernel.testing import running_kernel
from plugins.commands.builtin import BUILTIN_COMMANDS
from plugins.tools.builtin import BUILTIN_TOOLS

pytestmark = pytest.mark.anyio


async def test_lists_and_status() -> None:
    async with running_kernel(tools=BUILTIN_TOOLS, commands=BUILTIN_COMMANDS) as kernel:
        agents = await kernel.execute(m.ListAgents())
        assert isinstance(agents, m.AgentList) and agents.agents[0].name == "General Assistant"
        assert agents.agents[0].id == kernel.settings.agents[0].agent_id()
        tools = await kernel.execute(m.ListTools())
        assert {t.name for t in tools.tools} >= {"current_time", "read_file"}  # type: ignore[union-attr]
        commands = await kernel.execute(m.ListCommands())
        assert "help" in {c.name for c in commands.commands}  # type: ignore[union-attr]
        status = await kernel.execute(m.GetStatus())
        assert isinstance(status, m.StatusReport) and status.provider == "scripted" and status.agents == 1


async def test_settings_are_masked_validated_and_persisted(tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings = Settings()
    settings.provider.openai.api_key = "sk-secret-abcdef123456"
    db = tmp_path / "s.db"
    async with running_kernel(settings=settings, db_path=db) as kernel:
        view = await kernel.execute(m.GetSettings())
        assert isinstance(view, m.SettingsView)
        assert view.settings["provider"]["openai"]["api_key"] == "sk-…3456"
        assert "secret" not in str(view.settings)
        with pytest.raises(KernelError, match="memory_query_max must be >= 1"):
            await kernel.execute(m.UpdateSettings(changes={"tools": {"limits": {"memory_query_max": 0}}}))
        with pytest.raises(KernelError, match="invalid settings"):
            await kernel.execute(m.UpdateSettings(changes={"session": {"inbox_size": "many"}}))
        await kernel.execute(m.UpdateSettings(changes={"tools": {"limits": {"memory_query_max": 7}}}))
        assert kernel.settings.tools.limits["memory_query_max"] == 7
        assert kernel.settings.tools.limits["task_query_max"] == 4  # partial update keeps the rest
    async with running_kernel(settings=Settings(), db_path=db) as kernel:
        assert kernel.settings.tools.limits["memory_query_max"] == 7


async def test_history_save_append_and_clear() -> None:
    async with running_kernel() as kernel:
        msgs = (m.Message(role="user", content="a"), m.Message(role="assistant", content="b"))
        await kernel.execute(m.SaveHistory(session_id="s", messages=msgs))
        await kernel.execute(m.SaveHistory(session_id="s", messages=msgs[:1]))
        history = await kernel.execute(m.GetHistory(session_id="s"))
        assert [x.content for x in history.messages] == ["a", "b", "a"]  # type: ignore[union-attr]
        await kernel.execute(m.SaveHistory(session_id="s", messages=()))
        assert (await kernel.execute(m.GetHistory(session_id="s"))).messages == ()  # type: ignore[union-attr]
        await kernel.execute(m.SaveHistory(session_id="s", messages=msgs))
        await kernel.execute(m.ClearHistory(session_id="s"))
        assert (await kernel.execute(m.GetHistory(session_id="s"))).messages == ()  # type: ignore[union-attr]


async def test_slash_commands_run_and_unknown_is_not_found() -> None:
    async def echo(ctx, args):  # type: ignore[no-untyped-def]
        return f"{ctx.session_id}:{args}"

    commands = (*BUILTIN_COMMANDS, SlashCommand(name="say", description="", handler=echo))
    async with running_kernel(tools=BUILTIN_TOOLS, commands=commands) as kernel:
        out = await kernel.execute(m.RunCommand(session_id="s", name="/say", args="hi"))
        assert isinstance(out, m.CommandOutput) and out.output == "s:hi"
        helped = await kernel.execute(m.RunCommand(session_id="s", name="help"))
        assert "/say" in helped.output  # type: ignore[union-attr]
        model = await kernel.execute(m.RunCommand(session_id="s", name="model", args="gpt-x"))
        assert "gpt-x" in model.output  # type: ignore[union-attr]
        assert kernel.sessions["s"].model_override == "gpt-x"
        config = await kernel.execute(m.RunCommand(session_id="s", name="config"))
        assert "tools" in config.output  # type: ignore[union-attr]
        with pytest.raises(KernelError) as info:
            await kernel.execute(m.RunCommand(session_id="s", name="nope"))
        assert info.value.code == "not_found"


async def test_sessions_open_list_delete_and_unknown() -> None:
    async with running_kernel() as kernel:
        opened = await kernel.execute(m.OpenSession(label="work"))
        assert isinstance(opened, m.SessionOpened) and opened.session.label == "work"
        sid = opened.session.session_id
        listed = await kernel.execute(m.ListSessions(agent_id="General Assistant"))
        assert [s.session_id for s in listed.sessions] == [sid]  # type: ignore[union-attr]
        await kernel.execute(m.DeleteSession(session_id=sid))
        for command in (m.DeleteSession(session_id=sid), m.Interrupt(session_id=sid), m.Regenerate(session_id=sid)):
            with pytest.raises(KernelError) as info:
                await kernel.execute(command)
            assert info.value.code == "not_found"
        with pytest.raises(KernelError) as info:
            await kernel.execute(m.OpenSession(agent_id="no such agent"))
        assert info.value.code == "not_found"


async def test_kernel_exit_interrupts_running_work() -> None:
    from kernel.testing import ScriptedProvider, text_turn

    from .helpers import run_events

    provider = ScriptedProvider([text_turn(*["x"] * 100)], delay_s=0.05)
    async with running_kernel(provider) as kernel:
        sub = (await kernel.session("s")).hub.subscribe()
        await kernel.execute(m.Prompt(session_id="s", text="long"))
    events = await run_events(sub, timeout_s=1)
    assert isinstance(events[-1], m.RunFinished) and events[-1].interrupted


async def test_per_session_overrides_and_unload() -> None:
    from kernel.testing import ScriptedProvider, text_turn, tool_turn
    from plugins.tools.builtin import BUILTIN_TOOLS

    from .helpers import next_of, run_events

    provider = ScriptedProvider([tool_turn("write_file", '{"path": "x", "content": "y"}'), text_turn("z")])
    async with running_kernel(provider, tools=BUILTIN_TOOLS) as kernel:
        session = await kernel.session("s")
        session.max_turns = 1
        session.approval_timeout_s = 0.05
        sub = session.hub.subscribe()
        await kernel.execute(m.Prompt(session_id="s", text="go"))
        asked = await next_of(sub, m.ToolApprovalRequested)
        assert asked.timeout_s == 0.05
        reached = await next_of(sub, m.TurnLimitReached)
        assert reached.max_turns == 1
        await kernel.execute(m.ResolveTurnLimit(session_id="s", confirmed=False))
        events = await run_events(sub)
        assert isinstance(events[-1], m.RunFinished) and events[-1].stop_reason == "turn_limit"
        assert await kernel.unload_session("s") and "s" not in kernel.sessions
        assert not await kernel.unload_session("s")
        history = await kernel.execute(m.GetHistory(session_id="s"))
        assert next(x.role for x in history.messages) == "user"  # reloaded from the store
