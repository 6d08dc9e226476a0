"""Diagnostic (not part of the suite): the shared WebSocket and SSE writers' cost per send.

    python -m tests.bench.diag_send

``transports.shared.WebSocket.send_text`` around an ASGI ``send`` that does nothing,
against calling that ``send`` directly, on asyncio and trio: what the wrapper adds to
every frame before hypercorn's own work. It also measures what one ``send()`` on a loopback TCP socket costs when the reader
is busy (writes back to back) and when it sleeps between writes (the write must wake
it): the second is what a server streaming deltas as they come pays per frame.

Variants: without a send timeout; with one (``send_timeout_s``, as openfang and agent-cli
set it) and the watch of sends running beside the handler, as the router runs it (no deadline
per frame); with one and no watch (a cancel scope with a deadline per frame, as every frame
had before the watch). The same for ``SSEStream.send_raw``: in an ``open_sse`` block, where
the client watch looks after the writes, and a stream with no watch (a deadline per write).
The building blocks: anyio's default lock (a scheduling round per acquire) against
``fast_acquire`` (what the wrappers use), the clock, a cancel scope.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import anyio

FRAMES = 20000


async def _noop_send(message: dict[str, Any]) -> None:
    return None


async def _receive() -> dict[str, Any]:
    await anyio.sleep_forever()
    raise AssertionError


def _socket(*, timeout_s: float | None) -> Any:
    from transports.shared import WebSocket

    ws = WebSocket({"type": "websocket", "path": "/", "headers": [], "client": ("127.0.0.1", 1)}, _receive, _noop_send)
    ws._state = "connected"  # as after accept(), without a handshake
    ws.send_timeout_s = timeout_s
    return ws


async def per_frame_us(case: str) -> float:
    best = float("inf")
    for _ in range(5):
        if case == "bare send":
            started = time.perf_counter()
            for _ in range(FRAMES):
                await _noop_send({"type": "websocket.send", "text": "x"})
            best = min(best, (time.perf_counter() - started) / FRAMES * 1e6)
            continue
        ws = _socket(timeout_s=10.0 if "timeout" in case else None)
        async with anyio.create_task_group() as tasks:
            if "watched" in case:
                tasks.start_soon(ws.watch_sends, tasks.cancel_scope)
                await anyio.sleep(0.001)  # the watch is running
            started = time.perf_counter()
            for _ in range(FRAMES):
                await ws.send_text("x")
            best = min(best, (time.perf_counter() - started) / FRAMES * 1e6)
            tasks.cancel_scope.cancel()
    return best


async def building_blocks() -> dict[str, float]:
    """What send_text is made of, per call (best of 5)."""
    import math

    lock = anyio.Lock()
    fast = anyio.Lock(fast_acquire=True)

    async def default_lock() -> None:
        async with lock:
            pass

    async def fast_lock() -> None:
        async with fast:
            pass

    async def clock() -> None:
        anyio.current_time()

    async def scope_inf() -> None:
        with anyio.move_on_after(math.inf):  # noqa: ASYNC100 - the scope itself is measured
            pass

    async def scope_10s() -> None:
        with anyio.move_on_after(10.0):  # noqa: ASYNC100 - the scope itself is measured
            pass

    out = {}
    for name, fn in (("Lock() acquire+release", default_lock), ("Lock(fast_acquire=True)", fast_lock), ("anyio.current_time()", clock),
                     ("move_on_after(inf)", scope_inf), ("move_on_after(10)", scope_10s)):
        best = float("inf")
        for _ in range(5):
            started = time.perf_counter()
            for _ in range(FRAMES):
                await fn()
            best = min(best, (time.perf_counter() - started) / FRAMES * 1e6)
        out[name] = best
    return out


async def sse_per_write_us(case: str) -> float:
    from transports.shared import Request, SSEStream, open_sse, watching

    best = float("inf")
    for _ in range(5):
        request = Request({"type": "http", "path": "/", "headers": [], "client": ("127.0.0.1", 1)}, _receive, _noop_send)
        request.body_consumed = True
        async with watching(request) as watch:
            if "no watch" in case:
                stream = SSEStream(request, 15.0)
                stream.send_timeout_s = 10.0
                started = time.perf_counter()
                for _ in range(FRAMES):
                    await stream.send_raw(b"data: x\n\n")
            else:
                timeout_s = 10.0 if "timeout" in case else None
                async with open_sse(request, keepalive_interval_s=15.0, send_timeout_s=timeout_s, watch=watch) as stream:
                    started = time.perf_counter()
                    for _ in range(FRAMES):
                        await stream.send_raw(b"data: x\n\n")
            best = min(best, (time.perf_counter() - started) / FRAMES * 1e6)
    return best


CASES = ("bare send", "send_text", "send_text + timeout, watched", "send_text + timeout, no watch")
SSE_CASES = ("SSE send_raw", "SSE send_raw + timeout, watched", "SSE send_raw + timeout, no watch")


async def main_async() -> dict[str, float]:
    frames = {case: await per_frame_us(case) for case in CASES}
    writes = {case: await sse_per_write_us(case) for case in SSE_CASES}
    return frames | writes | await building_blocks()


def loopback_send_us(frames: int = 5000, gap_us: float = 100.0) -> dict[str, float]:
    """Microseconds per ``send()`` of a 45-byte frame to a reader in another process."""
    import os
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    pid = os.fork()
    if pid == 0:  # the reader: drains until EOF
        reader = socket.create_connection(server.getsockname())
        while reader.recv(65536):
            pass
        os._exit(0)
    conn, _ = server.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    out = {}
    try:
        for mode in ("reader busy (back to back)", f"reader asleep ({gap_us:g} us between)"):
            spent = 0.0
            for _ in range(frames):
                if "asleep" in mode:
                    until = time.perf_counter() + gap_us / 1e6
                    while time.perf_counter() < until:
                        pass
                started = time.perf_counter()
                conn.send(b"x" * 45)
                spent += time.perf_counter() - started
            out[mode] = spent / frames * 1e6
    finally:
        conn.close()
        server.close()
        os.waitpid(pid, 0)
    return out


def main() -> int:
    results = {backend: anyio.run(main_async, backend=backend) for backend in ("asyncio", "trio")}
    print(f"{'microseconds per call (best of 5)':34} {'asyncio':>9} {'trio':>9}")
    for name in results["asyncio"]:
        print(f"{name:34} {results['asyncio'][name]:9.2f} {results['trio'][name]:9.2f}")
    print()
    for mode, us in loopback_send_us().items():
        print(f"loopback send(), {mode:38} {us:7.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
