"""Latency under load: delta delivery delay with many concurrent streams.

``streams`` WebSockets (200; 50 with ``--quick``) each stream a paced model at
``rate`` deltas per second (40, a fast chat model) for ``seconds``; stream starts are
spread over one delta interval. Every delta carries the ``time.monotonic()`` of its
emission (see tests/bench/_provider.py; CLOCK_MONOTONIC is system-wide, so a client
in this process can compare it with its own clock); the delay of a delta is the
client's clock when the frame carrying it arrives minus that stamp. A merged frame
carries several stamps, each counted. Every stream must receive every delta.

Baseline: the bare hypercorn app pushing frames of the same shape on the same
schedule (the same pacing code), to the same client. The gateway: agent-cli, and
openfang with coalescing off (``coalesce_ms=0``) and as shipped (100 ms window: its
delay is by design about half the window).

No target is set by issue #7 for this one; the rows report p50 and p99 (gateway
minus baseline in the ratio column).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from typing import Any

from websockets.asyncio.client import ClientConnection

from . import _harness as h
from .bench_memory import open_many

STAMP = re.compile(rb"(\d+\.\d{6}) ")
CASES = {
    "agent-cli": ["--transport", "agent-cli"],
    "openfang, coalescing off": ["--transport", "openfang", "--set", "coalesce_ms=0"],
    "openfang, as shipped (100 ms window)": ["--transport", "openfang"],
}


def delta_marker(server: str) -> bytes:
    return b'"type":"text_delta"' if server == "openfang" else b'"Stream"'


def final_marker(server: str) -> bytes:
    return b'"type":"response"' if server == "openfang" else b'"Complete"'


def prompt(server: str, spec: dict[str, Any], session: str) -> str:
    if server == "bare":
        return "stream " + json.dumps(spec)
    text = json.dumps(spec)
    if server == "openfang":
        return json.dumps({"type": "message", "content": text, "session_id": session})
    return json.dumps({"request_id": "lat", "input": {"Text": text}, "stream": True})


async def one_stream(ws: ClientConnection, server: str, spec: dict[str, Any], start_at: float, delays: list[float]) -> int:
    """Run one stream; returns the number of deltas it received (in order: checked)."""
    delta, final = delta_marker(server), final_marker(server)
    await asyncio.sleep(max(0.0, start_at - time.monotonic()))
    await ws.send(prompt(server, spec, str(uuid.uuid4())))
    received = 0
    last = 0.0
    async with asyncio.timeout(spec["n"] / spec["rate"] + 60):
        while True:
            frame = await ws.recv(decode=False)
            now = time.monotonic()
            if delta in frame:
                for stamp in map(float, STAMP.findall(frame)):
                    if stamp < last:
                        raise RuntimeError(f"{server}: a delta arrived out of order")
                    last = stamp
                    delays.append((now - stamp) * 1000)
                    received += 1
            elif final in frame:
                return received


async def measure(server: str, child: h.Child, streams: int, rate: float, seconds: float) -> dict[str, Any]:
    """``streams`` sockets to one server (``bare`` or a gateway transport)."""
    kind = "bare" if server == "bare" else server.split(",")[0]
    return await measure_sockets(server, child, [(kind, child.port, streams)], rate, seconds)


async def measure_sockets(label: str, child: h.Child, groups: list[tuple[str, int, int]], rate: float, seconds: float) -> dict[str, Any]:
    """Streams over ``groups`` of (dialect, port, count) sockets of one server process, started together."""
    spec = {"n": int(rate * seconds), "rate": rate, "stamp": True}
    sockets: list[tuple[str, ClientConnection]] = []
    for kind, port, count in groups:
        sockets += [(kind, ws) for ws in await open_many(kind, port, None, count)]
    streams = len(sockets)
    order = [sockets[i] for i in _interleaved([count for _, _, count in groups])]
    try:
        # A short warm-up round first (a fresh server's first streams are slower), then the measured one.
        for round_spec in ({**spec, "n": max(4, int(rate / 4))}, spec):
            delays: list[float] = []
            begin = time.monotonic() + 0.2
            cpu = child.cpu_s()
            counts = await asyncio.gather(*(
                one_stream(ws, kind, round_spec, begin + i / (streams * rate), delays) for i, (kind, ws) in enumerate(order)
            ))
            busy = (child.cpu_s() - cpu) / (time.monotonic() - begin)
        rss_kib = child.rss_kib()
    finally:
        await asyncio.gather(*(ws.close() for _, ws in sockets), return_exceptions=True)
    lost = sum(spec["n"] - c for c in counts)  # of the measured round
    if lost:
        raise RuntimeError(f"latency ({label}): {lost} deltas did not arrive")
    delays.sort()
    return {"p50_ms": h.percentile(delays, 50), "p99_ms": h.percentile(delays, 99), "max_ms": delays[-1],
            "deltas": len(delays), "server_cpu_share": round(busy, 3), "streams": streams, "rate_per_stream": rate, "seconds": seconds,
            "rss_mib": round(rss_kib / 1024, 1)}


def _interleaved(counts: list[int]) -> list[int]:
    """Indexes into the concatenated groups, alternating between them (mixed start times)."""
    starts = [sum(counts[:g]) for g in range(len(counts))]
    return [starts[g] + i for i in range(max(counts, default=0)) for g in range(len(counts)) if i < counts[g]]


async def run(settings: h.Settings) -> list[h.Result]:
    streams = settings.pick(200, 50)
    rate = 40.0
    seconds = settings.pick(3.0, 0.75)
    h.raise_nofile(4 * streams + 256)
    results: list[h.Result] = []
    for backend in settings.backends:
        specs = [["bare", *h.backend_args(backend)]] + [["gateway", *h.backend_args(backend), *args] for args in CASES.values()]
        async with h.children(*specs) as (bare, *gateways):
            base = await measure("bare", bare, streams, rate, seconds)
            measured = {label: await measure(label, gw, streams, rate, seconds) for label, gw in zip(CASES, gateways)}
        for label, m in measured.items():
            for q in ("p50", "p99"):
                b, g = base[f"{q}_ms"], m[f"{q}_ms"]
                results.append(h.Result(
                    bench="latency", variant=f"{label}, {streams} streams x {rate:g}/s", backend=backend, metric=f"{q} ms",
                    baseline=b, gateway=g, ratio=None, shown=f"{g - b:+.1f} ms", target="report", met=None,
                    details={"baseline": base, "gateway": m},
                ))
    return results
