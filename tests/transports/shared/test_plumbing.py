"""Shared plumbing against real hypercorn servers and real clients, on asyncio and trio."""

from __future__ import annotations

import json
import select
import socket
import threading
from typing import Any

import anyio
import httpx
import msgspec
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.asyncio_clients import in_asyncio
from transports.shared import (
    ConfigError,
    HttpError,
    Router,
    ServerConfig,
    SlidingWindowLimiter,
    format_sse,
    is_loopback_host,
    origin_allowed,
    resolve_token,
    serve_asgi,
    validate_bind,
)
from transports.shared._serve import _bind_socket

from ._toy import ToyConfig, make_app, running

pytestmark = pytest.mark.anyio


def http(host: str, port: int) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=f"http://{host}:{port}", trust_env=False, timeout=5)


def ws_connect(url: str, **kw: Any) -> Any:
    return connect(url, proxy=None, open_timeout=5, close_timeout=2, **kw)


async def ws_status(url: str, **kw: Any) -> tuple[int, Any]:
    """Status and JSON body of a rejected upgrade."""

    async def attempt() -> tuple[int, Any]:
        try:
            async with ws_connect(url, **kw):
                return 101, None
        except InvalidStatus as exc:
            return exc.response.status_code, json.loads(exc.response.body or b"null")

    return await in_asyncio(attempt)


# ------------------------------------------------------------------ pure units


def test_config_subclass_overrides_defaults() -> None:
    class Config(ServerConfig, kw_only=True):
        port: int = 50051
        extra_ms: int = 100

    cfg = msgspec.convert({"host": "::1"}, Config)
    assert (cfg.host, cfg.port, cfg.extra_ms, cfg.max_message_bytes) == ("::1", 50051, 100, 65536)
    assert origin_allowed("http://localhost:5173", cfg.allowed_origins)
    assert Config().allowed_origins is not Config().allowed_origins  # no shared mutable default


def test_loopback_and_bind_validation() -> None:
    for host in ("127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]"):
        assert is_loopback_host(host), host
    for host in ("0.0.0.0", "", "::", "192.168.1.2", "example.com"):
        assert not is_loopback_host(host), host
    validate_bind(ServerConfig())
    with pytest.raises(ConfigError, match="GATEWAY_TOKEN"):
        validate_bind(ServerConfig(host="0.0.0.0"))
    validate_bind(ServerConfig(host="0.0.0.0"), env_token="t")
    validate_bind(ServerConfig(host="0.0.0.0", token="t"))
    assert resolve_token(ServerConfig(), {"GATEWAY_TOKEN": "env"}) == "env"
    assert resolve_token(ServerConfig(token="cfg"), {"GATEWAY_TOKEN": "env"}) == "cfg"
    assert resolve_token(ServerConfig(), {"GATEWAY_TOKEN": ""}) is None


def test_origin_matching() -> None:
    allowed = ServerConfig().allowed_origins
    assert origin_allowed(None, allowed)
    assert origin_allowed("http://127.0.0.1:8080", allowed)
    assert origin_allowed("https://[::1]:3000", allowed)
    assert not origin_allowed("http://evil.example", allowed)
    assert not origin_allowed("http://localhost.evil.example", allowed)
    assert not origin_allowed("null", allowed)
    assert not origin_allowed("http://example.com:81", ["http://example.com:80"])
    assert origin_allowed("http://example.com", ["*"])


def test_sse_format_follows_spec() -> None:
    assert format_sse("hi") == b"data: hi\n\n"
    assert format_sse("a\nb\r\nc\rd", event="e", id="1") == b"event: e\nid: 1\ndata: a\ndata: b\ndata: c\ndata: d\n\n"
    assert format_sse("x\n") == b"data: x\ndata: \n\n"
    with pytest.raises(ValueError):
        format_sse("x", event="a\nb")
    with pytest.raises(ValueError):
        format_sse("x", id="1\x00")
    # Bytes (UTF-8, as the JSON encoders give) are framed as they are: the same lines as
    # their text, multi-byte characters untouched; one line is the common case (JSON).
    text = "é€\r\n😀\r{}"
    assert format_sse(text.encode(), event="e", retry_ms=1500) == format_sse(text, event="e", retry_ms=1500)
    assert format_sse(text.encode()) == "data: é€\ndata: 😀\ndata: {}\n\n".encode()
    assert format_sse(b'{"a":"\\n"}', id="7") == b'id: 7\ndata: {"a":"\\n"}\n\n'


