"""Diagnostic: the garbage collector in two gateways side by side, over sockets.

    python -m tests.bench.diag_gc /tmp/before . [--backend asyncio|asyncio+uvloop|trio] [--requests 3000]

Runs the fake upstream (a burst of 200 chunks) and two gateway CLIs in front of it as OpenAI
proxies, one from each tree, and sends them streamed chat completions in turn (the order
flipped every round). Each gateway runs with a probe (a ``sitecustomize`` module put first on
its path) that times every collection the garbage collector makes (``gc.callbacks``); after a
warm-up the probe starts counting, and the gateway's CPU time (``/proc``) is read. Prints, per
tree: the collections by generation (how many, their total and longest pause), the CPU per
request, and the client's time to a whole 200-chunk answer (p50 / p99 / p99.9).

Why: garbage in reference cycles is what makes the collector run on a server whose requests
leave nothing else behind, and a full collection of the gateway's heap (every module it
imported) stops every stream for 25-40 ms. The thirteenth pass of issue 27 measured with this
what an answer's cycles cost (docs/performance.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from . import _harness as h
from .bench_openai_proxy import API_KEY, GATEWAY_CONFIG, client, stream_once

PROBE = '''\
"""diag_gc's probe in a gateway process: every collection's generation and pause."""
import gc, os, signal, time

_out = os.environ["DIAG_GC_OUT"]
_pauses = []
_started = [0.0]


def _timed(phase, info):
    if phase == "start":
        _started[0] = time.perf_counter()
    else:
        _pauses.append((info["generation"], time.perf_counter() - _started[0]))


def _reset(*_):
    _pauses.clear()


def _dump(*_):
    with open(_out, "w") as out:
        out.writelines(f"{generation} {pause}\\n" for generation, pause in _pauses)


gc.callbacks.append(_timed)
signal.signal(signal.SIGUSR1, _reset)
signal.signal(signal.SIGUSR2, _dump)
'''

WARM_UP = 100


def cpu_s(pid: int) -> float:
    """The process's user and system CPU time so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.asynccontextmanager
async def probed_gateway(tree: Path, backend: str, upstream: str, name: str) -> AsyncIterator[tuple[str, int, Path]]:
    """``python -m gateway serve`` from ``tree`` with the probe; (base URL, pid, the probe's file)."""
    probe_dir = h.scratch_dir() / f"gc-probe-{name}"
    probe_dir.mkdir(exist_ok=True)
    (probe_dir / "sitecustomize.py").write_text(PROBE)
    config = h.scratch_dir() / f"gc-{name}.toml"
    config.write_text(GATEWAY_CONFIG.format(provider="openai"))
    out = h.scratch_dir() / f"gc-{name}.pauses"
    env = h.child_env(
        GATEWAY_DB=str(h.scratch_dir() / f"gc-{name}.db"), OPENAI_API_KEY=API_KEY, OPENAI_BASE_URL=upstream,
        PYTHONPATH=f"{probe_dir}{os.pathsep}{tree}", DIAG_GC_OUT=str(out),
    )
    args = ["serve", "--transport", "http", *h.backend_args(backend), "--port", "0", "--config", str(config)]
    async with h.gateway_cli(args, env, r"transport http ready on (http://\S+)", tree=tree) as (process, ready):
        yield ready.group(1) + "/v1", process.pid, out


def summary(name: str, tree: Path, pauses_file: Path, cpu: float, requests: int, totals: list[float]) -> str:
    pauses: dict[int, list[float]] = {0: [], 1: [], 2: []}
    for line in pauses_file.read_text().splitlines():
        generation, pause = line.split()
        pauses[int(generation)].append(float(pause) * 1000)
    every = sum((p for p in pauses.values()), [])
    lines = [f"{name} ({tree}): CPU per request {cpu / requests * 1000:.3f} ms; collections' pauses {sum(every):.1f} ms in all, "
             f"{sum(every) / requests * 1000:.1f} µs a request"]
    for generation, taken in pauses.items():
        longest = f", longest {max(taken):.2f} ms" if taken else ""
        lines.append(f"  generation {generation}: {len(taken)} collections, {sum(taken):.1f} ms{longest}")
    ordered = sorted(totals)
    lines.append("  whole answer p50 / p99 / p99.9: " + " / ".join(f"{h.percentile(ordered, q):.2f}" for q in (50, 99, 99.9)) + " ms")
    return "\n".join(lines)


async def measure(trees: tuple[Path, Path], backend: str, requests: int) -> str:
    async with h.child("upstream", "--backend", "asyncio") as upstream, contextlib.AsyncExitStack() as stack:
        gateways = {name: await stack.enter_async_context(probed_gateway(tree, backend, upstream.ready, name)) for name, tree in zip("ab", trees, strict=True)}
        clients = {name: client(url) for name, (url, _, _) in gateways.items()}
        for each in clients.values():
            stack.push_async_callback(each.close)
            for _ in range(WARM_UP):
                await stream_once(each, "proxy")
        for _, pid, _ in gateways.values():
            os.kill(pid, signal.SIGUSR1)
        cpu_before = {name: cpu_s(pid) for name, (_, pid, _) in gateways.items()}
        totals: dict[str, list[float]] = {"a": [], "b": []}
        for index in range(requests):
            for name in ("a", "b") if index % 2 == 0 else ("b", "a"):
                totals[name].append((await stream_once(clients[name], "proxy"))[1])
        cpu = {name: cpu_s(pid) - cpu_before[name] for name, (_, pid, _) in gateways.items()}
        for _, pid, _ in gateways.values():
            os.kill(pid, signal.SIGUSR2)
        await asyncio.sleep(0.5)
        header = f"{backend}, {requests} streamed requests (200-chunk burst) to each gateway, alternated:"
        return "\n".join([header, *(summary(name, trees[i], gateways[name][2], cpu[name], requests, totals[name]) for i, name in enumerate("ab"))])


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.diag_gc")
    parser.add_argument("tree_a", type=Path, help="a checkout of the gateway (the baseline)")
    parser.add_argument("tree_b", type=Path, help="another checkout (the change)")
    parser.add_argument("--backend", choices=(*h.BACKENDS, h.UVLOOP), default="asyncio")
    parser.add_argument("--requests", type=int, default=3000, help="per gateway, after a warm-up of 100")
    args = parser.parse_args()
    print(asyncio.run(measure((args.tree_a.resolve(), args.tree_b.resolve()), args.backend, args.requests)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
