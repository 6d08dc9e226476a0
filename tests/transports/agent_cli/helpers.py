"""Helpers for the Agent-CLI tests: a live server, an asyncio client, test tools."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anyio
import msgspec
from websockets.asyncio.client import ClientConnection, connect

from kernel import Kernel
from kernel.tools import Tool, ToolContext, ToolFailure
from transports.agent_cli import AgentCliConfig, AgentCliTransport

T = TypeVar("T")
Frame = dict[str, Any]

#: Test servers: ephemeral port, no rate limit, no server pings (they delay shutdown).
BASE = {"port": 0, "rate_limit_per_minute": 0, "ping_interval_s": 0.0}


@asynccontextmanager
async def serve(kernel: Kernel, **config: Any) -> AsyncIterator[str]:
    """The transport on 127.0.0.1:<ephemeral>; yields its ws:// URL."""
    cfg = msgspec.convert({**BASE, **config}, AgentCliConfig)
    scope = anyio.CancelScope()

    async def run(*, task_status: Any) -> None:
        with scope:
            await AgentCliTransport().serve(kernel, cfg, task_status=task_status)

    async with anyio.create_task_group() as tg:
        address = await tg.start(run)
        try:
            yield address.replace("http://", "ws://") + cfg.path
        finally:
            scope.cancel()


def body(frame: Frame) -> tuple[str, Any]:
    """The response variant of a frame: ("Stream", "chunk")."""
    ((name, value),) = frame["response"].items()
    return name, value


def is_end(frame: Frame) -> bool:
    """Whether a frame ends its request: Text or Multi, Complete, or an error that is not a tool error."""
    name, _ = body(frame)
    if name in ("Complete", "StreamComplete", "Multi"):
        return True
    if name != "Text":
        return False
    error = frame["error"]
    return not (isinstance(error, str) and error.startswith('{"type":"tool_execution_error"'))


class Client:
    """A thin asyncio client: JSON frames out, JSON frames in, with timeouts."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws

    async def send(self, request: Any) -> None:
        await self.ws.send(request if isinstance(request, (str, bytes)) else json.dumps(request))

    async def recv(self, timeout: float = 5.0) -> Frame:
        return json.loads(await asyncio.wait_for(self.ws.recv(), timeout))

    async def until(self, predicate: Callable[[Frame], bool], timeout: float = 5.0) -> list[Frame]:
        """Frames up to and including the first one matching ``predicate``."""
        frames: list[Frame] = []
        async with asyncio.timeout(timeout):
            while True:
                frame = await self.recv(timeout)
                frames.append(frame)
                if predicate(frame):
                    return frames

    async def until_end(self, request_id: str, timeout: float = 5.0) -> list[Frame]:
        return await self.until(lambda f: f["request_id"] == request_id and is_end(f), timeout)

    async def ask(self, request: dict[str, Any], timeout: float = 5.0) -> list[Frame]:
        await self.send(request)
        return await self.until_end(request["request_id"], timeout)

    async def silent(self, seconds: float = 0.2) -> bool:
        """True if nothing arrives for ``seconds``."""
        try:
            await asyncio.wait_for(self.ws.recv(), seconds)
        except TimeoutError:
            return True
        return False


@asynccontextmanager
async def client(url: str, **kw: Any) -> AsyncIterator[Client]:
    async with connect(url, proxy=None, open_timeout=5, close_timeout=2, max_size=None, **kw) as ws:
        yield Client(ws)


def text(request_id: str, value: str, **extra: Any) -> dict[str, Any]:
    return {"request_id": request_id, "input": {"Text": value}, **extra}


def unit(request_id: str, name: str) -> dict[str, Any]:
    return {"request_id": request_id, "input": name}


# ------------------------------------------------------------------ tools


async def _add(args: dict[str, Any], ctx: ToolContext) -> str:
    return str(args["a"] + args["b"])


async def _boom(args: dict[str, Any], ctx: ToolContext) -> str:
    raise ToolFailure("disk on fire")


_NUMBERS = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}
ADD = Tool(name="add", description="Add two numbers", parameters=_NUMBERS, handler=_add)
BOOM = Tool(name="boom", description="Always fails", parameters={"type": "object"}, handler=_boom)
GUARDED = Tool(name="guarded", description="Needs approval", parameters=_NUMBERS, handler=_add, requires_approval=True)
TOOLS = (ADD, BOOM, GUARDED)
