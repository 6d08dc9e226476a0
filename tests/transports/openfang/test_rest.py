"""OpenFang's REST API and SSE stream, with httpx and with a stdlib client shaped like
OpenFang's Python SDK (urllib in a thread, JSON content type, SSE read line by line)."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
import uuid
from typing import Any

import anyio
import httpx
import msgspec
import pytest

from kernel import model as m
from kernel.testing import ScriptedProvider, failing_turn, text_turn, tool_turn
from kernel.tools import Tool
from plugins.providers.echo import EchoProvider
from tests.asyncio_clients import in_asyncio
from transports.openfang.config import REST_DENIAL, OpenFangConfig

from ._helpers import connect, make_config, recv_until, serving

pytestmark = pytest.mark.anyio
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class SdkClient:
    """What OpenFang's Python SDK does: urllib, ``Content-Type: application/json`` always,
    bodyless POSTs for stop/reset/switch, errors from the JSON ``error`` field."""

    def __init__(self, base_url: str, token: str | None = None) -> None:
        self.base_url = base_url
        self.token = token

    def _open(self, method: str, path: str, body: Any = None) -> Any:
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base_url + path, data=data, method=method, headers=headers)
        return urllib.request.urlopen(request, timeout=10)

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        try:
            with self._open(method, path, body) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def stream(self, path: str, body: Any) -> tuple[list[dict[str, Any]], list[str]]:
        """SSE as the SDKs read it: only lines starting with exactly ``data: ``."""
        events, other = [], []
        with self._open("POST", path, body) as response:
            for raw in response:
                line = raw.decode("utf-8").rstrip("\r\n")
                if line.startswith("data: "):
                    events.append(json.loads(line[len("data: "):]))
                elif line:
                    other.append(line)
        return events, other


async def sdk(server: Any, fn: str, *args: Any, token: str | None = None) -> Any:
    client = SdkClient(server.url, token)
    return await anyio.to_thread.run_sync(lambda: getattr(client, fn)(*args))


async def test_health_status_version_agents() -> None:
    async with serving() as server, httpx.AsyncClient(base_url=server.url) as http:
        health = (await http.get("/api/health")).json()
        assert health == {"status": "ok", "version": server.kernel.version}
        status = (await http.get("/api/status")).json()
        assert status["status"] == "running" and status["agent_count"] == 1
        version = (await http.get("/api/version")).json()
        assert version["version"] == server.kernel.version and version["dialect"] == "openfang"
        agents = (await http.get("/api/agents")).json()
        assert [a["id"] for a in agents] == [server.agent_id]
        assert {"name": "General Assistant", "state": "Running", "model_provider": "scripted"}.items() <= agents[0].items()
        one = await http.get(f"/api/agents/{server.agent_id}")
        assert one.status_code == 200 and one.json()["name"] == "General Assistant"
        bad = await http.get("/api/agents/default")
        assert (bad.status_code, bad.json()) == (400, {"error": "Invalid agent ID"})
        unknown = await http.get(f"/api/agents/{uuid.uuid4()}")
        assert (unknown.status_code, unknown.json()) == (404, {"error": "Agent not found"})
        assert (await http.get("/api/hands")).json() == {"hands": [], "total": 0}
        missing = await http.get("/api/nothing-here")
        assert missing.status_code == 404 and "error" in missing.json()
        # The same through the SDK-like client.
        assert await sdk(server, "call", "GET", "/api/health") == (200, health)
        assert await sdk(server, "call", "GET", "/api/agents/nope") == (400, {"error": "Invalid agent ID"})


async def test_message_and_its_errors() -> None:
    provider = ScriptedProvider([text_turn("Hi", " there"), failing_turn("upstream exploded")])
    async with serving(provider) as server, httpx.AsyncClient(base_url=server.url) as http:
        base = f"/api/agents/{server.agent_id}"
        ok = await http.post(f"{base}/message", json={"message": "hello"})
        assert ok.status_code == 200
        body = ok.json()
        assert {k: body[k] for k in ("response", "input_tokens", "output_tokens", "iterations", "cost_usd")} == {
            "response": "Hi there", "input_tokens": 3, "output_tokens": 5, "iterations": 0, "cost_usd": None,
        }
        failed = await http.post(f"{base}/message", json={"message": "again"})
        assert (failed.status_code, failed.json()) == (502, {"error": "upstream exploded"})
        too_big = await http.post(f"{base}/message", json={"message": "x" * (64 * 1024 + 1)})
        assert (too_big.status_code, too_big.json()) == (413, {"error": "Message too large (max 64KB)"})
        empty = await http.post(f"{base}/message", json={"message": "  "})
        assert (empty.status_code, empty.json()) == (400, {"error": "Missing or empty 'message' field"})
        garbage = await http.post(f"{base}/message", content=b"{not json", headers={"content-type": "application/json"})
        assert garbage.status_code == 400 and "error" in garbage.json()
        nobody = await http.post(f"/api/agents/{uuid.uuid4()}/message", json={"message": "hi"})
        assert (nobody.status_code, nobody.json()) == (404, {"error": "Agent not found"})
        assert await sdk(server, "call", "POST", f"{base}/message", {"message": "x" * 70000}) == (413, {"error": "Message too large (max 64KB)"})


def _data_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[len("data: "):]) for line in text.splitlines() if line.startswith("data: ")]


async def test_sse_stream_with_httpx_and_the_sdk_client() -> None:
    provider = ScriptedProvider([tool_turn("clock", "{}", call_id="call_3"), text_turn("It is", " noon")])
    clock = Tool(name="clock", description="time", parameters={"type": "object"}, handler=lambda a, c: _noon())
    async with serving(provider, tools=[clock]) as server, httpx.AsyncClient(base_url=server.url) as http:
        path = f"/api/agents/{server.agent_id}/message/stream"
        names, data = [], []
        async with http.stream("POST", path, json={"message": "time?"}) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            async for line in response.aiter_lines():
                if line.startswith("event: "):
                    names.append(line[len("event: "):])
                elif line.startswith("data: "):
                    data.append(json.loads(line[len("data: "):]))
        assert names == ["phase", "tool_use", "phase", "tool_result", "phase", "chunk", "phase", "done"]
        assert data[1] == {"tool": "clock", "id": "call_3"} and data[2] == {"phase": "tool_use", "detail": "clock"}
        assert data[3]["tool"] == "clock" and data[3]["input"] == "{}" and data[3]["result"] == "noon"
        assert data[5] == {"content": "It is noon", "done": False}
        assert data[-1] == {"done": True, "usage": {"input_tokens": 7, "output_tokens": 7}}
        provider.turns = [text_turn("again")]
        provider.requests.clear()
        events, _ = await sdk(server, "stream", path, {"message": "once more"})
        chunks = "".join(e["content"] for e in events if "content" in e)
        assert chunks == "again" and events[-1]["done"] is True


async def _noon() -> str:
    return "noon"


async def test_sse_keepalive_comments_and_stop_with_a_bodyless_post() -> None:
    provider = ScriptedProvider([text_turn(*["slow "] * 100)], delay_s=0.05)
    async with serving(provider, config=make_config(sse_keepalive_s=0.05, coalesce_ms=400, coalesce_chars=100_000)) as server:
        base = f"/api/agents/{server.agent_id}"
        results: dict[str, Any] = {}

        async def reader() -> None:
            results["stream"] = await sdk(server, "stream", f"{base}/message/stream", {"message": "go"})

        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            with anyio.fail_after(5):
                while not any(s.busy for s in server.kernel.sessions.values()):
                    await anyio.sleep(0.01)
            await anyio.sleep(0.3)
            results["stop"] = await sdk(server, "call", "POST", f"{base}/stop")  # JSON content type, no body
        results["idle_stop"] = await sdk(server, "call", "POST", f"{base}/stop")
    events, other = results["stream"]
    assert ": keep-alive" in other
    assert results["stop"] == (200, {"status": "ok", "message": "Run cancelled"})
    assert results["idle_stop"] == (200, {"status": "ok", "message": "No active run"})
    assert events[-1]["done"] is True and events[-1]["interrupted"] is True
    assert 0 < len("".join(e.get("content", "") for e in events)) < len("slow ") * 100


async def test_sessions_reset_switch_and_history() -> None:
    async with serving(EchoProvider()) as server, httpx.AsyncClient(base_url=server.url) as http:
        base = f"/api/agents/{server.agent_id}"
        await http.post(f"{base}/message", json={"message": "first"})
        session = (await http.get(f"{base}/session")).json()
        assert [(msg["role"], msg["content"]) for msg in session["messages"]] == [("User", "first"), ("Assistant", "echo: first")]
        first_id = session["session_id"]
        assert UUID.fullmatch(first_id)
        created = await http.post(f"{base}/sessions", json={"label": "second"})
        assert created.status_code == 200 and {"session_id", "label"} <= created.json().keys()
        assert created.json()["label"] == "second" and created.json()["active"] is True
        second_id = created.json()["session_id"]
        assert UUID.fullmatch(second_id)
        listed = (await http.get(f"{base}/sessions")).json()["sessions"]
        assert {s["session_id"]: s["active"] for s in listed} == {first_id: False, second_id: True}
        assert (await http.get(f"{base}/session")).json()["messages"] == []
        # The SDK posts switch/reset/new-session with a JSON content type and no body.
        assert await sdk(server, "call", "POST", f"{base}/sessions/{first_id}/switch") == (
            200, {"status": "ok", "message": "Session switched", "session_id": first_id},
        )
        assert (await http.get(f"{base}/session")).json()["session_id"] == first_id
        assert await sdk(server, "call", "POST", f"{base}/sessions/nope/switch") == (400, {"error": "Invalid session ID"})
        assert await sdk(server, "call", "POST", f"{base}/sessions/{uuid.uuid4()}/switch") == (404, {"error": "Session not found"})
        assert await sdk(server, "call", "POST", f"{base}/session/reset") == (
            200, {"status": "ok", "message": "Session reset", "session_id": first_id, "queued": False},
        )
        assert (await http.get(f"{base}/session")).json()["messages"] == []
        await http.post(f"{base}/message", json={"message": "again"})
        status, _ = await sdk(server, "call", "POST", f"{base}/sessions")
        assert status == 200
        await http.post(f"{base}/message", json={"message": "in the third"})
        assert (await sdk(server, "call", "POST", f"{base}/sessions/{first_id}/switch"))[0] == 200
        # OpenFang's DELETE /history clears every session of the agent, not only the active one.
        assert await sdk(server, "call", "DELETE", f"{base}/history") == (200, {"status": "ok", "message": "All history cleared", "sessions": 3})
        assert (await http.get(f"{base}/session")).json()["messages"] == []
        assert {s["message_count"] for s in (await http.get(f"{base}/sessions")).json()["sessions"]} == {0}


async def test_commands_listing_for_the_dashboard() -> None:
    async with serving() as server, httpx.AsyncClient(base_url=server.url) as http:
        web = (await http.get("/api/commands?surface=web")).json()
        names = {c["name"] for c in web["commands"]}
        assert {"context", "verbose", "queue", "stop", "new", "model", "help", "history", "tools"} <= names
        verbose = next(c for c in web["commands"] if c["name"] == "verbose")
        assert verbose["cmd"] == "/verbose" and verbose["desc"] == verbose["description"] and verbose["aliases"] == []
        assert web["surface"] == "web" and (await http.get("/api/commands")).json() == web
        bogus = await http.get("/api/commands?surface=bogus")
        assert bogus.status_code == 400 and "bogus" in bogus.json()["error"]


async def test_uploads_become_attachments_over_rest_and_the_socket() -> None:
    provider = ScriptedProvider([text_turn("seen")])
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256))
    async with serving(provider) as server, httpx.AsyncClient(base_url=server.url) as http:
        base = f"/api/agents/{server.agent_id}"
        image = await http.post(f"{base}/upload", files={"file": ("cat.png", png, "image/png")}, data={"filename": "cat.png"})
        assert image.status_code == 200
        info = image.json()
        assert info["filename"] == "cat.png" and info["content_type"] == "image/png" and info["size"] == len(png)
        text = await http.post(f"{base}/upload", files={"file": ("notes.txt", b"remember the milk", "text/plain")})
        binary = await http.post(f"{base}/upload", files={"file": ("blob.bin", b"\xff\xfe\x00\x01", "application/octet-stream")})
        assert binary.status_code == 400 and "is not text the model can read" in binary.json()["error"]
        reply = await http.post(f"{base}/message", json={"message": "look", "attachments": [{"file_id": info["file_id"]}]})
        assert reply.status_code == 200
        user = provider.requests[-1].messages[-1]
        assert [type(p).__name__ for p in user.parts] == ["TextPart", "ImagePart"] and user.parts[1].data == png
        stale = await http.post(f"{base}/message", json={"message": "x", "attachments": [{"file_id": "gone"}]})
        assert stale.status_code == 400

        async def client() -> dict[str, Any]:
            ws = await connect(server.ws_url)
            async with ws:
                frame = {"type": "message", "content": "read this", "attachments": [{"file_id": text.json()["file_id"], "filename": "notes.txt"}]}
                await ws.send(json.dumps(frame))
                return (await recv_until(ws, "response"))[-1]

        assert (await in_asyncio(client))["content"] == "seen"
        parts = provider.requests[-1].messages[-1]
        assert "remember the milk" in parts.content and "notes.txt" in parts.content


async def test_rest_runs_decline_tool_approvals_with_a_reason() -> None:
    guarded = Tool(name="guarded", description="asks", parameters={"type": "object"}, handler=lambda a, c: _noon(), requires_approval=True)
    provider = ScriptedProvider([tool_turn("guarded", "{}"), text_turn("could not")])
    async with serving(provider, tools=[guarded]) as server, httpx.AsyncClient(base_url=server.url) as http:
        with anyio.fail_after(5):
            reply = await http.post(f"/api/agents/{server.agent_id}/message", json={"message": "do it"})
        assert reply.status_code == 200 and reply.json()["response"] == "could not"
        tool_message = provider.requests[-1].messages[-1]
        assert tool_message.role == "tool" and "WebSocket" in tool_message.content


async def test_token_protects_rest_but_not_health() -> None:
    async with serving(config=make_config(token="s3cret")) as server, httpx.AsyncClient(base_url=server.url) as http:
        assert (await http.get("/api/health")).status_code == 200
        denied = await http.get("/api/agents")
        assert (denied.status_code, denied.json()) == (401, {"error": "Missing or invalid token"})
        assert (await http.get("/api/agents", headers={"Authorization": "Bearer s3cret"})).status_code == 200
        assert (await http.get("/api/agents?token=s3cret")).status_code == 200
        status, _ = await sdk(server, "call", "GET", "/api/agents", token="s3cret")
        assert status == 200
        assert (await sdk(server, "call", "GET", "/api/agents"))[0] == 401


async def test_websocket_and_rest_share_the_active_session() -> None:
    async with serving(EchoProvider()) as server, httpx.AsyncClient(base_url=server.url) as http:

        async def client() -> None:
            ws = await connect(server.ws_url)
            async with ws:
                await ws.send("over the socket")
                await recv_until(ws, "response")

        await in_asyncio(client)
        history = (await http.get(f"/api/agents/{server.agent_id}/session")).json()
        assert [m["content"] for m in history["messages"]] == ["over the socket", "echo: over the socket"]


async def test_stop_leaves_runs_of_other_transports_alone() -> None:
    provider = ScriptedProvider([text_turn(*["x"] * 50)], delay_s=0.02)
    async with serving(provider) as server:
        other = await server.kernel.session(None, server.agent_id)  # e.g. an Agent-CLI user's session
        await server.kernel.execute(m.Prompt(session_id=other.id, text="busy elsewhere"))
        with anyio.fail_after(5):
            while not other.busy:
                await anyio.sleep(0.01)
        status, body = await sdk(server, "call", "POST", f"/api/agents/{server.agent_id}/stop")
        assert (status, body) == (200, {"status": "ok", "message": "No active run"})
        assert other.active is not None and not other.active.interrupted
        other.interrupt()


async def test_rest_tool_approval_chooses_the_policy_of_rest_runs() -> None:
    guarded = Tool(name="guarded", description="asks", parameters={"type": "object"}, handler=lambda a, c: _noon(), requires_approval=True)
    provider = ScriptedProvider([tool_turn("guarded", "{}"), text_turn("it ran")])
    async with serving(provider, tools=[guarded], config=make_config(rest_tool_approval="approve")) as server, httpx.AsyncClient(base_url=server.url) as http:
        with anyio.fail_after(5):
            reply = await http.post(f"/api/agents/{server.agent_id}/message", json={"message": "do it"})
        assert reply.status_code == 200 and reply.json()["response"] == "it ran"
        tool_message = provider.requests[-1].messages[-1]
        assert tool_message.role == "tool" and tool_message.content == "noon" and tool_message.outcome == "ok"


async def test_rest_tool_approval_cannot_ask() -> None:
    for setting in ("ask", {"mode": "ask", "turn_limit": "stop"}, {"mode": "reject", "turn_limit": "ask"}):
        with pytest.raises(msgspec.ValidationError, match="cannot be asked"):
            msgspec.convert({"rest_tool_approval": setting}, OpenFangConfig)
    table = msgspec.convert({"rest_tool_approval": {"mode": "reject", "allow_tools": ["clock"]}}, OpenFangConfig)
    assert table.rest_policy == m.ApprovalPolicy(mode="reject", allow_tools=("clock",), reason=REST_DENIAL)
    assert table.rest_policy.at_turn_limit() == "stop" and OpenFangConfig().rest_policy == m.ApprovalPolicy(mode="reject", reason=REST_DENIAL)
    assert OpenFangConfig().socket_policy == m.ApprovalPolicy()
