"""Graceful shutdown: SIGTERM with streams open in every dialect at once.

One ``python -m gateway serve`` serves stdio, OpenFang (a socket and an SSE stream),
Agent-CLI and http (a native SSE prompt and an OpenAI stream); the echo model streams
slowly (``GATEWAY_ECHO_DELAY_S``). On SIGTERM every
run ends as interrupted and each client sees that end in its own dialect, sockets close
with 1001, streams end, and the process exits 0 within a few seconds.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import anyio
import httpx
import pytest

from tests.reliability._support import RawWebSocket, frames, gateway_child
from tests.subprocess_gateway import gateway_env

pytestmark = pytest.mark.anyio

LONG = " ".join(f"word{i}" for i in range(400))  # 20 s at 0.05 s a word: still running at SIGTERM


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
            if '"text_delta"' in line or '"content":"echo' in line:
                started.set()


async def test_sigterm_interrupts_every_stream_closes_cleanly_and_exits_0(tmp_path: Path, anyio_backend: str) -> None:
    env = gateway_env(tmp_path / "g.db", GATEWAY_ECHO_DELAY_S="0.05")
    args = [
        "serve", "--backend", anyio_backend, "-t", "stdio", "-t", "openfang", "-t", "agent-cli", "-t", "http",
        "--set", "openfang.port=0", "--set", "agent_cli.port=0", "--set", "http.port=0", "--set", 'stdio.session_id="stdio"',
    ]
    async with gateway_child(args, env, cwd=tmp_path) as child:
        await child.wait_ready(["openfang", "agent-cli", "http"])
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
        sse_started = anyio.Event()
        native: list[str] = []
        native_started = anyio.Event()
        chat: list[str] = []
        chat_started = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(sse_until_end, child.urls["openfang"], agent, sse_started, sse)
            tg.start_soon(http_stream, child.urls["http"], "/v1/sessions/http/prompt", {"text": LONG}, native_started, native)
            chat_body = {"model": "default", "stream": True, "messages": [{"role": "user", "content": LONG}]}
            tg.start_soon(http_stream, child.urls["http"], "/v1/chat/completions", chat_body, chat_started, chat)
            await child.send_line({"type": "prompt", "text": LONG, "request_id": "long"})
            await child.until_line(lambda x: x.get("type") == "text_delta")
            openfang, cli = await anyio.to_thread.run_sync(open_sockets)
            with anyio.fail_after(10):
                for started in (sse_started, native_started, chat_started):
                    await started.wait()

            child.process.send_signal(signal.SIGTERM)
            async with anyio.create_task_group() as readers:
                readers.start_soon(anyio.to_thread.run_sync, openfang.read_to_end)
                readers.start_soon(anyio.to_thread.run_sync, cli.read_to_end)
            with anyio.fail_after(10):
                code = await child.process.wait()
        openfang.close()
        cli.close()

    # The sockets below close with 1001, the server's own close: hypercorn would drop them
    # with 1011 only after its graceful timeout.
    assert code == 0, (code, bytes(child.stderr).decode(errors="replace")[-2000:])
    stderr = bytes(child.stderr).decode(errors="replace")
    assert "received SIGTERM" in stderr and "Traceback" not in stderr, stderr[-3000:]

    # stdio: the run ends once, interrupted, with the partial text.
    ends = [x for x in child.lines if x.get("request_id") == "long" and x["type"] in ("run_finished", "run_failed")]
    assert len(ends) == 1 and ends[0]["type"] == "run_finished" and ends[0]["interrupted"] is True
    assert 0 < len(ends[0]["text"]) < len("echo: " + LONG)

    # OpenFang socket: typing stop, then the response marked interrupted; then 1001.
    got = frames(openfang.texts)
    response = got[-1]
    assert response["type"] == "response" and response.get("interrupted") is True, got[-3:]
    assert got[-2] == {"type": "typing", "state": "stop"}
    assert response["content"] == "".join(f["content"] for f in got if f["type"] == "text_delta")
    assert openfang.close_code == 1001

    # Agent-CLI: the Complete marker with interrupted: true; then 1001.
    last = frames(cli.texts)[-1]
    assert last["request_id"] == "long" and last["response"]["Complete"]["interrupted"] is True
    assert cli.close_code == 1001

    # OpenFang SSE: a done event saying interrupted, and the response ended.
    data = [json.loads(line[len("data: "):]) for line in sse if line.startswith("data: ")]
    assert data[-1].get("done") is True and data[-1].get("interrupted") is True, sse[-6:]

    # http native SSE: the run's events end with run_finished, interrupted.
    events = [json.loads(line[len("data: "):]) for line in native if line.startswith("data: ")]
    assert events[-1]["type"] == "run_finished" and events[-1]["interrupted"] is True, native[-4:]

    # http OpenAI stream: a finish reason, then [DONE]: the stream ends properly.
    assert chat[-1] == "" or chat[-1].startswith("data: ")
    data_lines = [line[len("data: "):] for line in chat if line.startswith("data: ")]
    assert data_lines[-1] == "[DONE]", chat[-4:]
    assert json.loads(data_lines[-2])["choices"][0]["finish_reason"] == "stop"


async def test_sigterm_answers_an_open_acp_prompt_cancelled_and_exits_0(tmp_path: Path, anyio_backend: str) -> None:
    env = gateway_env(tmp_path / "g.db", GATEWAY_ECHO_DELAY_S="0.05")
    async with gateway_child(["serve", "--backend", anyio_backend, "-t", "acp"], env, cwd=tmp_path) as child:
        await child.send_line({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}})
        await child.send_line({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": str(tmp_path), "mcpServers": []}})
        session = (await child.until_line(lambda x: x.get("id") == 1, timeout_s=30))["result"]["sessionId"]
        prompt = {"sessionId": session, "prompt": [{"type": "text", "text": LONG}]}
        await child.send_line({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": prompt})
        await child.until_line(lambda x: x.get("method") == "session/update" and x["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        child.process.send_signal(signal.SIGTERM)
        with anyio.fail_after(10):
            code = await child.process.wait()
        await anyio.sleep(0.05)
    answers = [x for x in child.lines if x.get("id") == 2]
    assert answers == [{"jsonrpc": "2.0", "id": 2, "result": answers[0]["result"]}] and answers[0]["result"]["stopReason"] == "cancelled"
    assert code == 0
