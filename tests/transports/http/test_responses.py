"""The OpenAI Responses API (``/v1/responses``), driven by the official ``openai`` SDK and
the ``openai-agents`` SDK against a real server on 127.0.0.1."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import openai
import pytest

from kernel import FinishChunk, Kernel, ReasoningChunk, TextChunk, UsageChunk
from kernel import model as m
from kernel.settings import AgentSettings, Settings
from kernel.testing import ScriptedProvider, failing_turn, running_kernel, text_turn, tool_turn
from tests.asyncio_clients import in_asyncio

from ._helpers import ADD_TOOL, client, http_server

pytestmark = pytest.mark.anyio

TOKEN = "test-token-123"
AGENT = "Helper"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@asynccontextmanager
async def gateway(provider: ScriptedProvider, **config: Any) -> AsyncIterator[tuple[Kernel, str, openai.AsyncOpenAI]]:
    settings = Settings(agents=[AgentSettings(name=AGENT, system_prompt="agent prompt"), AgentSettings(name="Other")])
    async with (
        running_kernel(provider, settings=settings, tools=[ADD_TOOL]) as kernel,
        http_server(kernel, token=TOKEN, **config) as url,
    ):
        sdk = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=TOKEN, max_retries=0, timeout=20.0)
        try:
            yield kernel, url, sdk
        finally:
            await sdk.close()


def seen(provider: ScriptedProvider, call: int = -1) -> list[tuple[str, str]]:
    """What the model was sent on one call: (role, content) of each message."""
    return [(message.role, message.content) for message in provider.requests[call].messages]


async def settled(sdk: openai.AsyncOpenAI, response_id: str, status: str) -> Any:
    """The stored response once it has ``status`` (its run ends after the stream closed)."""
    with anyio.fail_after(10):
        while (stored := await sdk.responses.retrieve(response_id)).status != status:
            await anyio.sleep(0.01)
    return stored


async def live_sessions(kernel: Kernel) -> set[str]:
    """The sessions the kernel holds in memory (ephemeral ones are deleted after their response)."""
    with anyio.move_on_after(5):
        while len(kernel.sessions) > 0:
            await anyio.sleep(0.01)
    return set(kernel.sessions)


async def test_create_maps_the_request_and_stores_the_response() -> None:
    provider = ScriptedProvider([text_turn("Hello", " world", usage=(7, 2))])
    async with gateway(provider) as (kernel, _, sdk):
        response = await sdk.responses.create(
            model=AGENT,
            instructions="Be brief.",
            input=[
                {"role": "developer", "content": "Answer in English."},
                {"role": "user", "content": "first question"},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "first answer", "annotations": []}]},
                {"role": "user", "content": [{"type": "input_text", "text": "second question"}]},
            ],
            max_output_tokens=50,
            temperature=0.5,
            metadata={"ticket": "42"},
        )
        assert await live_sessions(kernel) == set()  # its session was unloaded: nobody follows it
        assert response.object == "response" and response.id.startswith("resp_")
        assert (response.status, response.model, response.output_text) == ("completed", AGENT, "Hello world")
        [message] = response.output
        assert message.type == "message" and message.role == "assistant" and message.status == "completed"
        assert message.content[0].type == "output_text" and message.content[0].text == "Hello world"
        assert response.usage is not None
        assert (response.usage.input_tokens, response.usage.output_tokens, response.usage.total_tokens) == (7, 2, 9)
        assert (response.instructions, response.max_output_tokens, response.temperature, response.metadata) == ("Be brief.", 50, 0.5, {"ticket": "42"})
        assert seen(provider) == [
            ("system", "Be brief.\n\nAnswer in English."),
            ("user", "first question"),
            ("assistant", "first answer"),
            ("user", "second question"),
        ]
        assert provider.requests[-1].max_tokens == 50 and provider.requests[-1].temperature == 0.5
        assert provider.requests[-1].stream is False  # a non-stream response: the provider may fetch it whole
        # Stored (the default): GET answers it, and its conversation is a kernel session.
        assert response.conversation is not None
        stored = await sdk.responses.retrieve(response.id)
        assert stored.model_dump() == response.model_dump()
        history = await kernel.execute(m.GetHistory(session_id=response.conversation.id))
        assert isinstance(history, m.HistoryView) and [msg.content for msg in history.messages][-2:] == ["second question", "Hello world"]
        await sdk.responses.delete(response.id)
        with pytest.raises(openai.NotFoundError):
            await sdk.responses.retrieve(response.id)
        # The conversation outlives its response object.
        assert await kernel.execute(m.GetSession(session_id=response.conversation.id))


async def test_streamed_events_rise_and_carry_reasoning_and_text() -> None:
    turn = [ReasoningChunk("Think"), ReasoningChunk("ing."), TextChunk("Hel"), TextChunk("lo"), UsageChunk(m.Usage(input_tokens=3, output_tokens=4)), FinishChunk("stop")]
    provider = ScriptedProvider([turn], delay_s=0.005)
    async with gateway(provider) as (_, _, sdk):
        stream = await sdk.responses.create(model=AGENT, input="hi", stream=True, reasoning={"summary": "auto"})
        events = [event async for event in stream]
        assert [event.sequence_number for event in events] == list(range(len(events)))
        kinds = [event.type for event in events]
        assert provider.requests[-1].stream is True
        assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
        assert kinds[-1] == "response.completed"
        summary = "".join(e.delta for e in events if e.type == "response.reasoning_summary_text.delta")
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        assert (summary, text) == ("Thinking.", "Hello")
        for name in ("response.reasoning_summary_part.added", "response.reasoning_summary_text.done", "response.reasoning_summary_part.done",
                     "response.content_part.added", "response.output_text.done", "response.content_part.done"):
            assert kinds.count(name) == 1, name
        assert kinds.count("response.output_item.added") == kinds.count("response.output_item.done") == 2
        final = events[-1].response
        assert [item.type for item in final.output] == ["reasoning", "message"]
        assert final.output[0].summary[0].text == "Thinking." and final.output_text == "Hello"
        assert final.usage.output_tokens == 4 and final.reasoning.summary == "auto"
        deltas = [e for e in events if e.type == "response.output_text.delta"]
        assert {(e.output_index, e.content_index, e.item_id) for e in deltas} == {(1, 0, final.output[1].id)}


async def test_stream_helper_and_a_client_function_tool_round_trip() -> None:
    provider = ScriptedProvider(
        [tool_turn("get_weather", '{"city": "Paris"}', call_id="call_w", text="Checking."), text_turn("Sunny in Paris.")], delay_s=0.002
    )
    async with gateway(provider) as (kernel, _, sdk):
        async with sdk.responses.stream(model=AGENT, input="Weather in Paris?", tools=[WEATHER]) as stream:
            kinds = [event.type async for event in stream]
            first = await stream.get_final_response()
        assert "response.function_call_arguments.delta" in kinds and "response.function_call_arguments.done" in kinds
        assert [item.type for item in first.output] == ["message", "function_call"]
        call = first.output[1]
        assert (call.call_id, call.name, json.loads(call.arguments), call.status) == ("call_w", "get_weather", {"city": "Paris"}, "completed")
        assert first.output_text == "Checking." and first.status == "completed"
        assert {spec.name for spec in provider.requests[0].tools} == {"get_weather", "add"}  # the client's tool beside the agent's
        assert first.tools[0].name == "get_weather"

        async with sdk.responses.stream(
            model=AGENT, previous_response_id=first.id, tools=[WEATHER],
            input=[{"type": "function_call_output", "call_id": "call_w", "output": "22C, sunny"}],
        ) as stream:
            second = await stream.get_final_response()
        assert second.output_text == "Sunny in Paris." and second.previous_response_id == first.id
        messages = provider.requests[-1].messages
        assert [msg.role for msg in messages] == ["system", "user", "assistant", "tool"]
        assert messages[2].tool_calls[0].id == "call_w" and (messages[3].tool_call_id, messages[3].name, messages[3].content) == ("call_w", "get_weather", "22C, sunny")
        # Continued in place: one kernel session holds both responses.
        assert first.conversation is not None and second.conversation is not None and first.conversation.id == second.conversation.id
        assert await live_sessions(kernel) == set()


async def test_stateless_round_trip_sends_the_whole_conversation_without_storing() -> None:
    provider = ScriptedProvider([tool_turn("get_weather", '{"city": "Oslo"}', call_id="call_o"), text_turn("Cold in Oslo.")])
    async with gateway(provider) as (kernel, _, sdk):
        first = await sdk.responses.create(model=AGENT, input="Oslo?", tools=[WEATHER], store=False)
        assert first.conversation is None and first.store is False
        with pytest.raises(openai.NotFoundError):
            await sdk.responses.retrieve(first.id)
        echoed = [item.model_dump(exclude_none=True) for item in first.output]
        second = await sdk.responses.create(
            model=AGENT, tools=[WEATHER], store=False,
            input=[{"role": "user", "content": "Oslo?"}, *echoed, {"type": "function_call_output", "call_id": "call_o", "output": "-5C"}],
        )
        assert second.output_text == "Cold in Oslo."
        messages = provider.requests[-1].messages
        assert [msg.role for msg in messages] == ["system", "user", "assistant", "tool"]
        assert messages[3].name == "get_weather"
        listed = await kernel.execute(m.ListSessions())
        assert isinstance(listed, m.SessionList) and listed.sessions == ()  # store: false wrote nothing
        assert await live_sessions(kernel) == set()


async def test_previous_response_id_continues_or_branches() -> None:
    provider = ScriptedProvider([text_turn("one"), text_turn("two"), text_turn("branch"), text_turn("copy")])
    async with gateway(provider) as (kernel, _, sdk):
        first = await sdk.responses.create(model=AGENT, input="a")
        second = await sdk.responses.create(model=AGENT, input="b", previous_response_id=first.id)
        assert seen(provider)[1:] == [("user", "a"), ("assistant", "one"), ("user", "b")]
        assert second.conversation.id == first.conversation.id  # type: ignore[union-attr]
        # From an older response: a new conversation holding the old one up to there.
        branch = await sdk.responses.create(model=AGENT, input="c", previous_response_id=first.id)
        assert seen(provider)[1:] == [("user", "a"), ("assistant", "one"), ("user", "c")]
        assert branch.conversation.id != first.conversation.id  # type: ignore[union-attr]
        # store: false continues in a throw-away copy: the stored conversation is unchanged.
        await sdk.responses.create(model=AGENT, input="d", previous_response_id=second.id, store=False)
        assert seen(provider)[1:] == [("user", "a"), ("assistant", "one"), ("user", "b"), ("assistant", "two"), ("user", "d")]
        history = await kernel.execute(m.GetHistory(session_id=first.conversation.id))  # type: ignore[union-attr]
        assert isinstance(history, m.HistoryView) and [msg.content for msg in history.messages] == ["a", "one", "b", "two"]

        with pytest.raises(openai.BadRequestError) as unknown:
            await sdk.responses.create(model=AGENT, input="e", previous_response_id="resp_nope")
        assert (unknown.value.code, unknown.value.param) == ("previous_response_not_found", "previous_response_id")
        with pytest.raises(openai.BadRequestError) as other:
            await sdk.responses.create(model="Other", input="e", previous_response_id=second.id)
        assert other.value.param == "model"


async def test_closing_the_stream_interrupts_the_run() -> None:
    provider = ScriptedProvider([text_turn(*["word "] * 400)], delay_s=0.01)
    async with gateway(provider) as (kernel, _, sdk):
        deltas = 0
        async with sdk.responses.stream(model=AGENT, input="long") as stream:
            async for event in stream:
                if event.type == "response.created":
                    response_id = event.response.id
                elif event.type == "response.output_text.delta":
                    deltas += 1
                    if deltas == 3:
                        break  # leaving the block closes the stream
        stored = await settled(sdk, response_id, "cancelled")
        assert provider.closed_streams == 1
        assert 0 < len(stored.output_text.split()) < 400  # the partial text, kept
        assert stored.incomplete_details is None and stored.error is None
        history = await kernel.execute(m.GetHistory(session_id=stored.conversation.id))
        assert isinstance(history, m.HistoryView) and history.messages[-1].content == stored.output_text
        # The interrupted conversation goes on.
        provider.turns, provider.delay_s = [text_turn("after")], 0.0
        after = await sdk.responses.create(model=AGENT, input="again", previous_response_id=response_id)
        assert after.output_text == "after" and seen(provider)[-2:] == [("assistant", stored.output_text), ("user", "again")]


async def test_provider_faults() -> None:
    provider = ScriptedProvider([failing_turn("slow down", code="rate_limited", status=429)])
    async with gateway(provider) as (_, _, sdk):
        # Before any output: the real HTTP status, streamed or not (the SDK may retry it).
        with pytest.raises(openai.RateLimitError) as limited:
            await sdk.responses.create(model=AGENT, input="hi")
        assert limited.value.code == "rate_limit_exceeded" and "slow down" in limited.value.message
        with pytest.raises(openai.RateLimitError):
            async with sdk.responses.stream(model=AGENT, input="hi") as stream:
                await stream.get_final_response()
        provider.turns = [failing_turn("upstream exploded")]
        with pytest.raises(openai.InternalServerError) as upstream:
            await sdk.responses.create(model=AGENT, input="hi")
        assert upstream.value.status_code == 502
        # After output: response.failed ends the stream, with the partial output.
        provider.turns = [[TextChunk("partial"), *failing_turn("cut off")]]
        stream = await sdk.responses.create(model=AGENT, input="hi", stream=True)
        events = [event async for event in stream]
        assert events[-1].type == "response.failed"
        failed = events[-1].response
        assert failed.status == "failed" and failed.error.code == "server_error" and "cut off" in failed.error.message
        assert failed.output_text == "partial" and failed.output[0].status == "incomplete"
        assert (await sdk.responses.retrieve(failed.id)).status == "failed"
        provider.turns = [text_turn("fine")]
        assert (await sdk.responses.create(model=AGENT, input="hi")).output_text == "fine"


async def test_errors_have_openai_shape() -> None:
    provider = ScriptedProvider([text_turn("ok")])
    async with gateway(provider, max_body_bytes=4096) as (_, url, sdk):
        bad = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError) as auth:
            await bad.responses.create(model=AGENT, input="hi")
        await bad.close()
        assert auth.value.code == "invalid_api_key"
        with pytest.raises(openai.APIStatusError) as big:
            await sdk.responses.create(model=AGENT, input="x" * 10_000)
        assert big.value.status_code == 413 and big.value.code == "request_too_large"
        refusals: list[tuple[dict[str, Any], str]] = [
            ({"input": ""}, "input"),
            ({"input": "hi", "tools": [{"type": "namespace", "name": "ns", "tools": [{"type": "web_search"}]}]}, "tools[0].tools[0].type"),
            ({"input": "hi", "tools": [{"type": "function", "name": "bad name!"}]}, "tools[0].name"),
            ({"input": "hi", "background": True}, "background"),
            ({"input": "hi", "previous_response_id": "resp_x", "conversation": "s"}, "conversation"),
            ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].id"),
            ({"input": [{"type": "fancy_new_item", "call_id": "c"}]}, "input[0].type"),
            ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "https://example.invalid/a.png"}]}]}, "input[0].content[0]"),
            ({"input": [{"role": "user", "content": [{"type": "input_text"}]}]}, "input[0].content[0]"),  # its text is missing
            ({"input": [{"role": "assistant", "content": "prefill"}]}, "input"),
            ({"input": "hi", "text": {"format": {"type": "json_schema", "name": "bad name!", "schema": {}}}}, "text.format.name"),
            ({"input": "hi", "text": {"format": {"type": "grammar"}}}, "text.format.type"),
            ({"input": "hi", "tool_choice": {"type": "file_search"}}, "tool_choice.type"),
            ({"input": "hi", "temperature": 5}, "temperature"),
        ]
        for body, param in refusals:
            with pytest.raises(openai.BadRequestError) as refused:
                await sdk.responses.create(model=AGENT, **body)
            assert refused.value.param == param, (body, refused.value.message)
            assert refused.value.body["type"] == "invalid_request_error"  # type: ignore[index]
        with pytest.raises(openai.NotFoundError) as missing:
            await sdk.responses.create(model=AGENT, input="hi", conversation="no-such-session")
        assert missing.value.param == "conversation"
        async with client(url, TOKEN) as http:
            for raw in (b"{nope", b'{"reasoning": {"deep": ' + b"[" * 2000 + b"]" * 2000 + b"}}", b'{"input": 5}'):
                response = await http.post("/v1/responses", content=raw)
                assert response.status_code == 400 and set(response.json()["error"]) == {"message", "type", "param", "code"}
            response = await http.get("/v1/responses/resp_unknown")
            assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
            assert (await http.delete("/v1/responses/resp_unknown")).status_code == 404
            assert (await http.put("/v1/responses")).status_code == 405
            assert (await http.get("/v1/responses/resp_x", params={"stream": "true"})).json()["error"]["param"] == "stream"
        assert (await sdk.responses.create(model=AGENT, input="still serving")).output_text == "ok"


async def test_stored_responses_are_bounded() -> None:
    provider = ScriptedProvider([text_turn("answer")])
    async with gateway(provider, stored_responses=2) as (_, _, sdk):
        first, second, third = [await sdk.responses.create(model=AGENT, input=str(i)) for i in range(3)]
        with pytest.raises(openai.NotFoundError):
            await sdk.responses.retrieve(first.id)
        assert [(await sdk.responses.retrieve(r.id)).id for r in (second, third)] == [second.id, third.id]
        with pytest.raises(openai.BadRequestError) as forgotten:
            await sdk.responses.create(model=AGENT, input="more", previous_response_id=first.id)
        assert forgotten.value.code == "previous_response_not_found"
        # The forgotten response's conversation is still there to continue by its id.
        more = await sdk.responses.create(model=AGENT, input="more", conversation=first.conversation.id)  # type: ignore[union-attr]
        assert more.conversation.id == first.conversation.id and seen(provider)[-3:] == [("user", "0"), ("assistant", "answer"), ("user", "more")]  # type: ignore[union-attr]


async def test_a_conversation_moves_between_responses_and_the_native_api() -> None:
    provider = ScriptedProvider([text_turn("from responses"), text_turn("from native"), text_turn("back again")])
    async with gateway(provider) as (_, url, sdk):
        raw = await sdk.responses.with_raw_response.create(model=AGENT, input="start here")
        first = raw.parse()
        session_id = raw.headers["x-session-id"]
        assert first.conversation is not None and first.conversation.id == session_id
        async with client(url, TOKEN) as http:
            answer = await http.post(f"/v1/sessions/{session_id}/prompt", json={"text": "native turn"}, headers={"accept": "application/json"})
            assert answer.status_code == 200 and answer.json()["text"] == "from native"
            assert seen(provider)[1:] == [("user", "start here"), ("assistant", "from responses"), ("user", "native turn")]
            # The conversation moved on past the response: previous_response_id branches off before
            # the native turn, while conversation= continues the session as it is now.
            provider.turns = [text_turn("back again")]
            back = await sdk.responses.create(model=AGENT, input="and back", conversation=session_id)
            assert back.output_text == "back again" and back.conversation.id == session_id  # type: ignore[union-attr]
            assert seen(provider)[-3:] == [("user", "native turn"), ("assistant", "from native"), ("user", "and back")]
            branch = await sdk.responses.create(model=AGENT, input="other way", previous_response_id=first.id)
            assert seen(provider)[1:] == [("user", "start here"), ("assistant", "from responses"), ("user", "other way")]
            assert branch.conversation.id != session_id  # type: ignore[union-attr]
            history = (await http.get(f"/v1/sessions/{session_id}/history")).json()["messages"]
            assert [msg["content"] for msg in history] == ["start here", "from responses", "native turn", "from native", "and back", "back again"]


async def test_openai_agents_runner_with_a_function_tool() -> None:
    """``Runner.run`` with its default model, the Responses API, pointed at the gateway; then
    streamed, continuing by ``previous_response_id`` instead of resending the conversation."""
    provider = ScriptedProvider([
        tool_turn("get_weather", '{"city": "Paris"}', call_id="call_paris"), text_turn("Sunny, 22C in Paris."),
        tool_turn("get_weather", '{"city": "Rome"}', call_id="call_rome", text="Checking."), text_turn("Warm ", "in Rome."),
    ])
    async with gateway(provider) as (kernel, url, _):

        async def run_agent() -> tuple[str, str, list[str]]:
            os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")  # nothing leaves this machine
            from agents import Agent, RunConfig, Runner, function_tool
            from agents.models.openai_provider import OpenAIProvider

            asked: list[str] = []

            @function_tool
            def get_weather(city: str) -> str:
                """Weather for a city."""
                asked.append(city)
                return f"22C in {city}"

            sdk = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=TOKEN, max_retries=0, timeout=20.0)
            try:
                agent = Agent(name="weather", instructions="Answer with the weather.", tools=[get_weather], model=AGENT)
                config = RunConfig(model_provider=OpenAIProvider(openai_client=sdk), tracing_disabled=True)  # its default model: Responses
                result = await Runner.run(agent, "Weather in Paris?", run_config=config)
                streamed = Runner.run_streamed(agent, "And Rome?", run_config=config, auto_previous_response_id=True)
                async for _ in streamed.stream_events():
                    pass
                return str(result.final_output), str(streamed.final_output), asked
            finally:
                await sdk.close()

        paris, rome, asked = await in_asyncio(run_agent)
        assert (paris, rome, asked) == ("Sunny, 22C in Paris.", "Warm in Rome.", ["Paris", "Rome"])
        roles = [[msg.role for msg in request.messages] for request in provider.requests]
        assert roles == [["system", "user"], ["system", "user", "assistant", "tool"], ["system", "user"], ["system", "user", "assistant", "tool"]]
        assert provider.requests[0].messages[0].content == "Answer with the weather."
        assert provider.requests[1].messages[3].content == "22C in Paris" and provider.requests[3].messages[3].content == "22C in Rome"
        assert {spec.name for spec in provider.requests[0].tools} == {"get_weather", "add"}
        listed = await kernel.execute(m.ListSessions())  # the conversations went through /v1/responses, not chat completions
        assert isinstance(listed, m.SessionList) and {session.label for session in listed.sessions} == {"openai responses"}
