"""The OpenAI-compatible surface, driven by the official ``openai`` SDK against a real server."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import msgspec
import openai
import pytest

from kernel import Kernel
from kernel import model as m
from kernel.settings import AgentSettings, Settings
from kernel.testing import (
    ScriptedProvider,
    failing_turn,
    running_kernel,
    text_turn,
    tool_turn,
)
from transports.http import HttpConfig

from ._helpers import ADD_TOOL, DANGER_TOOL, client, http_server

pytestmark = pytest.mark.anyio

TOKEN = "test-token-123"
AGENT = "Helper"
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@asynccontextmanager
async def gateway(provider: ScriptedProvider, **config: Any) -> AsyncIterator[tuple[Kernel, str, openai.AsyncOpenAI]]:
    settings = Settings(agents=[AgentSettings(name=AGENT, system_prompt="agent prompt"), AgentSettings(name="Other", model="other-model")])
    async with (
        running_kernel(provider, settings=settings, tools=[ADD_TOOL, DANGER_TOOL]) as kernel,
        http_server(kernel, token=TOKEN, **config) as url,
    ):
        sdk = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=TOKEN, max_retries=0, timeout=20.0)
        try:
            yield kernel, url, sdk
        finally:
            await sdk.close()


async def no_sessions_left(kernel: Kernel) -> bool:
    """Ephemeral sessions are deleted once the answer is out."""
    with anyio.move_on_after(5):
        while kernel.sessions:
            await anyio.sleep(0.01)
    return not kernel.sessions


async def test_non_streaming_completion_maps_messages() -> None:
    provider = ScriptedProvider([text_turn("Hello", " world", usage=(7, 2))])
    async with gateway(provider) as (kernel, _, sdk):
        answer = await sdk.chat.completions.create(
            model=AGENT,
            messages=[
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "first question"},
                {"role": "assistant", "content": "first answer"},
                {"role": "user", "content": [{"type": "text", "text": "second question"}]},
            ],
            max_completion_tokens=50,
            temperature=0.5,
        )
        assert answer.object == "chat.completion"
        assert answer.id.startswith("chatcmpl-")
        assert answer.model == AGENT
        choice = answer.choices[0]
        assert choice.message.role == "assistant" and choice.message.content == "Hello world"
        assert choice.finish_reason == "stop"
        assert (answer.usage.prompt_tokens, answer.usage.completion_tokens, answer.usage.total_tokens) == (7, 2, 9)
        request = provider.requests[-1]
        assert [(msg.role, msg.content) for msg in request.messages] == [
            ("system", "Be brief."),
            ("user", "first question"),
            ("assistant", "first answer"),
            ("user", "second question"),
        ]
        assert request.max_tokens == 50 and request.temperature == 0.5
        assert request.model == "scripted-1"  # an agent name selects the agent, not a model
        assert request.stream is False  # nobody needs it piece by piece: the provider may fetch it whole
        assert await no_sessions_left(kernel)


async def test_streaming_with_usage_chunk() -> None:
    provider = ScriptedProvider([text_turn("Hel", "lo", " there", usage=(4, 3))], delay_s=0.01)
    async with gateway(provider) as (kernel, _, sdk):
        stream = await sdk.chat.completions.create(
            model=AGENT, messages=[{"role": "user", "content": "hi"}], stream=True, stream_options={"include_usage": True}
        )
        chunks = [chunk async for chunk in stream]
        assert all(c.object == "chat.completion.chunk" for c in chunks)
        assert len({c.id for c in chunks}) == 1
        assert chunks[0].choices[0].delta.role == "assistant"
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == "Hello there"
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        assert finishes == ["stop"]
        assert chunks[-1].choices == [] and chunks[-1].usage is not None
        assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (4, 3)
        assert all(c.usage is None for c in chunks[:-1])
        assert provider.requests[-1].stream is True
        # Without include_usage there is no usage chunk.
        stream = await sdk.chat.completions.create(model=AGENT, messages=[{"role": "user", "content": "hi"}], stream=True)
        plain = [chunk async for chunk in stream]
        assert plain[-1].choices[0].finish_reason == "stop" and all(c.usage is None for c in plain)
        assert await no_sessions_left(kernel)


async def test_agent_tool_runs_inside_the_gateway() -> None:
    provider = ScriptedProvider([tool_turn("add", '{"a": 2, "b": 3}', call_id="call_add"), text_turn("The sum is 5.")])
    async with gateway(provider) as (_, _, sdk):
        answer = await sdk.chat.completions.create(model=AGENT, messages=[{"role": "user", "content": "2+3?"}])
        assert answer.choices[0].message.content == "The sum is 5."
        assert answer.choices[0].message.tool_calls is None
        assert answer.choices[0].finish_reason == "stop"
        tool_messages = [msg for msg in provider.requests[-1].messages if msg.role == "tool"]
        assert [(msg.tool_call_id, msg.content) for msg in tool_messages] == [("call_add", "5")]
        # The model saw the agent's tools.
        assert {spec.name for spec in provider.requests[0].tools} >= {"add", "danger"}


async def test_tool_needing_approval_is_rejected_by_default_policy() -> None:
    provider = ScriptedProvider([tool_turn("danger", "{}", call_id="call_d"), text_turn("ok")])
    async with gateway(provider) as (_, _, sdk):
        answer = await sdk.chat.completions.create(model=AGENT, messages=[{"role": "user", "content": "do it"}])
        assert answer.choices[0].message.content == "ok"
        tool_message = next(msg for msg in provider.requests[-1].messages if msg.role == "tool")
        assert "rejected" in tool_message.content


async def test_approval_policy_approve_runs_the_tool() -> None:
    provider = ScriptedProvider([tool_turn("danger", "{}", call_id="call_d"), text_turn("ok")])
    async with gateway(provider, openai_tool_approval="approve") as (_, _, sdk):
        await sdk.chat.completions.create(model=AGENT, messages=[{"role": "user", "content": "do it"}])
        tool_message = next(msg for msg in provider.requests[-1].messages if msg.role == "tool")
        assert tool_message.content == "done"


async def test_approval_policy_table_approves_the_tools_it_names() -> None:
    provider = ScriptedProvider([tool_turn("danger", "{}", call_id="call_d"), text_turn("ok")])
    policy = m.ApprovalPolicy(mode="reject", allow_tools=("danger",))
    async with gateway(provider, openai_tool_approval=policy) as (_, _, sdk):
        await sdk.chat.completions.create(model=AGENT, messages=[{"role": "user", "content": "do it"}])
        tool_message = next(msg for msg in provider.requests[-1].messages if msg.role == "tool")
        assert tool_message.content == "done" and tool_message.outcome == "ok"


@pytest.mark.parametrize("setting", ["ask", {"allow_tools": ["danger"]}, {"mode": "approve", "turn_limit": "ask"}])
def test_a_policy_that_would_ask_is_refused_at_load_time(setting: Any) -> None:
    """Nobody can answer a question on an OpenAI request: it would only wait for the timeout."""
    with pytest.raises(msgspec.ValidationError, match="cannot be asked"):
        msgspec.convert({"openai_tool_approval": setting}, HttpConfig)


async def test_client_tools_are_returned_as_tool_calls_and_continued() -> None:
    provider = ScriptedProvider(
        [tool_turn("get_weather", '{"city": "Paris"}', call_id="call_w", text="Checking."), text_turn("Sunny in Paris.")]
    )
    async with gateway(provider) as (kernel, _, sdk):
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Paris?"}]
        first = await sdk.chat.completions.create(model=AGENT, messages=messages, tools=[WEATHER_TOOL])
        choice = first.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.content == "Checking."
        [call] = choice.message.tool_calls
        assert (call.id, call.type, call.function.name, json.loads(call.function.arguments)) == (
            "call_w", "function", "get_weather", {"city": "Paris"}
        )
        offered = {spec.name for spec in provider.requests[0].tools}
        assert {"get_weather", "add"} <= offered
        messages += [choice.message.model_dump(exclude_none=True), {"role": "tool", "tool_call_id": "call_w", "content": "22C, sunny"}]
        second = await sdk.chat.completions.create(model=AGENT, messages=messages, tools=[WEATHER_TOOL])
        assert second.choices[0].message.content == "Sunny in Paris." and second.choices[0].finish_reason == "stop"
        seen = provider.requests[-1].messages
        assert [msg.role for msg in seen] == ["system", "user", "assistant", "tool"]
        assert seen[2].tool_calls[0].name == "get_weather" and seen[3].content == "22C, sunny"
        assert seen[3].tool_call_id == "call_w"
        assert await no_sessions_left(kernel)


async def test_client_tool_call_streamed() -> None:
    provider = ScriptedProvider([tool_turn("get_weather", '{"city": "Oslo"}', call_id="call_o")], delay_s=0.005)
    async with gateway(provider) as (_, _, sdk):
        stream = await sdk.chat.completions.create(
            model=AGENT, messages=[{"role": "user", "content": "Oslo?"}], tools=[WEATHER_TOOL], stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
        calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or ()]
        assert [(tc.index, tc.id, tc.function.name, tc.function.arguments) for tc in calls] == [(0, "call_o", "get_weather", '{"city": "Oslo"}')]
        assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]
        assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens == 4


async def test_unknown_model_passes_through_and_models_are_listed() -> None:
    provider = ScriptedProvider([text_turn("fine")])
    async with gateway(provider) as (_, _, sdk):
        answer = await sdk.chat.completions.create(model="gpt-pass-through", messages=[{"role": "user", "content": "hi"}])
        assert answer.model == "gpt-pass-through"
        assert provider.requests[-1].model == "gpt-pass-through"
        assert provider.requests[-1].messages[0].content == "agent prompt"  # the default agent's prompt
        await sdk.chat.completions.create(model="Other", messages=[{"role": "user", "content": "hi"}])
        assert provider.requests[-1].model == "other-model"
        models = [model async for model in sdk.models.list()]
        ids = [model.id for model in models]
        assert ids[:2] == [AGENT, "Other"] and "other-model" in ids
        assert all(model.object == "model" for model in models)
        assert (await sdk.models.retrieve("Other")).id == "Other"
        with pytest.raises(openai.NotFoundError) as info:
            await sdk.models.retrieve("no-such-model")
        assert info.value.code == "model_not_found"


async def test_error_mapping() -> None:
    provider = ScriptedProvider([failing_turn("slow down", code="rate_limited", status=429)])
    async with gateway(provider, max_body_bytes=4096) as (kernel, url, sdk):
        bad = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError) as auth:
            await bad.chat.completions.create(model=AGENT, messages=[{"role": "user", "content": "hi"}])
        await bad.close()
        assert auth.value.status_code == 401 and auth.value.code == "invalid_api_key"
        assert auth.value.body["type"] == "invalid_request_error"  # type: ignore[index]

        with pytest.raises(openai.APIStatusError) as big:
            await sdk.chat.completions.create(model=AGENT, messages=[{"role": "user", "content": "x" * 10_000}])
        assert big.value.status_code == 413 and big.value.code == "request_too_large"

        with pytest.raises(openai.RateLimitError) as limited:
            await sdk.chat.completions.create(model=AGENT, messages=[{"role": "user", "content": "hi"}])
        assert limited.value.status_code == 429 and limited.value.code == "rate_limit_exceeded"
        assert "slow down" in limited.value.message

        with pytest.raises(openai.RateLimitError):
            stream = await sdk.chat.completions.create(model=AGENT, messages=[{"role": "user", "content": "hi"}], stream=True)
            async for _ in stream:
                pass

        with pytest.raises(openai.BadRequestError) as bad_request:
            await sdk.chat.completions.create(model=AGENT, messages=[{"role": "user", "content": "hi"}], n=2)
        assert bad_request.value.param == "n"
        with pytest.raises(openai.BadRequestError):
            await sdk.chat.completions.create(model=AGENT, messages=[])

        provider.turns = [failing_turn("no such model upstream", code="not_found", status=404)]
        provider.requests.clear()
        with pytest.raises(openai.NotFoundError) as missing:
            await sdk.chat.completions.create(model="gpt-nope", messages=[{"role": "user", "content": "hi"}])
        assert missing.value.code == "model_not_found" and missing.value.param == "model"

        provider.turns = [failing_turn("upstream exploded")]
        provider.requests.clear()
        with pytest.raises(openai.InternalServerError) as upstream:
            await sdk.chat.completions.create(model=AGENT, messages=[{"role": "user", "content": "hi"}])
        assert upstream.value.status_code == 502

        # Raw error bodies are exactly OpenAI's shape.
        async with client(url, TOKEN) as http:
            response = await http.post("/v1/chat/completions", content=b"{nope")
            assert response.status_code == 400
            assert set(response.json()["error"]) == {"message", "type", "param", "code"}
            response = await http.get("/v1/models", headers={"authorization": "Bearer wrong"})
            assert response.status_code == 401 and set(response.json()["error"]) == {"message", "type", "param", "code"}

        provider.turns = [text_turn("still serving")]
        answer = await sdk.chat.completions.create(model=AGENT, messages=[{"role": "user", "content": "hi"}])
        assert answer.choices[0].message.content == "still serving"
        assert await no_sessions_left(kernel)


async def test_streaming_failure_after_output_is_an_in_stream_error() -> None:
    provider = ScriptedProvider([[*text_turn("partial")[:1], *failing_turn("cut off")]], delay_s=0.01)
    async with gateway(provider) as (_, _, sdk):
        stream = await sdk.chat.completions.create(model=AGENT, messages=[{"role": "user", "content": "hi"}], stream=True)
        received: list[str] = []
        with pytest.raises(openai.APIError) as info:
            async for chunk in stream:
                received.append(chunk.choices[0].delta.content or "")
        assert "".join(received) == "partial"
        assert "cut off" in info.value.message


async def test_client_disconnect_interrupts_the_run() -> None:
    provider = ScriptedProvider([text_turn(*["word "] * 400)], delay_s=0.01)
    async with gateway(provider) as (kernel, _, sdk):
        stream = await sdk.chat.completions.create(model=AGENT, messages=[{"role": "user", "content": "long"}], stream=True)
        count = 0
        async for _ in stream:
            count += 1
            if count == 3:
                break
        await stream.close()
        started = anyio.current_time()
        assert await no_sessions_left(kernel)
        assert anyio.current_time() - started < 2.5  # the run alone would need 4 s more
        assert provider.closed_streams == 1