def test_accepted_connections_send_small_writes_at_once() -> None:
    # TCP_NODELAY on every connection the servers accept, whatever the loop: the listening
    # socket carries it, and the OS hands it to each accepted socket.
    listener = _bind_socket("127.0.0.1", 0)
    with listener, socket.create_connection(listener.getsockname()[:2], timeout=5):
        select.select([listener], [], [], 5)
        accepted, _ = listener.accept()
        with accepted:
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1


def test_sliding_window_limiter() -> None:
    lim = SlidingWindowLimiter(2, 60.0)
    assert lim.check(0.0) == 0.0 and lim.check(1.0) == 0.0
    assert lim.check(2.0) == pytest.approx(58.0)
    assert lim.check(60.5) == 0.0  # first stamp left the window


async def test_off_loopback_bind_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GATEWAY_TOKEN", raising=False)
    with pytest.raises(ConfigError):
        await serve_asgi(Router(), ServerConfig(host="0.0.0.0"))


# --------------------------------------------------------------------- HTTP


async def test_bound_port_reported_and_routing() -> None:
    config = ToyConfig()
    router, _ = make_app(config)
    async with running(router, config) as (host, port, _):
        assert host == "127.0.0.1" and port > 0
        async with http(host, port) as client:
            r = await client.get("/health")
            assert r.status_code == 200 and r.json() == {"status": "ok"}
            r = await client.get("/items/a%20b", params={"q": "x"})
            assert r.json() == {"id": "a b", "q": "x"}
            r = await client.get("/nope")
            assert r.status_code == 404 and r.json() == {"error": "Not found: /nope"}
            r = await client.delete("/echo")
            assert r.status_code == 405 and r.headers["allow"] == "POST" and "error" in r.json()


async def test_json_body_errors() -> None:
    config = ToyConfig()
    router, _ = make_app(config)
    async with running(router, config) as (host, port, _), http(host, port) as client:
        r = await client.post("/echo", json={"name": "a", "count": 2})
        assert r.status_code == 201 and r.json() == {"name": "a", "count": 2} and r.headers["x-seen"] == "1"
        r = await client.post("/echo", content=b"{not json")
        assert r.status_code == 400 and r.json()["error"].startswith("Malformed JSON")
        r = await client.post("/echo", json={"name": "a", "count": "two"})
        assert r.status_code == 400 and "$.count" in r.json()["error"]
        r = await client.post("/echo", content=b"")
        assert r.status_code == 400
        r = await client.post("/echo", content=b"x" * 5000)
        assert r.status_code == 413 and "too large" in r.json()["error"]

        async def chunks():  # no Content-Length: the streaming limit applies
            for _ in range(5):
                yield b"x" * 1000

        r = await client.post("/echo", content=chunks())
        assert r.status_code == 413


async def test_http_auth_and_custom_error_shape() -> None:
    config = ToyConfig(token="s3cret")

    def openai_shape(err: HttpError) -> Any:
        return {"error": {"message": err.message, "type": err.code or "error"}}

    router, _ = make_app(config, error_body=openai_shape)
    async with running(router, config) as (host, port, _), http(host, port) as client:
        assert (await client.get("/health")).status_code == 200  # auth=False route
        r = await client.get("/items/1")
        assert r.status_code == 401 and r.json()["error"]["type"] == "unauthorized"
        assert r.headers["www-authenticate"] == "Bearer"
        assert (await client.get("/items/1", headers={"Authorization": "Bearer wrong"})).status_code == 401
        assert (await client.get("/items/1", headers={"Authorization": "Bearer s3cret"})).status_code == 200
        assert (await client.get("/items/1", params={"token": "s3cret"})).status_code == 200
        r = await client.get("/missing", params={"token": "s3cret"})
        assert r.json() == {"error": {"message": "Not found: /missing", "type": "not_found"}}


