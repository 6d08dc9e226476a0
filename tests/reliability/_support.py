"""Shared parts of the reliability tests: one kernel with several live transports,
clients for each dialect, a raw WebSocket client that can stop reading, and a
``python -m gateway`` child whose transports announce their addresses on stderr.

Everything binds 127.0.0.1 on ephemeral ports. The ``websockets`` client is
asyncio-only: on the trio backend it runs in a worker thread (:func:`in_asyncio`).
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import anyio
import msgspec
from wsproto import ConnectionState, ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    CloseConnection,
    Ping,
    RejectConnection,
    Request,
    TextMessage,
)

from kernel import Kernel
from kernel.settings import Settings
from kernel.testing import ScriptedProvider, running_kernel
from plugins.commands.builtin import BUILTIN_COMMANDS
from plugins.tools.builtin import BUILTIN_TOOLS
from tests.subprocess_gateway import ROOT

T = TypeVar("T")

#: Test defaults of every network transport: ephemeral port, no pings (they delay stops),
#: no rate limit (the tests send bursts), no per-IP cap (the load test opens 200 sockets).
NETWORK_BASE: dict[str, Any] = {"port": 0, "ping_interval_s": 0.0, "rate_limit_per_minute": 0, "max_connections_per_ip": 0}
EXTRA: dict[str, dict[str, Any]] = {"openfang": {"sse_keepalive_s": 0.5, "agents_poll_s": 0.0}, "http": {"sse_keepalive_s": 0.0, "requests_per_minute_per_ip": 0}}


def transport_class(name: str) -> Any:
    from gateway.app import load_registry

    return load_registry(use_entry_points=False).transports[name]


def transport_config(name: str, **overrides: Any) -> Any:
    cls = transport_class(name)
    values = {**NETWORK_BASE, **EXTRA.get(name, {}), **overrides}
    fields = {f.name for f in msgspec.structs.fields(cls.Config)}
    return msgspec.convert({k: v for k, v in values.items() if k in fields}, cls.Config)


@dataclass
class Live:
    """A running kernel and the base URL (``http://127.0.0.1:PORT``) of each network transport."""

    kernel: Kernel
    urls: dict[str, str] = field(default_factory=dict)

    @property
    def agent_id(self) -> str:
        return self.kernel.settings.agents[0].agent_id()

    def ws(self, name: str, query: str = "") -> str:
        base = self.urls[name].replace("http://", "ws://")
        path = f"/api/agents/{self.agent_id}/ws" if name == "openfang" else "/"
        return base + path + query


@asynccontextmanager
async def serving(kernel: Kernel, names: Iterable[str], **configs: dict[str, Any]) -> AsyncIterator[Live]:
    """Serve ``names`` over ``kernel`` until the block ends (``configs[name]``: overrides)."""
    live = Live(kernel)
    async with anyio.create_task_group() as tg:
        for name in names:
            config = transport_config(name, **configs.get(name.replace("-", "_"), {}))
            live.urls[name] = await tg.start(transport_class(name)().serve, kernel, config)
        try:
            yield live
        finally:
            tg.cancel_scope.cancel()


@asynccontextmanager
async def live_gateway(
    names: Iterable[str],
    provider: Any = None,
    *,
    settings: Settings | None = None,
    tools: Iterable[Any] = BUILTIN_TOOLS,
    **configs: dict[str, Any],
) -> AsyncIterator[Live]:
    """A kernel on a temporary store with the built-in tools and commands, serving ``names``."""
    kernel_cm = running_kernel(provider or ScriptedProvider(), settings=settings, tools=tools, commands=BUILTIN_COMMANDS)
    async with kernel_cm as kernel, serving(kernel, names, **configs) as live:
        yield live


# ------------------------------------------------------------------ stdio over pipes


class PipeReader:
    """JSON lines from a pipe, read without blocking the event loop."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        os.set_blocking(fd, False)
        self.buffer = b""
        self.lines: list[dict[str, Any]] = []

    async def until(self, predicate: Callable[[dict[str, Any]], bool], timeout_s: float = 10.0, start: int = 0) -> list[dict[str, Any]]:
        """All lines read so far, once one (from index ``start`` on) matches ``predicate``."""
        with anyio.fail_after(timeout_s):
            while not any(predicate(line) for line in self.lines[start:]):
                try:
                    data = os.read(self.fd, 1 << 16)
                except BlockingIOError:
                    await anyio.wait_readable(self.fd)
                    continue
                if not data:
                    raise EOFError("stdout closed")
                self.buffer += data
                *complete, self.buffer = self.buffer.split(b"\n")
                self.lines += [json.loads(line) for line in complete if line.strip()]
        return self.lines


class StdioPipes:
    """A line transport served in-process on two pipes: ``send`` a line, read ``reader.lines``."""

    def __init__(self) -> None:
        self.stdin_r, self.stdin_w = os.pipe()
        self.stdout_r, self.stdout_w = os.pipe()
        self.reader = PipeReader(self.stdout_r)

    def send(self, obj: Any) -> None:
        os.write(self.stdin_w, obj if isinstance(obj, bytes) else msgspec.json.encode(obj) + b"\n")

    def close(self) -> None:
        for fd in (self.stdin_r, self.stdin_w, self.stdout_r, self.stdout_w):
            try:
                os.close(fd)
            except OSError:
                pass


@asynccontextmanager
async def stdio_pipes(kernel: Kernel, name: str = "stdio", **config: Any) -> AsyncIterator[StdioPipes]:
    """A line transport (``stdio`` or ``acp``) served in-process on two pipes."""
    cls = transport_class(name)
    pipes = StdioPipes()
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(cls(pipes.stdin_r, pipes.stdout_w).serve, kernel, cls.Config(**config))
            try:
                yield pipes
            finally:
                tg.cancel_scope.cancel()
    finally:
        pipes.close()


# ------------------------------------------------------------------ raw WebSocket


class RawWebSocket:
    """A blocking WebSocket client on a plain socket (wsproto), for threads.

    Unlike a library client it reads nothing unless asked, and its receive buffer
    can be made small: the way to play a client that stops reading.
    """

    def __init__(self, url: str, *, rcvbuf: int | None = None, headers: dict[str, str] | None = None, timeout_s: float = 5.0) -> None:
        match = re.match(r"ws://([^:/]+):(\d+)(/.*)$", url)
        assert match, url
        host, port, target = match.group(1), int(match.group(2)), match.group(3)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout_s)
        self.sock.connect((host, port))
        self.conn = WSConnection(ConnectionType.CLIENT)
        extra = [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
        self.sock.sendall(self.conn.send(Request(host=f"{host}:{port}", target=target, extra_headers=extra)))
        self.texts: list[str] = []
        self.close_code: int | None = None
        self.close_reason = ""
        self._parts: list[str] = []
        self.status: int | None = None
        while self.status is None:
            self._pump()

    def _pump(self) -> bool:
        """Read once and process what arrived; False at EOF."""
        try:
            data = self.sock.recv(1 << 16)
        except ConnectionResetError:
            data = b""
        self.conn.receive_data(data or None)
        for event in self.conn.events():
            if isinstance(event, AcceptConnection):
                self.status = 101
            elif isinstance(event, RejectConnection):
                self.status = event.status_code
            elif isinstance(event, TextMessage):
                self._parts.append(event.data)
                if event.message_finished:
                    self.texts.append("".join(self._parts))
                    self._parts.clear()
            elif isinstance(event, CloseConnection):
                if self.close_code is None:
                    self.close_code, self.close_reason = event.code, event.reason or ""
                if self.conn.state is ConnectionState.REMOTE_CLOSING:
                    try:
                        self.sock.sendall(self.conn.send(event.response()))
                    except OSError:
                        pass
            elif isinstance(event, Ping):
                self.sock.sendall(self.conn.send(event.response()))
        return bool(data)

    def send_text(self, text: str) -> None:
        self.sock.sendall(self.conn.send(TextMessage(data=text)))

    def read_until(self, predicate: Callable[[list[str]], bool], timeout_s: float = 10.0) -> None:
        self.sock.settimeout(timeout_s)
        while not predicate(self.texts) and self.close_code is None:
            if not self._pump():
                return

    def read_to_end(self, timeout_s: float = 10.0) -> None:
        """Everything until the server closes (close frame or EOF)."""
        self.sock.settimeout(timeout_s)
        while self._pump():
            pass

    def close(self) -> None:
        self.sock.close()


class RawSSE:
    """A blocking HTTP/1.1 client of one SSE response (h11 on a plain socket), for threads.

    Reads only when asked, with a receive buffer that can be made small: a reader that
    stops reading. ``events`` are (id, event, data) triples.
    """

    def __init__(self, url: str, method: str, target: str, body: bytes = b"", *, headers: dict[str, str] | None = None, rcvbuf: int | None = None) -> None:
        import h11

        match = re.match(r"http://([^:/]+):(\d+)", url)
        assert match, url
        host, port = match.group(1), int(match.group(2))
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(10)
        self.sock.connect((host, port))
        self.h11 = h11
        self.conn = h11.Connection(our_role=h11.CLIENT)
        all_headers = [("host", f"{host}:{port}"), ("content-length", str(len(body))), ("accept", "text/event-stream")]
        all_headers += list((headers or {}).items())
        self.sock.sendall(self.conn.send(h11.Request(method=method, target=target, headers=all_headers)))
        self.sock.sendall(self.conn.send(h11.Data(data=body)) + self.conn.send(h11.EndOfMessage()))
        self.status = 0
        self.headers: dict[str, str] = {}
        self.events: list[tuple[str | None, str | None, str]] = []
        self.ended = False
        self._text = ""

    def _pump(self) -> None:
        h11 = self.h11
        while True:
            event = self.conn.next_event()
            if event is h11.NEED_DATA:
                data = self.sock.recv(1 << 16)
                self.conn.receive_data(data)
                if not data and self.conn.their_state is not h11.DONE:
                    self.ended = True
                    return
                continue
            if isinstance(event, h11.Response):
                self.status = event.status_code
                self.headers = {k.decode(): v.decode() for k, v in event.headers}
                return
            if isinstance(event, h11.Data):
                self._text += bytes(event.data).decode()
                while "\n\n" in self._text:
                    block, self._text = self._text.split("\n\n", 1)
                    fields: dict[str, str] = {}
                    data_lines = []
                    for line in block.split("\n"):
                        key, _, value = line.partition(": ")
                        if key == "data":
                            data_lines.append(value)
                        elif key in ("id", "event"):
                            fields[key] = value
                    if data_lines:
                        self.events.append((fields.get("id"), fields.get("event"), "\n".join(data_lines)))
                return
            if isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                self.ended = True
                return

    def read_until(self, predicate: Callable[[list[tuple[str | None, str | None, str]]], bool]) -> None:
        while not self.ended and not (self.status and predicate(self.events)):
            self._pump()

    def close(self) -> None:
        self.sock.close()


def frames(texts: list[str]) -> list[dict[str, Any]]:
    return [json.loads(t) for t in texts]


# ------------------------------------------------------------------ subprocess gateway

READY = re.compile(r"transport (\S+) ready on (http://\S+)")


class GatewayChild:
    """``python -m gateway serve ...`` with its stdio, and what its stderr announced."""

    def __init__(self, process: Any) -> None:
        self.process = process
        self.stderr = bytearray()
        self.stdout = bytearray()
        self.urls: dict[str, str] = {}
        self.lines: list[dict[str, Any]] = []

    async def pump_stderr(self) -> None:
        assert self.process.stderr is not None
        async for chunk in self.process.stderr:
            self.stderr += chunk
            for name, url in READY.findall(self.stderr.decode(errors="replace")):
                self.urls[name] = url

    async def wait_ready(self, names: Iterable[str], timeout_s: float = 30.0) -> None:
        with anyio.fail_after(timeout_s):
            while not all(n in self.urls for n in names):
                if self.process.returncode is not None:
                    raise AssertionError("gateway exited early:\n" + self.stderr.decode(errors="replace"))
                await anyio.sleep(0.02)

    async def send_line(self, obj: Any) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(msgspec.json.encode(obj) + b"\n")

    async def read_lines(self) -> None:
        """Collect stdout lines (stdio's protocol) into :attr:`lines` until EOF."""
        assert self.process.stdout is not None
        async for chunk in self.process.stdout:
            self.stdout += chunk
            *complete, rest = bytes(self.stdout).split(b"\n")
            self.stdout = bytearray(rest)
            self.lines += [msgspec.json.decode(line) for line in complete if line.strip()]

    async def until_line(self, predicate: Callable[[dict[str, Any]], bool], timeout_s: float = 10.0) -> dict[str, Any]:
        with anyio.fail_after(timeout_s):
            while True:
                for line in self.lines:
                    if predicate(line):
                        return line
                await anyio.sleep(0.01)


@asynccontextmanager
async def gateway_child(args: list[str], env: dict[str, str], cwd: Path) -> AsyncIterator[GatewayChild]:
    """The child with stderr and stdout pumped in the background; killed if still alive at the end."""
    process = await anyio.open_process([sys.executable, "-m", "gateway", *args], env=env, cwd=cwd)
    child = GatewayChild(process)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(child.pump_stderr)
            tg.start_soon(child.read_lines)
            try:
                yield child
            finally:
                if process.returncode is None:
                    process.kill()
                with anyio.move_on_after(10, shield=True):
                    await process.wait()
                tg.cancel_scope.cancel()
    finally:
        await process.aclose()


__all__ = ["ROOT"]
