"""The Responses API with what coding agents and the AI SDK send, through the official
``openai`` SDK against a real server on 127.0.0.1: namespace and free-form tools, hosted
tools, a ``store: false`` conversation replayed with sealed reasoning, ``item_reference``
round trips, and honest endings (an interrupt or a drain mid-stream, a failing upstream)."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import openai
import pytest

from kernel import Chunk, FinishChunk, Kernel, ProviderRequest, ReasoningChunk, TextChunk, UsageChunk
from kernel import model as m
from kernel.settings import AgentSettings, Settings
from kernel.testing import ScriptedProvider, failing_turn, running_kernel, text_turn, tool_turn

from ._helpers import http_server

pytestmark = pytest.mark.anyio

AGENT = "Helper"
NAMESPACE = {
    "type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.",
    "tools": [
        {"type": "function", "name": "spawn_agent", "description": "Start one", "parameters": {"type": "object", "properties": {"message": {"type": "string"}}}},
        {"type": "function", "name": "wait_agent", "description": "Wait", "parameters": {"type": "object", "properties": {}}},
    ],
}
APPLY_PATCH = {"type": "custom", "name": "apply_patch", "description": "Edit files.", "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}}
EXEC = {"type": "function", "name": "exec_command", "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}
HOSTED = [{"type": "web_search", "external_web_access": False}, {"type": "file_search", "vector_store_ids": ["vs_1"]}, {"type": "local_shell"}]


@asynccontextmanager
async def gateway(provider: ScriptedProvider) -> AsyncIterator[tuple[Kernel, openai.AsyncOpenAI]]:
    settings = Settings(agents=[AgentSettings(name=AGENT, system_prompt="agent prompt")])
    async with running_kernel(provider, settings=settings) as kernel, http_server(kernel) as url:
        sdk = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused-on-loopback", max_retries=0, timeout=20.0)
        try:
            yield kernel, sdk
        finally:
            await sdk.close()


def reasoning_turn(thought: str, *rest: Any) -> list[Any]:
    return [ReasoningChunk(thought), *rest]


async def test_namespace_and_custom_tools_round_trip_without_storing(caplog: pytest.LogCaptureFixture) -> None:
    patch = "*** Begin Patch\n*** End Patch"
    provider = ScriptedProvider([
        reasoning_turn("Spawn first.", *tool_turn("multi_agent_v1__spawn_agent", '{"message": "scan"}', call_id="call_s")),
        tool_turn("apply_patch", json.dumps({"input": patch}), call_id="call_p"),
        text_turn("All done."),
    ])
    tools: list[Any] = [EXEC, NAMESPACE, APPLY_PATCH, *HOSTED]
    common: dict[str, Any] = {"model": AGENT, "tools": tools, "store": False, "include": ["reasoning.encrypted_content"], "reasoning": {"summary": "auto"}}
    with caplog.at_level(logging.INFO, logger="gateway.http"):
        async with gateway(provider) as (_, sdk):
            conversation: list[Any] = [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be careful."}]},
                                       {"role": "user", "content": "Fix the bug."}]
            first = await sdk.responses.create(input=conversation, **common)
            reasoning, call = first.output
            assert reasoning.type == "reasoning" and reasoning.encrypted_content and reasoning.summary[0].text == "Spawn first."
            assert (call.type, call.name, call.namespace, call.call_id) == ("function_call", "spawn_agent", "multi_agent_v1", "call_s")  # type: ignore[union-attr]
            offered = {spec.name for spec in provider.requests[0].tools}
            assert {"exec_command", "multi_agent_v1__spawn_agent", "multi_agent_v1__wait_agent", "apply_patch"} <= offered
            assert not offered & {"web_search", "file_search", "local_shell"}
            assert provider.requests[0].messages[0].role == "system" and "Be careful." in provider.requests[0].messages[0].content
            # Codex's next turn: everything again, with the call's output.
            conversation += [item.model_dump(exclude_none=True) for item in first.output]
            conversation.append({"type": "function_call_output", "call_id": "call_s", "output": "agent a1 started"})
            async with sdk.responses.stream(input=conversation, **common) as stream:
                kinds = [event.type async for event in stream]
                second = await stream.get_final_response()
            assert "response.custom_tool_call_input.done" in kinds
            (custom,) = second.output
            assert (custom.type, custom.name, custom.input, custom.call_id) == ("custom_tool_call", "apply_patch", patch, "call_p")  # type: ignore[union-attr]
            sent = provider.requests[1].messages
            assert [(msg.role, msg.name) for msg in sent if msg.role == "tool"] == [("tool", "multi_agent_v1__spawn_agent")]
            assert sent[-2].tool_calls[0].name == "multi_agent_v1__spawn_agent" and sent[-1].content == "agent a1 started"
            conversation += [item.model_dump(exclude_none=True) for item in second.output]
            conversation.append({"type": "custom_tool_call_output", "call_id": "call_p", "output": "Done!"})
            # A reasoning item sealed by someone else (OpenAI's opaque blob) is ignored, not refused.
            conversation.insert(2, {"type": "reasoning", "summary": [], "encrypted_content": "gAAAAABopaque"})
            third = await sdk.responses.create(input=conversation, **common)
            assert third.output_text == "All done." and third.status == "completed"
            sent = provider.requests[2].messages
            calls = [c.name for msg in sent for c in msg.tool_calls]
            assert calls == ["multi_agent_v1__spawn_agent", "apply_patch"]
            assert json.loads(sent[-2].tool_calls[0].arguments) == {"input": patch} and sent[-1].content == "Done!"
            assert all("Spawn first." not in msg.content for msg in sent)  # reasoning is not replayed as text
    hosted_logs = [r.getMessage() for r in caplog.records if "not offered to the model" in r.getMessage()]
    assert len(hosted_logs) == 3 and any("'web_search'" in line for line in hosted_logs)  # once per type, over three requests


async def test_item_references_continue_from_stored_items() -> None:
    provider = ScriptedProvider([
        reasoning_turn("Look it up.", *tool_turn("exec_command", '{"cmd": "date"}', call_id="call_d", text="Checking.")),
        text_turn("It is Tuesday."),
        text_turn("You asked about the day."),
    ])
    async with gateway(provider) as (_, sdk):
        first = await sdk.responses.create(model=AGENT, input="What day is it?", tools=[EXEC])
        ids = [item.id for item in first.output]
        assert [item.type for item in first.output] == ["reasoning", "message", "function_call"]
        # The AI SDK's default (store: true): the earlier output by reference, then the result.
        second = await sdk.responses.create(model=AGENT, tools=[EXEC], input=[
            {"role": "user", "content": "What day is it?"}, *({"type": "item_reference", "id": i} for i in ids),
            {"type": "function_call_output", "call_id": "call_d", "output": "Tue"},
        ])
        assert second.output_text == "It is Tuesday."
        sent = provider.requests[1].messages
        assert [msg.role for msg in sent] == ["system", "user", "assistant", "tool"]
        assert sent[2].content == "Checking." and sent[2].tool_calls[0].id == "call_d" and sent[3].name == "exec_command"
        third = await sdk.responses.create(model=AGENT, input=[
            {"role": "user", "content": "What day is it?"}, {"type": "item_reference", "id": second.output[0].id}, {"role": "user", "content": "What did I ask?"},
        ])
        assert third.output_text == "You asked about the day."
        assert [(msg.role, msg.content) for msg in provider.requests[2].messages][-2:] == [("assistant", "It is Tuesday."), ("user", "What did I ask?")]
        # Unknown, and forgotten (the response deleted): 400 naming the reference.
        for missing in ("msg_nope", ids[1]):
            if missing == ids[1]:
                await sdk.responses.delete(first.id)
            with pytest.raises(openai.BadRequestError) as refused:
                await sdk.responses.create(model=AGENT, input=[{"role": "user", "content": "a"}, {"type": "item_reference", "id": missing}, {"role": "user", "content": "b"}])
            assert refused.value.param == "input[1].id" and missing in refused.value.message
        assert len(provider.requests) == 3


async def _running_session(kernel: Kernel) -> str:
    """The session of the one run in flight."""
    listed = await kernel.execute(m.ListSessions())
    assert isinstance(listed, m.SessionList)
    running = [s.session_id for s in listed.sessions if s.run_id is not None]
    assert len(running) == 1
    return running[0]


async def interrupt(kernel: Kernel) -> None:
    await kernel.execute(m.Interrupt(session_id=await _running_session(kernel)))


async def drain(kernel: Kernel) -> None:
    kernel.interrupt_all("drain")


def _why(cause: m.InterruptCause) -> str:
    error = m.run_end_error(m.RunFinished(session_id="s", run_id="r", text="", interrupted=True, interrupt_cause=cause))
    assert error is not None
    return error.message


@pytest.mark.parametrize(("stop", "cause"), [(interrupt, "client"), (drain, "drain")])
async def test_an_interrupt_or_a_drain_mid_stream_ends_failed_never_completed(stop: Any, cause: m.InterruptCause) -> None:
    provider = ScriptedProvider([text_turn(*["word "] * 300)], delay_s=0.01)
    async with gateway(provider) as (kernel, sdk):
        events: list[Any] = []
        stream = await sdk.responses.create(model=AGENT, input="long", stream=True)
        async for event in stream:
            events.append(event)
            if event.type == "response.output_text.delta" and sum(e.type == event.type for e in events) == 3:
                await stop(kernel)
        kinds = [event.type for event in events]
        assert kinds[-1] == "response.failed" and "response.completed" not in kinds
        failed = events[-1].response
        assert failed.status == "failed" and failed.error.code == "server_error" and failed.error.message == _why(cause)
        assert 0 < len(failed.output_text.split()) < 300 and failed.output[0].status == "incomplete"
        assert (await sdk.responses.retrieve(failed.id)).status == "failed"
        # The SDK's stream helper refuses such an end as a final response.
        provider.turns = [text_turn(*["more "] * 300)]
        with pytest.raises(RuntimeError, match=r"response\.completed"):
            async with sdk.responses.stream(model=AGENT, input="again") as helper:
                stopped = False
                async for event in helper:
                    if event.type == "response.output_text.delta" and not stopped:
                        stopped = True
                        await stop(kernel)
                await helper.get_final_response()


async def test_a_failure_after_output_is_a_failed_response_stream_or_not() -> None:
    provider = ScriptedProvider([[TextChunk("partial "), TextChunk("answer"), *failing_turn("upstream cut off")]])
    async with gateway(provider) as (_, sdk):
        whole = await sdk.responses.create(model=AGENT, input="hi")
        assert whole.status == "failed" and whole.output_text == "partial answer" and "upstream cut off" in whole.error.message  # type: ignore[union-attr]
        assert whole.output[0].status == "incomplete"  # type: ignore[union-attr]
        provider.turns = [failing_turn("upstream exploded")]
        with pytest.raises(openai.InternalServerError):  # nothing came: the error's own status
            await sdk.responses.create(model=AGENT, input="hi")
        provider.turns = [[ReasoningChunk("hmm"), UsageChunk(m.Usage(input_tokens=1, output_tokens=1)), FinishChunk("stop")]]
        fine = await sdk.responses.create(model=AGENT, input="hi")
        assert fine.status == "completed" and fine.output[0].type == "reasoning"


class _Stalling:
    """A model that says a few words, then waits until the run is interrupted."""

    name = "stalling"
    model = "stalling-1"

    def __init__(self) -> None:
        self.spoke = anyio.Event()

    async def stream(self, request: ProviderRequest) -> AsyncGenerator[Chunk, None]:
        yield TextChunk("partial words")
        self.spoke.set()
        await anyio.sleep_forever()

    async def aclose(self) -> None:
        return None


@pytest.mark.parametrize(("stop", "cause"), [(interrupt, "client"), (drain, "drain")])
async def test_an_interrupted_whole_answer_is_failed_with_its_partial_output(stop: Any, cause: m.InterruptCause) -> None:
    provider = _Stalling()
    settings = Settings(agents=[AgentSettings(name=AGENT)])
    async with running_kernel(provider, settings=settings) as kernel, http_server(kernel) as url:  # type: ignore[arg-type]
        sdk = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused-on-loopback", max_retries=0, timeout=20.0)
        got: list[Any] = []
        async with anyio.create_task_group() as tg:
            async def ask() -> None:
                got.append(await sdk.responses.create(model=AGENT, input="hi"))
            tg.start_soon(ask)
            await provider.spoke.wait()
            await stop(kernel)
        await sdk.close()
    (whole,) = got
    assert whole.status == "failed" and whole.output_text == "partial words" and whole.error.message == _why(cause)
    assert whole.output[0].status == "incomplete"


PIXEL = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="


async def test_an_image_a_tool_returns_reaches_the_model() -> None:
    provider = ScriptedProvider([tool_turn("view_image", '{"path": "shot.png"}', call_id="call_v"), text_turn("A single pixel.")])
    view_image = {"type": "function", "name": "view_image", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}
    async with gateway(provider) as (_, sdk):
        first = await sdk.responses.create(model=AGENT, input="What is in shot.png?", tools=[view_image], store=False)
        (call,) = first.output
        second = await sdk.responses.create(model=AGENT, tools=[view_image], store=False, input=[
            {"role": "user", "content": "What is in shot.png?"}, call.model_dump(exclude_none=True),
            {"type": "function_call_output", "call_id": "call_v", "output": [{"type": "input_image", "image_url": PIXEL}]},
        ])
        assert second.output_text == "A single pixel."
    sent = provider.requests[-1].messages
    assert [msg.role for msg in sent] == ["system", "user", "assistant", "tool", "user"]
    (image,) = sent[-1].parts
    assert isinstance(image, m.ImagePart) and image.mime_type == "image/png" and image.data.startswith(b"\x89PNG")
