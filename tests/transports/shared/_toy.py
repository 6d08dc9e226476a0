"""A toy transport built only from the shared helpers, plus client helpers for the tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anyio
import anyio.lowlevel
import msgspec

from transports.shared import (
    CLOSE_NORMAL,
    HttpError,
    Request,
    Response,
    Router,
    ServerConfig,
    WebSocket,
    WsIdle,
    WsInvalidFrame,
    WsRateLimited,
    WsText,
    WsTooLarge,
    json_response,
    open_sse,
    serve_asgi,
)

T = TypeVar("T")


class Item(msgspec.Struct):
    name: str
    count: int


class ToyConfig(ServerConfig, kw_only=True):
    """Subclass overriding defaults, as every transport's Config does."""

    max_message_bytes: int = 1024
    rate_limit_per_minute: int = 0
    max_connections_per_ip: int = 0
    max_body_bytes: int = 2048
    ping_interval_s: float = 0.0  # hypercorn's ping task delays shutdown; tested separately
    sse_keepalive_s: float = 0.2


def make_app(config: ToyConfig, **router_kwargs: Any) -> tuple[Router, dict[str, Any]]:
    router = Router(config, **router_kwargs)
    seen: dict[str, Any] = {"sse_closed": anyio.Event()}

    @router.get("/health", auth=False)
    async def health(request: Request) -> Response:
        return json_response(200, {"status": "ok"})

    @router.get("/items/{item_id}")
    async def get_item(request: Request) -> Response:
        return json_response(200, {"id": request.path_params["item_id"], "q": request.query.get("q")})

    @router.post("/echo")
    async def echo(request: Request) -> Response:
        item = await request.json(Item)
        return json_response(201, item, headers={"X-Seen": "1"})

    @router.get("/sse")
    async def sse(request: Request) -> None:
        async with open_sse(request, keepalive_interval_s=config.sse_keepalive_s) as stream:
            await stream.send("hello")
            await stream.send("line one\nline two", event="multi", id="7")
            await anyio.sleep(0.5)  # idle: keep-alive comments go out
            await stream.send(b'{"done":true}', event="done")

    @router.get("/sse/forever")
    async def sse_forever(request: Request) -> None:
        try:
            async with open_sse(request, keepalive_interval_s=0) as stream:
                n = 0
                while True:
                    await stream.send(str(n))
                    n += 1
                    await anyio.sleep(0.02)
        finally:
            seen["sse_closed"].set()

    def check_id(ws: WebSocket) -> None:
        if not ws.path_params["agent"].isdigit():
            raise HttpError(400, "Invalid agent ID")

    async def check_known(ws: WebSocket) -> None:
        await anyio.lowlevel.checkpoint()
        if ws.path_params["agent"] == "404":
            raise HttpError(404, "Agent not found")

    @router.websocket("/ws/{agent}")
    async def ws_handler(ws: WebSocket) -> None:
        if not await ws.accept([check_id, check_known]):
            return
        await ws.send_json({"type": "connected", "agent": ws.path_params["agent"]})
        async for event in ws:
            match event:
                case WsText(text=text):
                    await ws.send_json({"type": "echo", "text": text})
                case WsTooLarge(size_bytes=size):
                    await ws.send_json({"type": "error", "content": f"Message too large ({size})"})
                case WsRateLimited():
                    await ws.send_json({"type": "error", "content": "Rate limit exceeded"})
                case WsInvalidFrame(reason=reason):
                    await ws.send_json({"type": "error", "content": reason})
                case WsIdle():
                    await ws.send_json({"type": "error", "content": "idle"})
                    await ws.close(CLOSE_NORMAL, "idle")

    return router, seen


@asynccontextmanager
async def running(
    app: Any, config: ServerConfig, *, stop_by_cancel: bool = False
) -> AsyncIterator[tuple[str, int, Any]]:
    """Serve ``app`` for the duration of the block; yields host, port and a stopper.

    The stopper is the shutdown event, or (``stop_by_cancel``) the serving task's
    cancel scope, which must stop the server just as gracefully.
    """
    shutdown = anyio.Event()
    server_scope = anyio.CancelScope()

    async def serve(*, task_status: Any) -> None:
        with server_scope:  # cancels the server task only, not the test body
            await serve_asgi(app, config, shutdown=shutdown, task_status=task_status)

    async with anyio.create_task_group() as tg:
        host, port = await tg.start(serve)
        try:
            yield host, port, _Canceller(server_scope) if stop_by_cancel else shutdown
        finally:
            shutdown.set()


class _Canceller:
    def __init__(self, scope: anyio.CancelScope) -> None:
        self.scope = scope

    def set(self) -> None:
        self.scope.cancel()


