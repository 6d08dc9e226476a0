"""The OpenAI dialects' codecs: ``response_format`` / ``text.format``, ``tool_choice`` and
``parallel_tool_calls`` become the kernel's prompt options; malformed ones are refused
naming the field. Pure: no server."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel import model as m
from transports.http.openai import codec as chat
from transports.http.openai import wire as chat_wire
from transports.http.responses import codec as responses
from transports.http.responses import wire as responses_wire

AGENTS = [m.AgentInfo(id="id-1", name="Helper")]
SCHEMA = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
USER = [{"role": "user", "content": "hi"}]


def chat_options(**body: Any) -> m.PromptOptions | chat_wire.OpenAIError:
    request = chat.decode_chat_request(json.dumps({"messages": USER, **body}).encode())
    assert isinstance(request, chat_wire.ChatRequest), request
    planned = chat.plan_chat(request, AGENTS, context_limit=10)
    return planned.options if isinstance(planned, chat.ChatPlan) else planned


def responses_options(**body: Any) -> m.PromptOptions | chat_wire.OpenAIError:
    request = msgspec.convert({"input": "hi", **body}, responses_wire.ResponsesRequest)
    planned = responses.plan_response(request, AGENTS, context_limit=10)
    return planned.options if isinstance(planned, responses.ResponsePlan) else planned


def test_chat_response_format_kinds() -> None:
    spec = {"type": "json_schema", "json_schema": {"name": "thing", "schema": SCHEMA, "strict": True}}
    assert chat_options(response_format=spec).output_format == m.OutputFormat(type="json_schema", name="thing", schema=SCHEMA, strict=True)  # type: ignore[union-attr]
    assert chat_options(response_format={"type": "json_object"}).output_format == m.OutputFormat(type="json_object")  # type: ignore[union-attr]
    assert chat_options(response_format={"type": "text"}).output_format is None  # type: ignore[union-attr]
    assert chat_options().output_format is None  # type: ignore[union-attr]


def test_responses_text_format_is_flat() -> None:
    fmt = {"type": "json_schema", "name": "thing", "schema": SCHEMA}
    assert responses_options(text={"format": fmt}).output_format == m.OutputFormat(type="json_schema", name="thing", schema=SCHEMA)  # type: ignore[union-attr]
    assert responses_options(text={"format": {"type": "json_object"}}).output_format == m.OutputFormat(type="json_object")  # type: ignore[union-attr]
    assert responses_options(text={"format": {"type": "text"}, "verbosity": "low"}).output_format is None  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", None),
        ("required", m.ToolChoice(mode="required")),
        ("none", m.ToolChoice(mode="none")),
        ({"type": "function", "function": {"name": "get_weather"}}, m.ToolChoice(mode="tool", name="get_weather")),
    ],
)
def test_chat_tool_choice(choice: Any, expected: m.ToolChoice | None) -> None:
    options = chat_options(tool_choice=choice, parallel_tool_calls=False)
    assert isinstance(options, m.PromptOptions)
    assert options.tool_choice == expected and options.parallel_tool_calls is False


def test_responses_tool_choice_names_the_function_flat() -> None:
    options = responses_options(tool_choice={"type": "function", "name": "get_weather"}, parallel_tool_calls=True)
    assert isinstance(options, m.PromptOptions)
    assert options.tool_choice == m.ToolChoice(mode="tool", name="get_weather") and options.parallel_tool_calls is True
    assert responses_options().parallel_tool_calls is None  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": []}}}, "response_format.json_schema.schema"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": "yes"}}}, "response_format.json_schema.strict"),
        ({"response_format": {"type": "yaml"}}, "response_format.type"),
        ({"tool_choice": "always"}, "tool_choice"),
        ({"tool_choice": {"type": "function", "name": "flat is the Responses shape"}}, "tool_choice.function.name"),
        ({"tool_choice": {"type": "custom", "custom": {"name": "x"}}}, "tool_choice.type"),
    ],
)
def test_chat_refusals_name_the_field(body: dict[str, Any], param: str) -> None:
    refused = chat_options(**body)
    assert isinstance(refused, chat_wire.OpenAIError) and refused.status == 400 and refused.param == param, refused


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"text": {"format": "json"}}, "text.format"),
        ({"text": {"format": {"type": "json_schema", "name": "", "schema": SCHEMA}}}, "text.format.name"),
        ({"tool_choice": {"type": "function", "function": {"name": "chat shape"}}}, "tool_choice.name"),
        ({"tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": []}}, "tool_choice.type"),
    ],
)
def test_responses_refusals_name_the_field(body: dict[str, Any], param: str) -> None:
    refused = responses_options(**body)
    assert isinstance(refused, chat_wire.OpenAIError) and refused.status == 400 and refused.param == param, refused


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8), lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3), max_leaves=12)


@given(fmt=_json, choice=_json, parallel=_json)
def test_fuzz_formats_and_choices_never_raise(fmt: Any, choice: Any, parallel: Any) -> None:
    """Whatever JSON sits in these fields, each dialect plans or refuses with a 400."""
    raw = json.dumps({"messages": USER, "response_format": fmt, "tool_choice": choice, "parallel_tool_calls": parallel}).encode()
    request = chat.decode_chat_request(raw)
    planned = chat.plan_chat(request, AGENTS, context_limit=10) if isinstance(request, chat_wire.ChatRequest) else request
    assert isinstance(planned, chat.ChatPlan) or planned.status == 400
    raw = json.dumps({"input": "hi", "text": {"format": fmt}, "tool_choice": choice, "parallel_tool_calls": parallel}).encode()
    decoded = responses.decode_request(raw)
    result = responses.plan_response(decoded, AGENTS, context_limit=10) if isinstance(decoded, responses_wire.ResponsesRequest) else decoded
    assert isinstance(result, responses.ResponsePlan) or result.status == 400
