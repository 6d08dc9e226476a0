"""Graceful shutdown: SIGTERM drains, with streams open in every dialect at once.

One ``python -m gateway serve`` serves stdio, OpenFang (a socket and an SSE stream),
Agent-CLI, AG-UI and http (a native SSE prompt and an OpenAI chat stream); the echo model
streams slowly (``GATEWAY_ECHO_DELAY_S``). On SIGTERM ``/readyz`` turns 503 at once while
``/livez`` stays 200, new runs are refused in each dialect's retryable form (HTTP 503 with
``Retry-After``), the runs in flight go on for ``drain_s`` and are then interrupted with cause
``drain``: each client sees that end in its dialect's *failure* form — never a
normal-looking end (issue 22: an OpenAI chat stream used to end ``finish_reason: "stop"``).
Then sockets close with 1001, streams end and the process exits 0. A run that ends within
``drain_s`` is whole; a second signal stops at once.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.reliability._support import GatewayChild, RawWebSocket, frames, gateway_child
from tests.subprocess_gateway import gateway_env

pytestmark = pytest.mark.anyio

LONG = " ".join(f"word{i}" for i in range(400))  # 20 s at 0.05 s a word: still running when the drain ends
SHORT = " ".join(f"word{i}" for i in range(30))  # 1.5 s: ends within the drain
DRAINED = "The gateway is draining: the run was interrupted before its answer was complete"
REFUSED = "this gateway instance is draining (shutting down): retry, another instance or its restart will serve"


def config_file(tmp_path: Path, drain_s: float) -> str:
    path = tmp_path / "gateway.toml"
    path.write_text(f"drain_s = {drain_s}\n")
    return str(path)


async def sse_until_end(url: str, agent: str, started: anyio.Event, out: list[str]) -> None:
    body = {"message": LONG, "session_id": "sse"}
    async with httpx.AsyncClient(base_url=url, timeout=30) as client, client.stream("POST", f"/api/agents/{agent}/message/stream", json=body) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            out.append(line)
            if line.startswith("event: chunk"):
                started.set()


async def http_stream(url: str, path: str, body: dict[str, object], started: anyio.Event, out: list[str]) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client, client.stream("POST", path, json=body) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            out.append(line)
            if '"text_delta"' in line or '"content":"echo' in line or "TEXT_MESSAGE_CONTENT" in line:
                started.set()


def late_sockets(openfang_url: str, cli_url: str) -> list[dict[str, Any]]:
    """A new prompt on a new socket of each WebSocket dialect, while draining: the last frame."""
    out = []
    openfang = RawWebSocket(openfang_url, timeout_s=10)
    openfang.send_text(json.dumps({"type": "message", "content": "too late", "session_id": "ws-late"}))
    openfang.read_until(lambda t: any(f["type"] == "error" for f in frames(t)))
    out.append(frames(openfang.texts)[-1])
    openfang.close()
    cli = RawWebSocket(cli_url, timeout_s=10)
    cli.send_text(json.dumps({"request_id": "late", "input": {"Text": "too late"}, "stream": True}))
    cli.read_until(lambda t: any(f.get("error") for f in frames(t)))
    out.append(frames(cli.texts)[-1])
    cli.close()
    return out


def sse_data(lines: list[str]) -> list[Any]:
    return [json.loads(line[len("data: "):]) for line in lines if line.startswith("data: ") and line != "data: [DONE]"]


async def wait_draining(child: GatewayChild) -> httpx.Response:
    """``/readyz`` once the child took the signal in (it is handled by the child's loop)."""
    async with httpx.AsyncClient(base_url=child.urls["http"], timeout=10) as client:
        with anyio.fail_after(10):
            while (ready := await client.get("/readyz")).status_code == 200:
                await anyio.sleep(0.02)
            assert (await client.get("/livez")).status_code == 200  # alive while draining
    return ready


async def test_sigterm_drains_then_ends_every_stream_in_its_failure_form_and_exits_0(tmp_path: Path, anyio_backend: str) -> None:
    env = gateway_env(tmp_path / "g.db", GATEWAY_ECHO_DELAY_S="0.05")
    args = [
        "serve", "--config", config_file(tmp_path, 1.5), "--backend", anyio_backend,
        "-t", "stdio", "-t", "openfang", "-t", "agent-cli", "-t", "http", "-t", "agui",
        "--set", "openfang.port=0", "--set", "agent_cli.port=0", "--set", "http.port=0", "--set", "agui.port=0", "--set", 'stdio.session_id="stdio"',
    ]
    async with gateway_child(args, env, cwd=tmp_path) as child:
        await child.wait_ready(["openfang", "agent-cli", "http", "agui"])
        async with httpx.AsyncClient(base_url=child.urls["http"], timeout=10) as client:
            await client.post("/v1/sessions", json={"session_id": "http"})
        async with httpx.AsyncClient(base_url=child.urls["openfang"], timeout=10) as client:
            agent = (await client.get("/api/agents")).json()[0]["id"]
        of_url = child.urls["openfang"].replace("http", "ws") + f"/api/agents/{agent}/ws"
        cli_url = child.urls["agent-cli"].replace("http", "ws") + "/"

        def open_sockets() -> tuple[RawWebSocket, RawWebSocket]:
            openfang = RawWebSocket(of_url, timeout_s=15)
            openfang.send_text(json.dumps({"type": "message", "content": LONG, "session_id": "ws"}))
            openfang.read_until(lambda t: any(f["type"] == "text_delta" for f in frames(t)))
            cli = RawWebSocket(cli_url, timeout_s=15)
            cli.send_text(json.dumps({"request_id": "long", "input": {"Text": LONG}, "stream": True}))
            cli.read_until(lambda t: any("Stream" in f["response"] for f in frames(t)))
            return openfang, cli

        sse: list[str] = []
        native: list[str] = []
        chat: list[str] = []
        agui: list[str] = []
        started = [anyio.Event() for _ in range(4)]
        async with anyio.create_task_group() as tg:
            tg.start_soon(sse_until_end, child.urls["openfang"], agent, started[0], sse)
            tg.start_soon(http_stream, child.urls["http"], "/v1/sessions/http/prompt", {"text": LONG}, started[1], native)
            chat_body = {"model": "default", "stream": True, "messages": [{"role": "user", "content": LONG}]}
            tg.start_soon(http_stream, child.urls["http"], "/v1/chat/completions", chat_body, started[2], chat)
            agui_body = {
                "threadId": "agui", "runId": "r1", "state": {}, "tools": [], "context": [], "forwardedProps": {},
                "messages": [{"id": "u1", "role": "user", "content": LONG}],
            }
            tg.start_soon(http_stream, child.urls["agui"], "/agui", agui_body, started[3], agui)
            await child.send_line({"type": "prompt", "text": LONG, "request_id": "long"})
            await child.until_line(lambda x: x.get("type") == "text_delta")
            openfang, cli = await anyio.to_thread.run_sync(open_sockets)
            with anyio.fail_after(10):
                for event in started:
                    await event.wait()

            child.process.send_signal(signal.SIGTERM)
            ready = await wait_draining(child)
            assert ready.status_code == 503 and "draining" in ready.json()["not_ready"]
            async with httpx.AsyncClient(base_url=child.urls["http"], timeout=10) as client:
                refused = await client.post("/v1/sessions/http/prompt", json={"text": "too late"})
                late_chat = await client.post("/v1/chat/completions", json={"model": "default", "messages": [{"role": "user", "content": "late"}]})
            assert refused.status_code == 503 and refused.headers["retry-after"] == "1" and refused.json()["error"]["code"] == "draining"
            assert late_chat.status_code == 503 and late_chat.headers["retry-after"] == "1"
            await child.send_line({"type": "prompt", "text": "too late", "request_id": "late"})
            late_line = await child.until_line(lambda x: x.get("request_id") == "late")
            assert late_line["type"] == "error" and late_line["error"]["code"] == "draining", late_line
            async with httpx.AsyncClient(base_url=child.urls["agui"], timeout=10) as client:
                late_agui = await client.post("/agui", json={**agui_body, "threadId": "agui-late", "runId": "r2"})
            assert late_agui.status_code == 503 and late_agui.headers["retry-after"] == "1", late_agui.text
            refusals = await anyio.to_thread.run_sync(late_sockets, of_url, cli_url)
            assert refusals[0] == {"type": "error", "content": REFUSED}, refusals
            assert refusals[1]["request_id"] == "late" and refusals[1]["error"] == f"connection_error: {REFUSED}", refusals
            async with anyio.create_task_group() as readers:
                readers.start_soon(anyio.to_thread.run_sync, openfang.read_to_end, 20)
                readers.start_soon(anyio.to_thread.run_sync, cli.read_to_end, 20)
            with anyio.fail_after(15):
                code = await child.process.wait()
        openfang.close()
        cli.close()

    assert code == 0, (code, bytes(child.stderr).decode(errors="replace")[-2000:])
    stderr = bytes(child.stderr).decode(errors="replace")
    assert "received SIGTERM: draining" in stderr and "Traceback" not in stderr, stderr[-3000:]

    # stdio: the run ends once, interrupted by the drain, with the partial text.
    ends = [x for x in child.lines if x.get("request_id") == "long" and x["type"] in ("run_finished", "run_failed")]
    assert len(ends) == 1 and ends[0]["interrupted"] is True and ends[0]["interrupt_cause"] == "drain"
    assert 0 < len(ends[0]["text"]) < len("echo: " + LONG)

    # OpenFang socket: typing stop, then an error frame naming the drain (no response frame); then 1001.
    got = frames(openfang.texts)
    assert got[-1] == {"type": "error", "content": DRAINED}, got[-3:]
    assert got[-2] == {"type": "typing", "state": "stop"}
    assert not any(f["type"] == "response" for f in got)
    assert openfang.close_code == 1001

    # Agent-CLI: an error frame of the document's connection_error kind, no Complete marker; then 1001.
    last = frames(cli.texts)[-1]
    assert last["request_id"] == "long" and last["error"] == f"connection_error: {DRAINED}", last
    assert not any("Complete" in f["response"] for f in frames(cli.texts))
    assert cli.close_code == 1001

    # OpenFang SSE: an error event, then done.
    assert "event: error" in sse and sse_data(sse)[-2] == {"error": DRAINED}, sse[-8:]

    # http native SSE: run_finished, interrupted, saying why.
    events = sse_data(native)
    assert events[-1]["type"] == "run_finished" and events[-1]["interrupted"] is True and events[-1]["interrupt_cause"] == "drain", native[-4:]

    # http OpenAI chat stream: an in-stream error (the SDK raises), no finish_reason, no [DONE].
    data = sse_data(chat)
    assert data[-1]["error"]["code"] == "draining" and data[-1]["error"]["message"] == DRAINED, chat[-4:]
    assert not any(choice.get("finish_reason") for chunk in data[:-1] for choice in chunk.get("choices", ())), chat[-6:]
    assert "data: [DONE]" not in chat

    # AG-UI: RUN_ERROR naming the drain, no RUN_FINISHED.
    kinds = [e["type"] for e in sse_data(agui)]
    assert kinds[-1] == "RUN_ERROR" and sse_data(agui)[-1]["code"] == "draining" and "RUN_FINISHED" not in kinds, agui[-4:]


async def test_a_run_that_ends_within_the_drain_is_whole_and_the_process_then_exits_0(tmp_path: Path, anyio_backend: str) -> None:
    env = gateway_env(tmp_path / "g.db", GATEWAY_ECHO_DELAY_S="0.05")
    args = ["serve", "--config", config_file(tmp_path, 30), "--backend", anyio_backend, "-t", "http", "--set", "http.port=0"]
    async with gateway_child(args, env, cwd=tmp_path) as child:
        await child.wait_ready(["http"])
        chat: list[str] = []
        started = anyio.Event()
        async with anyio.create_task_group() as tg:
            body = {"model": "default", "stream": True, "messages": [{"role": "user", "content": SHORT}]}
            tg.start_soon(http_stream, child.urls["http"], "/v1/chat/completions", body, started, chat)
            with anyio.fail_after(10):
                await started.wait()
            child.process.send_signal(signal.SIGTERM)
            await wait_draining(child)
        with anyio.fail_after(15):
            code = await child.process.wait()
    assert code == 0
    data = sse_data(chat)
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in data if c.get("choices")) == "echo: " + SHORT
    assert [c["choices"][0]["finish_reason"] for c in data if c.get("choices") and c["choices"][0]["finish_reason"]] == ["stop"]
    assert chat[-1] == "" or chat[-1] == "data: [DONE]"
    assert "data: [DONE]" in chat


