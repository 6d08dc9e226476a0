"""A model that outruns its readers: 300,000 deltas produced in one burst, every dialect.

A healthy reader — one that reads as fast as it can — must get the whole answer, in order,
and its end marker: the run waits for a reader that fell behind (within its grace) instead
of dropping what it has not read. Once an Agent-CLI client got two thirds of such an
answer and then "the events after seq 199788 are no longer retained", never a Complete.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import openai
import pytest
import websockets

from kernel.testing import ScriptedProvider, text_turn
from tests.asyncio_clients import in_asyncio

from ._support import live_gateway, stdio_pipes

pytestmark = pytest.mark.anyio

PIECES = [f"w{i} " for i in range(300_000)]
FULL = "".join(PIECES)


def burst() -> ScriptedProvider:
    return ScriptedProvider([text_turn(*PIECES)])


async def test_agent_cli_stream() -> None:
    async with live_gateway(["agent-cli"], burst()) as live:

        async def client() -> tuple[str, dict[str, Any]]:
            async with websockets.connect(live.ws("agent-cli"), max_size=None, proxy=None) as ws:  # a default client
                await ws.send(json.dumps({"request_id": "long", "input": {"Text": "go"}, "stream": True}))
                text: list[str] = []
                async for frame in ws:
                    message = json.loads(frame)
                    assert not message.get("error"), message["error"]
                    response = message["response"]
                    if "Stream" in response:
                        text.append(response["Stream"])
                    elif "Complete" in response:
                        return "".join(text), response["Complete"]
            raise AssertionError("the socket closed before Complete")

        with anyio.fail_after(120):
            text, complete = await in_asyncio(client)
        assert text == FULL and complete["interrupted"] is False


async def test_openfang_socket() -> None:
    async with live_gateway(["openfang"], burst()) as live:

        async def client() -> tuple[str, dict[str, Any]]:
            async with websockets.connect(live.ws("openfang"), max_size=None, proxy=None) as ws:
                await ws.send(json.dumps({"type": "message", "content": "go"}))
                text: list[str] = []
                async for frame in ws:
                    message = json.loads(frame)
                    assert message["type"] != "error", message
                    if message["type"] == "text_delta":
                        text.append(message["content"])
                    elif message["type"] == "response":
                        return "".join(text), message
            raise AssertionError("the socket closed before the response")

        with anyio.fail_after(120):
            text, response = await in_asyncio(client)
        assert text == FULL and response["content"] == FULL


async def test_http_native_sse_and_openai_stream() -> None:
    async with live_gateway(["http"], burst()) as live:
        url = live.urls["http"]
        with anyio.fail_after(120):
            async with httpx.AsyncClient(base_url=url, timeout=60) as client:
                await client.post("/v1/sessions", json={"session_id": "long"})
                text: list[str] = []
                last: dict[str, Any] = {}
                async with client.stream("POST", "/v1/sessions/long/prompt", json={"text": "go"}) as response:
                    async for line in response.aiter_lines():
                        if line.startswith("data: "):
                            last = json.loads(line[6:])
                            if last["type"] == "text_delta":
                                text.append(last["text"])
            assert "".join(text) == FULL and last["type"] == "run_finished" and last["text"] == FULL

            async def sdk() -> tuple[str, str | None]:
                sdk_client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
                try:
                    stream = await sdk_client.chat.completions.create(model="default", stream=True, messages=[{"role": "user", "content": "go"}])
                    parts: list[str] = []
                    finish = None
                    async for chunk in stream:
                        if chunk.choices:
                            parts.append(chunk.choices[0].delta.content or "")
                            finish = chunk.choices[0].finish_reason or finish
                    return "".join(parts), finish
                finally:
                    await sdk_client.close()

            streamed, finish = await in_asyncio(sdk)
        assert streamed == FULL and finish == "stop"


async def test_stdio_and_acp_lines(tmp_path: Any) -> None:
    async with live_gateway([], burst()) as live, stdio_pipes(live.kernel, session_id="long") as pipes:
        pipes.send({"type": "prompt", "text": "go", "request_id": "long"})
        lines = await pipes.reader.until(lambda x: x.get("type") == "run_finished", timeout_s=120)
        text = "".join(x["text"] for x in lines if x.get("type") == "text_delta")
        assert text == FULL and lines[-1]["text"] == FULL and not [x for x in lines if x.get("type") == "subscriber_lagged"]
    async with live_gateway([], burst()) as live, stdio_pipes(live.kernel, "acp") as pipes:
        pipes.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}})
        pipes.send({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": str(tmp_path), "mcpServers": []}})
        lines = await pipes.reader.until(lambda x: x.get("id") == 1)
        session = next(x for x in lines if x.get("id") == 1)["result"]["sessionId"]
        start = len(lines)
        pipes.send({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"sessionId": session, "prompt": [{"type": "text", "text": "go"}]}})
        lines = await pipes.reader.until(lambda x: x.get("id") == 2, timeout_s=120, start=start)
        updates = [x["params"]["update"] for x in lines[start:] if x.get("method") == "session/update"]
        text = "".join(u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_message_chunk")
        assert text == FULL and next(x for x in lines if x.get("id") == 2)["result"]["stopReason"] == "end_turn"


async def test_packet_message() -> None:
    from transports.packet import connect

    async with live_gateway(["packet"], burst(), packet={"endpoint": "long-burst"}) as _:

        def call() -> dict[str, Any]:
            return connect("long-burst").process_message("go", timeout=120)

        with anyio.fail_after(120):
            answer = await anyio.to_thread.run_sync(call)
    assert answer["success"] is True and answer["data"]["content"] == FULL
