"""HTTP requests as an attacker sends them, over a raw socket (a client library would tidy
them): bodies that never arrive whole, bodies that stall, the request-smuggling pair,
framing the HTTP layer itself refuses, unknown routes, out-of-range numbers (issue 29).

Each dialect's app is served behind a thin wrapper that counts the requests it has finished,
so a test knows the server is done with a request before it looks at what the request did.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import anyio
import msgspec
import pytest
from anyio.abc import SocketStream

from kernel import Kernel
from kernel.testing import running_kernel
from plugins.commands.builtin import BUILTIN_COMMANDS
from plugins.providers.echo import EchoProvider
from transports.agui import AguiApp, AguiConfig
from transports.http.config import HttpConfig
from transports.http.server import HttpApp
from transports.openfang.config import OpenFangConfig
from transports.openfang.server import build_app
from transports.shared import serve_http

pytestmark = pytest.mark.anyio

QUIET: dict[str, Any] = {"port": 0, "ping_interval_s": 0.0, "requests_per_minute_per_ip": 0}


@dataclass
class Served:
    """One dialect's app on a loopback port, and the requests it has finished so far."""

    host: str
    port: int
    app: Any = None
    finished: list[str] = field(default_factory=list)
    changed: anyio.Event = field(default_factory=anyio.Event)

    async def until_finished(self, count: int) -> None:
        with anyio.fail_after(10):
            while len(self.finished) < count:
                await self.changed.wait()

    async def connect(self) -> SocketStream:
        return await anyio.connect_tcp(self.host, self.port)


def _counting(app: Any, served: list[Served]) -> Any:
    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            await app(scope, receive, send)
        finally:
            if scope["type"] == "http":
                served[0].finished.append(f"{scope['method']} {scope['path']}")
                served[0].changed.set()
                served[0].changed = anyio.Event()

    return wrapped


def _config(cls: Any, values: dict[str, Any]) -> Any:
    """``cls`` from those of ``values`` it has (the WebSocket-less http port has no pings)."""
    fields = {f.name for f in msgspec.structs.fields(cls)}
    return msgspec.convert({k: v for k, v in values.items() if k in fields}, cls)


def _app(kernel: Kernel, dialect: str, **overrides: Any) -> tuple[Any, Any, Any]:
    """(asgi app, config, error shaper) of a dialect's port."""
    values = {**QUIET, **overrides}
    if dialect == "http":
        http_config = _config(HttpConfig, {**values, "sse_keepalive_s": 0.0})
        http_app = HttpApp(kernel, http_config)
        return http_app, http_config, http_app.native.error_body
    if dialect == "openfang":
        from transports.http.console import hosted_console

        openfang_config = _config(OpenFangConfig, {**values, "sse_keepalive_s": 0.5, "agents_poll_s": 0.0})
        router = build_app(kernel, openfang_config, hosted_console)
        return router, openfang_config, router.error_body
    agui_config = _config(AguiConfig, {**values, "sse_keepalive_s": 0.0})
    agui = AguiApp(kernel, agui_config)
    return agui.router, agui_config, agui.router.error_body


@asynccontextmanager
async def serving(dialect: str, **overrides: Any) -> AsyncIterator[tuple[Kernel, Served]]:
    async with running_kernel(EchoProvider(), commands=BUILTIN_COMMANDS) as kernel:
        app, config, shaper = _app(kernel, dialect, **overrides)
        holder: list[Served] = []
        async with anyio.create_task_group() as tg:
            base = await tg.start(partial(serve_http, error_body=shaper), _counting(app, holder), config)
            host, _, port = base.removeprefix("http://").rpartition(":")
            holder.append(Served(host, int(port), app))
            try:
                yield kernel, holder[0]
            finally:
                tg.cancel_scope.cancel()


async def read_response(stream: SocketStream, timeout_s: float = 10.0, *, check_closed: bool = False) -> tuple[int, dict[str, str], bytes, bool]:
    """(status, headers, body, closed): one response, and (with ``check_closed``, which waits up
    to 2 s for it) whether the server closed the connection after it."""
    data = b""
    closed = False
    with anyio.fail_after(timeout_s):
        while b"\r\n\r\n" not in data:
            try:
                data += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                closed = True
                break
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers.get("content-length", "0"))
        while len(body) < length and not closed:
            try:
                body += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                closed = True
        if check_closed and not closed:
            with anyio.move_on_after(2):
                try:
                    extra = await stream.receive()
                    closed = not extra
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    closed = True
    return status, headers, body, closed


