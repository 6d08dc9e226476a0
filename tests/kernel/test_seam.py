"""The seam a transport uses: session commands, the state machine, policies, outcomes,
the run follower and backpressure."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import msgspec
import pytest

from kernel import FinishChunk, Follower, KernelError, RunFollower, RunWatch, TextChunk, Tool, ToolCallChunk, ToolFailure
from kernel import model as m
from kernel.settings import AgentSettings, Settings
from kernel.state import IllegalTransition, SessionMachine
from kernel.testing import ScriptedProvider, running_kernel, text_turn, tool_turn

from .helpers import run_events

pytestmark = pytest.mark.anyio


async def _ok(args: dict[str, Any], ctx: object) -> str:
    return "done"


async def _fails(args: dict[str, Any], ctx: object) -> str:
    raise ToolFailure("disk on fire")


async def _slow(args: dict[str, Any], ctx: object) -> str:
    await anyio.sleep(10)
    return "late"


GUARDED = Tool(name="guarded", description="asks first", parameters={"type": "object"}, handler=_ok, requires_approval=True, category="files")
FAILS = Tool(name="fails", description="fails", parameters={"type": "object"}, handler=_fails)
SLOW = Tool(name="slow", description="slow", parameters={"type": "object"}, handler=_slow)


def prompt(text: str, *, session: str = "s", request: str = "r1", policy: m.ApprovalPolicy | None = None) -> m.Prompt:
    return m.Prompt(session_id=session, request_id=request, text=text, options=m.PromptOptions(approval=policy))


# ------------------------------------------------------------------ the state machine


def test_the_machine_allows_only_its_table() -> None:
    machine = SessionMachine()
    with pytest.raises(IllegalTransition):
        machine.move("end_run")
    assert machine.move("start_run") == "running"
    with pytest.raises(IllegalTransition):
        machine.move("start_run")
    assert machine.move("ask_approval") == "awaiting_tool_approval"
    with pytest.raises(IllegalTransition):
        machine.move("ask_turns")
    assert machine.move("answered") == "running"
    assert machine.move("end_run") == "idle"
    assert machine.move("close") == "closed"
    with pytest.raises(IllegalTransition):
        machine.move("start_run")


async def test_one_ask_serves_both_questions_and_refuses_stray_answers() -> None:
    machine = SessionMachine()
    machine.move("start_run")
    with pytest.raises(KernelError) as refused:
        machine.answer("tool_approval", "c1", m_answer(True), "s")
    assert refused.value.code == "invalid_request"

    async def answer_soon() -> None:
        await anyio.lowlevel.checkpoint()
        with pytest.raises(KernelError) as wrong:
            machine.answer("tool_approval", "other", m_answer(True), "s")
        assert wrong.value.code == "not_found"
        with pytest.raises(KernelError):
            machine.answer("turn_limit", None, m_answer(True), "s")  # not the open question
        machine.answer("tool_approval", "c1", m_answer(True, "fine"), "s")

    async with anyio.create_task_group() as tg:
        tg.start_soon(answer_soon)
        answer = await machine.ask("tool_approval", "c1", 5, anyio.lowlevel.checkpoint)
    assert (answer.yes, answer.reason, machine.state) == (True, "fine", "running")
    timed_out = await machine.ask("turn_limit", None, 0, anyio.lowlevel.checkpoint)
    assert timed_out.timed_out and not timed_out.yes and machine.state == "running"


def m_answer(yes: bool, reason: str | None = None) -> Any:
    from kernel.state import Answer

    return Answer(yes=yes, reason=reason)


# ------------------------------------------------------------------ session commands


async def test_configure_get_and_close_session() -> None:
    async with running_kernel(ScriptedProvider([text_turn("hi")], model="m-default")) as kernel:
        opened = await kernel.execute(m.OpenSession(session_id="s"))
        assert isinstance(opened, m.SessionOpened) and opened.session.model == "m-default"
        configured = await kernel.execute(m.ConfigureSession(session_id="s", max_turns=3, model="m-x", approval_timeout_s=2.0))
        assert isinstance(configured, m.SessionOpened)
        assert (configured.session.model, configured.session.max_turns) == ("m-x", 3)
        again = await kernel.execute(m.ConfigureSession(session_id="s", model=None))
        assert isinstance(again, m.SessionOpened) and (again.session.model, again.session.max_turns) == ("m-default", 3)
        with pytest.raises(KernelError):
            await kernel.execute(m.ConfigureSession(session_id="s", max_turns=-1))
        with pytest.raises(msgspec.ValidationError):  # an object, never from a wire
            msgspec.json.decode(b'{"type": "configure_session", "files": {}}', type=m.Command)

        sub = await kernel.subscribe("s")
        watched = await kernel.execute(m.CloseSession(session_id="s", if_unwatched=True))
        assert isinstance(watched, m.Done) and "s" in kernel.sessions
        sub.close()
        await kernel.execute(m.CloseSession(session_id="s", if_unwatched=True))
        assert "s" not in kernel.sessions
        info = await kernel.execute(m.GetSession(session_id="s"))  # loaded again from the store
        assert isinstance(info, m.SessionOpened) and info.session.subscribers == 0
        with pytest.raises(KernelError) as missing:
            await kernel.execute(m.GetSession(session_id="nobody"))
        assert missing.value.code == "not_found"


async def test_ephemeral_sessions_are_never_stored() -> None:
    async with running_kernel(ScriptedProvider([text_turn("hi")])) as kernel:
        opened = await kernel.execute(m.OpenSession(ephemeral=True))
        assert isinstance(opened, m.SessionOpened)
        sid = opened.session.session_id
        async with await RunFollower.start(kernel, prompt("x", session=sid)) as run:
            assert isinstance(await run.wait(), m.RunFinished)
        listing = await kernel.execute(m.ListSessions())
        assert isinstance(listing, m.SessionList) and sid not in {s.session_id for s in listing.sessions}
        assert await kernel.store.get_session(sid) is None


async def test_a_run_on_an_ephemeral_session_does_not_open_it_again() -> None:
    """The session an OpenAI-style request just opened is followed and prompted as it is (one
    kernel command fewer on the first token's path); it stays another caller's missing one."""
    async with running_kernel(ScriptedProvider([text_turn("hi")])) as kernel:
        alice = m.Caller(principal=(await kernel.keys.create("alice"))[0].principal())
        bob = m.Caller(principal=(await kernel.keys.create("bob"))[0].principal())
        opened = await kernel.execute(m.OpenSession(ephemeral=True), alice)
        assert isinstance(opened, m.SessionOpened)
        sid = opened.session.session_id
        executed: list[str] = []
        execute = kernel.execute

        async def counted(command: m.Command, caller: m.Caller = m.LOCAL_CALLER) -> m.Reply:
            executed.append(type(command).__name__)
            return await execute(command, caller)

        kernel.execute = counted  # type: ignore[method-assign]
        with pytest.raises(KernelError) as refused:
            await RunFollower.start(kernel, prompt("x", session=sid), caller=bob)
        assert refused.value.code == "not_found"
        async with await RunFollower.start(kernel, prompt("x", session=sid), caller=alice) as run:
            assert isinstance(await run.wait(), m.RunFinished)
        assert executed == ["Prompt"]  # bob was refused at the subscription, before any command


async def test_an_ephemeral_session_opens_with_its_history() -> None:
    """A client that sends its whole conversation gets its session in one command: the prior
    turns are its context (dated, titled, admitted and capped as saved history is), and the
    run sees them; nothing is stored."""
    provider = ScriptedProvider([text_turn("third answer")])
    settings = Settings()
    settings.session.history_cap = 3
    earlier = (
        m.Message(role="user", content="first question about the ledger"),
        m.Message(role="assistant", content="first answer"),
        m.Message(role="user", content="", parts=(m.TextPart("second"), m.FilePart(name="notes.txt", data=b"see notes"))),
        m.Message(role="assistant", content="second answer"),
    )
    async with running_kernel(provider, settings=settings) as kernel:
        opened = await kernel.execute(m.OpenSession(ephemeral=True, history=earlier))
        assert isinstance(opened, m.SessionOpened)
        info = opened.session
        assert info.message_count == 3 and info.title == "first question about the ledger"
        context = kernel.sessions[info.session_id].context
        assert [x.content for x in context] == ["first answer", "", "second answer"]
        assert all(x.created_at for x in context)
        async with await RunFollower.start(kernel, prompt("third", session=info.session_id)) as run:
            assert isinstance(await run.wait(), m.RunFinished)
        seen = [x for x in provider.requests[0].messages if x.role != "system"]
        assert [x.role for x in seen] == ["user", "assistant", "user"]  # the cap holds with the prompt in
        assert "see notes" in (seen[0].content or "") and seen[-1].content == "third"
        assert await kernel.store.get_session(info.session_id) is None


async def test_history_opens_only_an_ephemeral_session_and_is_admitted() -> None:
    async with running_kernel(ScriptedProvider([])) as kernel:
        said = (m.Message(role="user", content="hello"),)
        with pytest.raises(KernelError) as stored:
            await kernel.execute(m.OpenSession(history=said))
        assert stored.value.code == "invalid_request" and "ephemeral" in stored.value.message
        too_many = m.Message(role="user", parts=tuple(m.FilePart(name=f"{i}.txt", data=b"x") for i in range(17)))
        with pytest.raises(KernelError) as refused:
            await kernel.execute(m.OpenSession(ephemeral=True, history=(too_many,)))
        assert refused.value.code == "too_large"
        assert not kernel.sessions  # refused before a session was made


async def test_interrupt_by_request_id_reaches_a_queued_run() -> None:
    provider = ScriptedProvider([text_turn(*["w "] * 50)], delay_s=0.01)
    async with running_kernel(provider) as kernel:
        first = await RunFollower.start(kernel, prompt("one", request="a"))
        assert isinstance((await first.next_batch())[0], m.RunStarted)
        second = await RunFollower.start(kernel, prompt("two", request="b"))
        assert second.accepted.queued
        info = await kernel.execute(m.GetSession(session_id="s"))
        assert isinstance(info, m.SessionOpened) and info.session.queued_requests == ("b",)
        await kernel.execute(m.Interrupt(session_id="s", target_request_id="b"))  # still waiting
        with pytest.raises(KernelError):
            await kernel.execute(m.Interrupt(session_id="s", target_request_id="nobody"))
        end_a, end_b = await first.wait(), await second.wait()
        assert isinstance(end_a, m.RunFinished) and not end_a.interrupted and end_a.text == "w " * 50
        assert isinstance(end_b, m.RunFinished) and end_b.interrupted and end_b.text == ""
        assert len(provider.requests) == 1  # the interrupted run never reached the model
        await first.aclose()
        await second.aclose()


async def test_history_changes_wait_behind_a_run() -> None:
    provider = ScriptedProvider([text_turn(*["w "] * 20)], delay_s=0.01)
    async with running_kernel(provider) as kernel:
        run = await RunFollower.start(kernel, prompt("go"))
        reply = await kernel.execute(m.ClearHistory(session_id="s"))
        assert isinstance(reply, m.Accepted) and reply.queued  # not while the run reads the context
        assert isinstance(await run.wait(), m.RunFinished)
        await run.aclose()
        history = await kernel.execute(m.GetHistory(session_id="s"))
        with anyio.fail_after(5):
            while isinstance(history, m.HistoryView) and history.messages:
                await anyio.sleep(0.01)
                history = await kernel.execute(m.GetHistory(session_id="s"))
        done = await kernel.execute(m.SaveHistory(session_id="s", messages=(m.Message(role="user", content="hello"),)))
        assert isinstance(done, m.Done)  # idle: applied before the reply


# ------------------------------------------------------------------ policies and outcomes


async def _outcome_of(policy: m.ApprovalPolicy | None, tool: Tool, *, settings: Settings | None = None) -> tuple[list[m.Event], m.Message]:
    provider = ScriptedProvider([tool_turn(tool.name, "{}"), text_turn("after")])
    async with running_kernel(provider, tools=[tool], settings=settings) as kernel:
        async with await RunFollower.start(kernel, prompt("go", policy=policy)) as run:
            events: list[m.Event] = []
            while run.end is None:
                events += await run.next_batch()
        history = await kernel.execute(m.GetHistory(session_id="s"))
        assert isinstance(history, m.HistoryView)
        return events, next(msg for msg in history.messages if msg.role == "tool")


async def test_policies_decide_without_a_question() -> None:
    events, stored = await _outcome_of(m.ApprovalPolicy(mode="reject", reason="no way"), GUARDED)
    call = next(e for e in events if isinstance(e, m.ToolCallStarted))
    result = next(e for e in events if isinstance(e, m.ToolResult))
    assert not call.needs_approval and call.refused and not any(isinstance(e, m.ToolApprovalRequested) for e in events)
    assert (result.outcome, result.rejected, result.is_error) == ("rejected", True, True)
    assert result.error == "the user declined to run guarded (no way)" and stored.outcome == "rejected"

    events, stored = await _outcome_of(m.ApprovalPolicy(mode="reject", allow_categories=("files",)), GUARDED)
    result = next(e for e in events if isinstance(e, m.ToolResult))
    assert (result.outcome, result.result, stored.outcome) == ("ok", "done", "ok")

    events, _ = await _outcome_of(m.ApprovalPolicy(mode="approve"), GUARDED)
    assert next(e for e in events if isinstance(e, m.ToolResult)).outcome == "ok"


async def test_outcomes_are_data_on_events_and_stored_messages() -> None:
    events, stored = await _outcome_of(None, FAILS)
    result = next(e for e in events if isinstance(e, m.ToolResult))
    assert (result.outcome, result.error, result.result) == ("error", "disk on fire", "tool error: disk on fire")
    assert stored.outcome == "error"

    settings = Settings()
    settings.tools.timeout_s = 0.01
    events, stored = await _outcome_of(None, SLOW, settings=settings)
    assert next(e for e in events if isinstance(e, m.ToolResult)).outcome == "timed_out" and stored.outcome == "timed_out"

    settings = Settings()
    settings.tools.limits = {"general_query_max": 1}
    two_calls = [
        ToolCallChunk(index=0, id="c1", name="fails", arguments="{}"),
        ToolCallChunk(index=1, id="c2", name="fails", arguments="{}"),
        FinishChunk("tool_calls"),
    ]
    provider = ScriptedProvider([two_calls, text_turn("ok")])
    async with running_kernel(provider, tools=[FAILS], settings=settings) as kernel:
        async with await RunFollower.start(kernel, prompt("go")) as run:
            seen: list[m.Event] = []
            while run.end is None:
                seen += await run.next_batch()
    outcomes = [e.outcome for e in seen if isinstance(e, m.ToolResult)]
    assert outcomes == ["error", "limit_reached"]


# ------------------------------------------------------------------ the run follower


async def test_run_follower_asks_and_answers() -> None:
    provider = ScriptedProvider([tool_turn("guarded", "{}"), text_turn("fine")])
    async with running_kernel(provider, tools=[GUARDED]) as kernel:
        async with await RunFollower.start(kernel, prompt("go")) as run:
            seen: list[m.Event] = []
            while run.question is None:
                seen += await run.next_batch()
            call = next(e for e in seen if isinstance(e, m.ToolCallStarted))
            assert call.needs_approval and not call.refused and isinstance(run.question, m.ToolApprovalRequested)
            info = await kernel.execute(m.GetSession(session_id="s"))
            assert isinstance(info, m.SessionOpened) and info.session.pending_call_id == call.call_id
            assert info.session.state == "awaiting_tool_approval" and info.session.request_id == "r1"
            await run.answer(True)
            end = await run.wait()
        assert isinstance(end, m.RunFinished) and end.text == "fine" and run.question is None


async def test_closing_a_run_follower_declines_its_open_question() -> None:
    provider = ScriptedProvider([tool_turn("guarded", "{}"), text_turn("after")])
    async with running_kernel(provider, tools=[GUARDED]) as kernel:
        sub = await kernel.subscribe((await kernel.session("s")).id)
        async with await RunFollower.start(kernel, prompt("go")) as run:
            while run.question is None:
                await run.next_batch()
        events = await run_events(sub)
        result = next(e for e in events if isinstance(e, m.ToolResult))
        assert result.outcome == "rejected" and "the client went away" in result.result


async def test_a_follower_that_leaves_its_question_open_lets_a_later_request_answer_it() -> None:
    provider = ScriptedProvider([tool_turn("guarded", "{}"), text_turn("after")])
    async with running_kernel(provider, tools=[GUARDED]) as kernel:
        async with await RunFollower.start(kernel, prompt("go"), decline_on_close=False) as first:
            while first.question is None:
                await first.next_batch()
            question = first.question
        assert isinstance(question, m.ToolApprovalRequested)
        info = await kernel.execute(m.GetSession(session_id="s"))
        assert isinstance(info, m.SessionOpened) and info.session.state == "awaiting_tool_approval"
        assert info.session.pending_call_id == question.call_id  # still open: nobody declined it
        follower = await Follower.open(kernel, "s")
        await kernel.execute(m.ResolveToolApproval(session_id="s", call_id=question.call_id, approved=True))
        watch = RunWatch(None, first.run_id)
        while watch.end is None:
            for event in await follower.next_batch():
                watch.feed(event)
        follower.close()
    assert isinstance(watch.end, m.RunFinished) and watch.end.text == "after"


async def test_a_deleted_session_ends_its_run_for_the_follower() -> None:
    provider = ScriptedProvider([text_turn(*["w "] * 100)], delay_s=0.01)
    async with running_kernel(provider) as kernel:
        async with await RunFollower.start(kernel, prompt("go")) as run:
            await run.next_batch()
            await kernel.execute(m.DeleteSession(session_id="s"))
            end = await run.wait()
    assert isinstance(end, m.RunFinished) and end.interrupted  # its end was recorded before the session closed


async def test_a_follower_whose_session_closes_without_an_end_gets_a_failure() -> None:
    provider = ScriptedProvider([text_turn(*["w "] * 100)], delay_s=0.01)
    async with running_kernel(provider) as kernel:
        async with await RunFollower.start(kernel, prompt("go")) as run:
            await run.next_batch()
            kernel.sessions["s"].hub.close()  # as if the session were gone mid-run
            end = await run.wait()
    assert isinstance(end, m.RunFailed) and end.error.code == "internal" and end.request_id == "r1"


def test_run_watch_picks_its_run_and_its_question() -> None:
    watch = RunWatch("mine")
    other = m.TextDelta(session_id="s", run_id="r0", request_id="theirs", text="x")
    started = m.RunStarted(session_id="s", run_id="r1", request_id="mine")
    ask = m.ToolApprovalRequested(session_id="s", run_id="r1", request_id="mine", call_id="c", name="t", arguments="{}")
    done = m.ToolResult(session_id="s", run_id="r1", request_id="mine", call_id="c", name="t", result="ok")
    end = m.RunFinished(session_id="s", run_id="r1", request_id="mine", text="")
    assert [watch.feed(e) for e in (other, started)] == [False, True] and watch.run_id == "r1"
    assert watch.feed(ask) and watch.question is ask
    assert watch.feed(done) and watch.question is None
    assert watch.feed(m.ContextCleared(session_id="s")) is False
    assert watch.feed(end) and watch.end is end
    assert watch.feed(m.TextDelta(session_id="s", run_id="r1", request_id="mine", text="late")) is False


# ------------------------------------------------------------------ backpressure


async def test_a_healthy_reader_gets_every_delta_of_a_burst() -> None:
    pieces = [f"w{i} " for i in range(300_000)]
    settings = Settings()
    settings.session.event_retention = 64  # far less than the answer: only backpressure saves it
    async with running_kernel(ScriptedProvider([text_turn(*pieces)]), settings=settings) as kernel:
        async with await RunFollower.start(kernel, prompt("go")) as run:
            texts: list[str] = []
            while run.end is None:
                texts += [e.text for e in await run.next_batch() if isinstance(e, m.TextDelta)]
        assert isinstance(run.end, m.RunFinished)
        assert "".join(texts) == "".join(pieces) == run.end.text


class _OnePerRound:
    """A model handing over one delta per scheduling round (one per upstream read)."""

    name = "per-round"
    model = "per-round-1"

    def __init__(self, pieces: list[str]) -> None:
        self.pieces = pieces

    async def stream(self, request: Any) -> Any:
        for piece in self.pieces:
            await anyio.lowlevel.checkpoint()
            yield TextChunk(piece)
        yield FinishChunk("stop")

    async def aclose(self) -> None:
        pass


async def test_a_streaming_writer_gathers_deltas_of_a_model_that_adds_one_per_round() -> None:
    """The first delta comes alone; later ones, each added in its own round, come
    several to a batch (fewer writes), all of them, in order."""
    pieces = [f"p{i} " for i in range(400)]
    async with running_kernel(_OnePerRound(pieces)) as kernel:
        async with await RunFollower.start(kernel, prompt("go")) as run:
            batches: list[list[str]] = []
            while run.end is None:
                batch = [e.text for e in await run.next_batch() if isinstance(e, m.TextDelta)]
                if batch:
                    batches.append(batch)
    assert "".join(t for b in batches for t in b) == "".join(pieces)
    assert batches[0] == [pieces[0]]
    assert len(batches) < 0.75 * len(pieces), len(batches)


async def test_a_reader_that_stops_is_cut_off_after_its_grace_and_the_run_goes_on() -> None:
    settings = Settings()
    settings.session.subscriber_buffer = 8
    settings.session.lag_grace_s = 0.2
    pieces = [f"w{i} " for i in range(2000)]
    provider = ScriptedProvider([[m_chunk(p) for p in pieces] + text_turn()[-2:]])
    agent = AgentSettings()
    async with running_kernel(provider, settings=settings, agent=agent) as kernel:
        stalled = await kernel.subscribe((await kernel.session("s")).id)
        async with await RunFollower.start(kernel, prompt("go")) as run:
            texts: list[str] = []
            while run.end is None:
                texts += [e.text for e in await run.next_batch() if isinstance(e, m.TextDelta | m.ReasoningDelta)]
        assert "".join(texts) == "".join(pieces)  # the healthy follower lost nothing
        kept = stalled.receive_nowait()
        assert isinstance(kept[-1], m.SubscriberLagged) and len(kept) <= settings.session.subscriber_buffer + 1


def m_chunk(text: str) -> Any:
    """Reasoning chunks do not merge: a stalled buffer really fills."""
    from kernel import ReasoningChunk

    return ReasoningChunk(text)


# ------------------------------------------------------------------ what clients list and show


class _Source:
    def __init__(self, *tools: Tool) -> None:
        self.offered = list(tools)

    def tools(self) -> list[Tool]:
        return self.offered


async def test_tool_sources_add_tools_to_a_session_and_to_every_session() -> None:
    session_tool = Tool(name="editor__terminal", description="runs a command", parameters={"type": "object"}, handler=_ok)
    global_tool = Tool(name="mcp__echo", description="echoes", parameters={"type": "object"}, handler=_ok)
    provider = ScriptedProvider([tool_turn("editor__terminal", "{}"), text_turn("after")])
    async with running_kernel(provider) as kernel:
        kernel.tool_sources = (_Source(global_tool),)
        await kernel.execute(m.OpenSession(session_id="s"))
        await kernel.execute(m.ConfigureSession(session_id="s", tool_sources=(_Source(session_tool),)))
        async with await RunFollower.start(kernel, prompt("go")) as run:
            events: list[m.Event] = []
            while run.end is None:
                events += await run.next_batch()
        offered = {spec.name for spec in provider.requests[0].tools}
        assert {"editor__terminal", "mcp__echo"} <= offered
        assert next(e for e in events if isinstance(e, m.ToolResult)).result == "done"
        listed = await kernel.execute(m.ListTools(session_id="s"))
        assert isinstance(listed, m.ToolList) and {"editor__terminal", "mcp__echo"} <= {t.name for t in listed.tools}
        other = await kernel.execute(m.ListTools())
        assert isinstance(other, m.ToolList) and "mcp__echo" in {t.name for t in other.tools}
        assert "editor__terminal" not in {t.name for t in other.tools}


async def test_a_session_is_titled_by_its_first_prompt_and_listed_with_it(tmp_path: Any) -> None:
    long = "Please summarise   the quarterly report\nand list every risk it mentions in detail, with owners"
    db = tmp_path / "g.db"
    async with running_kernel(ScriptedProvider([text_turn("ok")]), db_path=db) as kernel:
        async with await RunFollower.start(kernel, prompt(long)) as run:
            await run.wait()
        info = await kernel.execute(m.GetSession(session_id="s"))
        assert isinstance(info, m.SessionOpened) and info.session.title is not None
        assert info.session.title.startswith("Please summarise the quarterly report and list") and info.session.title.endswith("…")
        assert len(info.session.title) <= 60
        title = info.session.title
    async with running_kernel(ScriptedProvider([text_turn("ok")]), db_path=db) as kernel:
        listing = await kernel.execute(m.ListSessions())
        assert isinstance(listing, m.SessionList) and [s.title for s in listing.sessions] == [title]
        loaded = await kernel.execute(m.GetSession(session_id="s"))
        assert isinstance(loaded, m.SessionOpened) and loaded.session.title == title


async def test_who_follows_a_session_is_in_its_info_and_the_status() -> None:
    from kernel import Follower

    async with running_kernel() as kernel:
        await kernel.execute(m.OpenSession(session_id="s"))
        a = await Follower.open(kernel, "s", client="openfang")
        b = await Follower.open(kernel, "s", client="http")
        c = await Follower.open(kernel, "s", client="http")
        info = await kernel.execute(m.GetSession(session_id="s"))
        assert isinstance(info, m.SessionOpened) and info.session.clients == ("http", "openfang") and info.session.subscribers == 3
        status = await kernel.execute(m.GetStatus())
        assert isinstance(status, m.StatusReport) and status.clients == {"openfang": 1, "http": 2}
        for follower in (a, b, c):
            follower.close()
        info = await kernel.execute(m.GetSession(session_id="s"))
        assert isinstance(info, m.SessionOpened) and info.session.clients == ()


async def test_models_are_listed_configured_first() -> None:
    class Listing(ScriptedProvider):
        async def list_models(self) -> list[str]:
            return ["other-1", "scripted-1", "other-2"]

    async with running_kernel(ScriptedProvider()) as kernel:
        plain = await kernel.execute(m.ListModels())
        assert isinstance(plain, m.ModelList) and [x.id for x in plain.models] == ["scripted-1"]
    async with running_kernel(Listing()) as kernel:
        listed = await kernel.execute(m.ListModels())
        assert isinstance(listed, m.ModelList) and [x.id for x in listed.models] == ["scripted-1", "other-1", "other-2"]
        assert {x.provider for x in listed.models} == {"scripted"}


@pytest.mark.parametrize(
    ("prompt_text", "title"),
    [
        ("", None),
        (" \t\n\u3000", None),
        ("  one\u00a0two\x1cthree\n\nfour  ", "one two three four"),
        ("x" * 60, "x" * 60),  # exactly the limit: whole
        ("x" * 30 + " " + "y" * 29, "x" * 30 + " " + "y" * 29),
        ("x" * 30 + "    " + "y" * 30, "x" * 30 + " " + "y" * 28 + "…"),  # 61 once collapsed
        ("word " * 10_000, ("word " * 12).strip() + "…"),  # only the words the title needs are read
    ],
)
def test_a_title_is_the_prompt_on_one_line_cut_at_its_limit(prompt_text: str, title: str | None) -> None:
    from kernel.session import TITLE_CHARS, title_of

    assert title_of(m.Message(role="user", content=prompt_text)) == title
    assert title is None or len(title) <= TITLE_CHARS
