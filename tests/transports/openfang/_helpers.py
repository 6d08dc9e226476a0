"""A real OpenFang transport on 127.0.0.1 for the tests, and client helpers.

The ``websockets`` client is asyncio-only: on the trio backend it runs in a worker
thread with its own event loop (:func:`in_asyncio`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import websockets

from kernel import Kernel
from kernel.testing import ScriptedProvider, running_kernel
from kernel.tools import Tool
from plugins.commands.builtin import BUILTIN_COMMANDS
from transports.openfang import OpenFangConfig, OpenFangTransport

T = TypeVar("T")
RECV_TIMEOUT_S = 5.0


@dataclass
class Server:
    url: str
    kernel: Kernel
    agent_id: str
    scope: anyio.CancelScope

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://") + f"/api/agents/{self.agent_id}/ws"

    def ws_for(self, agent_ref: str, query: str = "") -> str:
        return self.url.replace("http://", "ws://") + f"/api/agents/{agent_ref}/ws" + query


def make_config(**overrides: Any) -> OpenFangConfig:
    """Ephemeral port, no protocol pings (they delay hypercorn's stop), quick agent polls."""
    values: dict[str, Any] = {"port": 0, "ping_interval_s": 0.0, "sse_keepalive_s": 0.2}
    values.update(overrides)
    return OpenFangConfig(**values)


@asynccontextmanager
async def serving(
    provider: Any = None, *, tools: Iterable[Tool] = (), config: OpenFangConfig | None = None, **kernel_kw: Any
) -> AsyncIterator[Server]:
    """Kernel + OpenFang transport; the server stops (its scope is cancelled) at the end."""
    async with running_kernel(provider or ScriptedProvider(), tools=tools, commands=BUILTIN_COMMANDS, **kernel_kw) as kernel:
        scope = anyio.CancelScope()

        async def run(*, task_status: Any) -> None:
            with scope:
                await OpenFangTransport().serve(kernel, config or make_config(), task_status=task_status)

        async with anyio.create_task_group() as tg:
            url = await tg.start(run)
            try:
                yield Server(url=url, kernel=kernel, agent_id=kernel.settings.agents[0].agent_id(), scope=scope)
            finally:
                scope.cancel()


async def recv(ws: Any) -> dict[str, Any]:
    return json.loads(await asyncio.wait_for(ws.recv(), RECV_TIMEOUT_S))


async def recv_until(ws: Any, *types: str) -> list[dict[str, Any]]:
    """Frames up to and including the first one whose type is in ``types``."""
    frames = []
    while True:
        frame = await recv(ws)
        frames.append(frame)
        if frame["type"] in types:
            return frames


async def connect(url: str, **kw: Any) -> Any:
    """Open a socket and consume ``connected`` + ``agents_updated``."""
    ws = await websockets.connect(url, **kw)
    first, second = await recv(ws), await recv(ws)
    assert first["type"] == "connected" and second["type"] == "agents_updated", (first, second)
    return ws


async def upgrade_status(url: str, **kw: Any) -> int:
    """The HTTP status of a refused upgrade (0 if it was accepted)."""
    try:
        ws = await websockets.connect(url, **kw)
    except websockets.InvalidStatus as exc:
        return exc.response.status_code
    await ws.close()
    return 0


def turn(frames: list[dict[str, Any]]) -> list[str]:
    """A compact view of a turn: ``typing:start``, ``phase:streaming``, ``text_delta``..."""
    out = []
    for f in frames:
        detail = f.get("state") or f.get("phase")
        out.append(f"{f['type']}:{detail}" if detail else f["type"])
    return out
