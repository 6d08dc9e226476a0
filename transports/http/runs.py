"""Reading a run for an HTTP answer: the one wait the OpenAI and Anthropic dialects share,
and the throw-away session of a request that carries its whole conversation.

A request is answered once its run has ended (a JSON answer) or has produced its first
output or its model has accepted the request (a stream, whose headers are held until then
so that an early failure keeps its real HTTP status). Either wait is bounded by
``run_timeout_s`` and ends as soon as the client goes away, so that its run can be
interrupted.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, Literal

import anyio

from kernel import Kernel, KernelError, RunFollower
from kernel import model as m
from transports.shared import ClientWatch, Request, Response, open_sse, watching

log = logging.getLogger("gateway.http")

Unanswered = Literal["gone", "timeout"]


async def read_run(
    run: RunFollower,
    *,
    timeout_s: float,
    watch: ClientWatch,
    until: Callable[[m.Event], bool] | None = None,
) -> tuple[list[m.Event], Unanswered | None]:
    """The run's events up to its end, or up to the first batch holding an event that
    ``until`` accepts or, with ``until``, saying that the model accepted the request
    (``model_responding``); and ``"gone"`` / ``"timeout"`` when the client left or time ran
    out first.

    A stream's headers go out with that batch: the client reads them while the model works,
    as it would from the upstream itself, instead of after the first token (the openai SDK
    spends 0.8-1 ms on them).

    ``watch``: the answer's one watch of the client (a stream's goes on with its SSE
    response: :func:`write_run`; a whole answer's ends after it is sent: :func:`answer_run`).
    It keeps the deadline too (:meth:`~transports.shared.ClientWatch.every`): a wait for the
    run's next batch with a deadline of its own made a cancel scope and a timer each time,
    6-7 µs a batch on asyncio."""
    seen: list[m.Event] = []
    why: Unanswered | None = None
    deadline = anyio.current_time() + timeout_s
    with anyio.CancelScope() as reading:

        def stop(cause: Unanswered) -> None:
            nonlocal why
            if why is None:
                why = cause
            reading.cancel()

        async def timed_out() -> bool:
            stop("timeout")
            return False

        watch.on_gone(partial(stop, "gone"))
        watch.every(lambda: deadline, timed_out)
        try:
            while run.end is None:
                batch = await run.next_batch()
                seen.extend(batch)
                if until is not None and any(until(event) or isinstance(event, m.ModelResponding) for event in batch):
                    break
        finally:
            watch.every(None)
            watch.on_gone(None)
    return seen, why


async def answer_run(
    request: Request, run: RunFollower, *, timeout_s: float, answer: Callable[[list[m.Event], Unanswered | None], Awaitable[Response]]
) -> None:
    """A whole (non-stream) answer: the run read to its end under one watch of the client,
    and the response ``answer`` makes of its events sent before that watch stops — and
    before the run's throw-away session is deleted (:func:`ephemeral_run`). Returned to the
    router instead, the response waited for both: stopping a watch (its task cancelled and
    joined) took 80-110 µs of a non-stream answer's time."""
    async with watching(request) as watch:
        seen, why = await read_run(run, timeout_s=timeout_s, watch=watch)
        await (await answer(seen, why)).send_to(request.send)


#: A dialect's SSE bytes for a batch of a run's events, and whether the run ended with it.
Frames = Callable[[list[m.Event]], Awaitable[tuple[bytes, bool]]]


async def write_run(
    request: Request, run: RunFollower, pending: list[m.Event], frames: Frames, *, watch: ClientWatch, opening: bytes = b"", **sse: Any
) -> None:
    """A run's answer as an SSE response (OpenAI chat, Responses, Anthropic): ``opening`` and
    the first batch (``pending``, what :func:`read_run` returned) go out with the response's
    headers, before the stream's keep-alive is set up, so the first token waits for nothing
    else; then each further batch in one write, until the run ends or the client is gone
    (``watch``, the one the wait for the first batch used). The batch with the run's end
    carries the response's end too: the client's stream ends with its last event, not after
    the keep-alive and the watch have stopped. ``sse``: :func:`open_sse`'s options."""
    data, ended = await frames(pending)
    async with open_sse(request, first=opening + data, last=ended, watch=watch, **sse) as stream:
        while not ended and not stream.closed:
            data, ended = await frames(await run.next_batch())
            if not await stream.send_raw(data, last=ended):
                return


@asynccontextmanager
async def ephemeral_run(
    kernel: Kernel,
    *,
    agent_id: str,
    label: str,
    history: Sequence[m.Message],
    command: Callable[[str], m.Prompt | m.Continue],
    policy: m.ApprovalPolicy,
    caller: m.Caller,
) -> AsyncIterator[RunFollower]:
    """One run of a client that sends its whole conversation each time: a fresh session in
    memory only (no disk write before the first token), opened with the prior turns as its
    history (one command, nothing queued through the session's task before the run), the
    run built by ``command(session_id)`` and followed under ``policy``; the session is
    deleted when the block ends (the kernel lets an unfinished run record its end first)."""
    opened = await kernel.execute(m.OpenSession(agent_id=agent_id, label=label, ephemeral=True, history=tuple(history)), caller)
    session_id = opened.session.session_id
    try:
        async with await RunFollower.start(kernel, command(session_id), policy=policy, client=caller.transport, caller=caller) as run:
            # The session's task takes the run now, up to its model call, before this request
            # sets up its wait: the upstream's time to answer hides that set-up, instead of the
            # set-up delaying the model call (36 µs sooner in process on asyncio, 18 on trio).
            await anyio.lowlevel.checkpoint()
            yield run
    finally:
        with anyio.CancelScope(shield=True):
            try:
                await kernel.execute(m.DeleteSession(session_id=session_id), caller)
            except KernelError as error:
                log.debug("deleting ephemeral session %s: %s", session_id, error.message)
