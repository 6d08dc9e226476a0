"""Diagnostic (not part of the suite): the kernel alone, no transport, no socket.

    python -m tests.bench.diag_kernel [--n 3000,10000,30000]

One subscriber drains a session while the bench model streams ``n`` deltas, in one
process, on asyncio and on trio; the model either hands its deltas over at once
(``burst``) or yields once per delta (``per-delta``); the kernel's merging of waiting
deltas on and off. Prints deltas per second and microseconds per delta: the ceiling
any transport starts from (docs/performance.md uses it to explain the figures).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import anyio

from . import _harness as h


async def measure(n: int, every: int, merge: bool) -> tuple[float, int]:
    from kernel import model as m
    from kernel.settings import SessionSettings, Settings
    from kernel.testing import running_kernel

    from ._provider import BenchProvider

    settings = Settings(session=SessionSettings(subscriber_buffer=2 * n + 64, event_retention=2 * n + 64))
    async with running_kernel(BenchProvider(), settings=settings) as kernel:
        session = await kernel.session(None, None)
        best = float("inf")
        events = 0
        for _ in range(3):
            sub = await kernel.subscribe(session.id)
            started = time.perf_counter()
            await kernel.execute(m.Prompt(session_id=session.id, request_id="d", text=json.dumps({"n": n, "size": 6, "every": every})))
            events = 0
            async with sub:
                async for event in sub:
                    batch = [event, *sub.receive_nowait()]
                    events += len(batch)
                    if any(isinstance(e, (m.RunFinished, m.RunFailed)) for e in batch):
                        break
            best = min(best, time.perf_counter() - started)
        return best, events


def child(backend: str, n: int, every: int, merge: bool) -> None:
    if not merge:
        from ._servers import disable_delta_merging

        disable_delta_merging()
    seconds, events = anyio.run(measure, n, every, merge, backend=backend)
    print(json.dumps({"seconds": seconds, "events": events}))


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.diag_kernel")
    parser.add_argument("--n", default="3000,30000")
    parser.add_argument("--child", nargs=4, metavar=("BACKEND", "N", "EVERY", "MERGE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        backend, n, every, merge = args.child
        child(backend, int(n), int(every), merge == "on")
        return 0
    print(f"{'backend':8} {'model':10} {'merging':8} {'n':>6} {'events':>7} {'deltas/s':>10} {'us/delta':>9}")
    for backend in h.BACKENDS:
        for mode, every in (("burst", 0), ("per-delta", 1)):
            for merge in ("on", "off"):
                for n in (int(x) for x in args.n.split(",")):
                    # A fresh process each: no state (or patch) carries over.
                    out = subprocess.run(
                        [sys.executable, "-m", "tests.bench.diag_kernel", "--child", backend, str(n), str(every), merge],
                        capture_output=True, text=True, env=h.child_env(), cwd=str(h.ROOT), check=True,
                    ).stdout
                    got = json.loads(out.strip().splitlines()[-1])
                    print(f"{backend:8} {mode:10} {merge:8} {n:6d} {got['events']:7d} {n / got['seconds']:10,.0f} {got['seconds'] / n * 1e6:9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
