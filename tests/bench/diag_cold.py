"""Diagnostic: the gateway's first-token path in process, with its caches warm and cold.

    python -m tests.bench.diag_cold [--backend asyncio|asyncio+uvloop|trio] [--requests 1500] [--turns 0]

Calls the http transport's ASGI app directly (no socket, no hypercorn) with the benchmark's
streamed chat completion (``diag_proxy``'s 200-word prompt, after ``--turns`` earlier exchanges of
a user message and an answer, as a coding agent's request carries them) and a model in process, in three
conditions, taken in turn request by request:

  warm   right after an unmeasured request of the same kind, and the model answers without
         waiting: the loop never idles, the gateway's code and data stay in the caches
  idle   after 1 ms of nothing, the model takes 1 ms to accept the request and 0.2 ms more to
         its first token, as a local upstream does: the loop sleeps in its poll meanwhile,
         as the gateway does between requests and while the upstream works
  cold   the model takes 1 ms to accept the request and 0.2 ms more to its first token, as a
         local upstream does (the loop idles meanwhile), and 32 MiB are written with a
         64-byte stride before the request and during both waits: every cache line the
         gateway touched is gone, as when the client and the upstream run on the same cores
         (the benchmark: three processes on two cores)

Prints, per condition, the medians of the gateway's own two parts of a first token: from the
app being called to the model call (the request the upstream would get leaves), and from the
model's first token to the response's first body bytes (headers sent on the way); their sum;
and the cold/warm ratio. Over sockets (``diag_proxy``'s timeline, ``diag_cores``) the gateway's
own share above the bare relay is close to the *cold* sum: what is left of the first token is
more the amount of code and data the path touches, read from memory again each request, than
the work it does.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import AsyncGenerator
from typing import Any

import anyio
import msgspec

from . import _harness as h
from .diag_proxy import PROMPT

EVICT_BYTES = 32 * 1024 * 1024
CONDITIONS = ("warm", "idle", "cold")
STEPS = ("to the model call", "first token to body", "the gateway's own")
#: The model's time to accept the request, then to its first token (a local upstream's).
ACCEPT_S = 0.001
FIRST_TOKEN_S = 0.0002
#: The first token, found in the body that carries it (a stream's headers, and the role's
#: chunk with them, go out when the model accepts the request, before it).
FIRST_WORD = b"Thereupon"


def scope() -> dict[str, Any]:
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions", "query_string": b"", "root_path": "",
        "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"), (b"authorization", b"Bearer x")],
        "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000), "state": {},
    }


def conversation(turns: int) -> list[dict[str, str]]:
    """``turns`` earlier exchanges, then the prompt."""
    earlier = [
        {"role": role, "content": f"{role} message {turn}: " + PROMPT[: 80 * (turn % 5 + 1)]}
        for turn in range(turns) for role in ("user", "assistant")
    ]
    return [*earlier, {"role": "user", "content": PROMPT}]


async def measure(requests: int, turns: int = 0) -> dict[str, dict[str, float]]:
    from kernel import FinishChunk, ProviderRequest, ResponseStarted, TextChunk
    from kernel.testing import running_kernel
    from transports.http import HttpConfig
    from transports.http.server import HttpApp

    marks: dict[str, float] = {}
    now = time.perf_counter

    class LocalUpstream:
        """A model that answers at once (warm), or as a local upstream does, evicting the
        caches while it works (cold: the upstream and the client would run meanwhile)."""

        name = "local-upstream"
        model = "local-upstream-1"
        condition = "warm"

        async def stream(self, request: ProviderRequest) -> AsyncGenerator[Any, None]:
            marks["model call"] = now()
            await self.work(ACCEPT_S)
            yield ResponseStarted()
            await self.work(FIRST_TOKEN_S)
            marks["first token"] = now()
            for word in (FIRST_WORD.decode(), " answer", " is", " here."):
                yield TextChunk(word)
            yield FinishChunk("stop")

        async def work(self, seconds: float) -> None:
            if self.condition == "warm":
                await anyio.lowlevel.checkpoint()
                return
            if self.condition == "cold":
                evict[::64] = zeros
            await anyio.sleep(seconds)

        async def aclose(self) -> None:
            return None

    body = msgspec.json.encode({"model": "default", "stream": True, "messages": conversation(turns)})

    async def one(app: HttpApp) -> dict[str, float]:
        delivered = False

        async def receive() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            await anyio.sleep_forever()
            raise AssertionError("unreachable")

        async def send(message: dict[str, Any]) -> None:
            if FIRST_WORD in message.get("body", b"") and "first body" not in marks:
                marks["first body"] = now()

        marks.clear()
        started = now()
        await app(scope(), receive, send)
        to_model = (marks["model call"] - started) * 1e3
        to_body = (marks["first body"] - marks["first token"]) * 1e3
        return {"to the model call": to_model, "first token to body": to_body, "the gateway's own": to_model + to_body}

    evict = bytearray(EVICT_BYTES)
    zeros = bytes(len(evict[::64]))
    model = LocalUpstream()
    rows: dict[str, list[dict[str, float]]] = {condition: [] for condition in CONDITIONS}
    async with running_kernel(model) as kernel:
        app = HttpApp(kernel, HttpConfig(requests_per_minute_per_ip=0))
        for _ in range(100):
            await one(app)
        for index in range(len(CONDITIONS) * requests):
            model.condition = condition = CONDITIONS[index % len(CONDITIONS)]
            if condition == "warm":
                await one(app)  # what the cold request before it evicted is read again
            elif condition == "idle":
                await anyio.sleep(ACCEPT_S)
            else:
                evict[::64] = zeros
            rows[condition].append(await one(app))
    return {condition: {step: statistics.median(r[step] for r in got) for step in STEPS} for condition, got in rows.items()}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.diag_cold")
    parser.add_argument("--backend", choices=(*h.BACKENDS, h.UVLOOP), action="append", help="default: asyncio, asyncio+uvloop, trio")
    parser.add_argument("--requests", type=int, default=1500, help="per condition")
    parser.add_argument("--turns", type=int, default=0, help="earlier exchanges in each request (default: none)")
    args = parser.parse_args()
    for backend in args.backend or ("asyncio", h.UVLOOP, "trio"):
        got = anyio.run(measure, args.requests, args.turns, **h.run_options(backend))
        print(f"{backend}: medians, ms ({args.requests} requests per condition, taken in turn, {args.turns} earlier exchanges each)")
        print(f"  {'':20} {'warm':>8} {'idle':>8} {'cold':>8} {'idle/warm':>10} {'cold/warm':>10}")
        for step in STEPS:
            warm, idle, cold = (got[condition][step] for condition in CONDITIONS)
            print(f"  {step:20} {warm:8.3f} {idle:8.3f} {cold:8.3f} {idle / warm:9.2f}x {cold / warm:9.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
