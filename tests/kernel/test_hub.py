"""Subscribers: merging, bounded buffers, cut-off of laggards, resume from a seq."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from kernel import hub as hub_module
from kernel import model as m
from kernel.hub import EventHub, Subscription
from kernel.testing import ScriptedProvider, running_kernel, text_turn

from .helpers import run_events

pytestmark = pytest.mark.anyio


def delta(text: str, run: str = "r") -> m.TextDelta:
    return m.TextDelta(session_id="s", run_id=run, text=text)


def started(run: str = "r") -> m.RunStarted:
    return m.RunStarted(session_id="s", run_id=run)


async def test_adjacent_deltas_merge_while_waiting() -> None:
    hub = EventHub("s", retention=100, buffer_size=10, grace_s=1)
    sub = hub.subscribe()
    hub.publish(started())
    for piece in ("a", "b", "c"):
        hub.publish(delta(piece))
    hub.publish(delta("x", run="other"))
    events = sub.receive_nowait()
    assert [type(e).__name__ for e in events] == ["RunStarted", "TextDelta", "TextDelta"]
    assert events[1].text == "abc" and events[1].seq == 4 and events[2].text == "x"  # type: ignore[union-attr]


async def test_full_buffer_catches_up_from_the_log() -> None:
    hub = EventHub("s", retention=1000, buffer_size=3, grace_s=60)
    sub = hub.subscribe()
    for i in range(10):
        hub.publish(started(str(i)))
    assert sub.pending == 3
    got = []
    for _ in range(10):
        got.append(await sub.__anext__())
    assert [e.seq for e in got] == list(range(1, 11))


async def test_laggard_past_grace_is_cut_off_then_resumes() -> None:
    now = [0.0]
    hub = EventHub("s", retention=1000, buffer_size=2, grace_s=5)
    sub = hub.subscribe()
    sub._clock = lambda: now[0]  # an explicit clock: no sleeping in the test
    for i in range(4):
        hub.publish(started(str(i)))
    now[0] = 10.0
    hub.publish(started("late"))
    events = sub.receive_nowait()
    assert isinstance(events[-1], m.SubscriberLagged)
    last = events[-1].last_seq
    assert last == 2 and events[-1].error.code == "rate_limited"
    with pytest.raises(StopAsyncIteration):
        await sub.__anext__()
    assert hub.subscriber_count == 0
    resumed = hub.subscribe(after_seq=last)
    assert [e.seq for e in resumed.receive_nowait()] == [3, 4, 5]


async def test_resume_from_a_dropped_seq_reports_lag() -> None:
    hub = EventHub("s", retention=3, buffer_size=10, grace_s=5)
    for i in range(6):
        hub.publish(started(str(i)))
    sub = hub.subscribe(after_seq=1)
    events = sub.receive_nowait()
    assert len(events) == 1 and isinstance(events[0], m.SubscriberLagged)


async def test_slow_subscriber_does_not_stall_the_run_or_others() -> None:
    provider = ScriptedProvider([text_turn(*[f"w{i} " for i in range(300)])])
    async with running_kernel(provider) as kernel:
        session = await kernel.session("s")
        slow = session.hub.subscribe(buffer_size=4)
        fast = session.hub.subscribe()
        await kernel.execute(m.Prompt(session_id="s", text="go"))
        events = await run_events(fast)
        assert isinstance(events[-1], m.RunFinished)
        assert slow.pending <= 4
        collected = await run_events(slow)
        text = "".join(e.text for e in collected if isinstance(e, m.TextDelta))
        assert text == events[-1].text


async def test_subscription_ends_when_the_session_is_deleted() -> None:
    async with running_kernel() as kernel:
        sub = await kernel.subscribe((await kernel.session("s")).id)
        await kernel.execute(m.DeleteSession(session_id="s"))
        with anyio.fail_after(2):
            assert [e async for e in sub] == []


async def until_lagged(follower) -> list[m.Event]:  # type: ignore[no-untyped-def]
    """Batches until the one reporting a gap (the events still buffered come first)."""
    for _ in range(10):
        batch = await follower.next_batch(anyio.current_time() + 1)
        if batch and isinstance(batch[-1], m.SubscriberLagged):
            return batch
    raise AssertionError("no gap reported")


async def test_follower_resumes_without_a_gap_and_reports_real_losses() -> None:
    from kernel import Follower
    from kernel.settings import Settings

    settings = Settings()
    settings.session.subscriber_buffer = 2
    settings.session.lag_grace_s = 0.0
    settings.session.event_retention = 1000
    async with running_kernel(settings=settings) as kernel:
        session = await kernel.session("s")
        follower = await Follower.open(kernel, "s")
        for i in range(6):
            await session.emit(started(str(i)))
        seqs = []
        while len(seqs) < 6:
            seqs += [e.seq for e in await follower.next_batch()]
        assert seqs == [1, 2, 3, 4, 5, 6]  # cut off on the way, resumed: no gap

        for i in range(4):
            await session.emit(started(str(i)))
        session.hub._log.clear()  # the events it missed are gone
        batch = await until_lagged(follower)
        assert isinstance(batch[-1], m.SubscriberLagged) and not follower.closed
        await session.emit(started("after"))
        assert [e.seq for e in await follower.next_batch()] == [session.hub.last_seq]  # goes on from now

        strict = await Follower.open(kernel, "s", stop_on_loss=True)
        for i in range(4):
            await session.emit(started(str(i)))
        session.hub._log.clear()
        batch = await until_lagged(strict)
        assert isinstance(batch[-1], m.SubscriberLagged) and strict.closed
        assert await strict.next_batch() == []


async def test_follower_deadline_and_session_end() -> None:
    from kernel import Follower

    async with running_kernel() as kernel:
        await kernel.session("s")
        follower = await Follower.open(kernel, "s")
        assert await follower.next_batch(anyio.current_time() + 0.02) == [] and not follower.closed
        await kernel.execute(m.DeleteSession(session_id="s"))
        assert await follower.next_batch() == [] and follower.closed


async def _reader(sub: Subscription, log: list[str], writes: int, then: str = "wait") -> None:
    """Takes what is ready, then "writes" it in ``writes`` scheduling rounds (a socket write on
    trio yields), then waits for more, closes, or goes away for good."""
    taken = [await sub.__anext__(), *sub.receive_nowait()]
    log.append("took " + ", ".join(event.text if isinstance(event, m.TextDelta) else type(event).__name__ for event in taken))
    for _ in range(writes):
        await anyio.lowlevel.checkpoint()
    log.append("written")
    if then == "close":
        sub.close()
    elif then == "away":
        await anyio.sleep_forever()
    else:
        await sub.__anext__()


@pytest.mark.parametrize("before", [(), (started(),)], ids=["woken by the delta", "woken just before it"])
async def test_first_token_is_written_before_the_run_goes_on(before: tuple[m.Event, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    """Woken by the first delta, or by an event just before it that it has not taken yet (a
    run's ``model_responding``; then the delta wakes nobody): the reader writes the first
    token before the run goes on to parse the rest of a burst."""
    monkeypatch.setattr(hub_module, "HAND_OVER_S", 60.0)
    hub = EventHub("s", retention=100, buffer_size=10, grace_s=1)
    sub = hub.subscribe()
    log: list[str] = []
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(_reader, sub, log, 5)
            await anyio.wait_all_tasks_blocked()
            for event in before:
                hub.publish(event)
            hub.publish(delta("first"))
            await hub.hand_over()
            log.append("run goes on")
            hub.publish(delta("second"))
    assert log == [f"took {'RunStarted, ' if before else ''}first", "written", "run goes on"]


async def test_a_reader_that_closes_or_never_returns_releases_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hub_module, "HAND_OVER_S", 60.0)
    hub = EventHub("s", retention=100, buffer_size=10, grace_s=1)
    closing, log = hub.subscribe(), list[str]()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(_reader, closing, log, 3, "close")
            await anyio.wait_all_tasks_blocked()
            hub.publish(delta("first"))
            await hub.hand_over()  # released by the close, not by the bound
            log.append("run goes on")
    assert log == ["took first", "written", "run goes on"]

    monkeypatch.setattr(hub_module, "HAND_OVER_S", 0.05)
    away = hub.subscribe()
    log = []
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(_reader, away, log, 0, "away")
            await anyio.wait_all_tasks_blocked()
            hub.publish(delta("again"))
            await hub.hand_over()  # the bound: the reader is still away
            log.append("run goes on")
            monkeypatch.setattr(hub_module, "HAND_OVER_S", 60.0)
            hub.publish(delta("later"))
            await hub.hand_over()  # busy elsewhere: not waited for again until it waits
            log.append("next run goes on")
            tg.cancel_scope.cancel()
    assert log == ["took again", "written", "run goes on", "next run goes on"]


async def test_no_hand_over_to_a_subscriber_that_was_not_waiting() -> None:
    hub = EventHub("s", retention=100, buffer_size=10, grace_s=1)
    busy = hub.subscribe()  # nobody is reading it now: it takes the event when it comes back
    hub.publish(delta("first"))
    with anyio.fail_after(5):
        await hub.hand_over()
    assert [e.text for e in busy.receive_nowait()] == ["first"]  # type: ignore[union-attr]
