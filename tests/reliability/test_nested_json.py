"""JSON nested far deeper than any parser's recursion limit, at every decode site.

``[[[[…]]]]`` 50,000 levels deep is a valid JSON text of 100 kB; msgspec (like the
standard library) raises ``RecursionError`` on it. One such line once ended the stdio and
ACP processes (their subprocess tests cover them: tests/transports/stdio,
tests/transports/acp). Here every other dialect of a live gateway gets the same input —
bare, as an object chain, and hidden inside an otherwise valid message — and must answer
with its own error shape and go on serving the same connection. (A bare array meets a
decoder that expects an object and is refused before any nesting is read: that clear
answer is fine too.) The kernel's settings updates, the one place that walks client data
recursively after decoding, refuse depth up front.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
from websockets.sync.client import connect as ws_connect

from tests.reliability.test_fuzz_live import Gateway, agent_cli_until, gateway, openfang_until_pong, probe_id
from transports.packet import Packet
from transports.packet import connect as packet_connect

__all__ = ["gateway"]  # the live gateway of every dialect, one per backend (a module fixture)

DEPTH = 50_000
TOO_DEEP = "nested too deeply"


def deep_array(depth: int = DEPTH) -> str:
    return "[" * depth + "]" * depth


def deep_object(depth: int = DEPTH) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def inside(message: dict[str, Any], depth: int = DEPTH) -> str:
    """A valid message with one more field whose value is nested ``depth`` deep."""
    return json.dumps(message)[:-1] + ', "extra": ' + deep_array(depth) + "}"


def test_agent_cli_frames(gateway: Gateway) -> None:
    with ws_connect(gateway.live.ws("agent-cli"), max_size=None) as ws:
        for frame, why in ((deep_array(), "Expected `object`"), (deep_object(), TOO_DEEP), (inside({"request_id": "deep", "input": {"Text": "hi"}}), TOO_DEEP)):
            ws.send(frame)
            error = json.loads(ws.recv(timeout=10))
            assert error["error"].startswith("Failed to parse request") and why in error["error"], error
            rid = probe_id()
            ws.send(json.dumps({"request_id": rid, "input": "GetCommands"}))
            assert "Text" in agent_cli_until(ws, rid)[-1]["response"]


def test_openfang_rest_bodies(gateway: Gateway) -> None:
    agent = gateway.live.agent_id
    with httpx.Client(base_url=gateway.live.urls["openfang"], timeout=30) as client:
        for body, why in ((deep_array(), "Expected `object`"), (deep_object(), TOO_DEEP), (inside({"message": "hi"}), TOO_DEEP)):
            answer = client.post(f"/api/agents/{agent}/message", content=body, headers={"content-type": "application/json"})
            assert answer.status_code == 400 and why in answer.json()["error"], answer.text
            assert client.get("/api/health").status_code == 200


def test_openfang_socket_frames(gateway: Gateway) -> None:
    depth = 10_000  # at most 50 kB: within OpenFang's 64 KiB frame limit
    with ws_connect(gateway.live.ws("openfang"), max_size=None) as ws:
        openfang_until_pong_after(ws, "{}")  # the connected / agents_updated frames first
        for frame in (deep_array(depth), deep_object(depth), inside({"type": "message", "content": "hi"}, depth)):
            ws.send(frame)
            frames = openfang_until_pong_after(ws, json.dumps({"type": "ping"}))
            errors = [f for f in frames if f["type"] == "error"]
            assert errors and TOO_DEEP in errors[0]["content"], frames
            assert not [f for f in frames if f["type"] in ("typing", "text_delta", "response")], frames  # no prompt made of it


def openfang_until_pong_after(ws: Any, frame: str) -> list[dict[str, Any]]:
    ws.send(json.dumps({"type": "ping"}) if frame == "{}" else frame)
    return openfang_until_pong(ws)


def test_http_native_and_openai_bodies(gateway: Gateway) -> None:
    with httpx.Client(base_url=gateway.live.urls["http"], timeout=30) as client:
        client.post("/v1/sessions", json={"session_id": "deep"})
        # The native bodies allow no unknown field: refused before the nesting is read.
        for body, why in ((deep_array(), "Expected `object`"), (deep_object(), "unknown field `a`"), (inside({"text": "hi"}), "unknown field `extra`")):
            answer = client.post("/v1/sessions/deep/prompt", content=body, headers={"content-type": "application/json"})
            assert answer.status_code == 400 and why in answer.json()["error"]["message"], answer.text
        answer = client.patch("/v1/settings", content=deep_object(), headers={"content-type": "application/json"})  # a free-form body
        assert answer.status_code == 400 and answer.json()["error"]["code"] == "parse_error" and TOO_DEEP in answer.json()["error"]["message"]
        chat = {"model": "default", "messages": [{"role": "user", "content": "hi"}]}
        for body, why in ((deep_array(), "Expected `object`"), (deep_object(), TOO_DEEP), (inside(chat), TOO_DEEP)):
            answer = client.post("/v1/chat/completions", content=body, headers={"content-type": "application/json"})
            error = answer.json()["error"]
            assert answer.status_code == 400 and error["type"] == "invalid_request_error" and why in error["message"], answer.text
        # Decodable (990 levels, under the parser's limit) but too deep for the settings walk.
        settings = '{"provider": ' + deep_object(990) + "}"
        answer = client.patch("/v1/settings", content=settings, headers={"content-type": "application/json"})
        assert answer.status_code == 400 and "nested too deeply" in answer.json()["error"]["message"], answer.text
        assert client.get("/v1/models").status_code == 200


def test_packet_bodies(gateway: Gateway) -> None:
    nested: Any = 1
    for _ in range(DEPTH):  # built without recursion, as a caller's own data could be
        nested = {"a": nested}
    server = packet_connect(gateway.packet_endpoint)
    for kind, body in (("save_history", {"messages": [nested]}), ("save_history", nested), ("set_settings", {"api_config": nested}), ("set_settings", {"tool_limits": nested})):
        answer = server.send(Packet(id="deep", type=kind, body=body), timeout=10).body
        assert answer["success"] is False and answer["error"], answer  # refused by the body's shape, never by a crash
    assert server.send(Packet(id="ok", type="get_status", body={}), timeout=10).body["success"] is True
