"""``beside``: a helper task that lives as long as a block and is stopped, not cancelled
from outside, when the block ends; so that what it made is freed at once, not left in a
reference cycle for the garbage collector (:mod:`tests.cycles`)."""

from __future__ import annotations

from collections import Counter

import anyio
import pytest

from kernel import beside
from tests.cycles import garbage_of

pytestmark = pytest.mark.anyio


async def test_the_work_runs_beside_the_block_and_is_stopped_when_it_ends() -> None:
    steps: list[str] = []
    started = anyio.Event()

    async def work() -> None:
        steps.append("started")
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            steps.append("stopped")

    with anyio.fail_after(5):
        async with beside(work):
            await started.wait()
            steps.append("block done")
    assert steps == ["started", "block done", "stopped"]


async def test_work_that_ends_by_itself_leaves_the_block_running() -> None:
    ended = anyio.Event()

    async def work() -> None:
        ended.set()

    with anyio.fail_after(5):
        async with beside(work):
            await ended.wait()
            await anyio.lowlevel.checkpoint()
            finished = True
    assert finished


async def test_a_failure_of_the_work_cancels_the_block_and_is_raised() -> None:
    block_cancelled = False

    async def work() -> None:
        raise LookupError("the work failed")

    with anyio.fail_after(5), pytest.raises(ExceptionGroup) as raised:
        async with beside(work):
            try:
                await anyio.sleep_forever()
            except anyio.get_cancelled_exc_class():
                block_cancelled = True
                raise
    assert block_cancelled
    assert [type(error) for error in raised.value.exceptions] == [LookupError]


async def test_a_failure_of_the_block_stops_the_work_and_is_raised() -> None:
    stopped = False

    async def work() -> None:
        nonlocal stopped
        try:
            await anyio.sleep_forever()
        finally:
            stopped = True

    with anyio.fail_after(5), pytest.raises(ExceptionGroup) as raised:
        async with beside(work):
            await anyio.lowlevel.checkpoint()
            raise KeyError("the block failed")
    assert stopped and [type(error) for error in raised.value.exceptions] == [KeyError]


async def test_a_stopped_task_leaves_no_reference_cycles() -> None:
    """The whole point: the same task cancelled from outside by its task group leaves its
    ``CancelledError``, frames and scopes in a cycle (on asyncio)."""

    async def waits() -> None:
        await anyio.sleep_forever()

    async def blocks() -> None:
        for _ in range(5):
            async with beside(waits):
                await anyio.lowlevel.checkpoint()

    assert await garbage_of(blocks) == Counter()
