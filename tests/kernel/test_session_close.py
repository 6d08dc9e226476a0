"""A session closed while a run has not told its end: the readers get an end, never silence.

The run here outlives the unload's grace because the store stalls on its answer (a database
that stopped answering): the write is shielded, so the interrupt cannot stop it.
"""

from __future__ import annotations

import anyio
import pytest

from kernel import model as m
from kernel.testing import ScriptedProvider, running_kernel, text_turn

from .helpers import StallingStore, next_of, prompt, run_events

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("cause", "code"),
    [(None, "interrupted"), ("drain", "draining"), ("shutdown", "draining"), ("timeout", "timeout"), ("owner_lost", "owner_lost")],
)
async def test_a_run_that_outlives_its_sessions_close_and_one_queued_behind_it_end_run_failed(
    tmp_path: object, cause: m.InterruptCause | None, code: str
) -> None:
    store = StallingStore(f"{tmp_path}/g.db")
    async with running_kernel(ScriptedProvider([text_turn("partial", " answer")]), store=store) as kernel:
        try:
            opened = await kernel.execute(m.OpenSession(session_id="s"))
            session_id = opened.session.session_id
            sub = await kernel.subscribe(session_id)
            first = await prompt(kernel, session_id, "one", request_id="r1")
            queued = await prompt(kernel, session_id, "two", request_id="r2")
            await store.stalled.wait()
            session = kernel.sessions[session_id]
            if cause is not None:  # why the session closes (a drain, a shutdown, a timeout, another instance took it over)
                session.interrupt(closing=True, cause=cause)
            assert await kernel.unload_session(session_id, grace_s=0.2)
            seen: list[m.Event] = []
            with anyio.fail_after(5):
                async for event in sub:
                    seen.append(event)
            ends = [event for event in seen if isinstance(event, m.RunFinished | m.RunFailed)]
            assert [(end.run_id, end.request_id) for end in ends] == [(first.run_id, "r1"), (queued.run_id, "r2")]
            for end in ends:
                assert isinstance(end, m.RunFailed) and end.error == m.ErrorInfo(code=code, message=m.SESSION_CLOSED)  # type: ignore[arg-type]
            assert "".join(event.text for event in seen if isinstance(event, m.TextDelta)) == "partial answer"
            last_seq = session.hub.last_seq
        finally:
            store.release.set()
        # The run, let go, finishes its write: nothing more is published for it.
        with anyio.fail_after(5):
            while session.active is not None:
                await anyio.sleep(0.01)
        assert session.hub.last_seq == last_seq


async def test_a_session_closed_after_its_run_ended_publishes_no_made_up_end(tmp_path: object) -> None:
    async with running_kernel(ScriptedProvider([text_turn("whole")])) as kernel:
        opened = await kernel.execute(m.OpenSession(session_id="s"))
        session_id = opened.session.session_id
        sub = await kernel.subscribe(session_id)
        accepted = await prompt(kernel, session_id, "one")
        end = (await run_events(sub, accepted.run_id))[-1]
        assert isinstance(end, m.RunFinished) and end.text == "whole"
        await kernel.unload_session(session_id)
        with anyio.fail_after(5):
            after = [event async for event in sub]
        assert after == []


async def test_a_session_whose_lease_was_lost_writes_nothing_more_and_its_runs_end_owner_lost() -> None:
    """Another instance holds the session's lease now: this one writes nothing more for it.
    What it would write (the run's partial answer, the prompt queued behind it) would land in
    the history or be refused depending on how it raced the new owner to the store's fence;
    refused every time, the runs end the same way every time (CI's flaky takeover case)."""
    model = ScriptedProvider([text_turn(*[f"w{i} " for i in range(200)])], delay_s=0.01)
    async with running_kernel(model) as kernel:
        opened = await kernel.execute(m.OpenSession(session_id="s"))
        sub = await kernel.subscribe("s")
        first = await prompt(kernel, "s", "one", request_id="r1")
        queued = await prompt(kernel, "s", "two", request_id="r2")
        await next_of(sub, m.TextDelta)
        kernel.lease_lost("s")
        with anyio.fail_after(5):
            ends = [event async for event in sub if isinstance(event, m.RunFinished | m.RunFailed)]
        assert [(end.run_id, type(end).__name__, end.error.code if isinstance(end, m.RunFailed) else None) for end in ends] == [
            (first.run_id, "RunFailed", "owner_lost"), (queued.run_id, "RunFailed", "owner_lost"),
        ], ends
        stored = await kernel.store.load_messages(opened.session.session_id, 10)
        assert [(x.role, x.content) for x in stored] == [("user", "one")]