async def test_a_second_sigterm_stops_at_once_and_the_run_ends_as_shut_down(tmp_path: Path, anyio_backend: str) -> None:
    env = gateway_env(tmp_path / "g.db", GATEWAY_ECHO_DELAY_S="0.05")
    args = ["serve", "--config", config_file(tmp_path, 300), "--backend", anyio_backend, "-t", "http", "--set", "http.port=0"]
    async with gateway_child(args, env, cwd=tmp_path) as child:
        await child.wait_ready(["http"])
        async with httpx.AsyncClient(base_url=child.urls["http"], timeout=10) as client:
            await client.post("/v1/sessions", json={"session_id": "s"})
        native: list[str] = []
        started = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(http_stream, child.urls["http"], "/v1/sessions/s/prompt", {"text": LONG}, started, native)
            with anyio.fail_after(10):
                await started.wait()
            child.process.send_signal(signal.SIGTERM)
            await wait_draining(child)
            child.process.send_signal(signal.SIGTERM)
            with anyio.fail_after(10):  # far less than drain_s (300 s): it did not wait for the run
                code = await child.process.wait()
    assert code == 0
    end = sse_data(native)[-1]
    assert end["type"] == "run_finished" and end["interrupted"] is True and end["interrupt_cause"] == "shutdown"
    assert "while draining: stopping now" in bytes(child.stderr).decode(errors="replace")


