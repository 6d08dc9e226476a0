"""Diagnostic: the proxied first token read by a client that takes next to no CPU.

    python -m tests.bench.diag_arrivals [--backend asyncio|asyncio+uvloop|trio] [--rounds 200] [--sdk]

The ``openai-proxy`` benchmark's client is the ``openai`` SDK: it spends most of a millisecond on
a response's headers and a quarter on each chunk, on the same two cores as the proxy and the fake
upstream. This sends the same streamed request to the upstream directly, to the bare relay and to
the gateway (rotating, one of each per round) from a raw socket instead: the request's bytes
written at once, the answer read as it arrives, nothing parsed but a search for the first content
chunk. Per target it prints the medians of the time to the first bytes and to the first content
chunk, how the answer arrived up to that chunk (the reads, and what each held: the head, the role
chunk, content), and the gateway's share above the relay as the median of paired differences.
``--sdk`` also times the ``openai`` SDK in the same rounds, for the contrast. ``--split``: the
upstream notes when each request reaches it (``time.perf_counter``, one clock for every process),
which splits each time to the first bytes into the way to the upstream and the way back from it
(the upstream's own work included, the same for every target).

What it shows: how much of the gateway's share above the relay is its own work (the raw client's
figure; compare ``diag_cold``'s in-process path) and how much comes with a client that works on
the same cores while the answer arrives (the SDK's). Loopback, bounded rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import statistics
import sys
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import msgspec

from . import _harness as h
from .bench_openai_proxy import API_KEY, PROMPT, direct_relay_gateway, stream_once

TARGETS = ("direct", "relay", "gateway")
#: What a read may hold before the first content chunk: the head, the role's chunk, content.
HEAD, ROLE, CONTENT = "head", "role", "content"


@dataclass
class Arrivals:
    """One target's requests: the first bytes, the first content chunk, the reads up to it."""

    first_bytes_ms: list[float] = field(default_factory=list)
    to_upstream_ms: list[float] = field(default_factory=list)
    first_token_ms: list[float] = field(default_factory=list)
    sdk_ms: list[float] = field(default_factory=list)
    patterns: collections.Counter[str] = field(default_factory=collections.Counter)


class RawClient:
    """One kept-alive HTTP/1.1 connection, a streamed chat completion per call."""

    def __init__(self, base_url: str, model: str) -> None:
        url = urlsplit(base_url)
        self.host, self.port = url.hostname or "127.0.0.1", url.port or 80
        body = msgspec.json.encode({"model": model, "stream": True, "messages": [{"role": "user", "content": PROMPT}]})
        self.request = (
            f"POST {url.path.rstrip('/')}/chat/completions HTTP/1.1\r\nhost: {self.host}:{self.port}\r\n"
            f"content-type: application/json\r\nauthorization: Bearer {API_KEY}\r\ncontent-length: {len(body)}\r\n\r\n"
        ).encode() + body
        self.streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def once(self) -> tuple[float, float, float, str]:
        """When the request was written (``time.perf_counter``), the milliseconds to the first
        bytes and to the first content chunk, and how the answer came up to it (each read's
        contents, ``+`` within a read, ``|`` between reads)."""
        if self.streams is None:
            self.streams = await asyncio.open_connection(self.host, self.port)
        reader, writer = self.streams
        started = time.perf_counter()
        writer.write(self.request)
        reads: list[str] = []
        first_bytes = first_token = 0.0
        seen = b""
        while not first_token:
            data = await reader.read(65536)
            if not data:
                raise RuntimeError("the server closed the connection")
            now = (time.perf_counter() - started) * 1000
            first_bytes = first_bytes or now
            held = [name for name, found in ((HEAD, b"HTTP/1.1 " in data), (ROLE, b'"role"' in data), (CONTENT, has_content(data))) if found]
            reads.append("+".join(held) or "-")
            seen += data
            if has_content(data):
                first_token = now
        while not seen.endswith(b"0\r\n\r\n"):  # the rest of the chunked answer, unread
            data = await reader.read(65536)
            if not data:
                raise RuntimeError("the server closed the connection")
            seen += data
        return started, first_bytes, first_token, " | ".join(reads)

    def close(self) -> None:
        if self.streams is not None:
            self.streams[1].close()


