"""The run loop: streaming, tools, approval, limits, turn limit, interrupt, failures."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from kernel import KernelError, Tool, ToolFailure
from kernel import model as m
from kernel.provider import FinishChunk, TextChunk, ToolCallChunk
from kernel.settings import AgentSettings, Settings
from kernel.testing import (
    ScriptedProvider,
    failing_turn,
    running_kernel,
    text_turn,
    tool_turn,
)

from .helpers import kinds, next_of, prompt, run_events

pytestmark = pytest.mark.anyio


async def _clock(args: dict, ctx: object) -> str:
    return "12:00"


async def _boom(args: dict, ctx: object) -> str:
    raise ToolFailure("disk on fire")


CLOCK = Tool(name="clock", description="time", parameters={"type": "object"}, handler=_clock)
GUARDED = Tool(name="guarded", description="asks first", parameters={"type": "object"}, handler=_clock, requires_approval=True)
BOOM = Tool(name="boom", description="fails", parameters={"type": "object"}, handler=_boom)


async def test_plain_turn_streams_and_finishes() -> None:
    async with running_kernel(ScriptedProvider([text_turn("Hel", "lo")])) as kernel:
        session = await kernel.session("s")
        sub = session.hub.subscribe()
        accepted = await prompt(kernel, "s", "hi", request_id="r1")
        events = await run_events(sub)
        assert kinds(events)[0] == "run_started" and kinds(events)[-1] == "run_finished"
        assert all(e.request_id == "r1" and e.run_id == accepted.run_id for e in events)  # type: ignore[union-attr]
        finished = events[-1]
        assert isinstance(finished, m.RunFinished)
        assert finished.text == "Hello" and finished.usage == m.Usage(input_tokens=3, output_tokens=5)
        assert "".join(e.text for e in events if isinstance(e, m.TextDelta)) == "Hello"
        seqs = [e.seq for e in events]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        history = await kernel.execute(m.GetHistory(session_id="s"))
        assert [(x.role, x.content) for x in history.messages] == [("user", "hi"), ("assistant", "Hello")]  # type: ignore[union-attr]


@pytest.mark.parametrize("stream", [True, False])
async def test_a_streamed_runs_first_delta_is_handed_over_and_a_whole_answers_is_not(stream: bool) -> None:
    """Streamed, the run waits after its first delta until its waiting reader took it (the first
    token goes out before the rest is parsed); asked for whole (a non-stream request), it goes on
    at once and the reader takes the answer in one piece, without a round more before the end."""
    async with running_kernel(ScriptedProvider([text_turn("Hel", "lo")])) as kernel:
        sub = (await kernel.session("s")).hub.subscribe()
        got: list[m.Event] = []

        async def read() -> None:
            got.extend(await run_events(sub))

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(read)
            await anyio.lowlevel.checkpoint()  # the reader waits for the session's first event
            await prompt(kernel, "s", "hi", options=m.PromptOptions(stream=stream))
        assert [e.text for e in got if isinstance(e, m.TextDelta)] == (["Hel", "lo"] if stream else ["Hello"])
        assert isinstance(got[-1], m.RunFinished) and got[-1].text == "Hello"


async def test_tool_call_fragments_are_assembled_and_result_fed_back() -> None:
    provider = ScriptedProvider([tool_turn("clock", '{"tz": "UTC"}'), text_turn("noon")])
    async with running_kernel(provider, tools=[CLOCK]) as kernel:
        sub = (await kernel.session("s")).hub.subscribe()
        await prompt(kernel, "s", "time?")
        events = await run_events(sub)
        call = next(e for e in events if isinstance(e, m.ToolCallStarted))
        result = next(e for e in events if isinstance(e, m.ToolResult))
        assert (call.name, call.arguments, call.call_id) == ("clock", '{"tz": "UTC"}', "call_1")
        assert (result.result, result.is_error) == ("12:00", False)
        second = provider.requests[1].messages
        assert second[-2].tool_calls[0].name == "clock" and second[-1].role == "tool" and second[-1].content == "12:00"
        assert isinstance(events[-1], m.RunFinished) and events[-1].tool_calls == 1


async def test_several_tool_calls_by_index_and_interleaved_fragments() -> None:
    turn = [
        ToolCallChunk(index=0, id="a", name="clock", arguments='{"x"'),
        ToolCallChunk(index=1, id="b", name="clock", arguments="{}"),
        ToolCallChunk(index=0, arguments=": 1}"),
        FinishChunk("tool_calls"),
    ]
    provider = ScriptedProvider([turn, text_turn("done")])
    async with running_kernel(provider, tools=[CLOCK]) as kernel:
        sub = (await kernel.session("s")).hub.subscribe()
        await prompt(kernel, "s", "two")
        events = await run_events(sub)
        calls = [e for e in events if isinstance(e, m.ToolCallStarted)]
        assert [(c.call_id, c.arguments) for c in calls] == [("a", '{"x": 1}'), ("b", "{}")]


async def test_failing_tool_and_unknown_tool_and_bad_arguments_reach_the_model() -> None:
    turn = [
        ToolCallChunk(index=0, id="a", name="boom", arguments="{}"),
        ToolCallChunk(index=1, id="b", name="nope", arguments="{}"),
        ToolCallChunk(index=2, id="c", name="clock", arguments="[not json"),
        FinishChunk("tool_calls"),
    ]
    async with running_kernel(ScriptedProvider([turn, text_turn("ok")]), tools=[CLOCK, BOOM]) as kernel:
        sub = (await kernel.session("s")).hub.subscribe()
        await prompt(kernel, "s", "go")
        results = {e.call_id: e for e in await run_events(sub) if isinstance(e, m.ToolResult)}
        assert results["a"].is_error and "disk on fire" in results["a"].result
        assert results["b"].rejected and "unknown tool" in results["b"].result
        assert results["c"].is_error and "invalid arguments" in results["c"].result


async def test_per_run_tool_limits_reject_and_reset_each_prompt() -> None:
    tool = Tool(name="recall", description="", parameters={}, handler=_clock, category="memory", access="query")
    turn = [ToolCallChunk(index=i, id=f"c{i}", name="recall", arguments="{}") for i in range(3)] + [FinishChunk("tool_calls")]
    settings = Settings()
    settings.tools.limits["memory_query_max"] = 2
    provider = ScriptedProvider([turn, text_turn("a"), turn, text_turn("b")])
    async with running_kernel(provider, tools=[tool], settings=settings) as kernel:
        sub = (await kernel.session("s")).hub.subscribe()
        for _ in range(2):
            await prompt(kernel, "s", "recall")
            events = await run_events(sub)
            results = [e for e in events if isinstance(e, m.ToolResult)]
            assert [r.rejected for r in results] == [False, False, True]
            assert results[2].result.startswith("tool call rejected: memory query limit")
            finished = events[-1]
            assert isinstance(finished, m.RunFinished) and finished.rejected_tools == (("recall", results[2].result),)
        direct = await kernel.execute(m.ExecuteTool(session_id="s", name="recall"))
        assert isinstance(direct, m.ToolOutput) and direct.result == "12:00"


async def test_max_tool_iterations_stops_the_run() -> None:
    agent = AgentSettings(max_tool_iterations=2)
    async with running_kernel(ScriptedProvider([tool_turn("clock")]), tools=[CLOCK], agent=agent) as kernel:
        sub = (await kernel.session("s")).hub.subscribe()
        await prompt(kernel, "s", "loop")
        events = await run_events(sub)
        assert isinstance(events[-1], m.RunFinished) and events[-1].stop_reason == "tool_iterations"
        assert sum(isinstance(e, m.ToolResult) for e in events) == 3


@pytest.mark.parametrize("approved", [True, False])
async def test_tool_approval_approve_and_reject(approved: bool) -> None:
    provider = ScriptedProvider([tool_turn("guarded", call_id="g1"), text_turn("after")])
    async with running_kernel(provider, tools=[GUARDED]) as kernel:
        session = await kernel.session("s")
        sub = session.hub.subscribe()
        await prompt(kernel, "s", "do it")
        asked = await next_of(sub, m.ToolApprovalRequested)
        assert asked.call_id == "g1" and session.state == "awaiting_tool_approval"
        with pytest.raises(KernelError):
            await kernel.execute(m.ResolveTurnLimit(session_id="s", confirmed=True))
        await kernel.execute(m.ResolveToolApproval(session_id="s", call_id="g1", approved=approved, reason="nope"))
        events = await run_events(sub)
        result = next(e for e in events if isinstance(e, m.ToolResult))
        assert result.rejected is (not approved)
        if not approved:
            assert "declined" in result.result and "nope" in result.result
        assert isinstance(events[-1], m.RunFinished) and events[-1].text == "after"


async def test_per_request_ask_before_tool_execution_and_remembered_answer() -> None:
    provider = ScriptedProvider([tool_turn("clock"), text_turn("x"), tool_turn("clock"), text_turn("y")])
    async with running_kernel(provider, tools=[CLOCK]) as kernel:
        sub = (await kernel.session("s")).hub.subscribe()
        await prompt(kernel, "s", "a", options=m.PromptOptions(ask_before_tool_execution=True))
        await next_of(sub, m.ToolApprovalRequested)
        await kernel.execute(m.ResolveToolApproval(session_id="s", approved=True, remember=True))
        await run_events(sub)
        await prompt(kernel, "s", "b", options=m.PromptOptions(ask_before_tool_execution=True))
        events = await run_events(sub)
        assert not any(isinstance(e, m.ToolApprovalRequested) for e in events)


async def test_approval_timeout_is_a_rejection() -> None:
    settings = Settings()
    settings.session.approval_timeout_s = 0.1
    async with running_kernel(ScriptedProvider([tool_turn("guarded"), text_turn("z")]), tools=[GUARDED], settings=settings) as kernel:
        sub = (await kernel.session("s")).hub.subscribe()
        await prompt(kernel, "s", "go")
        events = await run_events(sub)
        result = next(e for e in events if isinstance(e, m.ToolResult))
        assert result.rejected and "timed out" in result.result


async def test_interrupt_while_awaiting_approval_finishes_interrupted_once() -> None:
    async with running_kernel(ScriptedProvider([tool_turn("guarded")]), tools=[GUARDED]) as kernel:
        sub = (await kernel.session("s")).hub.subscribe()
        await prompt(kernel, "s", "go")
        await next_of(sub, m.ToolApprovalRequested)
        await kernel.execute(m.Interrupt(session_id="s"))
        events = await run_events(sub)
        ends = [e for e in events if isinstance(e, m.RUN_END_EVENTS)]
        assert len(ends) == 1 and isinstance(ends[0], m.RunFinished) and ends[0].interrupted
        history = await kernel.execute(m.GetHistory(session_id="s"))
        roles = [x.role for x in history.messages]  # type: ignore[union-attr]
        assert roles == ["user", "assistant", "tool"]  # the tool call is answered, history stays well-formed


async def test_interrupt_before_first_delta_and_mid_stream_keep_partial_text() -> None:
    provider = ScriptedProvider([text_turn("one ", "two ", "three ", "four")], delay_s=0.05)
    async with running_kernel(provider) as kernel:
        sub = (await kernel.session("s")).hub.subscribe()
        await prompt(kernel, "s", "a")
        await next_of(sub, m.RunStarted)
        await kernel.execute(m.Interrupt(session_id="s"))
        events = await run_events(sub)
        assert isinstance(events[-1], m.RunFinished) and events[-1].interrupted and events[-1].stop_reason == "interrupted"
        await prompt(kernel, "s", "b")
        await next_of(sub, m.TextDelta)
        await kernel.execute(m.Interrupt(session_id="s"))
        events = await run_events(sub)
        finished = events[-1]
        assert isinstance(finished, m.RunFinished) and finished.interrupted and finished.text.startswith("one")
        assert provider.closed_streams == 2
        with pytest.raises(KernelError, match="No active model output"):
            await kernel.execute(m.Interrupt(session_id="s"))
        history = await kernel.execute(m.GetHistory(session_id="s"))
        assert history.messages[-1].role == "assistant" and history.messages[-1].content == finished.text  # type: ignore[union-attr]


async def test_two_prompts_back_to_back_queue_in_order() -> None:
    async with running_kernel(ScriptedProvider([text_turn("x")], delay_s=0.01)) as kernel:
        sub = (await kernel.session("s")).hub.subscribe()
        first = await prompt(kernel, "s", "1", request_id="a")
        second = await prompt(kernel, "s", "2", request_id="b")
        assert not first.queued and second.queued
        events = await run_events(sub, second.run_id)
        starts = [e.request_id for e in events if isinstance(e, m.RunStarted)]
        assert starts == ["a", "b"]


async def test_full_inbox_answers_busy() -> None:
    settings = Settings()
    settings.session.inbox_size = 2
    async with running_kernel(ScriptedProvider([text_turn("x")], delay_s=0.2), settings=settings) as kernel:
        await prompt(kernel, "s", "1")
        await anyio.sleep(0.05)
        await prompt(kernel, "s", "2")
        await prompt(kernel, "s", "3")
        with pytest.raises(KernelError) as info:
            await prompt(kernel, "s", "4")
        assert info.value.code == "busy"


@pytest.mark.parametrize("confirm", [True, False])
async def test_turn_limit_confirm_and_decline(confirm: bool) -> None:
    agent = AgentSettings(max_turns=1)
    provider = ScriptedProvider([tool_turn("clock"), text_turn("end")])
    async with running_kernel(provider, tools=[CLOCK], agent=agent) as kernel:
        session = await kernel.session("s")
        sub = session.hub.subscribe()
        await prompt(kernel, "s", "go", request_id="orig")
        reached = await next_of(sub, m.TurnLimitReached)
        assert (reached.current_turns, reached.max_turns, reached.request_id) == (1, 1, "orig")
        assert session.state == "awaiting_turn_confirmation"
        await kernel.execute(m.ResolveTurnLimit(session_id="s", confirmed=confirm))
        events = await run_events(sub)
        finished = events[-1]
        assert isinstance(finished, m.RunFinished) and finished.request_id == "orig"
        assert finished.stop_reason == ("end_turn" if confirm else "turn_limit")
        assert finished.text == ("end" if confirm else "")


@pytest.mark.parametrize(
    ("code", "status"), [("rate_limited", 429), ("provider_error", 500), ("timeout", None)]
)
async def test_provider_errors_fail_the_run_not_the_session(code: str, status: int | None) -> None:
    provider = ScriptedProvider([[TextChunk("part"), *failing_turn("upstream said no", code=code, status=status or 0)], text_turn("fine")])
    async with running_kernel(provider) as kernel:
        sub = (await kernel.session("s")).hub.subscribe()
        await prompt(kernel, "s", "a")
        events = await run_events(sub)
        failed = events[-1]
        assert isinstance(failed, m.RunFailed) and failed.error.code == code and "upstream said no" in failed.error.message
        await prompt(kernel, "s", "b")
        events = await run_events(sub)
        assert isinstance(events[-1], m.RunFinished) and events[-1].text == "fine"
        history = await kernel.execute(m.GetHistory(session_id="s"))
        assert [x.content for x in history.messages] == ["a", "b", "fine"]  # type: ignore[union-attr]


async def test_unexpected_provider_exception_is_internal_error() -> None:
    async with running_kernel(ScriptedProvider([[RuntimeError("bug")]])) as kernel:
        sub = (await kernel.session("s")).hub.subscribe()
        await prompt(kernel, "s", "a")
        events = await run_events(sub)
        assert isinstance(events[-1], m.RunFailed) and events[-1].error.code == "internal"


async def test_regenerate_replaces_the_last_answer() -> None:
    provider = ScriptedProvider([text_turn("first"), text_turn("second")])
    async with running_kernel(provider) as kernel:
        sub = (await kernel.session("s")).hub.subscribe()
        await prompt(kernel, "s", "q")
        await run_events(sub)
        await kernel.execute(m.Regenerate(session_id="s", request_id="re"))
        events = await run_events(sub)
        assert isinstance(events[0], m.RunStarted) and events[0].regenerate
        assert isinstance(events[-1], m.RunFinished) and events[-1].text == "second"
        assert [x.content for x in provider.requests[1].messages[1:]] == ["q"]
        history = await kernel.execute(m.GetHistory(session_id="s"))
        assert [x.content for x in history.messages] == ["q", "second"]  # type: ignore[union-attr]


async def test_regenerate_without_history_fails_clearly() -> None:
    async with running_kernel() as kernel:
        sub = (await kernel.session("s")).hub.subscribe()
        await kernel.execute(m.Regenerate(session_id="s"))
        events = await run_events(sub)
        assert isinstance(events[-1], m.RunFailed) and events[-1].error.code == "invalid_request"


async def test_clear_context_resets_context_and_turns() -> None:
    provider = ScriptedProvider([text_turn("a")])
    async with running_kernel(provider) as kernel:
        session = await kernel.session("s")
        sub = session.hub.subscribe()
        await prompt(kernel, "s", "q")
        await run_events(sub)
        reply = await kernel.execute(m.ClearContext(session_id="s", request_id="c"))
        assert isinstance(reply, m.Done)
        assert isinstance(await next_of(sub, m.ContextCleared), m.ContextCleared)
        assert session.context == [] and session.turns == 0
        await prompt(kernel, "s", "again")
        await run_events(sub)
        assert [x.role for x in provider.requests[-1].messages] == ["system", "user"]


async def test_options_override_system_prompt_context_window_and_tools() -> None:
    provider = ScriptedProvider([text_turn("a")])
    async with running_kernel(provider, tools=[CLOCK]) as kernel:
        sub = (await kernel.session("s")).hub.subscribe()
        for text in ("1", "2", "3"):
            await prompt(kernel, "s", text)
            await run_events(sub)
        options = m.PromptOptions(system_prompt="be terse", max_context_messages=3, use_tools=False, max_tokens=7)
        await prompt(kernel, "s", "4", options=options)
        await run_events(sub)
        request = provider.requests[-1]
        assert request.messages[0].content == "be terse" and len(request.messages) == 4
        assert request.tools == () and request.max_tokens == 7


async def test_image_and_file_parts_reach_the_provider() -> None:
    provider = ScriptedProvider([text_turn("seen")])
    async with running_kernel(provider) as kernel:
        sub = (await kernel.session("s")).hub.subscribe()
        parts = (m.TextPart("look"), m.ImagePart(b"\x89PNG", "image/png"), m.FilePart(name="a.txt", data=b"hello"))
        await kernel.execute(m.Prompt(session_id="s", parts=parts))
        await run_events(sub)
        user = provider.requests[0].messages[-1]
        assert isinstance(user.parts[1], m.ImagePart)
        assert isinstance(user.parts[2], m.TextPart) and "a.txt" in user.parts[2].text and "hello" in user.parts[2].text


async def test_empty_prompt_is_rejected() -> None:
    async with running_kernel() as kernel:
        with pytest.raises(KernelError) as info:
            await kernel.execute(m.Prompt(session_id="s"))
        assert info.value.code == "invalid_request"


async def test_remembered_rejection_applies_without_asking() -> None:
    provider = ScriptedProvider([tool_turn("guarded"), text_turn("x"), tool_turn("guarded"), text_turn("y")])
    async with running_kernel(provider, tools=[GUARDED]) as kernel:
        sub = (await kernel.session("s")).hub.subscribe()
        await prompt(kernel, "s", "a")
        await next_of(sub, m.ToolApprovalRequested)
        await kernel.execute(m.ResolveToolApproval(session_id="s", approved=False, remember=True))
        await run_events(sub)
        await prompt(kernel, "s", "b")
        events = await run_events(sub)
        assert not any(isinstance(e, m.ToolApprovalRequested) for e in events)
        result = next(e for e in events if isinstance(e, m.ToolResult))
        assert result.rejected and "declined" in result.result


async def test_client_tools_end_the_run_and_continue_resumes_with_results() -> None:
    turn = [
        ToolCallChunk(index=0, id="srv", name="clock", arguments="{}"),
        ToolCallChunk(index=1, id="cli", name="lookup", arguments='{"q": "x"}'),
        FinishChunk("tool_calls"),
    ]
    provider = ScriptedProvider([turn, text_turn("final")])
    lookup = m.ClientTool(name="lookup", description="client side", parameters={"type": "object"})
    async with running_kernel(provider, tools=[CLOCK]) as kernel:
        sub = (await kernel.session("s")).hub.subscribe()
        await prompt(kernel, "s", "q", options=m.PromptOptions(client_tools=(lookup,)))
        events = await run_events(sub)
        assert {t.name for t in provider.requests[0].tools} == {"clock", "lookup"}
        finished = events[-1]
        assert isinstance(finished, m.RunFinished) and finished.stop_reason == "tool_calls"
        assert [c.id for c in finished.pending_tool_calls] == ["cli"]
        assert [e.call_id for e in events if isinstance(e, m.ToolResult)] == ["srv"]  # only the agent's tool ran
        await kernel.execute(m.SaveHistory(session_id="s", messages=(m.Message(role="tool", tool_call_id="cli", name="lookup", content="42"),)))
        await kernel.execute(m.Continue(session_id="s", request_id="c"))
        events = await run_events(sub)
        assert isinstance(events[-1], m.RunFinished) and events[-1].text == "final"
        sent = provider.requests[1].messages
        assert [x.role for x in sent[1:]] == ["user", "assistant", "tool", "tool"]
        assert sent[-1].content == "42"


async def test_unanswered_tool_calls_get_an_explicit_result_before_the_next_prompt() -> None:
    turn = [ToolCallChunk(index=0, id="cli", name="lookup", arguments="{}"), FinishChunk("tool_calls")]
    provider = ScriptedProvider([turn, text_turn("ok")])
    lookup = m.ClientTool(name="lookup")
    async with running_kernel(provider) as kernel:
        sub = (await kernel.session("s")).hub.subscribe()
        await prompt(kernel, "s", "a", options=m.PromptOptions(client_tools=(lookup,), use_tools=False))
        await run_events(sub)
        await prompt(kernel, "s", "b")
        await run_events(sub)
        sent = provider.requests[1].messages
        assert [x.role for x in sent[1:]] == ["user", "assistant", "tool", "user"]
        assert "not answered" in sent[3].content


async def test_continue_on_an_empty_session_fails_clearly() -> None:
    async with running_kernel() as kernel:
        sub = (await kernel.session("s")).hub.subscribe()
        await kernel.execute(m.Continue(session_id="s"))
        events = await run_events(sub)
        assert isinstance(events[-1], m.RunFailed) and "nothing to continue" in events[-1].error.message


async def test_interrupt_by_run_id() -> None:
    async with running_kernel(ScriptedProvider([text_turn(*["x "] * 50)], delay_s=0.02)) as kernel:
        sub = (await kernel.session("s")).hub.subscribe()
        accepted = await prompt(kernel, "s", "go")
        await next_of(sub, m.TextDelta)
        with pytest.raises(KernelError, match="is not running"):
            await kernel.execute(m.Interrupt(session_id="s", run_id="other"))
        await kernel.execute(m.Interrupt(session_id="s", run_id=accepted.run_id))
        events = await run_events(sub)
        assert isinstance(events[-1], m.RunFinished) and events[-1].interrupted


async def test_delete_during_a_run_leaves_no_orphans() -> None:
    async with running_kernel(ScriptedProvider([text_turn(*["x "] * 50)], delay_s=0.02), tools=[CLOCK]) as kernel:
        sub = (await kernel.session("s")).hub.subscribe()
        await prompt(kernel, "s", "go")
        await next_of(sub, m.TextDelta)
        await kernel.execute(m.DeleteSession(session_id="s"))
        assert await kernel.store.load_messages("s") == [] and await kernel.store.get_session("s") is None
        direct = await kernel.execute(m.ExecuteTool(name="clock"))
        assert isinstance(direct, m.ToolOutput)
        assert await kernel.store.list_sessions() == []


async def test_context_tokens_is_the_last_call_and_session_usage_accumulates() -> None:
    provider = ScriptedProvider([tool_turn("clock"), text_turn("done", usage=(30, 2)), text_turn("again", usage=(40, 3))])
    async with running_kernel(provider, tools=[CLOCK]) as kernel:
        session = await kernel.session("s")
        sub = session.hub.subscribe()
        await prompt(kernel, "s", "a")
        first = (await run_events(sub))[-1]
        assert isinstance(first, m.RunFinished)
        assert first.usage == m.Usage(input_tokens=34, output_tokens=4) and first.context_tokens == 30
        await prompt(kernel, "s", "b")
        await run_events(sub)
        assert session.info().usage == m.Usage(input_tokens=74, output_tokens=7)
