"""A helper task that lives as long as a block: a connection's watch of its client, a
forwarded command's watch of the kernel's stop.

When the block ends the task is *stopped*, not cancelled from outside: it runs in a cancel
scope of its own, which is cancelled, and returns. A task cancelled from outside ends with
its ``CancelledError``, which anyio's task group (asyncio) keeps in a frame of its own
traceback: a reference cycle of some 45 objects (the task's frames, scopes and futures) that
only the garbage collector frees. One per answer made the collector run every few requests
and, now and then, stop every stream for a full collection of the heap (25-40 ms in the
gateway process; docs/performance.md, issue 27, thirteenth pass).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio


@asynccontextmanager
async def beside(work: Callable[[], Awaitable[object]]) -> AsyncIterator[None]:
    """Run ``work()`` in a task beside the block; stop it when the block ends (it may end
    earlier by itself). An exception from ``work`` cancels the block, as a task group's does."""
    stop = anyio.CancelScope()

    async def run() -> None:
        with stop:
            await work()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(run)
        try:
            yield
        finally:
            stop.cancel()
