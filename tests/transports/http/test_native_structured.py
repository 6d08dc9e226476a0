"""The native HTTP dialect's prompt options ``output_format``, ``tool_choice`` and
``parallel_tool_calls`` (the kernel's ``PromptOptions`` on the wire), answered by the echo
model offline; a malformed option is a 400 that names it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import jsonschema
import pytest

from kernel.settings import AgentSettings, Settings
from kernel.testing import running_kernel
from plugins.providers.echo import EchoProvider

from ._helpers import ADD_TOOL, client, http_server

pytestmark = pytest.mark.anyio

TOKEN = "native-structured-token"
SCHEMA = {
    "type": "object",
    "properties": {"when": {"type": "string", "format": "date"}, "count": {"type": "integer", "exclusiveMinimum": 2}, "kind": {"enum": ["a", "b"]}},
    "required": ["when", "count", "kind"],
}


@asynccontextmanager
async def native() -> AsyncIterator[httpx.AsyncClient]:
    async with running_kernel(EchoProvider(), settings=Settings(agents=[AgentSettings(name="Helper")]), tools=[ADD_TOOL]) as kernel:
        async with http_server(kernel, token=TOKEN) as url, client(url, TOKEN) as http:
            yield http


async def _session(http: httpx.AsyncClient) -> str:
    created = await http.post("/v1/sessions", json={})
    assert created.status_code in (200, 201), created.text
    return str(created.json()["session"]["session_id"])


async def test_output_format_option_gives_a_schema_valid_answer() -> None:
    async with native() as http:
        session = await _session(http)
        options = {"output_format": {"type": "json_schema", "name": "event", "schema": SCHEMA, "strict": True}}
        answer = await http.post(f"/v1/sessions/{session}/prompt", json={"text": "when?", "options": options}, headers={"accept": "application/json"})
    assert answer.status_code == 200, answer.text
    jsonschema.validate(json.loads(answer.json()["text"]), SCHEMA, format_checker=jsonschema.FormatChecker())


async def test_tool_choice_option_forces_the_agents_tool_then_answers() -> None:
    async with native() as http:
        session = await _session(http)
        options = {"tool_choice": {"mode": "tool", "name": "add"}, "parallel_tool_calls": False}
        answer = await http.post(f"/v1/sessions/{session}/prompt", json={"text": "add something", "options": options}, headers={"accept": "application/json"})
    result = answer.json()
    assert answer.status_code == 200 and result["stop_reason"] == "end_turn", result
    (call,) = result["tool_calls"]
    assert call["name"] == "add" and not call["is_error"]
    assert result["text"].startswith("echo: tool add returned:")


@pytest.mark.parametrize(
    "options",
    [{"output_format": {"type": "xml"}}, {"tool_choice": {"mode": "always"}}, {"tool_choice": {"mode": "tool", "name": "x", "extra": 1}}],
)
async def test_a_malformed_option_is_a_400(options: dict[str, object]) -> None:
    async with native() as http:
        session = await _session(http)
        answer = await http.post(f"/v1/sessions/{session}/prompt", json={"text": "x", "options": options}, headers={"accept": "application/json"})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] in ("invalid_request", "parse_error")


async def test_forcing_a_missing_tool_is_a_400_with_the_tools_name() -> None:
    async with native() as http:
        session = await _session(http)
        options = {"tool_choice": {"mode": "tool", "name": "nowhere"}}
        answer = await http.post(f"/v1/sessions/{session}/prompt", json={"text": "x", "options": options}, headers={"accept": "application/json"})
    assert answer.status_code == 400 and "nowhere" in answer.json()["error"]["message"]