async def test_sigterm_ends_an_open_acp_prompt_with_a_json_rpc_error_naming_the_drain_and_exits_0(tmp_path: Path, anyio_backend: str) -> None:
    env = gateway_env(tmp_path / "g.db", GATEWAY_ECHO_DELAY_S="0.05")
    async with gateway_child(["serve", "--config", config_file(tmp_path, 0.5), "--backend", anyio_backend, "-t", "acp"], env, cwd=tmp_path) as child:
        await child.send_line({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}})
        await child.send_line({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": str(tmp_path), "mcpServers": []}})
        session = (await child.until_line(lambda x: x.get("id") == 1, timeout_s=30))["result"]["sessionId"]
        prompt = {"sessionId": session, "prompt": [{"type": "text", "text": LONG}]}
        await child.send_line({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": prompt})
        await child.until_line(lambda x: x.get("method") == "session/update" and x["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        child.process.send_signal(signal.SIGTERM)
        answer = await child.until_line(lambda x: x.get("id") == 2, timeout_s=10)
        with anyio.fail_after(10):
            code = await child.process.wait()
    assert "result" not in answer and answer["error"]["data"]["code"] == "draining" and answer["error"]["message"] == DRAINED, answer
    assert code == 0


async def test_the_openai_sdk_raises_when_sigterm_cuts_its_chat_stream(tmp_path: Path, anyio_backend: str) -> None:
    """The issue's repro, with the client its users run: an OpenAI chat stream cut by a drain
    makes the SDK raise mid-iteration — it never ends as if the answer were whole."""
    import openai

    env = gateway_env(tmp_path / "g.db", GATEWAY_ECHO_DELAY_S="0.05")
    args = ["serve", "--config", config_file(tmp_path, 0.5), "--backend", anyio_backend, "-t", "http", "--set", "http.port=0"]
    async with gateway_child(args, env, cwd=tmp_path) as child:
        await child.wait_ready(["http"])
        client = openai.AsyncOpenAI(base_url=child.urls["http"] + "/v1", api_key="unused", max_retries=0)
        text: list[str] = []
        finishes: list[str] = []
        stream = await client.chat.completions.create(model="default", stream=True, messages=[{"role": "user", "content": LONG}])
        with pytest.raises(openai.APIError, match="draining") as raised:
            async for chunk in stream:
                if chunk.choices:
                    text.append(chunk.choices[0].delta.content or "")
                    if chunk.choices[0].finish_reason:
                        finishes.append(chunk.choices[0].finish_reason)
                if len(text) == 5:
                    child.process.send_signal(signal.SIGTERM)
        await client.close()
        with anyio.fail_after(20):
            code = await child.process.wait()
    assert code == 0
    assert finishes == [] and len(text) >= 5
    assert "".join(text) != "echo: " + LONG and ("echo: " + LONG).startswith("".join(text))
    assert "interrupted before its answer was complete" in str(raised.value)
