"""Past one process: what sharing a session through Redis costs (issue #13).

Two kernels in one process, on one PostgreSQL schema and one Redis key prefix (the
machine's services, as the tests use them), play two gateway instances; kernel A owns the
session. Each row compares a follower or a command on B (through Redis) with the same on A
(in-process), measured in the same run:

* **delivery delay** — a paced model (``rate`` deltas a second) stamps each delta with
  ``time.monotonic()``; a follower's delay is its clock when the delta arrives minus that
  stamp; p50 and p99, remote minus local in the ratio column;
* **throughput** — a burst of ``n`` deltas: deltas a second reaching a follower on B
  against one on A (the ratio);
* **forwarding** — ``GetSession`` carried out on A directly, and sent to B which forwards it
  to A and returns A's reply: p50 per command.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncGenerator
from typing import Any

import anyio

from kernel import Chunk, Follower, Kernel, ProviderRequest, Settings, TextChunk
from kernel import model as m
from kernel.testing import text_turn
from plugins.cluster.redis import RedisCluster
from plugins.stores.postgres import PostgresStore
from tests.bench import _harness as h
from tests.services import postgres_schema, redis_url


class StampedModel:
    """``n`` deltas, each ``"<monotonic stamp> "``, paced at ``rate`` a second (0: a burst)."""

    name = "stamped"

    def __init__(self, n: int, rate: float) -> None:
        self.n, self.rate = n, rate

    @property
    def model(self) -> str:
        return "stamped-1"

    async def stream(self, request: ProviderRequest) -> AsyncGenerator[Chunk, None]:
        for i in range(self.n):
            if self.rate:
                await anyio.sleep(1 / self.rate)
            yield TextChunk(f"{time.monotonic():.6f} " if self.rate else "x")
        for chunk in text_turn()[-2:]:
            yield chunk

    async def aclose(self) -> None:
        return None


async def _kernels(provider: Any, store_url: str, prefix: str) -> tuple[Kernel, Kernel, Any]:
    from contextlib import AsyncExitStack

    stack = AsyncExitStack()
    kernels = []
    for i in range(2):
        settings = Settings()
        settings.provider.default = "stamped"
        cluster = RedisCluster(redis_url(), instance_id=f"{prefix}-{i}", key_prefix=prefix, lease_s=5.0)
        kernel = Kernel(settings, providers={"stamped": lambda _s: provider}, store=PostgresStore(store_url), cluster=cluster)
        kernels.append(await stack.enter_async_context(kernel))
    return kernels[0], kernels[1], stack


async def _follow(follower: Follower, delays: list[float] | None, count: list[int]) -> None:
    while True:
        batch = await follower.next_batch()
        now = time.monotonic()
        for event in batch:
            if isinstance(event, m.TextDelta):
                if delays is not None:
                    delays += [now - float(stamp) for stamp in event.text.split()]
                count[0] += len(event.text.split()) if delays is not None else len(event.text)
            if isinstance(event, m.RunFinished | m.RunFailed):
                return


async def _latency(n: int, rate: float) -> tuple[list[float], list[float]]:
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    with postgres_schema() as url:
        a, b, stack = await _kernels(StampedModel(n, rate), url, prefix)
        async with stack:
            await a.execute(m.OpenSession(session_id="s"))
            local: list[float] = []
            remote: list[float] = []
            async with await Follower.open(a, "s") as on_a, await Follower.open(b, "s") as on_b, anyio.create_task_group() as tg:
                tg.start_soon(_follow, on_a, local, [0])
                tg.start_soon(_follow, on_b, remote, [0])
                await a.execute(m.Prompt(session_id="s", text="go"))
    return sorted(local), sorted(remote)


async def _throughput(n: int) -> tuple[float, float]:
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    with postgres_schema() as url:
        a, b, stack = await _kernels(StampedModel(n, 0), url, prefix)
        async with stack:
            await a.execute(m.OpenSession(session_id="s"))
            done: dict[str, float] = {}

            async def timed(name: str, follower: Follower, started: float) -> None:
                await _follow(follower, None, [0])
                done[name] = time.monotonic() - started

            async with await Follower.open(a, "s") as on_a, await Follower.open(b, "s") as on_b, anyio.create_task_group() as tg:
                started = time.monotonic()
                tg.start_soon(timed, "local", on_a, started)
                tg.start_soon(timed, "remote", on_b, started)
                await a.execute(m.Prompt(session_id="s", text="go"))
    return n / done["local"], n / done["remote"]


async def _forwarding(count: int) -> tuple[list[float], list[float]]:
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    with postgres_schema() as url:
        a, b, stack = await _kernels(StampedModel(1, 0), url, prefix)
        async with stack:
            await a.execute(m.OpenSession(session_id="s"))
            times: dict[str, list[float]] = {"local": [], "forwarded": []}
            for _ in range(count):
                for name, kernel in (("local", a), ("forwarded", b)):
                    started = time.perf_counter()
                    await kernel.execute(m.GetSession(session_id="s"))
                    times[name].append(time.perf_counter() - started)
    return sorted(times["local"]), sorted(times["forwarded"])


async def run(settings: h.Settings) -> list[h.Result]:
    results: list[h.Result] = []
    n, rate = settings.pick(400, 100), settings.pick(100.0, 100.0)
    for backend in settings.backends:
        local, remote = await anyio.to_thread.run_sync(lambda b=backend: anyio.run(_latency, n, rate, **h.run_options(b)))
        for q, label in ((50, "p50"), (99, "p99")):
            lo, re_ = h.percentile(local, q) * 1000, h.percentile(remote, q) * 1000
            results.append(h.Result(
                bench="cluster", variant=f"delivery delay {label}, {rate:g} deltas/s", backend=backend, metric="ms",
                baseline=lo, gateway=re_, ratio=None, shown=f"+{re_ - lo:.2f} ms", details={"deltas": n},
            ))
        burst = settings.pick(20_000, 5_000)
        local_rate, remote_rate = await anyio.to_thread.run_sync(lambda b=backend: anyio.run(_throughput, burst, **h.run_options(b)))
        results.append(h.Result(
            bench="cluster", variant=f"burst of {burst} deltas", backend=backend, metric="deltas/s",
            baseline=local_rate, gateway=remote_rate, ratio=remote_rate / local_rate, details={"deltas": burst},
        ))
        count = settings.pick(300, 60)
        direct, forwarded = await anyio.to_thread.run_sync(lambda b=backend: anyio.run(_forwarding, count, **h.run_options(b)))
        lo, fo = h.median(direct) * 1000, h.median(forwarded) * 1000
        results.append(h.Result(
            bench="cluster", variant="GetSession, p50", backend=backend, metric="ms per command",
            baseline=lo, gateway=fo, ratio=None, shown=f"+{fo - lo:.2f} ms", details={"commands": count},
        ))
    return results
