"""Bad input and the security policy: every refusal is a ``RUN_ERROR`` body with its HTTP
status, and the server goes on serving."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest

from kernel.testing import ScriptedProvider, running_kernel, text_turn
from transports.agui import AguiConfig, AguiTransport
from transports.shared import ConfigError

from ._helpers import agui_server, protocol_events, run_input, user

pytestmark = pytest.mark.anyio

PNG = base64.b64encode(b"png").decode()


def _nested(depth: int) -> bytes:
    return b'{"threadId": "t", "runId": "r", "messages": [], "state": ' + b"[" * depth + b"]" * depth + b"}"


BAD_BODIES: list[tuple[str, bytes | dict[str, Any], int, str, str]] = [
    ("empty", b"", 400, "invalid_request", "empty"),
    ("not json", b"{not json", 400, "parse_error", "not valid JSON"),
    ("nested too deep", _nested(100_000), 400, "parse_error", "nested too deeply"),
    ("no runId", {"threadId": "t", "messages": []}, 400, "invalid_request", "runId"),
    ("bad thread id", run_input("no/slash", "r", []), 400, "invalid_request", "threadId"),
    ("long run id", run_input("t", "r" * 300, []), 400, "invalid_request", "runId"),
    ("unknown role", run_input("t", "r", [{"id": "1", "role": "robot", "content": "x"}]), 400, "invalid_request", "messages[0]"),
    ("empty user message", run_input("t", "r", [user("")]), 400, "invalid_request", "needs content"),
    ("image by url", run_input("t", "r", [{"id": "1", "role": "user", "content": [{"type": "image", "source": {"type": "url", "value": "http://x/y.png"}}]}]), 400, "invalid_request", "inline"),
    ("audio", run_input("t", "r", [{"id": "1", "role": "user", "content": [{"type": "audio", "source": {"type": "data", "value": PNG, "mimeType": "audio/wav"}}]}]), 400, "invalid_request", "audio"),
    ("bad base64", run_input("t", "r", [{"id": "1", "role": "user", "content": [{"type": "image", "source": {"type": "data", "value": "%%%", "mimeType": "image/png"}}]}]), 400, "invalid_request", "base64"),
    ("bad tool name", run_input("t", "r", [user("x")], tools=[{"name": "no spaces", "description": "", "parameters": {}}]), 400, "invalid_request", "tools[0]"),
    ("unanswerable tool result", run_input("t", "r", [user("x"), {"id": "2", "role": "tool", "toolCallId": "nope", "content": "1"}]), 400, "invalid_request", "answers no tool call"),
]


@pytest.mark.parametrize(("case", "body", "status", "code", "says"), BAD_BODIES, ids=[case[0] for case in BAD_BODIES])
async def test_bad_run_input_is_refused_in_agui_shape(case: str, body: bytes | dict[str, Any], status: int, code: str, says: str) -> None:
    async with running_kernel(ScriptedProvider([text_turn("still here")])) as kernel, agui_server(kernel) as url:
        async with httpx.AsyncClient(timeout=20.0) as http:
            content = body if isinstance(body, bytes) else json.dumps(body).encode()
            refused = await http.post(url, content=content, headers={"content-type": "application/json"})
            (error,) = protocol_events([refused.content])
            assert refused.status_code == status and error.code == code and says in error.message, refused.text
            fine = await http.post(url, json=run_input("after", "r2", [user("Hi")]))
            assert fine.status_code == 200 and "still here" in fine.text


async def test_the_router_refuses_in_agui_shape_too() -> None:
    async with running_kernel(ScriptedProvider()) as kernel, agui_server(kernel, token="s3cret", max_body_bytes=2048) as url:
        async with httpx.AsyncClient(timeout=20.0) as http:
            refusals = [
                (await http.post(url, json=run_input("t", "r", [user("Hi")])), 401, "unauthorized"),
                (await http.post(url, json=run_input("t", "r", [user("x" * 4000)]), headers={"authorization": "Bearer s3cret"}), 413, "too_large"),
                (await http.get(url, headers={"authorization": "Bearer s3cret"}), 405, "method_not_allowed"),
                (await http.get(f"{url}/elsewhere", headers={"authorization": "Bearer s3cret"}), 404, "not_found"),
                (await http.post(url, json=run_input("t", "r", [user("Hi")]), headers={"authorization": "Bearer s3cret", "origin": "http://localhost:3000"}), 403, "forbidden"),
            ]
            ok = await http.post(url, json=run_input("t", "r", [user("Hi")]), headers={"authorization": "Bearer s3cret"})
    assert ok.status_code == 200
    for response, status, code in refusals:
        (error,) = protocol_events([response.content])
        assert (response.status_code, error.code) == (status, code), response.text


async def test_requests_are_rate_limited_per_client_address() -> None:
    async with running_kernel(ScriptedProvider()) as kernel, agui_server(kernel, requests_per_minute_per_ip=2) as url:
        async with httpx.AsyncClient(timeout=20.0) as http:
            answered = [await http.post(url, json=run_input("t", f"r{i}", [user(f"Hi {i}")])) for i in range(3)]
    assert [r.status_code for r in answered] == [200, 200, 429] and "retry-after" in answered[2].headers
    (error,) = protocol_events([answered[2].content])
    assert error.code == "rate_limited"


async def test_cors_is_an_allow_list_and_off_by_default() -> None:
    front_end = "http://localhost:5173"
    preflight = {"origin": front_end, "access-control-request-method": "POST", "access-control-request-headers": "content-type, last-event-id"}
    async with running_kernel(ScriptedProvider()) as kernel:
        async with agui_server(kernel) as url, httpx.AsyncClient(timeout=20.0) as http:
            off = await http.options(url, headers=preflight)
            assert off.status_code == 403 and "access-control-allow-origin" not in off.headers
        async with agui_server(kernel, cors_origins=[front_end]) as url, httpx.AsyncClient(timeout=20.0) as http:
            allowed = await http.options(url, headers=preflight)
            assert allowed.status_code == 204 and allowed.headers["access-control-allow-origin"] == front_end
            assert "last-event-id" in allowed.headers["access-control-allow-headers"]
            run = await http.post(url, json=run_input("t-cors", "r", [user("Hi")]), headers={"origin": front_end})
            assert run.status_code == 200 and run.headers["access-control-allow-origin"] == front_end
            other = await http.post(url, json=run_input("t-cors", "r2", [user("Hi")]), headers={"origin": "http://evil.example"})
            assert other.status_code == 403 and json.loads(other.content)["type"] == "RUN_ERROR"


async def test_a_refused_first_run_leaves_no_thread_behind() -> None:
    async with running_kernel(ScriptedProvider()) as kernel, agui_server(kernel) as url:
        async with httpx.AsyncClient(timeout=20.0) as http:
            bad = await http.post(url, json=run_input("never", "r", [{"id": "1", "role": "user", "content": [{"type": "video", "source": {"type": "data", "value": PNG, "mimeType": "video/mp4"}}]}]))
            resume = await http.post(url, json=run_input("never", "r", [], resume=[{"interruptId": "approval:1:c", "status": "resolved"}]))
            events = await http.get(f"{url}/threads/never/events")
    assert (bad.status_code, resume.status_code, events.status_code) == (400, 409, 404)
    assert [json.loads(r.content)["type"] for r in (bad, resume, events)] == ["RUN_ERROR"] * 3


@pytest.mark.parametrize(("change", "says"), [({"path": "agui"}, "path"), ({"path": "/agui/"}, "path"), ({"agent": "Nobody"}, "Agent not found"), ({"sse_keepalive_s": -1.0}, "sse_keepalive_s")])
async def test_a_bad_config_is_refused_before_anything_is_bound(change: dict[str, Any], says: str) -> None:
    async with running_kernel(ScriptedProvider()) as kernel:
        with pytest.raises(ConfigError, match=says):
            await AguiTransport().serve(kernel, AguiConfig(port=0, **change))
