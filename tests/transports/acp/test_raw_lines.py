"""What an SDK never sends: garbage, unknown methods, bad params, odd ids, EOF.

A plain subprocess writes raw lines to the gateway's stdin and reads its stdout;
the gateway runs on the backend each test names.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ._client import BACKENDS, raw_gateway

pytestmark = pytest.mark.parametrize("backend", BACKENDS)

INIT = {"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": False}}}


def test_bad_lines_are_answered_and_never_end_the_process(backend: str, tmp_path: Path) -> None:
    with raw_gateway(backend, tmp_path, tmp_path / "g.db", "--set", "acp.max_line_bytes=2000") as gw:
        gw.send(b"this is not json")
        parse_error = gw.receive()
        assert parse_error["id"] is None and parse_error["error"]["code"] == -32700
        gw.send(b"[1, 2]")
        assert gw.receive()["error"]["code"] == -32600
        gw.send(b'"a string"')
        assert gw.receive()["error"]["code"] == -32600
        gw.send({"jsonrpc": "1.0", "id": 7, "method": "initialize"})
        assert gw.receive() == {"jsonrpc": "2.0", "id": 7, "error": {"code": -32600, "message": 'Invalid request: "jsonrpc" must be "2.0"'}}
        gw.send({"jsonrpc": "2.0", "id": 8, "method": 5})
        reply = gw.receive()
        assert (reply["id"], reply["error"]["code"]) == (8, -32600)
        gw.send(b'{"jsonrpc":"2.0","id":9,"method":"session/prompt","params":{"sessionId":"' + b"x" * 3000 + b'"}}')
        too_long = gw.receive()
        assert too_long["id"] is None and too_long["error"]["code"] == -32600 and "2000-byte limit" in too_long["error"]["message"]
        assert gw.call(10, "no/such/method")["error"] == {"code": -32601, "message": "Method not found: no/such/method"}
        assert gw.call(11, "_vendor/extension", {})["error"]["code"] == -32601
        bad = gw.call(12, "session/new", {"cwd": 5})
        assert bad["error"]["code"] == -32602 and "cwd" in bad["error"]["message"]
        relative = gw.call(13, "session/new", {"cwd": "relative/dir", "mcpServers": []})
        assert relative["error"]["code"] == -32602 and "absolute" in relative["error"]["message"]
        assert gw.call(14, "session/prompt", {"sessionId": "ghost", "prompt": [{"type": "text", "text": "hi"}]})["error"]["code"] == -32002
        # A stray response and an unknown notification get no answer; the next request still works.
        gw.send({"jsonrpc": "2.0", "id": 99, "result": {}})
        gw.send({"jsonrpc": "2.0", "method": "no/such/notification", "params": {}})
        ok = gw.call(15, "initialize", INIT)
        assert ok["result"]["protocolVersion"] == 1
        code, rest = gw.close()
    assert code == 0 and rest == []


def test_ids_start_at_zero_and_strings_are_echoed(backend: str, tmp_path: Path) -> None:
    with raw_gateway(backend, tmp_path, tmp_path / "g.db") as gw:
        assert gw.call(0, "initialize", INIT)["result"]["agentInfo"]["name"] == "gateway"
        dated = gw.call("init-2", "initialize", {"protocolVersion": "2025-06-18"})
        assert dated["id"] == "init-2" and dated["result"]["protocolVersion"] == 1
        assert gw.call(None, "initialize", {"protocolVersion": 7})["result"]["protocolVersion"] == 1
        session = gw.call(0, "session/new", {"cwd": str(tmp_path), "mcpServers": []})["result"]["sessionId"]
        gw.send({"jsonrpc": "2.0", "id": 0, "method": "session/prompt", "params": {"sessionId": session, "prompt": [{"type": "text", "text": "zero"}]}})
        reply, before = gw.until_response(0)
        assert reply == {"jsonrpc": "2.0", "id": 0, "result": {"stopReason": "end_turn", "usage": reply["result"]["usage"]}}
        chunks = [m["params"]["update"] for m in before if m.get("method") == "session/update"]
        assert "".join(u["content"]["text"] for u in chunks if u["sessionUpdate"] == "agent_message_chunk") == "echo: zero"
        code, _ = gw.close()
    assert code == 0


def test_permission_request_ids_start_at_zero(backend: str, tmp_path: Path) -> None:
    with raw_gateway(backend, tmp_path, tmp_path / "g.db") as gw:
        gw.call(0, "initialize", INIT)
        session = gw.call(1, "session/new", {"cwd": str(tmp_path), "mcpServers": []})["result"]["sessionId"]
        args = json.dumps({"path": "p.txt", "content": "zero"})
        gw.send({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"sessionId": session, "prompt": [{"type": "text", "text": f"/tool write_file {args}"}]}})
        while (message := gw.receive()).get("method") != "session/request_permission":
            pass
        assert message["id"] == 0
        params = message["params"]
        assert params["sessionId"] == session and params["toolCall"]["kind"] == "edit"
        assert [o["optionId"] for o in params["options"]] == ["allow_once", "allow_always", "reject_once", "reject_always"]
        gw.send({"jsonrpc": "2.0", "id": 0, "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}})
        reply, before = gw.until_response(2)
        assert reply["result"]["stopReason"] == "end_turn"
        statuses = [m["params"]["update"].get("status") for m in before if m.get("method") == "session/update"]
        assert "in_progress" in statuses and "completed" in statuses
        code, _ = gw.close()
    assert code == 0
    assert (tmp_path / "p.txt").read_text() == "zero"


def test_cancel_answers_cancelled_exactly_once(backend: str, tmp_path: Path) -> None:
    words = " ".join(f"w{i}" for i in range(400))
    with raw_gateway(backend, tmp_path, tmp_path / "g.db", GATEWAY_ECHO_DELAY_S="0.02") as gw:
        gw.call(0, "initialize", INIT)
        session = gw.call(1, "session/new", {"cwd": str(tmp_path), "mcpServers": []})["result"]["sessionId"]
        gw.send({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"sessionId": session, "prompt": [{"type": "text", "text": words}]}})
        while gw.receive()["params"]["update"]["sessionUpdate"] != "agent_message_chunk":
            pass
        gw.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}})
        gw.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}})
        reply, _ = gw.until_response(2)
        assert reply == {"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "cancelled"}}
        # A cancel with nothing running, or for a session nobody opened, is quietly ignored.
        gw.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "ghost"}})
        gw.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {}})
        after = gw.call(3, "session/set_model", {"sessionId": session, "modelId": "echo-large"})
        assert after == {"jsonrpc": "2.0", "id": 3, "result": {}}
        code, rest = gw.close()
    assert code == 0
    assert not [m for m in rest if m.get("id") == 2]


def test_set_model_updates_the_model_option_and_load_answers_the_setup(backend: str, tmp_path: Path) -> None:
    with raw_gateway(backend, tmp_path, tmp_path / "g.db") as gw:
        gw.call(0, "initialize", INIT)
        session = gw.call(1, "session/new", {"cwd": str(tmp_path), "mcpServers": []})["result"]["sessionId"]
        gw.send({"jsonrpc": "2.0", "id": 2, "method": "session/set_model", "params": {"sessionId": session, "modelId": "my-model"}})
        changed, _ = gw.until_response(2)
        assert changed["result"] == {}
        [option_update] = [m["params"]["update"] for m in [gw.receive()] if m.get("method") == "session/update"]
        assert option_update["sessionUpdate"] == "config_option_update"
        assert [o["currentValue"] for o in option_update["configOptions"] if o["id"] == "model"] == ["my-model"]
        gw.send({"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": {"sessionId": session, "prompt": [{"type": "text", "text": "/model"}]}})
        reply, before = gw.until_response(3)
        assert reply["result"]["stopReason"] == "end_turn"
        assert any("Model: my-model" in m["params"]["update"].get("content", {}).get("text", "") for m in before)
        assert gw.call(4, "session/set_model", {"sessionId": session})["error"]["code"] == -32602
        gw.send({"jsonrpc": "2.0", "id": 5, "method": "session/load", "params": {"sessionId": session, "cwd": str(tmp_path), "mcpServers": []}})
        loaded, replay = gw.until_response(5)
        assert loaded["result"]["modes"]["currentModeId"] == "default"
        assert [o["currentValue"] for o in loaded["result"]["configOptions"]] == ["default", "my-model", "0"]
        assert not [m for m in replay if m["params"]["update"]["sessionUpdate"].endswith("message_chunk")], "slash commands are not history"
        code, rest = gw.close()
    assert code == 0
    assert any(m["params"]["update"]["sessionUpdate"] == "available_commands_update" for m in rest + replay if m.get("method"))


def test_eof_interrupts_a_running_prompt_after_the_grace(backend: str, tmp_path: Path) -> None:
    words = " ".join(f"w{i}" for i in range(2000))
    with raw_gateway(backend, tmp_path, tmp_path / "g.db", "--set", "acp.eof_grace_s=0.3", GATEWAY_ECHO_DELAY_S="0.02") as gw:
        gw.call(0, "initialize", INIT)
        session = gw.call(1, "session/new", {"cwd": str(tmp_path), "mcpServers": []})["result"]["sessionId"]
        gw.send({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"sessionId": session, "prompt": [{"type": "text", "text": words}]}})
        while gw.receive()["params"]["update"]["sessionUpdate"] != "agent_message_chunk":
            pass
        code, rest = gw.close(timeout_s=15)
    assert code == 0
    [answer] = [m for m in rest if m.get("id") == 2]
    assert answer["result"]["stopReason"] == "cancelled"


def test_deeply_nested_lines_are_parse_errors_not_crashes(backend: str, tmp_path: Path) -> None:
    with raw_gateway(backend, tmp_path, tmp_path / "g.db") as gw:
        for line in (b"[" * 200_000 + b"]" * 200_000, b'{"a":' * 200_000 + b"1" + b"}" * 200_000):
            gw.send(line)
            reply = gw.receive()
            assert reply["id"] is None and reply["error"]["code"] == -32700, reply
        assert gw.call(1, "initialize", INIT)["result"]["protocolVersion"] == 1
        code, rest = gw.close()
    assert code == 0 and rest == []
