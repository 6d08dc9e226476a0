"""A model — the fake OpenAI upstream, through the ``openai`` provider — uses MCP tools
through the dialects: OpenFang's WebSocket (the gateway's composition root in this
process), the stdio dialect and ``gateway tools`` (``python -m gateway`` with configured
servers), and ACP (an editor's own servers in ``session/new``, driven by the official
ACP SDK). Approvals are asked and honoured, a crashing server fails a call clearly and
is started again, an interrupted call is cancelled on the server. Every MCP server is
real (``mcp_server.py``): a child process on stdio, or over HTTP on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import acp
import anyio
import pytest
from acp.schema import EnvVariable, HttpMcpServer, McpServerStdio

from gateway.app import build_kernel, load_registry, start_mcp_servers
from kernel.settings import Settings, load_settings
from tests.asyncio_clients import in_asyncio
from tests.fakes.openai_server import FakeOpenAIServer, Reply, ToolCallScript, fake_openai_server
from tests.subprocess_gateway import ROOT, gateway_env, gateway_process
from tests.transports.acp._client import BACKENDS, RecordingClient, capabilities, raw_gateway, spawn
from tests.transports.acp._client import run as run_sdk
from tests.transports.openfang._helpers import connect, make_config, recv_until
from transports.openfang import OpenFangTransport

from ._support import serving_http, stdio_args, stdio_toml

KEY = "sk-test-mcp-0001"


def calls(name: str, arguments: str = "{}", call_id: str = "call_1") -> Reply:
    """A model turn that calls one tool."""
    return Reply(text="", tool_calls=[ToolCallScript(name=name, arguments=arguments, id=call_id)])


def offered(upstream: FakeOpenAIServer, index: int = 0) -> dict[str, dict[str, Any]]:
    """The tools (OpenAI function specs) the model was offered in request ``index``."""
    return {t["function"]["name"]: t["function"] for t in upstream.requests[index].get("tools", [])}


def tool_message(upstream: FakeOpenAIServer, index: int) -> str:
    """What the model read back from the tool it called before request ``index``."""
    last = upstream.requests[index]["messages"][-1]
    assert last["role"] == "tool", last
    return str(last["content"])


def provider_toml(upstream: FakeOpenAIServer) -> str:
    return f'[provider.openai]\napi_key = "{KEY}"\nbase_url = "{upstream.base_url}"\nmodel = "fake-model"\nmax_retries = 0\n\n'


# ---------------------------------------------------------------- OpenFang WebSocket


@asynccontextmanager
async def openfang_gateway(settings: Settings) -> AsyncIterator[str]:
    """What ``gateway serve --transport openfang`` builds, in this process: the configured
    MCP servers, a kernel offered their tools, the OpenFang transport; yields its WebSocket URL."""
    async with anyio.create_task_group() as services:
        servers = await start_mcp_servers(services, settings)
        assert servers is not None and not servers.failures, servers and servers.failures
        kernel = build_kernel(settings, load_registry(use_entry_points=False), tool_sources=servers.sources)
        async with kernel, anyio.create_task_group() as transports:
            url = await transports.start(OpenFangTransport().serve, kernel, make_config())
            yield f"{url.replace('http://', 'ws://')}/api/agents/{kernel.settings.agents[0].agent_id()}/ws"
            transports.cancel_scope.cancel()
        services.cancel_scope.cancel()


@pytest.mark.anyio
async def test_openfang_ws_asks_before_an_mcp_tool_and_a_stop_cancels_it_on_the_server(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    script = [
        calls("files__whoami", call_id="c1"),
        Reply(text="That is the server."),
        calls("files__whoami", call_id="c2"),
        Reply(text="Not then."),
        calls("files__slow", '{"seconds": 120}', call_id="c3"),
        Reply(text="never reached"),
    ]
    async with fake_openai_server(script, api_key=KEY) as upstream:
        config = tmp_path / "g.toml"
        extra = 'env = { MCP_TEST_GREETING = "ahoy" }\napproved_tools = ["slow"]'
        config.write_text(provider_toml(upstream) + f'[store]\npath = "{tmp_path / "g.db"}"\n\n' + stdio_toml("files", state, extra=extra))
        async with openfang_gateway(load_settings(config, env={})) as ws_url:

            async def client() -> tuple[list[dict[str, Any]], ...]:
                ws = await connect(ws_url)
                async with ws:
                    await ws.send('{"type":"message","content":"who is there?"}')
                    asked = await recv_until(ws, "command_result")
                    await ws.send('{"type":"command","command":"approve"}')
                    approved = asked + await recv_until(ws, "response")
                    await ws.send('{"type":"message","content":"and again?"}')
                    asked = await recv_until(ws, "command_result")
                    await ws.send('{"type":"command","command":"deny","args":"not now"}')
                    denied = asked + await recv_until(ws, "response")
                    await ws.send('{"type":"message","content":"wait a while"}')
                    async with asyncio.timeout(20):
                        while not (state / "slow-started").exists():
                            await asyncio.sleep(0.02)
                    await ws.send('{"type":"command","command":"stop"}')
                    stopped = await recv_until(ws, "response")
                return approved, denied, stopped

            approved, denied, stopped = await in_asyncio(client)
            with anyio.fail_after(10):
                while not (state / "slow-cancelled").exists():
                    await anyio.sleep(0.02)
    question = next(f for f in approved if f["type"] == "command_result" and f["command"] == "approval")
    assert question["approval"]["tool"] == "files__whoami"
    ran = next(f for f in approved if f["type"] == "tool_result")
    assert ran["is_error"] is False and "greeting=ahoy" in ran["result"] and approved[-1]["content"] == "That is the server."
    refused = next(f for f in denied if f["type"] == "tool_result")
    assert refused["is_error"] is True and "declined" in refused["result"] and "not now" in refused["result"]
    assert stopped[-1]["interrupted"] is True
    assert not any(f["type"] == "command_result" and f.get("command") == "approval" for f in stopped), "slow is an approved tool"
    spec = offered(upstream)["files__whoami"]
    assert spec["description"].startswith("The server's process id") and spec["parameters"]["type"] == "object"
    assert "greeting=ahoy" in tool_message(upstream, 1)
    assert "declined" in tool_message(upstream, 3)
    assert len(upstream.requests) == 5, "the interrupted run made no model call after the tool"


# ---------------------------------------------------------------- stdio dialect (python -m gateway)


@pytest.mark.anyio
async def test_stdio_gateway_serves_configured_servers_and_names_the_one_that_failed(tmp_path: Path, anyio_backend: str) -> None:
    state = tmp_path / "state"
    state.mkdir()
    script = [calls("files__whoami", call_id="c1"), calls("web__add", '{"a": 19, "b": 23}', call_id="c2"), Reply(text="All done.")]
    async with serving_http(state) as url, fake_openai_server(script, api_key=KEY) as upstream:
        config = tmp_path / "g.toml"
        config.write_text(
            provider_toml(upstream)
            + stdio_toml("files", state, legacy=True, extra='env = { MCP_TEST_GREETING = "hello" }')
            + f'[[tools.mcp]]\nname = "web"\nurl = "{url}"\napproved_tools = ["add"]\n\n'
            + f'[[tools.mcp]]\nname = "broken"\ncommand = "{tmp_path / "no-such-server"}"\n'
        )
        args = ["serve", "--transport", "stdio", "--backend", anyio_backend, "--config", str(config)]
        async with gateway_process(args, gateway_env(tmp_path / "g.db"), cwd=tmp_path) as client:
            await client.receive(timeout_s=30)
            await client.send({"type": "prompt", "text": "who, and what is 19 + 23?", "request_id": "1"})
            asked = await client.until(lambda msg: msg["type"] == "tool_approval_requested", timeout_s=30)
            await client.send({"type": "resolve_tool_approval", "call_id": asked[-1]["call_id"], "approved": True})
            seen = asked + await client.until(lambda msg: msg["type"] in ("run_finished", "run_failed"), timeout_s=30)
            await client.close_stdin()
            await client.rest(timeout_s=30)
            assert await client.process.wait() == 0
            assert client.process.stderr is not None
            logs = (await client.process.stderr.receive(1 << 20)).decode()
    assert asked[-1]["name"] == "files__whoami"
    who, added = (msg for msg in seen if msg["type"] == "tool_result")
    assert "outcome" not in who and "greeting=hello" in who["result"]  # ok, the default, is left out
    assert (added["name"], added.get("outcome", "ok"), added["result"]) == ("web__add", "ok", "42")
    assert not any(msg["type"] == "tool_approval_requested" and msg["name"] == "web__add" for msg in seen)
    assert seen[-1]["text"] == "All done."
    assert {"files__whoami", "files__crash", "web__add", "web__weather"} <= set(offered(upstream))
    assert not any(name.startswith("broken__") for name in offered(upstream))
    assert "MCP server broken" in logs and "did not start" in logs and "No such file or directory" in logs


def test_gateway_tools_lists_mcp_tools_and_exits_1_for_a_server_that_did_not_start(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    config = tmp_path / "g.toml"
    config.write_text(stdio_toml("files", state, extra='approved_tools = ["add"]\ntools = ["add", "whoami"]') + '[[tools.mcp]]\nname = "gone"\ncommand = "/no/such/mcp-server"\n')
    command = [sys.executable, "-m", "gateway", "tools", "--config", str(config)]
    done = subprocess.run(command, capture_output=True, text=True, env=gateway_env(tmp_path / "g.db"), cwd=ROOT, timeout=120)
    lines = {line.split("\t")[0]: line.split("\t") for line in done.stdout.splitlines()}
    assert lines["files__add"] == ["files__add", "mcp files", "query", "Add two whole numbers."]
    assert lines["files__whoami"][1:3] == ["mcp files", "update, asks first"]
    assert "files__crash" not in lines, "not in the allow-list"
    assert lines["read_file"][1] == "plugins.builtins"
    assert done.returncode == 1
    assert "gateway: MCP server gone did not start: FileNotFoundError" in done.stderr


# ---------------------------------------------------------------- ACP (the editor's servers)


@pytest.mark.parametrize("backend", BACKENDS)
def test_acp_editor_servers_start_with_the_session_and_stop_with_it(backend: str, tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    script = [
        calls("editor__whoami", call_id="c1"),
        Reply(text="Asked the editor's server."),
        calls("web__add", '{"a": 2, "b": 3}', call_id="c2"),
        Reply(text="Five."),
        calls("editor__crash", call_id="c3"),
        Reply(text="It crashed."),
        calls("editor__whoami", call_id="c4"),
        Reply(text="It is back."),
        calls("editor__slow", '{"seconds": 120}', call_id="c5"),
        Reply(text="never reached"),
    ]
    client = RecordingClient(permission="allow_once")
    pids: list[int] = []

    async def scenario() -> int | None:
        async with serving_http(state) as url, fake_openai_server(script, api_key=KEY) as upstream:
            config = tmp_path / "g.toml"
            config.write_text(provider_toml(upstream))
            async with spawn(client, backend, tmp_path, tmp_path / "g.db", "--config", str(config)) as (conn, proc):
                started = await conn.initialize(protocol_version=acp.PROTOCOL_VERSION, client_capabilities=capabilities())
                assert started.agent_capabilities.mcp_capabilities.http is True
                servers = [
                    McpServerStdio(name="editor", command=sys.executable, args=stdio_args(state), env=[EnvVariable(name="MCP_TEST_GREETING", value="from zed")]),
                    HttpMcpServer(type="http", name="web", url=url, headers=[]),
                ]
                sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=servers)).session_id
                for text in ("who?", "2 + 3?", "crash it", "who now?"):
                    assert (await conn.prompt(session_id=sid, prompt=[acp.text_block(text)])).stop_reason == "end_turn"
                slow = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=[acp.text_block("wait")]))
                async with asyncio.timeout(20):
                    while not (state / "slow-started").exists():
                        await asyncio.sleep(0.02)
                    await conn.cancel(session_id=sid)
                    assert (await slow).stop_reason == "cancelled"
                    while not (state / "slow-cancelled").exists():
                        await asyncio.sleep(0.02)
                pids.extend(int(text.split()[0].removeprefix("pid=")) for text in done_texts(client, "pid="))
                assert alive(pids[-1]), "the server started again runs while the session is open"
                await conn.close_session(session_id=sid)
                async with asyncio.timeout(10):
                    while alive(pids[-1]):
                        await asyncio.sleep(0.05)
            assert {"editor__whoami", "editor__crash", "web__add"} <= set(offered(upstream))
            assert "greeting=from zed" in tool_message(upstream, 1) and f"cwd={tmp_path}" in tool_message(upstream, 1)
            assert tool_message(upstream, 3) == "5"
            assert "the MCP server editor stopped while running crash" in tool_message(upstream, 5)
            return proc.returncode

    assert run_sdk(scenario(), timeout_s=90) == 0
    asked = [call.title for call, _ in client.permission_requests]
    assert asked == ["Whoami (editor)", "Add (web)", "Crash (editor)", "Whoami (editor)", "Slow (editor)"]
    statuses = [(u.status, text_of(u)) for u in client.of("tool_call_update") if u.status in ("completed", "failed")]
    assert [status for status, _ in statuses] == ["completed", "completed", "failed", "completed", "failed"]
    assert "started again at its next use" in statuses[2][1]
    assert len(pids) == 2 and pids[0] != pids[1], "the crashed server was started again: a new process"


@pytest.mark.parametrize("backend", BACKENDS)
def test_acp_bad_servers_are_refused_a_failing_one_is_named_and_load_replaces_them(backend: str, tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    editor = {"name": "editor", "command": sys.executable, "args": stdio_args(state), "env": []}
    gone = {"name": "gone", "command": str(tmp_path / "no-such-server"), "args": [], "env": []}
    with raw_gateway(backend, tmp_path, tmp_path / "g.db") as gw:
        gw.call(0, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        sse = gw.call(1, "session/new", {"cwd": str(tmp_path), "mcpServers": [{"type": "sse", "name": "old", "url": "http://127.0.0.1:9/sse", "headers": []}]})
        assert sse["error"]["code"] == -32602 and "mcpServers[0] (old): 'sse' MCP servers are not supported" in sse["error"]["message"]
        malformed = gw.call(2, "session/new", {"cwd": str(tmp_path), "mcpServers": [{"name": "no command"}]})
        assert malformed["error"]["code"] == -32602 and "missing required field `command`" in malformed["error"]["message"]
        sid = gw.call(3, "session/new", {"cwd": str(tmp_path), "mcpServers": [gone, editor]})["result"]["sessionId"]

        def prompt(rid: int, text: str) -> list[dict[str, Any]]:
            """The session/update payloads of one prompt; every permission asked is allowed."""
            gw.send({"jsonrpc": "2.0", "id": rid, "method": "session/prompt", "params": {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}})
            updates = []
            while True:
                message = gw.receive()
                if message.get("method") == "session/request_permission":
                    gw.send({"jsonrpc": "2.0", "id": message["id"], "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}})
                elif message.get("method") == "session/update":
                    updates.append(message["params"]["update"])
                elif message.get("id") == rid:
                    assert message["result"]["stopReason"] == "end_turn", message
                    return updates

        # The offline echo model calls a tool it is offered when the prompt reads "/tool NAME ARGS".
        ran = prompt(4, "/tool editor__whoami {}")
        done = next(u for u in ran if u["sessionUpdate"] == "tool_call_update" and u.get("status") == "completed")
        pid = int(done["content"][0]["content"]["text"].split()[0].removeprefix("pid="))
        assert alive(pid)
        reloaded = gw.call(5, "session/load", {"sessionId": sid, "cwd": str(tmp_path), "mcpServers": []})
        assert "result" in reloaded
        deadline = time.monotonic() + 10
        while alive(pid):
            assert time.monotonic() < deadline, "the server the editor no longer gives still runs"
            time.sleep(0.05)
        echoed = prompt(6, "/tool editor__whoami {}")
        assert not any(u["sessionUpdate"] == "tool_call" for u in echoed), "its tools are no longer offered"
        code, _ = gw.close()
    assert code == 0
    log = (tmp_path / "gateway.log").read_text()
    assert "MCP server gone" in log and "did not start" in log


def done_texts(client: RecordingClient, prefix: str) -> list[str]:
    return [text_of(u) for u in client.of("tool_call_update") if u.status == "completed" and text_of(u).startswith(prefix)]


def text_of(update: Any) -> str:
    return "".join(getattr(c.content, "text", "") for c in update.content or () if c.type == "content")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
