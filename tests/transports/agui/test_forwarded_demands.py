"""AG-UI runs that ask for structured output or a forced tool through ``forwardedProps``
(``outputFormat``, ``toolChoice``, ``parallelToolCalls`` in the kernel's shapes), answered by
the echo model offline; a malformed one is a 400 in AG-UI's shape."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import jsonschema
import pytest

from kernel.settings import AgentSettings, Settings
from kernel.testing import running_kernel
from plugins.providers.echo import EchoProvider
from tests.transports.http._helpers import ADD_TOOL

from ._helpers import Stream, agui_server, read_stream, run_input, user

pytestmark = pytest.mark.anyio

SCHEMA = {"type": "object", "properties": {"title": {"type": "string", "minLength": 3}, "items": {"type": "array", "items": {"type": "integer"}, "minItems": 2}}, "required": ["title", "items"]}
LOOKUP = {"name": "lookup", "description": "runs in the browser", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}


@asynccontextmanager
async def agui() -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(agents=[AgentSettings(name="Helper")])
    async with running_kernel(EchoProvider(), settings=settings, tools=[ADD_TOOL]) as kernel:
        async with agui_server(kernel) as url, httpx.AsyncClient(base_url=url, timeout=20.0) as http:
            yield http


async def post(http: httpx.AsyncClient, body: dict[str, Any]) -> Stream:
    async with http.stream("POST", "", json=body, headers={"accept": "text/event-stream"}) as response:
        return await read_stream(response)


async def test_output_format_in_forwarded_props_shapes_the_answer() -> None:
    props = {"outputFormat": {"type": "json_schema", "name": "list", "schema": SCHEMA}, "somethingElse": 1}
    async with agui() as http:
        stream = await post(http, run_input("t1", "r1", [user("make a list")], forwardedProps=props))
    assert stream.status == 200 and stream.events[-1]["type"] == "RUN_FINISHED"
    jsonschema.validate(json.loads(stream.text()), SCHEMA)


async def test_a_forced_client_tool_comes_back_as_the_runs_pending_call() -> None:
    props = {"toolChoice": {"mode": "tool", "name": "lookup"}, "parallelToolCalls": False}
    async with agui() as http:
        stream = await post(http, run_input("t2", "r1", [user("find it")], tools=[LOOKUP], forwardedProps=props))
    (start,) = stream.of("TOOL_CALL_START")
    assert start["toolCallName"] == "lookup"
    arguments = "".join(event["delta"] for event in stream.of("TOOL_CALL_ARGS"))
    jsonschema.validate(json.loads(arguments), LOOKUP["parameters"])
    assert stream.events[-1]["outcome"] == {"type": "success", "pendingToolCallIds": [start["toolCallId"]]}


@pytest.mark.parametrize(
    "props",
    [
        {"outputFormat": {"type": "yaml"}},
        {"toolChoice": {"mode": "sometimes"}},
        {"toolChoice": "required"},
        {"parallelToolCalls": "no"},
    ],
)
async def test_malformed_demands_are_a_400(props: dict[str, Any]) -> None:
    async with agui() as http:
        response = await http.post("", json=run_input("t3", "r1", [user("x")], forwardedProps=props))
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_request" and "forwardedProps" in response.json()["message"]


async def test_forcing_a_tool_nobody_offers_fails_the_run_in_agui_shape() -> None:
    async with agui() as http:
        stream = await post(http, run_input("t4", "r1", [user("x")], forwardedProps={"toolChoice": {"mode": "tool", "name": "nowhere"}}))
    error = stream.events[-1]
    assert error["type"] == "RUN_ERROR" and "nowhere" in error["message"]
