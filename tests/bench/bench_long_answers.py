"""Long answers cost linear time: an answer twice as long takes about twice as long.

Text accumulated with ``+=`` on an attribute is copied at every delta, which made a 6 MB
answer take seconds once (quadratic). This runs answers of N and 2N deltas of 4 KiB
through the kernel to a subscriber, in-process, and reports time(2N) / (2 * time(N)):
1.0 is linear; a quadratic cost shows as about 2.
"""

from __future__ import annotations

import time

import anyio

from kernel import model as m
from kernel.testing import ScriptedProvider, running_kernel, text_turn
from tests.bench import _harness as h


async def _answer_s(deltas: int) -> float:
    pieces = ["z" * 4096] * deltas
    async with running_kernel(ScriptedProvider([text_turn(*pieces)])) as kernel:
        await kernel.session("long")
        subscription = await kernel.subscribe("long")
        started = time.perf_counter()
        await kernel.execute(m.Prompt(session_id="long", text="go", request_id="p"))
        async for event in subscription:
            if isinstance(event, m.RunFinished):
                assert len(event.text) == 4096 * deltas
                break
        return time.perf_counter() - started


def _median_s(deltas: int, reps: int, backend: str) -> float:
    return h.median([anyio.run(_answer_s, deltas, **h.run_options(backend)) for _ in range(reps)])


async def run(settings: h.Settings) -> list[h.Result]:
    n = settings.pick(1500, 300)
    reps = settings.pick(5, 2)
    results: list[h.Result] = []
    for backend in settings.backends:
        single = await anyio.to_thread.run_sync(_median_s, n, reps, backend)
        double = await anyio.to_thread.run_sync(_median_s, 2 * n, reps, backend)
        ratio = double / (2 * single)
        results.append(h.Result(
            bench="long-answers", variant=f"{n} vs {2 * n} deltas of 4 KiB", backend=backend, metric="s per answer",
            baseline=single, gateway=double, ratio=ratio, target="<= 1.3 (linear)", met=ratio <= 1.3,
            details={"deltas": n, "single_s": single, "double_s": double},
        ))
    return results
