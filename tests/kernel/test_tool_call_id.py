"""A tool learns the id of the call it runs for (``ToolContext.call_id``): ACP's terminal
shows a command inside that call; a client's direct ``execute_tool`` has none."""

from __future__ import annotations

from typing import Any

import pytest

from kernel import Tool, ToolContext
from kernel import model as m
from kernel.testing import ScriptedProvider, running_kernel, text_turn, tool_turn

pytestmark = pytest.mark.anyio


async def test_the_call_id_reaches_the_tool() -> None:
    seen: list[str | None] = []

    async def record(args: dict[str, Any], ctx: ToolContext) -> str:
        seen.append(ctx.call_id)
        return "ok"

    tool = Tool(name="record", description="records its call id", parameters={"type": "object"}, handler=record)
    provider = ScriptedProvider([tool_turn("record", "{}", call_id="call_42"), text_turn("done")])
    async with running_kernel(provider, tools=[tool]) as kernel:
        await kernel.execute(m.Prompt(session_id="s", text="go"))
        assert await kernel.wait_idle(10)
        direct = await kernel.execute(m.ExecuteTool(session_id="s", name="record"))
    assert isinstance(direct, m.ToolOutput) and direct.result == "ok"
    assert seen == ["call_42", None]