def request_head(method: str, path: str, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


# ------------------------------------------------------------------ bodies that never arrive whole


async def _agent_id(kernel: Kernel) -> str:
    return kernel.settings.agents[0].agent_id()


def _requests(agent_id: str) -> dict[str, tuple[str, str, str, bytes]]:
    """What each dialect would act on, by case name: (dialect, method, path, whole body)."""
    agui_input = {
        "threadId": "t-cut", "runId": "r1", "state": {}, "tools": [], "context": [], "forwardedProps": {},
        "messages": [{"id": "u1", "role": "user", "content": "hello there"}],
    }
    return {
        "native prompt": ("http", "POST", "/v1/sessions/s-cut/prompt", json.dumps({"text": "hello there"}).encode()),
        "native settings": ("http", "PATCH", "/v1/settings", json.dumps({"session": {"history_cap": 77}}).encode()),
        "openfang message": ("openfang", "POST", f"/api/agents/{agent_id}/message", json.dumps({"message": "hello there"}).encode()),
        "agui run": ("agui", "POST", "/agui", json.dumps(agui_input).encode()),
    }


async def _nothing_happened(kernel: Kernel, case: str) -> None:
    if case == "native settings":
        assert kernel.settings.session.history_cap != 77
        return
    sessions = await kernel.store.list_sessions()
    for record in sessions:
        messages = await kernel.store.load_messages(record.session_id, 100)
        assert not messages, f"{case}: the cut-off request was acted on: {messages}"
    assert not any(session.active is not None for session in kernel.sessions.values())


@pytest.mark.parametrize("ending", ["close", "half-close", "chunked without its last chunk"])
@pytest.mark.parametrize("case", ["native prompt", "native settings", "openfang message", "agui run"])
async def test_a_body_that_did_not_arrive_whole_is_never_acted_on(case: str, ending: str) -> None:
    dialect = _requests("x")[case][0]
    async with serving(dialect) as (kernel, served):
        _, method, path, body = _requests(await _agent_id(kernel))[case]
        await kernel.session("s-cut", create=True)  # so the prompt's route reads its body
        stream = await served.connect()
        if ending == "chunked without its last chunk":
            head = request_head(method, path, {"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
            await stream.send(head + f"{len(body):x}\r\n".encode() + body + b"\r\n")  # no 0-size chunk
        else:
            head = request_head(method, path, {"Content-Type": "application/json", "Content-Length": str(len(body) + 40)})
            await stream.send(head + body)
        if ending == "half-close":
            await stream.send_eof()
        else:
            await stream.aclose()
        await served.until_finished(1)
        await _nothing_happened(kernel, case)
        if ending == "half-close":
            await stream.aclose()


# ------------------------------------------------------------------ bodies that stall


async def test_a_stalled_body_is_answered_408_and_its_connection_closed() -> None:
    async with serving("http", body_timeout_s=0.3) as (kernel, served):
        await kernel.session("s-stall", create=True)
        stream = await served.connect()
        body = json.dumps({"text": "hello"}).encode()
        await stream.send(request_head("POST", "/v1/sessions/s-stall/prompt", {"Content-Type": "application/json", "Content-Length": str(len(body) + 10)}) + body)
        status, _, answer, closed = await read_response(stream, check_closed=True)
        assert status == 408 and closed
        assert json.loads(answer)["error"]["code"] == "timeout"
        await _nothing_happened(kernel, "native prompt")


async def test_half_read_bodies_per_address_are_capped() -> None:
    async with serving("http", max_body_reads_per_ip=2, body_timeout_s=30.0) as (kernel, served):
        await kernel.session("s-cap", create=True)
        stalled = []
        head = request_head("POST", "/v1/sessions/s-cap/prompt", {"Content-Type": "application/json", "Content-Length": "100"})
        for _ in range(2):
            stream = await served.connect()
            await stream.send(head + b'{"text": ')
            stalled.append(stream)
        reads = served.app.native.body_reads  # the port's count of bodies in progress
        with anyio.fail_after(10):
            while reads._open.get("127.0.0.1", 0) < 2:  # both handlers are reading their body
                await anyio.sleep(0.01)
        probe = await served.connect()  # a request without a body is not held back by the cap
        await probe.send(request_head("GET", "/health", {}))
        assert (await read_response(probe))[0] == 200
        third = await served.connect()
        await third.send(head + b'{"text": ')
        status, headers, answer, _ = await read_response(third)
        assert status == 429 and headers["retry-after"] == "1"
        assert "bodies in progress" in json.loads(answer)["error"]["message"]
        for stream in [*stalled, probe, third]:
            await stream.aclose()


# ------------------------------------------------------------------ framing


async def test_content_length_with_chunked_is_refused_and_the_connection_closed() -> None:
    async with serving("http") as (kernel, served):
        await kernel.session("s-te", create=True)
        stream = await served.connect()
        body = json.dumps({"text": "smuggled"}).encode()
        head = request_head("POST", "/v1/sessions/s-te/prompt", {"Content-Type": "application/json", "Content-Length": "5", "Transfer-Encoding": "chunked"})
        await stream.send(head + f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n")
        status, headers, answer, closed = await read_response(stream, check_closed=True)
        assert status == 400 and closed and headers["connection"] == "close"
        assert "Transfer-Encoding" in json.loads(answer)["error"]["message"]
        await _nothing_happened(kernel, "native prompt")


MALFORMED = {
    "bad chunk size": (b"POST /v1/settings HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
    "two content-lengths": (b"POST /v1/settings HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}", 400),
    "negative content-length": (b"POST /v1/settings HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -1\r\n\r\n", 400),
    "a NUL in a header": (b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Bad: a\x00b\r\n\r\n", 400),
    "oversized headers": (b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n", 431),
}


def _shape(dialect: str, body: bytes) -> str:
    """The error message, read the way the dialect's clients read it."""
    parsed = json.loads(body)
    if dialect == "openfang":
        assert isinstance(parsed["error"], str)  # OpenFang's REST errors: {"error": "…"}
        return str(parsed["error"])
    if dialect == "agui":  # a RUN_ERROR event, what an AG-UI client shows
        assert parsed["type"] == "RUN_ERROR" and parsed["code"] in ("invalid_request", "too_large")
        return str(parsed["message"])
    assert parsed["error"]["code"] in ("invalid_request", "too_large")
    return str(parsed["error"]["message"])


@pytest.mark.parametrize("dialect", ["http", "openfang", "agui"])
@pytest.mark.parametrize("case", sorted(MALFORMED))
async def test_errors_of_the_http_layer_come_in_the_dialects_shape(dialect: str, case: str) -> None:
    raw, expected = MALFORMED[case]
    async with serving(dialect) as (_, served):
        stream = await served.connect()
        await stream.send(raw)
        status, headers, body, closed = await read_response(stream, check_closed=True)
        assert status == expected and closed
        assert headers["content-type"] == "application/json"
        assert _shape(dialect, body)


async def test_openfangs_port_answers_unknown_routes_in_openfangs_shape() -> None:
    async with serving("openfang") as (_, served):
        stream = await served.connect()
        await stream.send(request_head("GET", "/api/no-such-route", {}))
        status, _, body, _ = await read_response(stream)
        assert status == 404
        assert json.loads(body) == {"error": "Not found: /api/no-such-route"}
        await stream.aclose()
        console = await served.connect()  # the console's API on the same port still answers
        await console.send(request_head("GET", "/v1/status", {}))
        assert (await read_response(console))[0] == 200
        await console.aclose()


# ------------------------------------------------------------------ numbers and text


@pytest.mark.parametrize("query", ["limit=9223372036854775808", "limit=" + "9" * 5000, "limit=%C2%B2", "limit=-1"])
async def test_integer_query_parameters_are_bounded(query: str) -> None:
    async with serving("http") as (kernel, served):
        await kernel.session("s-int", create=True)
        stream = await served.connect()
        await stream.send(request_head("GET", f"/v1/sessions/s-int/history?{query}", {}))
        status, _, body, _ = await read_response(stream)
        assert status == 400
        assert "limit must be an integer" in json.loads(body)["error"]["message"]
        await stream.aclose()


async def test_a_resume_point_past_any_seq_is_refused() -> None:
    async with serving("http") as (kernel, served):
        await kernel.session("s-seq", create=True)
        stream = await served.connect()
        await stream.send(request_head("GET", "/v1/sessions/s-seq/events", {"Last-Event-ID": "9223372036854775808"}))
        status, _, body, _ = await read_response(stream)
        assert status == 400 and "Last-Event-ID" in json.loads(body)["error"]["message"]
        await stream.aclose()


async def test_a_lone_surrogate_is_named_as_such() -> None:
    async with serving("http") as (kernel, served):
        await kernel.session("s-sur", create=True)
        stream = await served.connect()
        body = b'{"text": "\\ud800"}'
        await stream.send(request_head("POST", "/v1/sessions/s-sur/prompt", {"Content-Type": "application/json", "Content-Length": str(len(body))}) + body)
        status, _, answer, _ = await read_response(stream)
        assert status == 400
        message = json.loads(answer)["error"]["message"]
        assert "lone UTF-16 surrogate" in message and "truncated" not in message
        await stream.aclose()


BAD_OPTIONS: dict[str, tuple[dict[str, Any], str]] = {
    "max_tokens": ({"max_tokens": -1}, "max_tokens must be at least 1"),
    "temperature": ({"temperature": 99}, "temperature must be between 0 and 2"),
    "max_context_messages": ({"max_context_messages": -1}, "max_context_messages must be at least 1"),
    "max_tool_iterations": ({"max_tool_iterations": -1}, "max_tool_iterations must be at least 1"),
}


@pytest.mark.parametrize("name", sorted(BAD_OPTIONS))
async def test_prompt_options_are_validated_once_for_every_dialect(name: str) -> None:
    options, message = BAD_OPTIONS[name]
    async with serving("http") as (kernel, served):
        await kernel.session("s-opt", create=True)
        stream = await served.connect()
        body = json.dumps({"text": "hi", "options": options}).encode()
        await stream.send(request_head("POST", "/v1/sessions/s-opt/prompt", {"Content-Type": "application/json", "Content-Length": str(len(body))}) + body)
        status, _, answer, _ = await read_response(stream)
        assert status == 400
        assert message in json.loads(answer)["error"]["message"]
        await stream.aclose()
        await _nothing_happened(kernel, "native prompt")


# ------------------------------------------------------------------ settings under concurrency


async def _patch(served: Served, changes: dict[str, Any]) -> int:
    stream = await served.connect()
    body = json.dumps(changes).encode()
    await stream.send(request_head("PATCH", "/v1/settings", {"Content-Type": "application/json", "Content-Length": str(len(body))}) + body)
    status = (await read_response(stream))[0]
    await stream.aclose()
    return status


async def test_concurrent_settings_changes_on_different_fields_all_survive() -> None:
    async with serving("http") as (kernel, served):
        for round_ in range(10):
            statuses: list[int] = []

            async def patch(changes: dict[str, Any], statuses: list[int] = statuses) -> None:
                statuses.append(await _patch(served, changes))

            async with anyio.create_task_group() as tg:
                tg.start_soon(patch, {"session": {"history_cap": 100 + round_}})
                tg.start_soon(patch, {"session": {"approval_timeout_s": 10.0 + round_}})
            assert statuses == [200, 200]
            assert (kernel.settings.session.history_cap, kernel.settings.session.approval_timeout_s) == (100 + round_, 10.0 + round_)


# ------------------------------------------------------------------ the banner


def test_the_banner_shows_the_store_with_home_expanded(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    from gateway.banner import store_lines

    monkeypatch.setenv("HOME", str(tmp_path))

    class _Settings:
        class store:
            path = "~/.local/share/gateway/gateway.db"

        class cluster:
            redis_url = ""

    class _Kernel:
        settings = _Settings

    shown: Callable[[], str] = lambda: store_lines(_Kernel())[0].text  # type: ignore[arg-type]
    assert shown() == f"{tmp_path}/.local/share/gateway/gateway.db"
