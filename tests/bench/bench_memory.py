"""Memory: resident set size per idle WebSocket connection, with and without deflate.

A fresh server process per case (so memory freed by an earlier case cannot be reused
and hide the cost): the bare hypercorn app (baseline), the openfang transport and the
agent-cli transport, each on the asyncio and the trio worker. The benchmark opens a
few warm-up connections and closes them, reads the server's ``VmRSS`` from
``/proc/PID/status``, opens ``count`` connections (1,000 for the gateway without
deflate, where the target applies; 500 for the baseline and the deflate cases; 100
each with ``--quick``), does
one exchange on each (openfang: the ``connected`` and ``agents_updated`` frames it
sends plus a ``ping``; agent-cli: ``GetCommands``; bare: ``ping``), so that a
negotiated permessage-deflate context has been used both ways, checks that every
connection is still open, and reads ``VmRSS`` again. Per connection = the growth
divided by ``count``. The cases of a backend run at the same time, each server in its
own process (CPU contention does not change RSS).

``websockets`` offers permessage-deflate by default (``compression="deflate"``);
``compression=None`` offers nothing. Whether hypercorn accepted the offer is read
from the handshake response and reported.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from . import _harness as h
from .bench_ws_stream import ws_url

SERVERS = ("bare", "openfang", "agent-cli")
TARGET_KIB = 64


def url_for(server: str, port: int) -> str:
    return f"ws://127.0.0.1:{port}/" if server == "bare" else ws_url(server, port)


async def open_one(server: str, port: int, compression: str | None) -> ClientConnection:
    ws = await connect(url_for(server, port), compression=compression, max_size=None, ping_interval=None, open_timeout=60)
    async with asyncio.timeout(30):
        if server == "bare":
            await ws.send("ping")
            assert await ws.recv() == "pong"
        elif server == "openfang":
            for _ in range(2):  # connected, agents_updated
                await ws.recv()
            await ws.send(json.dumps({"type": "ping"}))
            assert json.loads(await ws.recv())["type"] == "pong"
        else:
            await ws.send(json.dumps({"request_id": "c", "input": "GetCommands"}))
            assert json.loads(await ws.recv())["request_id"] == "c"
    return ws


async def open_many(server: str, port: int, compression: str | None, count: int, batch: int = 50) -> list[ClientConnection]:
    sockets: list[ClientConnection] = []
    for start in range(0, count, batch):
        sockets += await asyncio.gather(*(open_one(server, port, compression) for _ in range(start, min(count, start + batch))))
    return sockets


async def close_all(sockets: list[ClientConnection]) -> None:
    await asyncio.gather(*(ws.close() for ws in sockets), return_exceptions=True)


async def still_open(sockets: list[ClientConnection]) -> int:
    async def alive(ws: ClientConnection) -> bool:
        try:
            async with asyncio.timeout(20):
                await (await ws.ping())
            return True
        except (OSError, TimeoutError, ConnectionClosed):
            return False

    return sum(await asyncio.gather(*(alive(ws) for ws in sockets)))


async def settle_rss(child: h.Child, seconds: float = 0.5) -> int:
    await asyncio.sleep(seconds)
    return child.rss_kib()


def server_args(server: str, backend: str) -> list[str]:
    return ["bare", *h.backend_args(backend)] if server == "bare" else ["gateway", *h.backend_args(backend), "--transport", server]


async def measure(server: str, child: h.Child, compression: str | None, count: int) -> dict[str, Any]:
    warm = await open_many(server, child.port, compression, min(20, count // 10))
    negotiated = warm[0].response.headers.get("Sec-WebSocket-Extensions") if warm[0].response else None
    await close_all(warm)
    before = await settle_rss(child)
    sockets = await open_many(server, child.port, compression, count)
    try:
        after = await settle_rss(child)
        alive = await still_open(sockets)
    finally:
        await close_all(sockets)
    return {"rss_before_kib": before, "rss_after_kib": after, "per_connection_kib": (after - before) / count,
            "connections": count, "still_open": alive, "extensions": negotiated or ""}


async def run(settings: h.Settings) -> list[h.Result]:
    count = settings.pick(1000, 100)
    # The target (1,000 held, <= 64 KiB each without deflate) needs the full count; the
    # per-connection figure of the baseline and of the deflate cases does not, and each
    # WebSocket handshake costs the client a few milliseconds.
    other = settings.pick(500, 100)
    h.raise_nofile(2 * len(SERVERS) * count + 1024)
    results: list[h.Result] = []
    compressions = (None, "deflate")
    for backend in settings.backends:
        # A fresh process per case: memory freed by one case must not be reused by the next.
        cases = [(server, compression) for compression in compressions for server in SERVERS]
        async with h.children(*(server_args(server, backend) for server, _ in cases)) as servers:
            # The cases run at once: each server is its own process, CPU contention does not change RSS.
            got = await asyncio.gather(*(
                measure(server, child, compression, count if server != "bare" and compression is None else other)
                for (server, compression), child in zip(cases, servers)
            ))
            measured = dict(zip(cases, got))
        for compression in compressions:
            base = measured["bare", compression]
            for server in SERVERS[1:]:
                m = measured[server, compression]
                held = m["still_open"] == m["connections"]
                deflate = "deflate offered" if compression else "no deflate"
                target = f"<= {TARGET_KIB} KiB" if compression is None else "report"
                met = (m["per_connection_kib"] <= TARGET_KIB and held) if compression is None else None
                results.append(h.Result(
                    bench="memory", variant=f"{server}, {m['connections']} idle sockets, {deflate}", backend=backend, metric="KiB/conn",
                    baseline=base["per_connection_kib"], gateway=m["per_connection_kib"],
                    ratio=m["per_connection_kib"] / base["per_connection_kib"] if base["per_connection_kib"] > 0 else None,
                    target=target, met=met, details={"baseline": base, "gateway": m},
                ))
    return results
