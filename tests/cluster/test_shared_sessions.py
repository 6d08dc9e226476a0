"""Two kernels as two gateway instances: a session owned by one is used from the other
through commands and followers only — forwarded, followed live, resumed, taken over."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from kernel import Follower, RunFollower, Tool
from kernel import model as m
from kernel.host import seq_key
from kernel.testing import ScriptedProvider, text_turn, tool_turn
from plugins.cluster.redis import RedisCluster

from ._support import cluster_kernels

pytestmark = pytest.mark.anyio

WORDS = [f"w{i} " for i in range(300)]


async def _ok(args: dict[str, Any], ctx: object) -> str:
    return "written"


GUARDED = Tool(name="guarded", description="asks first", parameters={"type": "object"}, handler=_ok, requires_approval=True)


async def test_a_session_of_one_instance_is_followed_and_driven_from_another() -> None:
    a_model = ScriptedProvider([text_turn(*WORDS)])
    async with cluster_kernels([a_model, ScriptedProvider([text_turn("from b")])]) as (a, b):
        await a.execute(m.OpenSession(session_id="s"))
        info = await b.execute(m.GetSession(session_id="s"))  # forwarded to the owner
        assert isinstance(info, m.SessionOpened) and info.session.session_id == "s"
        assert "s" in a.sessions and "s" not in b.sessions
        async with await Follower.open(b, "s", client="test") as watcher:  # B follows A's session
            accepted = await a.execute(m.Prompt(session_id="s", request_id="p1", text="go"))
            assert isinstance(accepted, m.Accepted)
            seen: list[m.Event] = []
            with anyio.fail_after(20):
                while not any(isinstance(e, m.RunFinished) for e in seen):
                    seen += await watcher.next_batch()
        text = "".join(e.text for e in seen if isinstance(e, m.TextDelta))
        assert text == "".join(WORDS)
        seqs = [e.seq for e in seen]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        # A prompt sent to B runs on A, and B's run follower hands out its events.
        async with await RunFollower.start(b, m.Prompt(session_id="s", text="again"), client="test") as run:
            with anyio.fail_after(20):
                end = await run.wait()
        assert isinstance(end, m.RunFinished) and end.text == "".join(WORDS) and len(a_model.requests) == 2
        history = await b.execute(m.GetHistory(session_id="s"))
        assert isinstance(history, m.HistoryView) and [x.content for x in history.messages if x.role == "user"] == ["go", "again"]


async def test_an_interrupt_and_an_approval_sent_to_one_instance_act_on_the_other() -> None:
    slow = ScriptedProvider([text_turn(*WORDS)], delay_s=0.01)
    asking = ScriptedProvider([tool_turn("guarded", "{}"), text_turn("done")])
    async with cluster_kernels([slow, asking], tools=[GUARDED]) as (a, b):
        await a.execute(m.OpenSession(session_id="long"))
        async with await RunFollower.start(b, m.Prompt(session_id="long", text="go")) as run:
            with anyio.fail_after(20):
                while not any(isinstance(e, m.TextDelta) for e in await run.next_batch()):
                    pass
            await b.execute(m.Interrupt(session_id="long"))
            with anyio.fail_after(20):
                end = await run.wait()
        assert isinstance(end, m.RunFinished) and end.interrupted and len(end.text) < len("".join(WORDS))

        await b.execute(m.OpenSession(session_id="ask"))  # owned by B this time
        async with await RunFollower.start(a, m.Prompt(session_id="ask", text="write")) as run:
            with anyio.fail_after(20):
                while run.question is None:
                    await run.next_batch()
            await run.answer(True)  # through A, to B
            with anyio.fail_after(20):
                end = await run.wait()
        assert isinstance(end, m.RunFinished) and end.text == "done" and "ask" in b.sessions and "ask" not in a.sessions


async def test_resume_after_a_seq_on_any_instance() -> None:
    async with cluster_kernels([ScriptedProvider([text_turn(*WORDS)]), ScriptedProvider()]) as (a, b):
        async with await RunFollower.start(a, m.Prompt(session_id="r", text="go")) as run:
            with anyio.fail_after(20):
                events = []
                while run.end is None:
                    events += await run.next_batch()
        middle = events[len(events) // 2].seq
        async with await Follower.open(b, "r", after_seq=middle) as resumed:
            got: list[m.Event] = []
            with anyio.fail_after(20):
                while not any(isinstance(e, m.RunFinished) for e in got):
                    got += await resumed.next_batch()
        assert got[0].seq == middle + 1 and got[-1].seq == events[-1].seq


async def test_a_deleted_session_ends_its_remote_followers() -> None:
    async with cluster_kernels([ScriptedProvider(), ScriptedProvider()]) as (a, b):
        await a.execute(m.OpenSession(session_id="gone"))
        follower = await Follower.open(b, "gone")
        await b.execute(m.DeleteSession(session_id="gone"))  # forwarded to A
        with anyio.fail_after(10):
            assert await follower.next_batch() == [] and follower.closed
        with pytest.raises(m.KernelError):
            await b.execute(m.GetSession(session_id="gone"))


async def test_an_instance_that_lost_a_session_without_noticing_writes_and_publishes_nothing_beside_its_new_owner() -> None:
    """Two owners for a moment: A's lease ran out while it was busy (a late renewal) and B took
    the session over. A notices at its next publish (its events are refused by the stream's
    fence): its run in flight ends ``owner_lost`` — what it would still write is refused by
    the store's fence — and A lets the session go; a prompt sent to A is then run by B."""
    a_model = ScriptedProvider([text_turn("a1"), text_turn(*WORDS)], delay_s=0.01)
    async with cluster_kernels([a_model, ScriptedProvider([text_turn("b1")])], lease_s=30.0) as (a, b):
        async with await RunFollower.start(a, m.Prompt(session_id="s", text="first")) as run:
            with anyio.fail_after(20):
                assert isinstance(await run.wait(), m.RunFinished)
        cluster = a.cluster
        assert isinstance(cluster, RedisCluster)
        async with await RunFollower.start(a, m.Prompt(session_id="s", text="slow")) as slow:
            with anyio.fail_after(20):
                while not any(isinstance(e, m.TextDelta) for e in await slow.next_batch()):
                    pass
            await cluster._client.delete([cluster._owner_key("s")])  # A's lease expired (A renews every 10 s here)
            await b.execute(m.GetSession(session_id="s"))  # B needs the session: B takes it over
            async with await Follower.open(b, "s") as on_b:
                with anyio.fail_after(20):
                    end = await slow.wait()
                assert isinstance(end, m.RunFailed) and end.error.code == "owner_lost", end  # never a whole-looking answer
                with anyio.fail_after(10):
                    while "s" in a.sessions:  # its events were refused: A let the session go
                        await anyio.sleep(0.02)
                assert on_b.pending == 0  # none of A's events reached B's followers
        async with await RunFollower.start(a, m.Prompt(session_id="s", text="next")) as run:  # sent to A, run by B
            with anyio.fail_after(20):
                end = await run.wait()
        assert isinstance(end, m.RunFinished) and end.text == "b1"
        history = await b.execute(m.GetHistory(session_id="s"))
        # "slow" was stored before B took over; A's answer to it was refused.
        assert [x.content for x in history.messages] == ["first", "a1", "slow", "next", "b1"]