async def test_cors_off_by_default_and_on_when_enabled() -> None:
    config = ToyConfig()
    for cors in (False, True):
        router, _ = make_app(config, cors=cors)
        async with running(router, config) as (host, port, _), http(host, port) as client:
            r = await client.get("/health", headers={"Origin": "http://localhost:3000"})
            assert (r.headers.get("access-control-allow-origin") == "http://localhost:3000") is cors
            r = await client.get("/health", headers={"Origin": "http://evil.example"})
            assert "access-control-allow-origin" not in r.headers


# ---------------------------------------------------------------------- SSE


async def test_sse_stream_line_by_line() -> None:
    config = ToyConfig()
    router, _ = make_app(config)
    async with running(router, config) as (host, port, _), http(host, port) as client:
        async with client.stream("GET", "/sse") as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            assert r.headers["cache-control"] == "no-cache" and r.headers["x-accel-buffering"] == "no"
            lines = [line async for line in r.aiter_lines()]
    assert lines[:2] == ["data: hello", ""]
    assert lines[2:7] == ["event: multi", "id: 7", "data: line one", "data: line two", ""]
    assert ": keep-alive" in lines
    assert lines[-3:] == ["event: done", 'data: {"done":true}', ""]


async def test_sse_client_disconnect_stops_producer() -> None:
    config = ToyConfig()
    router, seen = make_app(config)
    async with running(router, config) as (host, port, _), http(host, port) as client:
        async with client.stream("GET", "/sse/forever") as r:
            async for line in r.aiter_lines():
                if line == "data: 3":
                    break
        with anyio.fail_after(2):
            await seen["sse_closed"].wait()


async def test_shutdown_ends_open_sse_stream() -> None:
    config = ToyConfig()
    router, seen = make_app(config)
    async with running(router, config) as (host, port, shutdown), http(host, port) as client:
        async with client.stream("GET", "/sse/forever") as r:
            async for line in r.aiter_lines():  # ends cleanly: the server ended it, before hypercorn's
                if line == "data: 1":  # graceful timeout would have cut the connection (an error here)
                    shutdown.set()
        with anyio.fail_after(1):
            await seen["sse_closed"].wait()


# ---------------------------------------------------------------- WebSocket


async def test_ws_echo_binary_utf8_and_invalid_frame() -> None:
    config = ToyConfig()
    router, _ = make_app(config)
    async with running(router, config) as (host, port, _):

        async def client() -> list[Any]:
            async with ws_connect(f"ws://{host}:{port}/ws/1") as ws:
                out = [json.loads(await ws.recv())]
                await ws.send("hi")
                out.append(json.loads(await ws.recv()))
                await ws.send("héllo".encode())
                out.append(json.loads(await ws.recv()))
                await ws.send(b"\xff\xfe")
                out.append(json.loads(await ws.recv()))
                return out

        out = await in_asyncio(client)
    assert out[0] == {"type": "connected", "agent": "1"}
    assert out[1] == {"type": "echo", "text": "hi"}
    assert out[2] == {"type": "echo", "text": "héllo"}
    assert out[3]["type"] == "error" and "UTF-8" in out[3]["content"]


async def test_ws_auth_bearer_and_query() -> None:
    config = ToyConfig(token="s3cret")
    router, _ = make_app(config)
    async with running(router, config) as (host, port, _):
        base = f"ws://{host}:{port}/ws/1"
        assert await ws_status(base) == (401, {"error": "Missing or invalid token"})
        assert (await ws_status(base + "?token=bad"))[0] == 401
        assert (await ws_status(base + "?token=s3cret"))[0] == 101
        assert (await ws_status(base, additional_headers={"Authorization": "Bearer s3cret"}))[0] == 101


async def test_ws_origin_allow_list() -> None:
    config = ToyConfig()
    router, _ = make_app(config)
    async with running(router, config) as (host, port, _):
        url = f"ws://{host}:{port}/ws/1"
        assert await ws_status(url, origin="http://evil.example") == (403, {"error": "Origin not allowed"})
        assert (await ws_status(url, origin="http://localhost:5173"))[0] == 101
        assert (await ws_status(url))[0] == 101  # websockets sends no Origin by default


