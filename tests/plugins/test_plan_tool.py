"""The built-in ``update_plan`` tool: ACP's plan entries as arguments, checked, summarised."""

from __future__ import annotations

import pytest

from kernel import model as m
from kernel.testing import ScriptedProvider, running_kernel, text_turn, tool_turn
from plugins.manager import load_plugins
from plugins.tools.builtin import BUILTIN_TOOLS
from plugins.tools.plan import MAX_ENTRIES, UPDATE_PLAN

pytestmark = pytest.mark.anyio


def test_registered_with_the_builtins_and_shaped_like_acp_plan_entries() -> None:
    registry = load_plugins(use_entry_points=False)
    assert registry.tools["update_plan"] is UPDATE_PLAN and UPDATE_PLAN in BUILTIN_TOOLS
    entry = UPDATE_PLAN.parameters["properties"]["entries"]["items"]
    assert entry["required"] == ["content", "priority", "status"]
    assert entry["properties"]["priority"]["enum"] == ["high", "medium", "low"]
    assert entry["properties"]["status"]["enum"] == ["pending", "in_progress", "completed"]
    assert not UPDATE_PLAN.requires_approval and UPDATE_PLAN.access == "query"


async def run(kernel: object, **arguments: object) -> m.ToolOutput:
    reply = await kernel.execute(m.ExecuteTool(session_id="s", name="update_plan", arguments=arguments))  # type: ignore[attr-defined]
    assert isinstance(reply, m.ToolOutput)
    return reply


async def test_a_plan_is_summarised_and_a_bad_one_explained() -> None:
    entries = [
        {"content": "read the failing test", "priority": "high", "status": "completed"},
        {"content": "fix the parser", "priority": "high", "status": "in_progress"},
        {"content": "update the docs", "priority": "low", "status": "pending"},
    ]
    async with running_kernel(tools=BUILTIN_TOOLS) as kernel:
        done = await run(kernel, entries=entries)
        assert not done.is_error and done.result == "plan updated: 3 steps (1 completed, 1 in progress, 1 pending)"
        assert (await run(kernel, entries=[])).result == "plan cleared"
        for bad, words in (
            ({"entries": [{"content": "x", "priority": "urgent", "status": "pending"}]}, "priority"),
            ({"entries": [{"content": "  ", "priority": "low", "status": "pending"}]}, "entry 0 has no content"),
            ({"entries": [{"content": "x"}] * (MAX_ENTRIES + 1)}, f"at most {MAX_ENTRIES}"),
            ({"steps": []}, "invalid plan"),
        ):
            failed = await run(kernel, **bad)
            assert failed.is_error and words in failed.result, failed.result


async def test_the_model_calls_it_like_any_tool() -> None:
    plan = '{"entries": [{"content": "one step", "priority": "medium", "status": "in_progress"}]}'
    provider = ScriptedProvider([tool_turn("update_plan", plan), text_turn("working on it")])
    async with running_kernel(provider, tools=BUILTIN_TOOLS) as kernel:
        accepted = await kernel.execute(m.Prompt(session_id="s", text="plan it"))
        assert isinstance(accepted, m.Accepted)
        assert await kernel.wait_idle(10)
        history = await kernel.execute(m.GetHistory(session_id="s"))
    assert isinstance(history, m.HistoryView)
    [tool] = [msg for msg in history.messages if msg.role == "tool"]
    assert tool.outcome == "ok" and tool.content == "plan updated: 1 step (1 in progress)"