async def test_a_prompt_sent_to_an_instance_that_lost_the_session_is_run_by_the_owner() -> None:
    async with cluster_kernels([ScriptedProvider([text_turn("a1")]), ScriptedProvider([text_turn("b1")])], lease_s=30.0) as (a, b):
        async with await RunFollower.start(a, m.Prompt(session_id="s", text="first")) as run:
            with anyio.fail_after(20):
                await run.wait()
        cluster = a.cluster
        assert isinstance(cluster, RedisCluster)
        await cluster._client.delete([cluster._owner_key("s")])
        await b.execute(m.GetSession(session_id="s"))  # B took it over; A does not know yet
        async with await RunFollower.start(a, m.Prompt(session_id="s", text="second")) as run:
            with anyio.fail_after(20):
                end = await run.wait()
        assert isinstance(end, m.RunFinished) and end.text == "b1" and "s" not in a.sessions
        history = await b.execute(m.GetHistory(session_id="s"))
        assert [x.content for x in history.messages] == ["first", "a1", "second", "b1"]


async def test_a_prompt_queued_at_an_owner_that_lost_the_session_ends_owner_lost_where_it_was_sent() -> None:
    """A prompt sent through B was accepted by the owner A behind a run in flight there; then A
    lost the session (as when A dies: its lease is gone, and B takes the session over). B's new
    session never heard of the queued run and the stream never tells of it (A's events are
    refused now): the request at B ends ``owner_lost`` — it used to wait for ever (the soak's
    hung sockets, where the owner died between accepting a prompt and announcing its run)."""
    a_model = ScriptedProvider([text_turn(*WORDS)], delay_s=0.01)
    async with cluster_kernels([a_model, ScriptedProvider([text_turn("b1")])], lease_s=30.0) as (a, b):
        await a.execute(m.OpenSession(session_id="s"))
        async with await RunFollower.start(a, m.Prompt(session_id="s", text="first")) as first:
            with anyio.fail_after(20):
                while not any(isinstance(e, m.TextDelta) for e in await first.next_batch()):
                    pass
            async with await RunFollower.start(b, m.Prompt(session_id="s", request_id="queued", text="second")) as second:
                assert second.accepted.queued and "s" not in b.sessions  # forwarded to A, waiting behind "first"
                cluster = a.cluster
                assert isinstance(cluster, RedisCluster)
                await cluster._client.delete([cluster._owner_key("s")])  # A's lease is gone (A renews every 10 s here)
                await b.execute(m.GetSession(session_id="s"))  # B needs the session: B takes it over
                with anyio.fail_after(20):
                    end = await second.wait()
                assert isinstance(end, m.RunFailed) and end.error.code == "owner_lost" and end.request_id == "queued", end
            with anyio.fail_after(20):
                end = await first.wait()
            assert isinstance(end, m.RunFailed) and end.error.code == "owner_lost", end  # A's run in flight: refused, never whole
        history = await b.execute(m.GetHistory(session_id="s"))
        assert isinstance(history, m.HistoryView) and "second" not in [x.content for x in history.messages]


