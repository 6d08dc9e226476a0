"""Helper tasks that live as long as a block: a connection's watch of its client, its
writer and the commands it runs, a forwarded command's watch of the kernel's stop.

When the block ends each task is *stopped*, not cancelled from outside: it runs in a cancel
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
from typing import Any

import anyio
from anyio.abc import TaskGroup


class SideTasks:
    """The tasks of a :func:`side_tasks` block, each in a cancel scope of its own."""

    def __init__(self, group: TaskGroup) -> None:
        self._group = group
        self._scopes: set[anyio.CancelScope] = set()
        self._stopped = False

    def start_soon(self, work: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run ``work(*args)`` beside the block until it returns or the block ends."""
        scope = anyio.CancelScope()
        if self._stopped:
            scope.cancel()
        self._scopes.add(scope)

        async def run() -> None:
            try:
                with scope:
                    await work(*args)
            finally:
                self._scopes.discard(scope)

        self._group.start_soon(run)

    def stop(self) -> None:
        """Stop every task still running (each returns from its own cancelled scope)."""
        self._stopped = True
        for scope in list(self._scopes):
            scope.cancel()


@asynccontextmanager
async def side_tasks() -> AsyncIterator[SideTasks]:
    """A task group whose tasks are stopped when the block ends; a failure of one cancels
    the block, as a task group's does."""
    async with anyio.create_task_group() as group:
        tasks = SideTasks(group)
        try:
            yield tasks
        finally:
            tasks.stop()


@asynccontextmanager
async def beside(work: Callable[[], Awaitable[object]]) -> AsyncIterator[None]:
    """Run ``work()`` in a task beside the block; stop it when the block ends (it may end
    earlier by itself)."""
    async with side_tasks() as tasks:
        tasks.start_soon(work)
        yield
