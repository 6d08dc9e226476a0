"""Diagnostic: what the CPUs did while a proxied first token was on its way.

    python -m tests.bench.diag_sched [--backend asyncio|asyncio+uvloop|trio] [--rounds 100] [--paced] [--targets direct,relay,gateway]

Runs the fake upstream (one burst of 200 chunks, or paced with ``--paced``), the bare relay and the gateway as in
``bench_openai_proxy``, and sends streamed requests to the three in a rotating order, recording
each one's window from the client's call to its first content chunk. Meanwhile ``perf sched
record`` traces every switch and wake-up of both CPUs on the same clock (``-k monotonic``), and
``_sched_trace`` tells, per window, how long each process ran and how long a thread of the
client, the proxy or the upstream waited for a CPU: queued on a busy CPU while another CPU sat
idle, queued with every CPU busy, or being woken onto an idle CPU.

Why: ``diag_proxy`` found the gateway's main thread waiting for a CPU for 1.5-1.7 ms of its
first-token window, a third of it. This says where the CPUs were then. Tracing every switch
slows everything down (the client's own first token by about a fifth), so read the figures as
proportions. Linux only; needs ``perf`` and permission to trace (root, tracefs mounted: this
mounts it when it is missing).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import openai

from . import _harness as h
from ._sched_trace import WAIT_KINDS, Window, analyse, parse
from .bench_openai_proxy import PACED_WORDS_PER_S, PROMPT, direct_relay_gateway

TARGETS = ("direct", "relay", "gateway")
ROLES = ("client", "proxy", "upstream", "other", "idle")


async def first_token_window(each: openai.AsyncOpenAI, model: str) -> tuple[float, float]:
    """(start, first content chunk) on ``time.perf_counter``'s clock; the stream read to its end."""
    start = time.perf_counter()
    first = 0.0
    stream = await each.chat.completions.create(model=model, messages=[{"role": "user", "content": PROMPT}], stream=True)
    async with stream:
        async for chunk in stream:
            if not first and chunk.choices and chunk.choices[0].delta.content:
                first = time.perf_counter()
    return start, first


async def measure(
    backend: str, rounds: int, data: Path, paced: bool, chosen: tuple[str, ...]
) -> tuple[dict[str, list[tuple[float, float]]], dict[str, int]]:
    """Each chosen target's first-token windows, and the pid of each process (client, upstream, relay, gateway)."""
    windows: dict[str, list[tuple[float, float]]] = {name: [] for name in chosen}
    pace = ("--words-per-s", str(PACED_WORDS_PER_S)) if paced else ()
    async with direct_relay_gateway(backend, "sched", *pace) as (targets, pids):
        for each, model in targets.values():  # warm-up: connections, first runs
            for _ in range(10):
                await first_token_window(each, model)
        recorder = await asyncio.create_subprocess_exec(
            "perf", "sched", "record", "-a", "-k", "monotonic", "-o", str(data),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )
        await asyncio.sleep(1.0)
        try:
            for index in range(rounds):
                for name in chosen[index % len(chosen) :] + chosen[: index % len(chosen)]:
                    each, model = targets[name]
                    windows[name].append(await first_token_window(each, model))
        finally:
            recorder.send_signal(signal.SIGINT)
            await recorder.wait()
    return windows, pids | {"client": os.getpid()}


def report(title: str, windows: dict[str, list[tuple[float, float]]], pids: dict[str, int], data: Path) -> None:
    script = subprocess.run(
        ["perf", "script", "-i", str(data), "-F", "comm,pid,tid,cpu,time,event,trace"],
        capture_output=True, text=True, check=True,
    ).stdout
    trace = parse(script.splitlines())
    chosen = tuple(windows)
    results: dict[str, list[Window]] = {}
    for name in chosen:
        roles = {pids["client"]: "client", pids["upstream"]: "upstream", **({pids[name]: "proxy"} if name in pids else {})}
        results[name] = list(analyse(trace, roles, windows[name]))
    proxies = [name for name in ("relay", "gateway") if name in chosen and "direct" in chosen]
    print(f"{title}: {len(windows[chosen[0]])} rounds under perf sched record (medians per window, ms; speed probe {h.speed_probe_ms():.0f} ms)")
    print(f"  {'':<34}" + "".join(f"{name:>10}" for name in chosen) + "".join(f"{name + '-direct':>16}" for name in proxies))

    def row(label: str, value: dict[str, list[float]]) -> None:
        medians = "".join(f"{statistics.median(value[name]) * 1000:>10.3f}" for name in chosen)
        paired = "".join(
            f"{statistics.median(a - b for a, b in zip(value[name], value['direct'], strict=True)) * 1000:>+16.3f}" for name in proxies
        )
        print(f"  {label:<34}{medians}{paired}")

    row("time to first token", {name: [end - start for start, end in windows[name]] for name in chosen})
    for role in ROLES:
        row(f"ran: {role}", {name: [w.ran[role] for w in results[name]] for name in chosen})
    for kind in WAIT_KINDS:
        row(f"waited: {kind}", {name: [w.waited[kind] for w in results[name]] for name in chosen})


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.diag_sched")
    parser.add_argument("--backend", choices=(*h.BACKENDS, h.UVLOOP), action="append", help="the proxies' backend (default: asyncio)")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--paced", action="store_true", help="the upstream paces its chunks as the benchmark's paced rows do (default: one burst)")
    parser.add_argument(
        "--targets", default=",".join(TARGETS),
        help="which of direct, relay, gateway to send to, in rotation (default: all three; B - direct only when direct is among them)",
    )
    args = parser.parse_args()
    if shutil.which("perf") is None:
        print("diag_sched needs perf (linux-tools)", file=sys.stderr)
        return 1
    if not Path("/sys/kernel/tracing/events").exists():
        subprocess.run(["mount", "-t", "tracefs", "nodev", "/sys/kernel/tracing"], check=False)
    chosen = tuple(name for name in TARGETS if name in args.targets.split(","))
    if not chosen:
        parser.error(f"--targets: name one or more of {', '.join(TARGETS)}")
    for backend in args.backend or ["asyncio"]:
        data = h.scratch_dir() / f"sched-{backend}.data"
        windows, pids = asyncio.run(measure(backend, args.rounds, data, args.paced, chosen))
        report(f"{backend}, {'paced' if args.paced else 'burst'}", windows, pids, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
