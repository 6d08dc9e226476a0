"""``side_tasks`` and ``beside``: helper tasks that live as long as a block and are stopped,
not cancelled from outside, when the block ends; so that what they made is freed at once,
not left in a reference cycle for the garbage collector (:mod:`tests.cycles`)."""

from __future__ import annotations

from collections import Counter

import anyio
import pytest

from kernel import beside, side_tasks
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


async def test_side_tasks_started_during_the_block_are_all_stopped_at_its_end() -> None:
    stopped: list[int] = []
    waiting = anyio.Event()
    started = 0

    async def work(number: int) -> None:
        nonlocal started
        started += 1
        if started == 3:
            waiting.set()
        try:
            await anyio.sleep_forever()
        finally:
            stopped.append(number)

    async def done_early() -> None:
        stopped.append(0)

    with anyio.fail_after(5):
        async with side_tasks() as tasks:
            tasks.start_soon(done_early)
            for number in (1, 2, 3):
                tasks.start_soon(work, number)
            await waiting.wait()
    assert sorted(stopped) == [0, 1, 2, 3]


async def test_a_side_task_started_as_the_block_ends_is_stopped_too() -> None:
    """A task started by another one while the block stops (a command arriving as the client
    goes) does not outlive the block."""
    ran = False

    async def late() -> None:
        nonlocal ran
        await anyio.sleep_forever()
        ran = True

    async def starts_one_when_stopped() -> None:
        try:
            await anyio.sleep_forever()
        finally:
            tasks.start_soon(late)

    with anyio.fail_after(5):
        async with side_tasks() as tasks:
            tasks.start_soon(starts_one_when_stopped)
            await anyio.lowlevel.checkpoint()
    assert not ran


async def test_stopped_side_tasks_leave_no_reference_cycles() -> None:
    async def waits(_: int) -> None:
        await anyio.sleep_forever()

    async def blocks() -> None:
        for _ in range(5):
            async with side_tasks() as tasks:
                for number in range(3):
                    tasks.start_soon(waits, number)
                await anyio.lowlevel.checkpoint()

    assert await garbage_of(blocks) == Counter()
