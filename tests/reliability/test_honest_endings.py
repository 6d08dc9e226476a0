"""An interrupted answer never looks complete, in any dialect (issue 22).

One kernel serves http (native and OpenAI chat), OpenFang, Agent-CLI and AG-UI; a slow model
streams; mid-stream an ``Interrupt`` command arrives from elsewhere — as a client's interrupt,
and as a dialect's run timeout (the cause every interrupt carries; a drain or a shutdown ends
the same way, see test_shutdown.py). Each client sees its dialect's form: the OpenAI SDK raises
(an in-stream error, no ``finish_reason``); OpenFang, Agent-CLI and AG-UI show a client's
interrupt in their own interrupted form and any other cause as their error; the native dialect
says the cause. A failing upstream is covered in every dialect by test_provider_faults.py.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import anyio
import httpx
import openai
import pytest

from kernel import Kernel
from kernel import model as m
from kernel.testing import ScriptedProvider, running_kernel, text_turn
from tests.reliability._support import RawWebSocket, frames, serving

pytestmark = pytest.mark.anyio

Cause = Literal["client", "timeout"]
CAUSES: list[Cause] = ["client", "timeout"]
WORDS = 400  # 8 s at 0.02 s a word: still running when interrupted


def slow_model() -> ScriptedProvider:
    return ScriptedProvider([text_turn(*[f"w{i} " for i in range(WORDS)])] * 8, delay_s=0.02)


async def interrupt_running(kernel: Kernel, cause: Cause) -> None:
    """Interrupt the one run going on (whichever session, as another client would)."""
    with anyio.fail_after(10):
        while not (running := [s for s in kernel.sessions.values() if s.active is not None]):
            await anyio.sleep(0.01)
    await kernel.execute(m.Interrupt(session_id=running[0].id, cause=cause))


@pytest.mark.parametrize("cause", CAUSES)
async def test_openai_chat_stream_and_answer_raise_in_the_sdk_and_never_finish_stop(cause: Cause, anyio_backend: str) -> None:
    async with running_kernel(slow_model()) as kernel, serving(kernel, ["http"]) as live:
        client = openai.AsyncOpenAI(base_url=live.urls["http"] + "/v1", api_key="unused", max_retries=0)
        chunks: list[Any] = []
        raised: list[openai.APIError] = []
        async with anyio.create_task_group() as tg:
            try:
                stream = await client.chat.completions.create(model="default", stream=True, messages=[{"role": "user", "content": "go"}])
                async for chunk in stream:
                    chunks.append(chunk)
                    if len(chunks) == 2:  # the answer is streaming: now the interrupt
                        tg.start_soon(interrupt_running, kernel, cause)
            except openai.APIError as exc:
                raised.append(exc)
        assert raised and "interrupted before its answer was complete" in str(raised[0])
        assert chunks and not any(choice.finish_reason for chunk in chunks for choice in chunk.choices)
        refused: list[openai.APIStatusError] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(interrupt_running, kernel, cause)
            try:
                await client.chat.completions.create(model="default", messages=[{"role": "user", "content": "go"}])
            except openai.APIStatusError as exc:
                refused.append(exc)
        assert refused and refused[0].status_code == (409 if cause == "client" else 504)
        await client.close()


@pytest.mark.parametrize("cause", CAUSES)
async def test_native_sse_says_the_cause(cause: Cause, anyio_backend: str) -> None:
    async with running_kernel(slow_model()) as kernel, serving(kernel, ["http"]) as live:
        async with httpx.AsyncClient(base_url=live.urls["http"], timeout=30) as client:
            await client.post("/v1/sessions", json={"session_id": "s"})
            events: list[dict[str, Any]] = []
            async with anyio.create_task_group() as tg, client.stream("POST", "/v1/sessions/s/prompt", json={"text": "go"}) as response:
                tg.start_soon(interrupt_running, kernel, cause)
                async for line in response.aiter_lines():
                    if line.startswith("data: "):
                        events.append(json.loads(line[6:]))
    end = events[-1]
    assert end["type"] == "run_finished" and end["interrupted"] is True and end["interrupt_cause"] == cause


def _openfang(url: str) -> list[dict[str, Any]]:
    ws = RawWebSocket(url, timeout_s=20)
    try:
        ws.send_text(json.dumps({"type": "message", "content": "go"}))
        ws.read_until(lambda texts: any(json.loads(t)["type"] in ("response", "error") for t in texts), timeout_s=20)
    finally:
        ws.close()
    return frames(ws.texts)


def _agent_cli(url: str) -> list[dict[str, Any]]:
    ws = RawWebSocket(url, timeout_s=20)
    try:
        ws.send_text(json.dumps({"request_id": "r", "input": {"Text": "go"}, "stream": True}))
        ws.read_until(lambda texts: any(json.loads(t).get("error") or "Complete" in json.loads(t)["response"] for t in texts), timeout_s=20)
    finally:
        ws.close()
    return frames(ws.texts)


@pytest.mark.parametrize("cause", CAUSES)
async def test_websocket_dialects_show_a_clients_interrupt_as_interrupted_and_any_other_as_an_error(cause: Cause, anyio_backend: str) -> None:
    async with running_kernel(slow_model()) as kernel, serving(kernel, ["openfang", "agent-cli"]) as live:
        async with anyio.create_task_group() as tg:
            tg.start_soon(interrupt_running, kernel, cause)
            got = await anyio.to_thread.run_sync(_openfang, live.ws("openfang"))
        last = got[-1]
        if cause == "client":
            assert last["type"] == "response" and last["interrupted"] is True
        else:
            assert last == {"type": "error", "content": "The run did not end in time: it was interrupted before its answer was complete"}
            assert not any(f["type"] == "response" for f in got)
        async with anyio.create_task_group() as tg:
            tg.start_soon(interrupt_running, kernel, cause)
            got = await anyio.to_thread.run_sync(_agent_cli, live.ws("agent-cli"))
        last = got[-1]
        if cause == "client":
            assert last["response"]["Complete"]["interrupted"] is True and last["error"] is None
        else:
            assert last["error"] == "timeout_error: The run did not end in time: it was interrupted before its answer was complete"
            assert not any("Complete" in f["response"] for f in got)


@pytest.mark.parametrize("cause", CAUSES)
async def test_agui_ends_a_clients_interrupt_cancelled_and_any_other_with_run_error(cause: Cause, anyio_backend: str) -> None:
    body = {
        "threadId": f"t-{cause}", "runId": "r1", "state": {}, "tools": [], "context": [], "forwardedProps": {},
        "messages": [{"id": "u1", "role": "user", "content": "go"}],
    }
    async with running_kernel(slow_model()) as kernel, serving(kernel, ["agui"]) as live:
        events: list[dict[str, Any]] = []
        async with httpx.AsyncClient(base_url=live.urls["agui"], timeout=30) as client:
            async with anyio.create_task_group() as tg, client.stream("POST", "/agui", json=body) as response:
                tg.start_soon(interrupt_running, kernel, cause)
                async for line in response.aiter_lines():
                    if line.startswith("data: "):
                        events.append(json.loads(line[6:]))
    kinds = [e["type"] for e in events]
    if cause == "client":
        assert kinds[-1] == "RUN_FINISHED" and events[-1]["outcome"]["type"] == "cancelled"
    else:
        assert kinds[-1] == "RUN_ERROR" and events[-1]["code"] == "timeout" and "RUN_FINISHED" not in kinds
