"""Structured output and forced tools through the OpenAI dialects, end to end: LangChain's
``ChatOpenAI`` and the ``openai`` SDK against the gateway, whose openai provider talks to the
scripted upstream (which honours ``response_format`` and ``tool_choice`` as a real model
does). Each test checks what the upstream received and what the client got back."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Literal, TypeVar

import anyio
import anyio.to_thread
import jsonschema
import openai
import pydantic
import pytest
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from kernel.settings import AgentSettings, OpenAISettings, Settings
from kernel.testing import running_kernel
from plugins.providers.echo import EchoProvider
from plugins.providers.openai import OpenAIProvider
from tests.fakes.openai_server import FakeOpenAIServer, Reply, fake_openai_server

from ._helpers import ADD_TOOL, http_server

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore:Async generator .* was garbage collected:ResourceWarning"),
]

AGENT = "Helper"
T = TypeVar("T")


class Address(pydantic.BaseModel):
    city: str
    zip_code: str = pydantic.Field(min_length=5, max_length=5)


class Person(pydantic.BaseModel):
    """A person the model describes."""

    name: str
    age: int = pydantic.Field(ge=18)
    role: Literal["admin", "user"]
    addresses: list[Address] = pydantic.Field(min_length=1)


@tool
def get_weather(city: str, days: int) -> str:
    """The forecast for a city (run by the client, never by the gateway)."""
    return f"sunny in {city} for {days} days"


@asynccontextmanager
async def gateway(script: list[Reply] | None = None, *, agent_tools: tuple[str, ...] = ("*",)) -> AsyncIterator[tuple[FakeOpenAIServer, str]]:
    """The http transport over the openai provider over the scripted upstream; the agent has
    a tool of its own (``add``) unless ``agent_tools`` says otherwise, so a client's forced
    tool must win over it."""
    async with fake_openai_server(script or [Reply(text="free text, unless a format is asked for")]) as upstream:
        provider = OpenAIProvider(OpenAISettings(api_key="sk-upstream", base_url=upstream.base_url, model="fake-model", timeout_s=10.0, max_retries=0))
        settings = Settings(agents=[AgentSettings(name=AGENT, tools=list(agent_tools))])
        async with running_kernel(provider, settings=settings, tools=[ADD_TOOL]) as kernel, http_server(kernel) as url:
            yield upstream, f"{url}/v1"
        await provider.aclose()


def chat_model(base_url: str, **kw: Any) -> ChatOpenAI:
    return ChatOpenAI(model=AGENT, base_url=base_url, api_key="unused-on-loopback", max_retries=0, timeout=20, **kw)  # type: ignore[arg-type]


async def in_thread(call: Callable[[], T]) -> T:
    """LangChain's sync API in a worker thread: the same program on asyncio and trio
    (its async API runs on asyncio only)."""
    return await anyio.to_thread.run_sync(call)


# ---------------------------------------------------------------- LangChain, chat completions


async def test_langchain_json_schema_structured_output() -> None:
    async with gateway() as (upstream, base_url):
        person = await in_thread(lambda: chat_model(base_url).with_structured_output(Person, method="json_schema").invoke("Describe someone."))
    assert isinstance(person, Person) and person.age == 18 and len(person.addresses) == 1
    sent = upstream.requests[0]
    fmt = sent["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "Person" and fmt["json_schema"]["strict"] is True
    assert set(fmt["json_schema"]["schema"]["required"]) == {"name", "age", "role", "addresses"}
    assert {t["function"]["name"] for t in sent["tools"]} == {"add"}  # the agent's tools stay free


async def test_langchain_function_calling_structured_output_forces_the_schema_tool() -> None:
    async with gateway() as (upstream, base_url):
        person = await in_thread(lambda: chat_model(base_url).with_structured_output(Person, method="function_calling").invoke("Describe someone."))
    assert isinstance(person, Person) and person.role == "admin"
    sent = upstream.requests[0]
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "Person"}}
    assert sent["parallel_tool_calls"] is False
    assert len(upstream.requests) == 1  # the forced call went back to the client, not round again


@pytest.mark.parametrize(
    ("choice", "upstream_choice", "agent_tools"),
    [
        ("get_weather", {"type": "function", "function": {"name": "get_weather"}}, ("*",)),
        # "required" from a client with tools of its own: one of those, though the agent has
        # tools too (the client could not see a call of the agent's).
        ("any", "required", ("*",)),
        ("any", "required", ()),
    ],
)
async def test_langchain_bind_tools_with_tool_choice(choice: str, upstream_choice: Any, agent_tools: tuple[str, ...]) -> None:
    async with gateway(agent_tools=agent_tools) as (upstream, base_url):
        model = chat_model(base_url).bind_tools([get_weather], tool_choice=choice)
        message = await in_thread(lambda: model.invoke("Weather in Paris?"))
    assert isinstance(message, AIMessage) and message.response_metadata["finish_reason"] == "tool_calls"
    (call,) = message.tool_calls
    assert call["name"] == "get_weather"
    jsonschema.validate(call["args"], get_weather.tool_call_schema.model_json_schema())
    assert upstream.requests[0]["tool_choice"] == upstream_choice
    offered = [t["function"]["name"] for t in upstream.requests[0]["tools"]]
    assert offered == (["get_weather"] if choice == "any" else ["add", "get_weather"])
    assert len(upstream.requests) == 1


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # LangChain's async API is asyncio's; the sync one covers trio
async def test_langchain_async_api_on_asyncio(anyio_backend: str) -> None:
    async with gateway() as (upstream, base_url):
        person = await chat_model(base_url).with_structured_output(Person).ainvoke("Describe someone.")
    assert isinstance(person, Person)
    assert upstream.requests[0]["response_format"]["type"] == "json_schema"


# ---------------------------------------------------------------- LangChain, Responses API


async def test_langchain_responses_api_structured_output_and_forced_tool() -> None:
    async with gateway() as (upstream, base_url):
        model = chat_model(base_url, use_responses_api=True)
        person = await in_thread(lambda: model.with_structured_output(Person, method="json_schema").invoke("Describe someone."))
        forced = await in_thread(lambda: model.bind_tools([get_weather], tool_choice="get_weather").invoke("Weather in Paris?"))
    assert isinstance(person, Person)
    fmt = upstream.requests[0]["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "Person"
    assert isinstance(forced, AIMessage) and [c["name"] for c in forced.tool_calls] == ["get_weather"]
    assert upstream.requests[1]["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}


# ---------------------------------------------------------------- the SDK: both dialects, refusals


async def test_sdk_text_format_json_object_and_streamed_json_schema() -> None:
    schema = Person.model_json_schema()
    async with gateway() as (upstream, base_url):
        sdk = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)
        answer = await sdk.responses.create(model=AGENT, input="hi", text={"format": {"type": "json_object"}})
        assert isinstance(json.loads(answer.output_text), dict)
        assert answer.text.format.type == "json_object"  # type: ignore[union-attr]
        chunks = await sdk.chat.completions.create(
            model=AGENT, messages=[{"role": "user", "content": "hi"}], stream=True,
            response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": schema}},
        )
        text = "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])
        await sdk.close()
    Person.model_validate_json(text)
    assert upstream.requests[0]["response_format"] == {"type": "json_object"}
    assert upstream.requests[1]["response_format"]["json_schema"] == {"name": "person", "schema": schema}


@pytest.mark.parametrize("stream", [False, True])
async def test_forcing_a_tool_that_does_not_exist_is_a_400_in_both_dialects(stream: bool) -> None:
    async with gateway() as (upstream, base_url):
        sdk = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)
        with pytest.raises(openai.BadRequestError) as chat:
            await sdk.chat.completions.create(
                model=AGENT, messages=[{"role": "user", "content": "hi"}], stream=stream,
                tool_choice={"type": "function", "function": {"name": "nowhere"}},
            )
        with pytest.raises(openai.BadRequestError) as responses:
            await sdk.responses.create(model=AGENT, input="hi", stream=stream, tool_choice={"type": "function", "name": "nowhere"})
        answer = await sdk.chat.completions.create(model=AGENT, messages=[{"role": "user", "content": "still there?"}])
        await sdk.close()
    assert "nowhere" in chat.value.message and "nowhere" in responses.value.message
    assert upstream.requests and all("nowhere" not in json.dumps(r) for r in upstream.requests[:-1])
    assert answer.choices[0].finish_reason == "stop"


@pytest.mark.parametrize("stream", [False, True])
async def test_an_upstream_refusing_the_format_is_the_dialects_400(stream: bool) -> None:
    refusal = Reply.error(400, "Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model.")
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    async with gateway([refusal]) as (upstream, base_url):
        sdk = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)
        with pytest.raises(openai.BadRequestError) as chat:
            await sdk.chat.completions.create(
                model=AGENT, messages=[{"role": "user", "content": "hi"}], stream=stream,
                response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}},
            )
        with pytest.raises(openai.BadRequestError) as responses:
            await sdk.responses.create(model=AGENT, input="hi", stream=stream, text={"format": {"type": "json_schema", "name": "a", "schema": schema}})
        await sdk.close()
    assert "response_format" in chat.value.message and "response_format" in responses.value.message
    assert len(upstream.requests) == 2 and all("response_format" in r for r in upstream.requests)


async def test_bad_formats_and_choices_are_refused_naming_the_field() -> None:
    async with gateway() as (_, base_url):
        sdk = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)
        cases: list[tuple[dict[str, Any], str]] = [
            ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
            ({"response_format": {"type": "xml"}}, "response_format.type"),
            ({"response_format": {"type": "json_schema", "json_schema": {"name": "a b", "schema": {}}}}, "response_format.json_schema.name"),
            ({"tool_choice": "sometimes"}, "tool_choice"),
            ({"tool_choice": {"type": "function", "function": {}}}, "tool_choice.function.name"),
        ]
        for extra, param in cases:
            with pytest.raises(openai.BadRequestError) as refused:
                await sdk.chat.completions.create(model=AGENT, messages=[{"role": "user", "content": "hi"}], **extra)
            assert refused.value.param == param, (extra, refused.value.message)
        await sdk.close()


# ---------------------------------------------------------------- offline: the echo model


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
async def test_langchain_structured_output_works_offline_with_the_echo_model(method: str) -> None:
    settings = Settings(agents=[AgentSettings(name=AGENT)])
    async with running_kernel(EchoProvider(), settings=settings, tools=[ADD_TOOL]) as kernel, http_server(kernel) as url:
        model = chat_model(f"{url}/v1").with_structured_output(Person, method=method)  # type: ignore[arg-type]
        person = await in_thread(lambda: model.invoke("Describe someone."))
    assert isinstance(person, Person) and person.age == 18 and person.role == "admin"
