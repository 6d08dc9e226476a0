"""Reading a run for an HTTP answer: the one wait both OpenAI dialects share.

An OpenAI request is answered once its run has ended (a JSON answer) or has produced
its first output (a stream, whose headers are held until then so that an early failure
keeps its real HTTP status). Either wait is bounded by ``run_timeout_s`` and ends as
soon as the client goes away, so that its run can be interrupted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import anyio
from anyio.abc import TaskGroup

from kernel import RunFollower
from kernel import model as m
from transports.shared import Request, wait_disconnect

Unanswered = Literal["gone", "timeout"]


async def read_run(
    request: Request,
    run: RunFollower,
    *,
    timeout_s: float,
    until: Callable[[m.Event], bool] | None = None,
    tasks: TaskGroup | None = None,
) -> tuple[list[m.Event], Unanswered | None]:
    """The run's events up to its end, or up to the first batch holding an event that
    ``until`` accepts; and ``"gone"`` / ``"timeout"`` when the client left or time ran
    out first.

    ``tasks``: the caller's task group, to watch the client from. Then this returns as
    soon as it has the events, leaving the watch to end in the background, instead of
    waiting one more scheduling round for it — a round in which a run reading a burst
    from its upstream would handle the whole burst before the stream's first chunk is
    written."""
    if tasks is not None:
        return await _read(request, run, timeout_s, until, tasks)
    async with anyio.create_task_group() as own:
        got = await _read(request, run, timeout_s, until, own)
    return got


async def _read(
    request: Request, run: RunFollower, timeout_s: float, until: Callable[[m.Event], bool] | None, tasks: TaskGroup
) -> tuple[list[m.Event], Unanswered | None]:
    seen: list[m.Event] = []
    why: Unanswered | None = None
    deadline = anyio.current_time() + timeout_s
    watching = anyio.CancelScope()
    with anyio.CancelScope() as reading:

        async def watch() -> None:
            nonlocal why
            with watching:
                await wait_disconnect(request)
                why = "gone"
                reading.cancel()

        tasks.start_soon(watch)
        try:
            while run.end is None:
                batch = await run.next_batch(deadline)
                if not batch:  # the deadline passed
                    why = "timeout"
                    break
                seen.extend(batch)
                if until is not None and any(until(event) for event in batch):
                    break
        finally:
            watching.cancel()
    return seen, why
