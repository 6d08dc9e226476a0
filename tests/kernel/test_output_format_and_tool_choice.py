"""Structured output and ``tool_choice`` through the kernel: what each model call of a run
receives (the format on every call, the choice on the first only), the refusals, and the
echo model honouring both offline."""

from __future__ import annotations

import json

import jsonschema
import msgspec
import pytest

from kernel import Tool
from kernel import model as m
from kernel.provider import ProviderRequest
from kernel.testing import ScriptedProvider, running_kernel, text_turn, tool_turn
from plugins.providers.echo import EchoProvider

from .helpers import prompt, run_events

pytestmark = pytest.mark.anyio

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 18}, "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2}},
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}
FORMAT = m.OutputFormat(type="json_schema", name="person", schema=PERSON, strict=True)


async def _clock(args: dict, ctx: object) -> str:
    return "12:00"


CLOCK = Tool(name="clock", description="time", parameters={"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}, handler=_clock)
LOOKUP = m.ClientTool(name="lookup", description="client side", parameters={"type": "object", "properties": {"q": {"type": "string", "minLength": 2}}, "required": ["q"]})


async def test_the_format_goes_with_every_call_and_the_choice_with_the_first_only() -> None:
    provider = ScriptedProvider([tool_turn("clock", '{"tz": "UTC"}'), text_turn('{"name": "a"}')])
    options = m.PromptOptions(output_format=FORMAT, tool_choice=m.ToolChoice(mode="tool", name="clock"), parallel_tool_calls=False)
    async with running_kernel(provider, tools=[CLOCK]) as kernel:
        sub = (await kernel.session("s")).hub.subscribe()
        await prompt(kernel, "s", "who?", options=options)
        events = await run_events(sub)
        assert isinstance(events[-1], m.RunFinished) and events[-1].stop_reason == "end_turn"
    first, second = provider.requests
    assert first.output_format == FORMAT and second.output_format == FORMAT
    assert first.tool_choice == m.ToolChoice(mode="tool", name="clock")
    assert second.tool_choice is None  # after the forced call's result the model answers freely
    assert first.parallel_tool_calls is False and second.parallel_tool_calls is False


async def test_none_offers_no_tool_and_required_needs_one() -> None:
    provider = ScriptedProvider([text_turn("plain")])
    async with running_kernel(provider, tools=[CLOCK]) as kernel:
        sub = (await kernel.session("s")).hub.subscribe()
        await prompt(kernel, "s", "q", options=m.PromptOptions(tool_choice=m.ToolChoice(mode="none"), client_tools=(LOOKUP,)))
        await run_events(sub)
        assert provider.requests[0].tools == () and provider.requests[0].tool_choice is None
        await prompt(kernel, "s", "q", options=m.PromptOptions(tool_choice=m.ToolChoice(mode="required"), use_tools=False))
        events = await run_events(sub)
    failed = events[-1]
    assert isinstance(failed, m.RunFailed) and failed.error.code == "invalid_request"
    assert "needs tools" in failed.error.message
    assert len(provider.requests) == 1  # the refused run never reached the model


async def test_forcing_a_tool_that_does_not_exist_is_invalid_and_the_session_lives_on() -> None:
    provider = ScriptedProvider([text_turn("fine")])
    async with running_kernel(provider, tools=[CLOCK]) as kernel:
        sub = (await kernel.session("s")).hub.subscribe()
        await prompt(kernel, "s", "q", options=m.PromptOptions(tool_choice=m.ToolChoice(mode="tool", name="nope")))
        events = await run_events(sub)
        failed = events[-1]
        assert isinstance(failed, m.RunFailed) and failed.error.code == "invalid_request" and "'nope'" in failed.error.message
        assert provider.requests == []
        assert not any(isinstance(e, m.TurnStarted) for e in events)  # refused before a turn counted
        await prompt(kernel, "s", "again")
        events = await run_events(sub)
        assert isinstance(events[-1], m.RunFinished) and events[-1].text == "fine"


async def test_echo_calls_a_forced_client_tool_with_a_valid_instance_and_the_call_goes_back() -> None:
    async with running_kernel(EchoProvider(), tools=[CLOCK]) as kernel:
        sub = (await kernel.session("s")).hub.subscribe()
        options = m.PromptOptions(tool_choice=m.ToolChoice(mode="tool", name="lookup"), client_tools=(LOOKUP,))
        await prompt(kernel, "s", "find it", options=options)
        events = await run_events(sub)
    finished = events[-1]
    assert isinstance(finished, m.RunFinished) and finished.stop_reason == "tool_calls"
    (call,) = finished.pending_tool_calls
    assert call.name == "lookup"
    jsonschema.validate(json.loads(call.arguments), LOOKUP.parameters)


async def test_echo_runs_a_required_agent_tool_then_answers_in_the_format() -> None:
    async with running_kernel(EchoProvider(), tools=[CLOCK]) as kernel:
        sub = (await kernel.session("s")).hub.subscribe()
        options = m.PromptOptions(tool_choice=m.ToolChoice(mode="required"), output_format=FORMAT)
        await prompt(kernel, "s", "who?", options=options)
        events = await run_events(sub)
    results = [e for e in events if isinstance(e, m.ToolResult)]
    assert [r.name for r in results] == ["clock"] and results[0].outcome == "ok"
    finished = events[-1]
    assert isinstance(finished, m.RunFinished) and finished.stop_reason == "end_turn"
    answer = json.loads(finished.text)
    jsonschema.validate(answer, PERSON)
    assert answer == {"name": "", "age": 18, "tags": ["", ""]}


async def test_required_with_client_tools_offers_only_those_on_the_first_call() -> None:
    """The client cannot see the agent's tools: "required" must end in a call it gets back."""
    provider = ScriptedProvider([tool_turn("lookup", '{"q": "ab"}', call_id="cli"), text_turn("done")])
    async with running_kernel(provider, tools=[CLOCK]) as kernel:
        sub = (await kernel.session("s")).hub.subscribe()
        options = m.PromptOptions(tool_choice=m.ToolChoice(mode="required"), client_tools=(LOOKUP,))
        await prompt(kernel, "s", "q", options=options)
        events = await run_events(sub)
        assert [t.name for t in provider.requests[0].tools] == ["lookup"]
        assert provider.requests[0].tool_choice == m.ToolChoice(mode="required")
        finished = events[-1]
        assert isinstance(finished, m.RunFinished) and finished.stop_reason == "tool_calls"
        await kernel.execute(m.SaveHistory(session_id="s", messages=(m.Message(role="tool", tool_call_id="cli", name="lookup", content="42"),)))
        await kernel.execute(m.Continue(session_id="s", request_id="c", options=m.PromptOptions(client_tools=(LOOKUP,))))
        await run_events(sub)
    assert {t.name for t in provider.requests[1].tools} == {"clock", "lookup"}  # the next run is free again


async def test_echo_json_object_answers_the_prompt_as_an_object() -> None:
    request = ProviderRequest(model="echo", messages=(m.Message(role="user", content="hi there"),), output_format=m.OutputFormat(type="json_object"))
    text = "".join([c.text async for c in EchoProvider().stream(request) if hasattr(c, "text")])
    assert json.loads(text) == {"echo": "hi there"}


async def test_echo_refuses_a_schema_it_cannot_meet_as_invalid_request() -> None:
    impossible = m.OutputFormat(type="json_schema", schema={"type": "integer", "minimum": 0.2, "maximum": 0.8})
    async with running_kernel(EchoProvider()) as kernel:
        sub = (await kernel.session("s")).hub.subscribe()
        await prompt(kernel, "s", "q", options=m.PromptOptions(output_format=impossible))
        events = await run_events(sub)
    failed = events[-1]
    assert isinstance(failed, m.RunFailed) and failed.error.code == "invalid_request"


def test_the_options_round_trip_as_native_json() -> None:
    """The native dialects put PromptOptions on the wire as they are."""
    options = m.PromptOptions(output_format=FORMAT, tool_choice=m.ToolChoice(mode="tool", name="clock"), parallel_tool_calls=False)
    raw = msgspec.json.encode(options)
    assert msgspec.json.decode(raw, type=m.PromptOptions) == options
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(b'{"tool_choice": {"mode": "always"}}', type=m.PromptOptions)
