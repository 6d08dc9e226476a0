"""The client watch keeps a stream alive from its own task (``ClientWatch.every``): keep-alives
come while the client is quiet, its going is still seen, and nothing it sends is lost to a
keep-alive's turn. It also ends a write the client does not take within the send timeout:
the stream's own writes have no deadline of their own. In process, with an ASGI receive fed
by hand, on asyncio and trio."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import pytest

from transports.shared import ClientWatch, Request, open_sse, watching

pytestmark = pytest.mark.anyio


class Client:
    """An ASGI client: its messages are given by the test; what the app sends is kept."""

    def __init__(self) -> None:
        self.to_app, self._from_test = anyio.create_memory_object_stream[dict[str, Any]](10)
        self.sent: list[dict[str, Any]] = []
        #: The client stopped reading: a send never completes.
        self.stalled = False
        self.request = Request({"type": "http", "path": "/", "headers": [], "client": ("127.0.0.1", 1)}, self._from_test.receive, self._send)
        self.request.body_consumed = True

    async def _send(self, message: dict[str, Any]) -> None:
        if self.stalled:
            await anyio.sleep_forever()
        self.sent.append(message)

    def bodies(self) -> list[bytes]:
        return [message["body"] for message in self.sent if message["type"] == "http.response.body"]


async def test_every_ticks_when_due_and_the_clients_going_is_still_seen() -> None:
    client = Client()
    ticks = 0
    gone = anyio.Event()
    due = [anyio.current_time() + 3600.0]

    async def tick() -> bool:
        nonlocal ticks
        ticks += 1
        due[0] = anyio.current_time() + 0.005  # as a keep-alive moves its due on
        return True

    async with anyio.create_task_group() as tasks:
        watch = ClientWatch(client.request)
        watch.on_gone(gone.set)
        tasks.start_soon(watch.run)
        watch.every(lambda: due[0], tick)
        for _ in range(20):
            await anyio.lowlevel.checkpoint()
        assert ticks == 0  # not due: the watch only waits for the client
        due[0] = anyio.current_time()
        watch.every(lambda: due[0], tick)  # due now: the wait for the client ends at once
        with anyio.fail_after(5):
            while ticks < 3:
                await anyio.sleep(0.005)
        await client.to_app.send({"type": "http.disconnect"})
        with anyio.fail_after(5):
            await gone.wait()
    assert client.request.disconnected


async def test_a_tick_that_says_stop_and_every_none_stop_the_ticks() -> None:
    client = Client()
    calls = 0

    async def once() -> bool:
        nonlocal calls
        calls += 1
        return False

    async with watching(client.request) as watch:
        await anyio.lowlevel.checkpoint()
        watch.every(anyio.current_time, once)
        await anyio.sleep(0.05)
        assert calls == 1
        ticked: list[bool] = []

        async def tick() -> bool:
            ticked.append(True)
            return True

        watch.every(lambda: anyio.current_time() + 0.02, tick)
        watch.every(None)
        await anyio.sleep(0.06)
        assert ticked == []


async def test_a_message_that_comes_while_ticks_fall_due_is_not_lost() -> None:
    """The client's message is taken whole even when the wait for it ends at a tick's due time
    again and again: its disconnect ends the stream's block."""
    client = Client()
    ticks = 0
    due = [anyio.current_time()]

    async def tick() -> bool:
        nonlocal ticks
        ticks += 1
        due[0] = anyio.current_time() + 0.001
        return True

    with anyio.fail_after(5):
        async with watching(client.request) as watch:
            watch.every(lambda: due[0], tick)
            while ticks < 20:
                await anyio.sleep(0.001)
            await client.to_app.send({"type": "http.disconnect"})
            async with open_sse(client.request, keepalive_interval_s=0, watch=watch):
                await anyio.sleep_forever()  # cancelled once the watch sees the client go
    assert client.request.disconnected


async def test_a_quiet_stream_on_the_answers_watch_gets_keep_alives_and_none_after_it_ends() -> None:
    client = Client()
    async with watching(client.request) as watch:
        async with open_sse(client.request, keepalive_interval_s=0.02, watch=watch, first=b"data: first\n\n") as stream:
            with anyio.fail_after(5):
                while len(client.bodies()) < 3:
                    await anyio.sleep(0.005)
            assert await stream.send_raw(b"data: last\n\n", last=True)
        ended = len(client.sent)
        await anyio.sleep(0.06)
        assert len(client.sent) == ended
    bodies = client.bodies()
    assert bodies[0] == b"data: first\n\n" and bodies[-1] == b"data: last\n\n"
    assert set(bodies[1:-1]) == {b": keep-alive\n\n"}
    assert client.sent[-1]["more_body"] is False


async def test_a_write_the_client_does_not_take_is_ended_by_the_watch() -> None:
    """The block's write has no deadline of its own: the watch ends it, and the block with it,
    when it outlives the send timeout. The watch looks within one send timeout while the stream
    is quiet, so a write that starts long before the next keep-alive is still ended in time."""
    client = Client()
    after_the_write = False
    with anyio.fail_after(5):
        async with watching(client.request) as watch:
            async with open_sse(client.request, keepalive_interval_s=3600, send_timeout_s=0.05, watch=watch) as stream:
                assert await stream.send_raw(b"data: taken\n\n")
                await anyio.sleep(0.12)  # the watch has looked (and found nothing to do) since
                client.stalled = True
                await stream.send_raw(b"data: never taken\n\n")
                after_the_write = True
    assert not after_the_write  # cancelled in the write, not timed out by a deadline of its own
    assert stream.closed and client.bodies() == [b"data: taken\n\n"]


async def test_a_keep_alive_the_client_does_not_take_ends_the_stream_and_frees_the_watch() -> None:
    """The watch's own write (a keep-alive) bounds itself: a client that stops reading while the
    stream is quiet is let go after the send timeout, and its going is still seen after that."""
    client = Client()
    with anyio.fail_after(5):
        async with watching(client.request) as watch:
            async with open_sse(client.request, keepalive_interval_s=0.02, send_timeout_s=0.05, watch=watch) as stream:
                client.stalled = True
                await stream.wait_closed()
                await anyio.sleep_forever()  # cancelled: the stream ended
            gone = anyio.Event()
            watch.on_gone(gone.set)
            await client.to_app.send({"type": "http.disconnect"})
            await gone.wait()
    assert stream.closed and client.bodies() == []
