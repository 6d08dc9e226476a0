"""The ``openai`` provider sends structured output and ``tool_choice`` as the upstream
spells them, and an upstream's refusal of a format is an ``invalid_request`` (a 400 for
the client), never a silent answer without it."""

from __future__ import annotations

import json
from contextlib import aclosing

import jsonschema
import pytest

from kernel import model as m
from kernel.provider import Chunk, ProviderError, ProviderRequest, TextChunk, ToolCallChunk, ToolSpec
from kernel.settings import OpenAISettings
from plugins.providers.openai import OpenAIProvider
from tests.fakes.openai_server import FakeOpenAIServer, Reply, fake_openai_server

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore:Async generator .* was garbage collected:ResourceWarning"),
]

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}}, "required": ["city", "days"]}
WEATHER = ToolSpec(name="weather", description="forecast", parameters=SCHEMA)
HI = (m.Message(role="user", content="plan a trip"),)


def _provider(server: FakeOpenAIServer) -> OpenAIProvider:
    return OpenAIProvider(OpenAISettings(api_key="sk-test", base_url=server.base_url, timeout_s=5.0, max_retries=0))


async def _chunks(provider: OpenAIProvider, request: ProviderRequest) -> list[Chunk]:
    async with aclosing(provider.stream(request)) as stream:
        return [chunk async for chunk in stream]


@pytest.mark.parametrize("stream", [True, False])
async def test_response_format_reaches_the_upstream_and_its_answer_validates(stream: bool) -> None:
    fmt = m.OutputFormat(type="json_schema", name="trip", schema=SCHEMA, strict=True)
    async with fake_openai_server([Reply(text="free text the format replaces")]) as server:
        provider = _provider(server)
        chunks = await _chunks(provider, ProviderRequest(model="fake-model", messages=HI, output_format=fmt, stream=stream))
        await provider.aclose()
    assert server.requests[0]["response_format"] == {"type": "json_schema", "json_schema": {"name": "trip", "schema": SCHEMA, "strict": True}}
    assert "tools" not in server.requests[0] and "tool_choice" not in server.requests[0]
    text = "".join(c.text for c in chunks if isinstance(c, TextChunk))
    jsonschema.validate(json.loads(text), SCHEMA)


async def test_json_object_and_a_forced_tool_with_parallel_calls_off() -> None:
    request = ProviderRequest(
        model="fake-model", messages=HI, tools=(WEATHER,), output_format=m.OutputFormat(type="json_object"),
        tool_choice=m.ToolChoice(mode="tool", name="weather"), parallel_tool_calls=False,
    )
    async with fake_openai_server([Reply(text="no tool in the script")]) as server:
        provider = _provider(server)
        chunks = await _chunks(provider, request)
        await provider.aclose()
    sent = server.requests[0]
    assert sent["response_format"] == {"type": "json_object"}
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "weather"}}
    assert sent["parallel_tool_calls"] is False
    calls = [c for c in chunks if isinstance(c, ToolCallChunk)]
    assert calls[0].name == "weather"
    jsonschema.validate(json.loads("".join(c.arguments for c in calls)), SCHEMA)


@pytest.mark.parametrize("mode", ["required", "none", "auto"])
async def test_tool_choice_strings(mode: str) -> None:
    choice = m.ToolChoice(mode=mode)  # type: ignore[arg-type]
    async with fake_openai_server([Reply(text="ok")]) as server:
        provider = _provider(server)
        await _chunks(provider, ProviderRequest(model="fake-model", messages=HI, tools=(WEATHER,), tool_choice=choice))
        await _chunks(provider, ProviderRequest(model="fake-model", messages=HI, tool_choice=choice))
        await provider.aclose()
    assert server.requests[0]["tool_choice"] == mode
    assert "tool_choice" not in server.requests[1]  # OpenAI refuses a tool_choice without tools


async def test_an_upstream_that_refuses_the_format_is_invalid_request() -> None:
    refusal = Reply.error(400, "Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model.")
    async with fake_openai_server([refusal]) as server:
        provider = _provider(server)
        with pytest.raises(ProviderError) as caught:
            await _chunks(provider, ProviderRequest(model="fake-model", messages=HI, output_format=m.OutputFormat(type="json_object")))
        await provider.aclose()
    assert caught.value.code == "invalid_request" and caught.value.status == 400
    assert "response_format" in caught.value.message
    assert len(server.requests) == 1  # not retried without the format
