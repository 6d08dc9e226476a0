"""The tool called by a (scripted) model, directly, and the /roll command, on both backends."""

import re

import anyio
import pytest

from gateway_dice import ROLL, ROLL_DICE
from kernel import KernelError
from kernel import model as m
from kernel.testing import ScriptedProvider, running_kernel, text_turn, tool_turn

pytestmark = pytest.mark.anyio

ROLLED = re.compile(r"3d2: ([12]), ([12]), ([12]) \(total (\d)\)")


async def test_the_model_calls_the_tool_and_reads_the_result() -> None:
    model = ScriptedProvider([tool_turn("roll_dice", '{"count": 3, "sides": 2}'), text_turn("rolled")])
    async with running_kernel(model, tools=[ROLL_DICE]) as kernel:
        session = await kernel.session()
        async with await kernel.subscribe(session.id) as events:
            await kernel.execute(m.Prompt(session_id=session.id, text="roll 3d2"))
            results = []
            with anyio.fail_after(5):
                async for event in events:
                    if isinstance(event, m.ToolResult):
                        results.append(event)
                    if isinstance(event, m.RunFinished):
                        break
    [result] = results
    assert not result.is_error
    rolled = ROLLED.fullmatch(result.result)
    assert rolled and sum(int(rolled[i]) for i in (1, 2, 3)) == int(rolled[4])
    assert model.requests[1].messages[-1].content == result.result  # what the model read back


async def test_bad_arguments_and_the_roll_command() -> None:
    async with running_kernel(tools=[ROLL_DICE], commands=[ROLL]) as kernel:
        bad = await kernel.execute(m.ExecuteTool(name="roll_dice", arguments={"count": 0}))
        assert bad.is_error and bad.result == "tool error: count must be an integer from 1 to 100, got 0"
        output = await kernel.execute(m.RunCommand(name="roll", args="3d2"))
        assert ROLLED.fullmatch(output.output)
        with pytest.raises(KernelError, match="usage: /roll NdS"):
            await kernel.execute(m.RunCommand(name="roll", args="lots"))