def has_content(data: bytes) -> bool:
    return b'"content":"' in data.replace(b'"content":""', b"")


async def measure(backend: str, rounds: int, sdk: bool, split: bool) -> dict[str, Arrivals]:
    got = {name: Arrivals() for name in TARGETS}
    stamps = h.scratch_dir() / f"arrivals-{backend}.txt"
    stamps.write_text("")
    async with direct_relay_gateway(backend, "arrivals", *(("--arrivals", str(stamps)) if split else ())) as (targets, _):
        raw = {name: RawClient(str(client.base_url), model) for name, (client, model) in targets.items()}
        try:
            for name in TARGETS:  # warm-up: connections, first runs
                for _ in range(10):
                    await raw[name].once()
                    if sdk:
                        await stream_once(*targets[name])
            for index in range(rounds):
                for name in TARGETS[index % 3 :] + TARGETS[: index % 3]:
                    started, first_bytes, first_token, pattern = await raw[name].once()
                    if split:
                        arrived = float(stamps.read_text().split()[-1])  # this request's: they come one at a time
                        got[name].to_upstream_ms.append((arrived - started) * 1000)
                    got[name].first_bytes_ms.append(first_bytes)
                    got[name].first_token_ms.append(first_token)
                    got[name].patterns[pattern] += 1
                    if sdk:
                        got[name].sdk_ms.append((await stream_once(*targets[name]))[0])
        finally:
            for each in raw.values():
                each.close()
    return got


def report(backend: str, got: dict[str, Arrivals]) -> str:
    direct = statistics.median(got["direct"].first_token_ms)
    lines = [f"{backend}: medians of {len(got['direct'].first_token_ms)} rounds, raw socket client"]
    for name in TARGETS:
        each = got[name]
        token = statistics.median(each.first_token_ms)
        added = f" ({token - direct:+.2f} ms on direct)" if name != "direct" else ""
        lines.append(f"  {name:8} first bytes {statistics.median(each.first_bytes_ms):.2f} ms, first token {token:.2f} ms{added}")
        if each.to_upstream_ms:
            back = statistics.median(b - t for b, t in zip(each.first_bytes_ms, each.to_upstream_ms, strict=True))
            lines.append(f"           to the upstream {statistics.median(each.to_upstream_ms):.2f} ms, from its arrival to the first bytes {back:.2f} ms")
        lines.extend(f"           {count:4}x  {pattern}" for pattern, count in each.patterns.most_common(3))
    share = statistics.median(g - r for g, r in zip(got["gateway"].first_token_ms, got["relay"].first_token_ms, strict=True))
    lines.append(f"  the gateway's share above the relay (paired): {share:+.2f} ms")
    if got["direct"].sdk_ms:
        sdk_direct = statistics.median(got["direct"].sdk_ms)
        sdk_share = statistics.median(g - r for g, r in zip(got["gateway"].sdk_ms, got["relay"].sdk_ms, strict=True))
        lines.append(
            f"  openai SDK, same rounds: direct {sdk_direct:.2f} ms, relay {statistics.median(got['relay'].sdk_ms) - sdk_direct:+.2f} ms, "
            f"gateway {statistics.median(got['gateway'].sdk_ms) - sdk_direct:+.2f} ms, the gateway's share above the relay {sdk_share:+.2f} ms"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.diag_arrivals")
    parser.add_argument("--backend", choices=(*h.BACKENDS, h.UVLOOP), action="append", help="the proxies' backend (default: all three)")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--sdk", action="store_true", help="also time the openai SDK in the same rounds")
    parser.add_argument("--split", action="store_true", help="split the time to the first bytes at the request's arrival upstream")
    args = parser.parse_args()
    print(f"speed probe {h.speed_probe_ms()} ms (lower is faster)", flush=True)
    for backend in args.backend or ["asyncio", h.UVLOOP, "trio"]:
        print(report(backend, asyncio.run(measure(backend, args.rounds, args.sdk, args.split))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
