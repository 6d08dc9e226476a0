"""The Vercel AI SDK under Node against the gateway (issue 23): ``generateObject`` over both
OpenAI dialects, ``generateText`` with a forced ``toolChoice``, and a second turn built from
``response.messages`` with the Responses provider's default ``store`` (which sends the earlier
answer as an ``item_reference``). The gateway runs the openai provider over the scripted
upstream, which honours ``response_format`` and ``tool_choice`` as a real model does."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest

from kernel.settings import AgentSettings, OpenAISettings, Settings
from kernel.testing import running_kernel
from plugins.providers.openai import OpenAIProvider
from tests.fakes.openai_server import FakeOpenAIServer, Reply, fake_openai_server
from tests.node_clients import npm_install

from ._helpers import ADD_TOOL, http_server

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore:Async generator .* was garbage collected:ResourceWarning"),
]

#: Pinned: ai 7 needs Node 22; the 6.x line is what Node 20 runs.
AI_SDK = ["ai@6.0.325", "@ai-sdk/openai@3.0.141", "@ai-sdk/openai-compatible@2.0.92", "zod@4.6.7"]
SCRIPT = Path(__file__).with_name("ai_sdk_client.cjs")
AGENT = "Helper"


@asynccontextmanager
async def gateway() -> AsyncIterator[tuple[FakeOpenAIServer, str]]:
    async with fake_openai_server([Reply(text="Paris is lovely in spring.")]) as upstream:
        provider = OpenAIProvider(OpenAISettings(api_key="sk-upstream", base_url=upstream.base_url, model="fake-model", timeout_s=10.0, max_retries=0))
        settings = Settings(agents=[AgentSettings(name=AGENT)])
        async with running_kernel(provider, settings=settings, tools=[ADD_TOOL]) as kernel, http_server(kernel) as url:
            yield upstream, f"{url}/v1"
        await provider.aclose()


async def run_sdk(base_url: str, *steps: str) -> dict[str, Any]:
    node, modules = npm_install("ai-sdk", AI_SDK)
    env = {**os.environ, "NODE_PATH": str(modules), "NODE_ENV": "production"}
    plan = json.dumps({"baseURL": base_url, "model": AGENT, "steps": list(steps)})
    with anyio.fail_after(120):
        done = await anyio.run_process([node, str(SCRIPT), plan], env=env, check=False)
    out = done.stdout.decode()
    if done.returncode != 0 or not out:
        pytest.fail(f"the AI SDK script failed ({done.returncode}): {out}\n{done.stderr.decode()[-3000:]}", pytrace=False)
    result: dict[str, Any] = json.loads(out)
    for name, value in result.items():
        assert "thrown" not in value, (name, value["thrown"])
    return result


def _person_ok(value: Any, schema: dict[str, Any]) -> None:
    jsonschema.validate(value, schema)
    assert value["age"] >= 18 and len(value["tags"]) >= 2 and value["role"] in ("admin", "user")


async def test_generate_object_over_both_dialects() -> None:
    async with gateway() as (upstream, base_url):
        result = await run_sdk(base_url, "object_responses", "object_chat")
    responses, chat = result["object_responses"], result["object_chat"]
    sent_format = responses["request"]["text"]["format"]
    assert sent_format["type"] == "json_schema"
    _person_ok(responses["object"], sent_format["schema"])
    assert chat["request"]["response_format"]["type"] == "json_schema"
    _person_ok(chat["object"], chat["request"]["response_format"]["json_schema"]["schema"])
    # What the upstream got: the format of each, as chat completions spell it.
    assert [r["response_format"]["type"] for r in upstream.requests] == ["json_schema", "json_schema"]
    assert upstream.requests[0]["response_format"]["json_schema"]["schema"] == sent_format["schema"]


async def test_generate_text_with_a_forced_tool_over_both_dialects() -> None:
    async with gateway() as (upstream, base_url):
        result = await run_sdk(base_url, "tool_responses", "tool_chat")
    for name in ("tool_responses", "tool_chat"):
        step = result[name]
        assert step["finishReason"] == "tool-calls", (name, step)
        (call,) = step["toolCalls"]
        assert call["toolName"] == "weather"
        assert len(call["input"]["city"]) >= 2 and call["input"]["days"] >= 1
    assert result["tool_responses"]["request"]["tool_choice"] == {"type": "function", "name": "weather"}
    assert result["tool_chat"]["request"]["tool_choice"] == "required"
    assert upstream.requests[0]["tool_choice"] == {"type": "function", "function": {"name": "weather"}}
    assert [t["function"]["name"] for t in upstream.requests[0]["tools"]] == ["add", "weather"]
    # "required" from a client with tools of its own means one of those: the agent's "add"
    # is not offered on that call, so the call comes back to the program.
    assert upstream.requests[1]["tool_choice"] == "required"
    assert [t["function"]["name"] for t in upstream.requests[1]["tools"]] == ["weather"]
    assert len(upstream.requests) == 2


async def test_a_second_turn_from_response_messages_with_the_default_store() -> None:
    async with gateway() as (upstream, base_url):
        result = await run_sdk(base_url, "second_turn")
    step = result["second_turn"]
    assert step["first"] == "Paris is lovely in spring." and step["text"] == "Paris is lovely in spring."
    kinds = [item.get("type", "message") for item in step["request"]["input"]]
    assert "item_reference" in kinds, step["request"]["input"]  # what the SDK sends with store: true
    second = upstream.requests[-1]["messages"]
    assert [(m["role"], m["content"]) for m in second if m["role"] != "system"] == [
        ("user", "first question"), ("assistant", "Paris is lovely in spring."), ("user", "second question"),
    ]
