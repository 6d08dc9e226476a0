"""The TCP line carrier (``serve_lines``, ``LineConnection``, ``LineSplitter``) with a toy
dialect, real sockets on 127.0.0.1, on asyncio and trio."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from anyio.abc import SocketStream, TaskStatus
from anyio.streams.buffered import BufferedByteReceiveStream
from hypothesis import given
from hypothesis import strategies as st

from transports.shared import ConfigError, LineConnection, LineServerConfig, LineSplitter, LineTooLong, serve_lines

Handler = Callable[[LineConnection], Awaitable[None]]

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def no_token_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GATEWAY_TOKEN", raising=False)


# ------------------------------------------------------------------ the splitter


def test_lines_are_cut_at_newlines_and_over_long_ones_dropped() -> None:
    splitter = LineSplitter(max_line_bytes=8)
    assert splitter.feed(b"hel") == []
    assert splitter.feed(b"lo\r\nworld\n") == [b"hello", b"world"]
    assert splitter.feed(b"far too long\nok\nrest") == [LineTooLong(12, 8), b"ok"]
    assert splitter.end() == [b"rest"]
    assert splitter.end() == []
    assert splitter.feed(b"\n\r\n") == [b"", b""]  # blank lines are lines: the dialect decides
    assert splitter.feed(b"0123456789") == [] and splitter.end() == [LineTooLong(10, 8)]


@given(st.lists(st.binary(max_size=30), max_size=20), st.integers(min_value=1, max_value=12))
def test_any_pieces_give_the_lines_of_the_whole_stream(chunks: list[bytes], limit: int) -> None:
    splitter = LineSplitter(max_line_bytes=limit)
    got = [line for chunk in chunks for line in splitter.feed(chunk)] + splitter.end()
    whole = b"".join(chunks).split(b"\n")
    if whole[-1] == b"":
        whole.pop()  # a final newline ends the last line; it does not start another
    assert got == [LineTooLong(len(w), limit) if len(w) > limit else w.rstrip(b"\r") for w in whole]


# ------------------------------------------------------------------ the server


async def shout(conn: LineConnection) -> None:
    """The toy dialect: every line comes back upper-cased."""
    while (line := await conn.receive()) is not None:
        await conn.send(b"TOO LONG\n" if isinstance(line, LineTooLong) else line.upper() + b"\n")


def token_of(line: bytes) -> str | None:
    return line.removeprefix(b"TOKEN ").decode() if line.startswith(b"TOKEN ") else None


@asynccontextmanager
async def serving(handler: Handler = shout, send_timeout_s: float | None = None, **options: Any) -> AsyncIterator[tuple[anyio.CancelScope, int]]:
    """Serve the toy dialect on a free port; the scope stops the server (and only the server)."""
    config = LineServerConfig(port=0, **options)
    stop = anyio.CancelScope()

    async def serve(*, task_status: TaskStatus[str]) -> None:
        with stop:
            await serve_lines(config, handler, token_of=token_of, refusal=lambda text: f"NO {text}\n", send_timeout_s=send_timeout_s, task_status=task_status)

    async with anyio.create_task_group() as tg:
        address = await tg.start(serve)
        assert address.startswith("tcp://127.0.0.1:")
        yield stop, int(address.rsplit(":", 1)[1])
        stop.cancel()


class Client:
    def __init__(self, stream: SocketStream) -> None:
        self.stream = stream
        self.reader = BufferedByteReceiveStream(stream)

    async def send(self, line: str) -> None:
        await self.stream.send(line.encode() + b"\n")

    async def line(self) -> str:
        with anyio.fail_after(5):
            return (await self.reader.receive_until(b"\n", 65536)).decode()

    async def closed(self) -> bool:
        """Whether the server closed the connection (nothing more comes)."""
        with anyio.fail_after(5):
            try:
                return not await self.reader.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return True


@asynccontextmanager
async def connect(port: int) -> AsyncIterator[Client]:
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        yield Client(stream)


async def test_lines_in_writes_out_and_the_last_line_at_end_of_input() -> None:
    async with serving(max_message_bytes=16) as (_, port), connect(port) as client:
        await client.send("hello")
        assert await client.line() == "HELLO"
        await client.send("x" * 40)
        assert await client.line() == "TOO LONG"
        await client.stream.send(b"last, no newline")
        await client.stream.send_eof()
        assert await client.line() == "LAST, NO NEWLINE"
        assert await client.closed()


async def test_an_unsafe_bind_is_refused_before_anything_listens() -> None:
    with pytest.raises(ConfigError, match="refusing to bind to non-loopback host"):
        await serve_lines(LineServerConfig(host="0.0.0.0"), shout, token_of=token_of, refusal=str)


async def test_with_a_token_the_first_line_must_present_it() -> None:
    async with serving(token="s3cret", auth_timeout_s=0.3) as (_, port):
        async with connect(port) as client:
            await client.send("TOKEN s3cret")
            await client.send("in")
            assert await client.line() == "IN"
        async with connect(port) as client:
            await client.send("TOKEN wrong")
            assert await client.line() == "NO unauthorized: the first line must present the access token"
            assert await client.closed()
        async with connect(port) as client:  # says nothing: refused when the time is up
            assert await client.line() == "NO unauthorized: the first line must present the access token"
            assert await client.closed()


async def test_connections_per_address_are_limited() -> None:
    async with serving(max_connections_per_ip=1) as (_, port):
        async with connect(port) as first:
            await first.send("one")
            assert await first.line() == "ONE"
            async with connect(port) as second:
                assert await second.line() == "NO too many connections from your address"
                assert await second.closed()
            await first.send("still here")
            assert await first.line() == "STILL HERE"
        with anyio.fail_after(5):
            while True:  # the slot is free once the server has seen the first one go
                async with connect(port) as third:
                    await third.send("three")
                    if await third.line() == "THREE":
                        break


async def test_writes_keep_their_order_and_render_under_the_lock() -> None:
    state: list[int] = []

    async def counting(conn: LineConnection) -> None:
        def render() -> str:
            state.append(len(state))
            return f"{state[-1]}\n"

        async with anyio.create_task_group() as tg:
            for _ in range(50):
                tg.start_soon(conn.write, render)

    async with serving(counting) as (_, port), connect(port) as client:
        assert [await client.line() for _ in range(50)] == [str(i) for i in range(50)]


async def test_a_client_that_stops_reading_is_dropped() -> None:
    dropped = anyio.Event()

    async def flood(conn: LineConnection) -> None:
        async with anyio.create_task_group() as tg:

            async def write() -> None:
                while not conn.closed:
                    await conn.send(b"x" * 65536)
                dropped.set()

            tg.start_soon(write)
            assert await conn.receive() is None  # the reader ends too
        await conn.send(b"never written")  # and nothing raises

    async with serving(flood, send_timeout_s=0.3) as (_, port), connect(port):
        with anyio.fail_after(10):
            await dropped.wait()


async def test_a_client_that_went_away_costs_no_exception() -> None:
    gone = anyio.Event()

    async def late(conn: LineConnection) -> None:
        assert await conn.receive() is None
        for _ in range(3):
            await conn.send(b"anyone?\n")
        gone.set()

    async with serving(late) as (_, port):
        async with connect(port):
            pass
        with anyio.fail_after(5):
            await gone.wait()


async def test_a_failing_handler_does_not_stop_the_server() -> None:
    calls: list[int] = []

    async def flaky(conn: LineConnection) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("bug in the dialect")
        await shout(conn)

    async with serving(flaky) as (_, port):
        async with connect(port) as client:
            assert await client.closed()
        async with connect(port) as client:
            await client.send("ok")
            assert await client.line() == "OK"


async def test_stopping_the_server_says_the_farewell_and_closes() -> None:
    async def polite(conn: LineConnection) -> None:
        conn.farewell = lambda: "bye\n"
        await shout(conn)

    async with serving(polite) as (stop, port), connect(port) as client:
        await client.send("hi")
        assert await client.line() == "HI"
        stop.cancel()
        assert await client.line() == "bye"
        assert await client.closed()


async def test_the_connection_carries_its_rate_limit() -> None:
    async def limited(conn: LineConnection) -> None:
        while await conn.receive() is not None:
            await conn.send(b"LIMITED\n" if conn.limiter.check() else b"OK\n")

    async with serving(limited, rate_limit_per_minute=2) as (_, port), connect(port) as client:
        for _ in range(3):
            await client.send("x")
        assert [await client.line() for _ in range(3)] == ["OK", "OK", "LIMITED"]