async def test_ws_transport_checks_and_unknown_path() -> None:
    config = ToyConfig()
    router, _ = make_app(config)
    async with running(router, config) as (host, port, _):
        assert await ws_status(f"ws://{host}:{port}/ws/abc") == (400, {"error": "Invalid agent ID"})
        assert await ws_status(f"ws://{host}:{port}/ws/404") == (404, {"error": "Agent not found"})
        assert (await ws_status(f"ws://{host}:{port}/elsewhere"))[0] == 404


async def test_ws_per_ip_limit() -> None:
    config = ToyConfig(max_connections_per_ip=2)
    router, _ = make_app(config)
    async with running(router, config) as (host, port, _):
        url = f"ws://{host}:{port}/ws/1"

        async def client() -> tuple[int, int]:
            async with ws_connect(url) as a, ws_connect(url) as b:
                await a.recv(), await b.recv()
                try:
                    async with ws_connect(url):
                        third = 101
                except InvalidStatus as exc:
                    third = exc.response.status_code
            for _ in range(50):  # slots are released when the server sees the close
                try:
                    async with ws_connect(url) as c, ws_connect(url) as d:
                        await c.recv(), await d.recv()
                        return third, 101
                except InvalidStatus:
                    await anyio.sleep(0.02)
            return third, 429

        assert await in_asyncio(client) == (429, 101)


async def test_ws_oversize_and_rate_limit_reported_socket_stays_open() -> None:
    config = ToyConfig(max_message_bytes=100, rate_limit_per_minute=4)
    router, _ = make_app(config)
    async with running(router, config) as (host, port, _):

        async def client() -> list[Any]:
            async with ws_connect(f"ws://{host}:{port}/ws/1") as ws:
                await ws.recv()
                out = []
                for msg in ("x" * 101, "é" * 60, "ok", "a", "b", "c"):
                    await ws.send(msg)
                    out.append(json.loads(await ws.recv()))
                return out

        out = await in_asyncio(client)
    assert out[0] == {"type": "error", "content": "Message too large (101)"}
    assert out[1] == {"type": "error", "content": "Message too large (120)"}  # bytes, not chars
    assert out[2] == {"type": "echo", "text": "ok"}
    assert out[3] == {"type": "echo", "text": "a"}
    assert out[4] == {"type": "error", "content": "Rate limit exceeded"}  # 5th message in a minute
    assert out[5] == {"type": "error", "content": "Rate limit exceeded"}


async def test_ws_idle_timeout() -> None:
    config = ToyConfig(idle_timeout_s=0.3)
    router, _ = make_app(config)
    async with running(router, config) as (host, port, _):

        async def client() -> tuple[Any, int]:
            async with ws_connect(f"ws://{host}:{port}/ws/1") as ws:
                await ws.recv()
                msg = json.loads(await ws.recv())
                try:
                    await ws.recv()
                except ConnectionClosed as exc:
                    return msg, exc.rcvd.code if exc.rcvd else -1
                return msg, -2

        assert await in_asyncio(client) == ({"type": "error", "content": "idle"}, 1000)


@pytest.mark.parametrize("stop_by_cancel", [False, True], ids=["event", "cancel"])
async def test_shutdown_closes_open_websocket_with_1001(stop_by_cancel: bool) -> None:
    config = ToyConfig(ping_interval_s=20.0)  # hypercorn pings on, as by default
    router, _ = make_app(config)
    async with running(router, config, stop_by_cancel=stop_by_cancel) as (host, port, shutdown):
        opened = threading.Event()  # set from the client thread on trio
        result: dict[str, Any] = {}

        async def client() -> None:
            async with ws_connect(f"ws://{host}:{port}/ws/1") as ws:
                await ws.recv()
                opened.set()
                try:
                    await ws.recv()
                except ConnectionClosed as exc:
                    result["code"] = exc.rcvd.code if exc.rcvd else None

        async def run_client() -> None:
            await in_asyncio(client)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run_client)
            with anyio.fail_after(5):
                while not opened.is_set():
                    await anyio.sleep(0.01)
            shutdown.set()
    # 1001 is the server's own close, sent before it told hypercorn to stop: hypercorn itself
    # would drop the socket with 1011 only after its graceful timeout.
    assert result["code"] == 1001