async def test_a_takeover_behind_the_saved_seq_notes_the_loss_and_its_follower_is_told_owner_lost() -> None:
    """The previous owner saved a seq its stream never reached (its last events were refused,
    its lease gone). The new owner goes on after that seq and notes in the stream that the
    events between went with the previous owner. A follower that read the stream to its end is
    told so as ``owner_lost``; before, the seqs' gap read as a reader that fell behind, and a
    request queued there ended ``rate_limited`` (CI's flaky case above)."""
    async with cluster_kernels([ScriptedProvider([text_turn("one")]), ScriptedProvider([])], lease_s=30.0) as (a, b):
        await a.execute(m.OpenSession(session_id="s"))
        async with await RunFollower.start(a, m.Prompt(session_id="s", text="first")) as first:
            await first.wait()
        cluster = a.cluster
        assert isinstance(cluster, RedisCluster)
        with anyio.fail_after(10):
            while not (tail := await cluster.tail("s", 1)) or not isinstance(tail[-1], m.RunFinished):
                await anyio.sleep(0.01)
        published = tail[-1].seq
        async with await Follower.open(b, "s", client="test") as watcher:  # from the stream's end
            await a.store.set_value(seq_key("s"), str(published + 2).encode())  # A's refused events had reached that seq
            await cluster._client.delete([cluster._owner_key("s")])
            await b.execute(m.GetSession(session_id="s"))  # B takes it over
            with anyio.fail_after(20):
                batch = await watcher.next_batch()
        assert len(batch) == 1 and isinstance(lost := batch[0], m.SubscriberLagged), batch
        assert (lost.last_seq, lost.seq, lost.end_code) == (published, published + 2, "owner_lost"), lost
        assert b.sessions["s"].hub.last_seq == published + 2
