"""Draining (SIGTERM's first half, in the kernel): new runs refused, runs in flight go on up
to the drain's bound and then end interrupted with cause ``drain``; readiness says so; every
interrupt carries why it happened, which is how each dialect knows the answer is not whole."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from kernel import model as m
from kernel.testing import ScriptedProvider, running_kernel, text_turn

from .helpers import next_of, prompt, run_events

pytestmark = pytest.mark.anyio


async def test_a_drain_refuses_new_runs_and_interrupts_what_outlives_it_with_cause_drain() -> None:
    provider = ScriptedProvider([text_turn(*["x "] * 400)], delay_s=0.02)
    async with running_kernel(provider) as kernel:
        assert await kernel.readiness() == {}
        sub = (await kernel.session("long")).hub.subscribe()
        await prompt(kernel, "long", "go")
        await next_of(sub, m.TextDelta)
        async with anyio.create_task_group() as tg:
            tg.start_soon(kernel.drain, 0.3)
            with anyio.fail_after(5):
                while not kernel.draining:  # the drain task has begun
                    await anyio.lowlevel.checkpoint()
            assert "draining" in await kernel.readiness()
            with pytest.raises(m.KernelError) as refused:
                await kernel.execute(m.Prompt(session_id="other", text="new"))
            assert refused.value.code == "draining"
            # Commands that start no run still work while draining.
            assert isinstance(await kernel.execute(m.GetSession(session_id="long")), m.SessionOpened)
        end = (await run_events(sub))[-1]
        assert isinstance(end, m.RunFinished) and end.interrupted and end.interrupt_cause == "drain"
        assert 0 < len(end.text) < len("x " * 400)
        error = m.run_end_error(end)
        assert error is not None and error.code == "draining"
        assert kernel.stopping.is_set()


async def test_a_run_that_ends_within_the_drain_is_whole() -> None:
    provider = ScriptedProvider([text_turn(*["y "] * 20)], delay_s=0.01)
    async with running_kernel(provider) as kernel:
        sub = (await kernel.session("short")).hub.subscribe()
        await prompt(kernel, "short", "go")
        await next_of(sub, m.TextDelta)
        assert await kernel.drain(30.0) == 0
        end = (await run_events(sub))[-1]
        assert isinstance(end, m.RunFinished) and not end.interrupted and end.text == "y " * 20
        assert m.run_end_error(end) is None


async def test_every_interrupt_says_why() -> None:
    provider = ScriptedProvider([text_turn(*["z "] * 400), text_turn(*["z "] * 400), text_turn(*["z "] * 400)], delay_s=0.02)
    async with running_kernel(provider) as kernel:
        sub = (await kernel.session("s")).hub.subscribe()
        causes = []
        for cause in ("client", "timeout"):
            await prompt(kernel, "s", "go")
            await next_of(sub, m.TextDelta)
            await kernel.execute(m.Interrupt(session_id="s", cause=cause))
            end = (await run_events(sub))[-1]
            assert isinstance(end, m.RunFinished)
            causes.append(end.interrupt_cause)
        await prompt(kernel, "s", "go")
        await next_of(sub, m.TextDelta)
        kernel.interrupt_all()
        end = (await run_events(sub))[-1]
        assert isinstance(end, m.RunFinished)
        causes.append(end.interrupt_cause)
    assert causes == ["client", "timeout", "shutdown"]
    # A client's own interrupt keeps the dialects' interrupted form; the others are failures.
    ids = {"session_id": "s", "run_id": "r"}
    assert m.forced_end_error(m.RunFinished(**ids, text="", interrupted=True, interrupt_cause="client")) is None
    assert m.forced_end_error(m.RunFinished(**ids, text="", interrupted=True, interrupt_cause="timeout")) is not None
