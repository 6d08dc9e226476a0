"""Diagnostic: the proxied first token when the proxies have a core of their own.

    python -m tests.bench.diag_cores [--backend asyncio|asyncio+uvloop|trio] [--rounds 150] [--runs 2]

The ``openai-proxy`` benchmark runs three processes — the client, the proxy, the fake upstream
— on this machine's two cores, wherever the OS puts them. This runs the same three targets
(the upstream directly, the bare relay of ``_servers.py``, the gateway), one streamed and one
non-stream request each per round in a rotating order, in two arrangements, alternately:

  shared     as the benchmark does: every process on either core
  own core   the relay and the gateway on CPU 1, the client and the upstream on CPU 0

and prints, per arrangement, what the relay and the gateway add to the direct call (medians)
and the gateway's own share above the relay (the median of the per-round differences).

Why: in the shared arrangement the gateway's own share above the relay is 1.4-2 ms to a burst's
first token, yet its own work to the first body byte is 0.3-0.4 ms (the ASGI app called in
process, docs/performance.md). With a core of its own the share falls to a few tenths of a
millisecond: the rest is where the OS runs three busy processes on two cores, which a
deployment whose client and upstream are elsewhere does not have. Linux only (CPU affinity).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys

from . import _harness as h
from .bench_openai_proxy import complete_once, direct_relay_gateway, stream_once

ARRANGEMENTS = ("shared", "own core")
TARGETS = ("direct", "relay", "gateway")


def arrange(arrangement: str, upstream: int, proxies: tuple[int, ...]) -> None:
    """Place the processes: ``own core`` puts the proxies on CPU 1 and this process (the
    client) and the upstream on CPU 0; ``shared`` lets each run on either."""
    both = {0, 1}
    own = arrangement == "own core"
    os.sched_setaffinity(0, {0} if own else both)
    os.sched_setaffinity(upstream, {0} if own else both)
    for pid in proxies:
        os.sched_setaffinity(pid, {1} if own else both)


async def measure(backend: str, arrangement: str, rounds: int) -> str:
    async with direct_relay_gateway(backend, "cores") as (targets, pids):
        arrange(arrangement, pids["upstream"], (pids["relay"], pids["gateway"]))
        try:
            for each, model in targets.values():  # warm-up: connections, first runs
                for _ in range(10):
                    await stream_once(each, model)
                    await complete_once(each, model)
            first: dict[str, list[float]] = {name: [] for name in TARGETS}
            whole: dict[str, list[float]] = {name: [] for name in TARGETS}
            for index in range(rounds):
                for name in TARGETS[index % 3 :] + TARGETS[: index % 3]:
                    each, model = targets[name]
                    first[name].append((await stream_once(each, model))[0])
                    whole[name].append(await complete_once(each, model))
        finally:
            arrange("shared", pids["upstream"], (pids["relay"], pids["gateway"]))
    return f"{backend}, {arrangement:8}  " + "  |  ".join(
        f"{what}: direct {statistics.median(got['direct']):.2f} ms, relay {added(got, 'relay')}, gateway {added(got, 'gateway')}, "
        f"own share {statistics.median(g - r for g, r in zip(got['gateway'], got['relay'], strict=True)):+.2f} ms"
        for what, got in (("first token", first), ("non-stream", whole))
    )


def added(got: dict[str, list[float]], name: str) -> str:
    return f"{statistics.median(got[name]) - statistics.median(got['direct']):+.2f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.diag_cores")
    parser.add_argument("--backend", choices=(*h.BACKENDS, h.UVLOOP), action="append", help="the proxies' backend (default: asyncio)")
    parser.add_argument("--rounds", type=int, default=150)
    parser.add_argument("--runs", type=int, default=2, help="each arrangement this many times, alternately")
    args = parser.parse_args()
    if len(os.sched_getaffinity(0)) < 2:
        print("diag_cores needs two CPUs", file=sys.stderr)
        return 1
    for backend in args.backend or ["asyncio"]:
        for _ in range(args.runs):
            for arrangement in ARRANGEMENTS:
                print(asyncio.run(measure(backend, arrangement, args.rounds)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
