"""The watch of a WebSocket's sends (``WebSocket.watch_sends``, run by the router beside each
handler): a send the client does not take within the send timeout ends the handler and the
connection closes with 1008; sends make no deadline of their own. In process, through the
router, with an ASGI client played by the test, on asyncio and trio."""

from __future__ import annotations

from collections import Counter
from typing import Any

import anyio
import pytest

from tests.cycles import garbage_of
from transports.shared import Router, ServerConfig, WebSocket

pytestmark = pytest.mark.anyio


class Client:
    """An ASGI WebSocket client: it connects, then takes frames until it stops reading."""

    def __init__(self) -> None:
        self.stalled = False
        self.texts: list[str] = []
        self.close: dict[str, Any] | None = None
        self.scope = {"type": "websocket", "path": "/ws", "headers": [(b"host", b"127.0.0.1")], "client": ("127.0.0.1", 1), "query_string": b""}
        self._connected = False
        self._closed = anyio.Event()

    async def receive(self) -> dict[str, Any]:
        if not self._connected:
            self._connected = True
            return {"type": "websocket.connect"}
        await self._closed.wait()  # it answers the server's close frame with its own
        assert self.close is not None
        return {"type": "websocket.disconnect", "code": self.close["code"]}

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "websocket.send":
            if self.stalled:
                await anyio.sleep_forever()
            self.texts.append(message["text"])
        elif message["type"] == "websocket.close":
            self.close = message
            self._closed.set()


def router_with(handler: Any) -> Router:
    router = Router(ServerConfig(), token=None)
    router.websocket("/ws", handler, auth=False)
    return router


async def test_a_send_the_client_does_not_take_ends_the_handler_and_closes_with_1008() -> None:
    """The timeout is set after accept, as the dialects set it; the stream is quiet for longer
    than the timeout before the stalled send, so the watch must look while nothing is sent."""
    client = Client()
    after_the_send = False

    async def handler(ws: WebSocket) -> None:
        nonlocal after_the_send
        assert await ws.accept()
        ws.send_timeout_s = 0.05
        assert await ws.send_text("taken")
        await anyio.sleep(0.12)
        client.stalled = True
        await ws.send_text("never taken")
        after_the_send = True

    with anyio.fail_after(5):
        await router_with(handler)(client.scope, client.receive, client.send)
    assert not after_the_send  # cancelled in its send, not timed out by a deadline of its own
    assert client.texts == ["taken"]
    assert client.close is not None and client.close["code"] == 1008 and "too slow" in client.close["reason"]


async def test_sends_the_client_takes_are_not_cut_and_the_connection_closes_normally() -> None:
    client = Client()

    async def handler(ws: WebSocket) -> None:
        assert await ws.accept()
        ws.send_timeout_s = 0.02
        for index in range(20):
            assert await ws.send_text(f"frame {index}")
            await anyio.sleep(0.005)  # quiet spells around the watch's looks

    with anyio.fail_after(5):
        await router_with(handler)(client.scope, client.receive, client.send)
    assert client.texts == [f"frame {index}" for index in range(20)]
    assert client.close is not None and client.close["code"] == 1000


async def test_without_a_send_timeout_a_stalled_send_waits() -> None:
    """No timeout set: the watch never looks, and a send waits as long as the client takes."""
    client = Client()
    sending = anyio.Event()

    async def handler(ws: WebSocket) -> None:
        assert await ws.accept()
        client.stalled = True
        sending.set()
        await ws.send_text("waits")

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(router_with(handler), client.scope, client.receive, client.send)
        await sending.wait()
        await anyio.sleep(0.2)
        assert client.close is None  # still waiting for the client
        tasks.cancel_scope.cancel()


async def test_a_websocket_connection_through_the_router_leaves_no_reference_cycles() -> None:
    """The router's watch of a connection's sends runs beside its handler."""

    async def handler(ws: WebSocket) -> None:
        assert await ws.accept()
        ws.send_timeout_s = 5.0
        assert await ws.send_text("hello")

    router = router_with(handler)

    async def connections() -> None:
        for _ in range(5):
            client = Client()
            with anyio.fail_after(5):
                await router(client.scope, client.receive, client.send)
            assert client.texts == ["hello"] and client.close is not None and client.close["code"] == 1000

    assert await garbage_of(connections) == Counter()
