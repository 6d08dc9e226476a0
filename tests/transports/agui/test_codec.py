"""The pure AG-UI codec: run input -> kernel commands, kernel events -> AG-UI events.

Inputs are built with ag-ui-protocol's own models and every emitted event is parsed by
them. The encoder is fuzzed: whatever a kernel run does, its stream satisfies the rules
the client's verifier enforces, and a client that reconnects after any event (or in the
middle of what one kernel event became) ends up with exactly what it would have had.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import msgspec
from ag_ui.core import AssistantMessage, Context, FunctionCall, RunAgentInput, SystemMessage, Tool, ToolCall, ToolMessage, UserMessage
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel import model as m
from transports.agui import codec, wire
from transports.agui.events import RunEncoder, RunIndex, RunRecord, Segment, snapshot_messages

from ._helpers import protocol_events

# ---------------------------------------------------------------- run input


def _input(messages: list[Any], **extra: Any) -> wire.RunAgentInput:
    fields: dict[str, Any] = {"state": {}, "tools": [], "context": [], "forwarded_props": {}, **extra}
    model = RunAgentInput(thread_id="thread-1", run_id="run-1", messages=messages, **fields)
    decoded = codec.decode_input(model.model_dump_json(by_alias=True).encode())
    assert isinstance(decoded, wire.RunAgentInput), decoded
    return decoded


def _plan(messages: list[Any], history: list[m.Message] | None = None, **extra: Any) -> codec.RunPlan:
    plan = codec.plan_run(_input(messages, **extra), history or [], agent_prompt="Be kind.")
    assert isinstance(plan, codec.RunPlan), plan
    return plan


def test_a_new_user_turn_is_a_prompt_and_its_predecessors_seed_a_new_thread() -> None:
    messages = [UserMessage(id="u1", content="a"), AssistantMessage(id="a1", content="b"), UserMessage(id="u2", content="c")]
    plan = _plan(messages)
    assert plan.kind == "prompt" and plan.prompt == (m.TextPart("c"),)
    assert [(msg.role, msg.content) for msg in plan.save] == [("user", "a"), ("assistant", "b")]
    known = _plan(messages, history=[m.Message(role="user", content="a"), m.Message(role="assistant", content="b")])
    assert known.kind == "prompt" and known.save == ()  # the thread's own history wins


def test_system_messages_and_context_extend_the_agents_prompt_and_tools_are_the_clients() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    plan = _plan(
        [SystemMessage(id="s", content="Be brief."), UserMessage(id="u", content="hi")],
        context=[Context(description="user", value="Ada")],
        tools=[Tool(name="weather", description="look up", parameters=schema)],
    )
    assert plan.options.system_prompt == "Be kind.\n\nBe brief.\n\nContext from the application:\n- user: Ada"
    assert plan.options.client_tools == (m.ClientTool(name="weather", description="look up", parameters=schema),)
    assert _plan([UserMessage(id="u", content="hi")]).options.system_prompt is None  # the agent's own


def test_tool_results_for_the_clients_calls_continue_the_run() -> None:
    call = ToolCall(id="c1", type="function", function=FunctionCall(name="weather", arguments="{}"))
    history = [m.Message(role="user", content="w?"), m.Message(role="assistant", tool_calls=(m.ToolCall(id="c1", name="weather", arguments="{}"),))]
    messages = [UserMessage(id="u", content="w?"), AssistantMessage(id="a", tool_calls=[call]), ToolMessage(id="t", tool_call_id="c1", content="sunny")]
    plan = _plan(messages, history=history)
    assert plan.kind == "continue"
    assert plan.save == (m.Message(role="tool", content="sunny", tool_call_id="c1", name="weather", outcome="ok"),)
    save, command = codec.run_commands(plan, "thread-1", "run-1")
    assert isinstance(save, m.SaveHistory) and isinstance(command, m.Continue) and command.request_id == "run-1"
    answered = [*history, *plan.save]
    assert _plan(messages, history=answered).kind == "sync"  # nothing new: already answered
    stray = _plan_error([*messages[:2], ToolMessage(id="t", tool_call_id="zz", content="?")], history)
    assert stray.status == 400 and "zz" in stray.message


def _plan_error(messages: list[Any], history: list[m.Message]) -> codec.AguiError:
    error = codec.plan_run(_input(messages), history, agent_prompt="")
    assert isinstance(error, codec.AguiError)
    return error


def test_a_turn_the_kernel_holds_unanswered_is_retried_not_repeated() -> None:
    history = [m.Message(role="user", content="hi")]
    assert _plan([UserMessage(id="u", content="hi")], history=history).kind == "continue"
    again = _plan([UserMessage(id="u", content="hi"), UserMessage(id="u2", content="hi")], history=history)
    assert again.kind == "prompt" and again.prompt == (m.TextPart("hi"),)  # said twice on purpose


def test_resume_answers_the_open_question_only() -> None:
    info = m.SessionInfo(session_id="thread-1", agent_id="a", state="awaiting_tool_approval", run_id="k", pending_call_id="c1")
    interrupt = codec.approval_interrupt_id(7, "c1")
    assert codec.interrupt_seq(interrupt) == 7

    def resume(**entry: Any) -> codec.ResumePlan | codec.AguiError:
        return codec.plan_resume(_input([], resume=[{"interruptId": interrupt, "status": "resolved", **entry}]), info)

    approved = resume(payload={"approved": True, "remember": True})
    assert isinstance(approved, codec.ResumePlan) and approved.answer == m.ResolveToolApproval(session_id="thread-1", call_id="c1", approved=True, remember=True)
    declined = resume(payload=False)
    assert isinstance(declined, codec.ResumePlan) and isinstance(declined.answer, m.ResolveToolApproval) and not declined.answer.approved
    cancelled = codec.plan_resume(_input([], resume=[{"interruptId": interrupt, "status": "cancelled"}]), info)
    assert isinstance(cancelled, codec.ResumePlan) and cancelled.answer.reason == "cancelled by the user"
    wrong = codec.plan_resume(_input([], resume=[{"interruptId": codec.approval_interrupt_id(7, "c2"), "status": "resolved"}]), info)
    assert isinstance(wrong, codec.AguiError) and wrong.status == 409
    turns = m.SessionInfo(session_id="thread-1", agent_id="a", state="awaiting_turn_confirmation", run_id="k")
    limit = codec.plan_resume(_input([], resume=[{"interruptId": codec.turn_limit_interrupt_id(9), "status": "resolved"}]), turns)
    assert isinstance(limit, codec.ResumePlan) and limit.answer == m.ResolveTurnLimit(session_id="thread-1", confirmed=True)
    bad = resume(payload={"approved": True, "extra": 1})
    assert isinstance(bad, codec.AguiError) and bad.status == 400


def test_last_event_ids() -> None:
    assert codec.resume_after(None) is None and codec.resume_after(" ") is None and codec.resume_after("12") == 12
    assert isinstance(codec.resume_after("x"), codec.AguiError) and isinstance(codec.resume_after("-1"), codec.AguiError)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.binary(max_size=400), st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8), lambda c: st.lists(c, max_size=4) | st.dictionaries(st.sampled_from(["threadId", "runId", "messages", "role", "content", "id", "resume", "tools", "type", "source"]), c, max_size=5)).map(lambda v: json.dumps(v).encode())))
def test_no_input_makes_the_codec_raise(raw: bytes) -> None:
    decoded = codec.decode_input(raw)
    if isinstance(decoded, codec.AguiError):
        protocol_events([msgspec.json.encode(decoded.body())])
        return
    planned = codec.plan_run(decoded, [], agent_prompt="")
    assert isinstance(planned, (codec.RunPlan, codec.AguiError))
    info = m.SessionInfo(session_id=decoded.thread_id, agent_id="a", state="awaiting_tool_approval", run_id="k", pending_call_id="c")
    assert isinstance(codec.plan_resume(decoded, info), (codec.ResumePlan, codec.AguiError))


def test_the_event_modules_load_no_server() -> None:
    code = "import sys; import transports.agui.events, transports.agui.codec; print(sorted({'anyio', 'hypercorn', 'trio'} & set(sys.modules)))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "[]"


# ---------------------------------------------------------------- kernel events out


class _Run:
    """Builds one kernel run's events with rising seqs (and another run's, interleaved)."""

    def __init__(self) -> None:
        self.events: list[m.Event] = []

    def add(self, cls: type[Any], run_id: str = "k1", **fields: Any) -> Any:
        event = cls(session_id="thread-1", run_id=run_id, request_id="r", seq=len(self.events) + 1, **fields)
        self.events.append(event)
        return event


def _record() -> RunRecord:
    return RunRecord("thread-1", "k1", Segment(run_id="run-1", parent_run_id="parent"), after_seq=0)


def _frames(events: list[m.Event], record: RunRecord | None = None, after: int | None = None) -> list[tuple[bytes, str | None]]:
    return RunEncoder(record or _record(), after=after).feed(events)


def _types(frames: list[tuple[bytes, str | None]]) -> list[str]:
    return [event.type.value for event in protocol_events([data for data, _ in frames])]


def test_an_approval_splits_one_kernel_run_into_two_agui_runs() -> None:
    run = _Run()
    run.add(m.RunStarted)
    run.add(m.TurnStarted, turn=1)
    run.add(m.TextDelta, text="Let me.")
    run.add(m.ToolCallStarted, call_id="c1", name="danger", arguments="{}", needs_approval=True)
    asked = run.add(m.ToolApprovalRequested, call_id="c1", name="danger", arguments="{}", timeout_s=30.0)
    run.add(m.ToolResult, call_id="c1", name="danger", result="done")
    run.add(m.TurnStarted, turn=2)
    run.add(m.TextDelta, text="Done.")
    run.add(m.RunFinished, text="Let me.Done.", usage=m.Usage(input_tokens=1, output_tokens=2))
    record = _record()
    record.resumed[codec.approval_interrupt_id(asked.seq, "c1")] = Segment(run_id="run-2")
    frames = _frames(run.events, record)
    assert _types(frames) == [
        "RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "TOOL_CALL_START", "TOOL_CALL_ARGS",
        "TOOL_CALL_END", "RUN_FINISHED", "RUN_STARTED", "TOOL_CALL_RESULT", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END", "RUN_FINISHED",
    ]
    events = [json.loads(data) for data, _ in frames]
    assert events[0] == {"type": "RUN_STARTED", "threadId": "thread-1", "runId": "run-1", "protocolVersion": "1.0", "parentRunId": "parent"}
    interrupt = events[7]["outcome"]["interrupts"][0]
    assert interrupt["id"] == "approval:5:c1" and interrupt["toolCallId"] == "c1" and interrupt["metadata"]["timeoutS"] == 30.0
    assert events[8]["runId"] == "run-2" and events[-1]["runId"] == "run-2"
    assert events[4]["parentMessageId"] == events[1]["messageId"]  # the call belongs to the turn's message
    assert [event_id for _, event_id in frames] == ["1", None, "3", None, None, "4", None, "5", None, "6", None, "8", None, "9"]


def test_client_tools_reasoning_cancellation_and_failure() -> None:
    run = _Run()
    run.add(m.RunStarted)
    run.add(m.TurnStarted, turn=1)
    run.add(m.ReasoningDelta, text="hmm")
    run.add(m.ToolCallStarted, call_id="w1", name="weather", arguments='{"city":"Oslo"}', category="client")
    run.add(m.RunFinished, text="", stop_reason="tool_calls", pending_tool_calls=(m.ToolCall(id="w1", name="weather", arguments="{}"),))
    events = [json.loads(data) for data, _ in _frames(run.events)]
    assert [e["type"] for e in events][1:4] == ["REASONING_START", "REASONING_MESSAGE_START", "REASONING_MESSAGE_CONTENT"]
    assert events[-1]["outcome"] == {"type": "success", "pendingToolCallIds": ["w1"]} and events[-1]["result"] == {"stopReason": "tool_calls"}
    stopped = _Run()
    stopped.add(m.RunStarted)
    stopped.add(m.TextDelta, text="part")
    stopped.add(m.RunFinished, text="part", interrupted=True, stop_reason="interrupted")
    assert json.loads(_frames(stopped.events)[-1][0])["outcome"] == {"type": "cancelled"}
    failed = _Run()
    failed.add(m.RunStarted)
    failed.add(m.RunFailed, error=m.ErrorInfo(code="provider_error", message="boom"))
    assert json.loads(_frames(failed.events)[-1][0]) == {"type": "RUN_ERROR", "message": "boom", "code": "provider_error"}


def test_snapshots_and_the_index() -> None:
    history = [
        m.Message(role="user", parts=(m.TextPart("look"), m.ImagePart(data=b"img"), m.FilePart(name="a.txt", data=b"txt"))),
        m.Message(role="assistant", tool_calls=(m.ToolCall(id="c", name="t", arguments="{}"),)),
        m.Message(role="tool", tool_call_id="c", content="no", outcome="rejected"),
    ]
    encoder = RunEncoder(_record())
    frames = encoder.sync(snapshot_messages("thread-1", history))
    assert _types(frames) == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"] and encoder.ended
    messages = json.loads(frames[1][0])["messages"]
    assert [msg["role"] for msg in messages] == ["user", "assistant", "tool"] and messages[2]["error"] == "rejected"
    assert [part["type"] for part in messages[0]["content"]] == ["text", "image", "document"]
    index = RunIndex(max_threads=2)
    for thread in ("a", "b", "c"):
        index.remember(RunRecord(thread, "k", Segment(run_id="r"), after_seq=0))
    assert index.latest("a") is None and index.latest("c") is not None


# ---------------------------------------------------------------- the encoder, fuzzed


@st.composite
def kernel_runs(draw: st.DrawFn) -> tuple[list[m.Event], RunRecord]:
    run, record = _Run(), _record()
    text = st.text(min_size=1, max_size=4)
    run.add(m.RunStarted)
    turns = draw(st.integers(1, 3))
    for turn in range(turns):
        if draw(st.booleans()) and turn:
            run.add(m.TurnLimitReached, current_turns=turn, max_turns=turn)
        run.add(m.TurnStarted, turn=turn + 1)
        for kind in draw(st.lists(st.sampled_from(["text", "reasoning", "other run"]), max_size=5)):
            if kind == "other run":
                run.add(m.TextDelta, run_id="k0", text="not ours")
            else:
                run.add(m.TextDelta if kind == "text" else m.ReasoningDelta, text=draw(text))
        last = turn == turns - 1
        for i in range(draw(st.integers(0, 2))):
            call = f"c{turn}{i}"
            run.add(m.ToolCallStarted, call_id=call, name="tool", arguments=draw(st.sampled_from(["", "{}", '{"a":1}'])))
            if last and draw(st.booleans()):
                continue  # a client tool: no result
            if draw(st.booleans()):
                asked = run.add(m.ToolApprovalRequested, call_id=call, name="tool", arguments="{}")
                if draw(st.booleans()):
                    record.resumed[codec.approval_interrupt_id(asked.seq, call)] = Segment(run_id=f"resumed-{call}")
            run.add(m.ToolResult, call_id=call, name="tool", result=draw(text))
    end = draw(st.sampled_from(["finished", "interrupted", "failed", "still running"]))
    if end == "failed":
        run.add(m.RunFailed, error=m.ErrorInfo(code="provider_error", message="boom"))
    elif end != "still running":
        run.add(m.RunFinished, text="", interrupted=end == "interrupted")
    return run.events, record


def _verify(events: list[dict[str, Any]]) -> None:
    """The rules ``verifyEvents`` of @ag-ui/client applies to one stream."""
    active = finished = errored = False
    texts: set[str] = set()
    calls: set[str] = set()
    spans: set[str] = set()
    reasoning: set[str] = set()
    for i, event in enumerate(events):
        kind = event["type"]
        assert not errored or kind == "RUN_STARTED", f"{kind} after RUN_ERROR"
        assert not finished or kind in ("RUN_STARTED", "RUN_ERROR"), f"{kind} after RUN_FINISHED"
        assert i or kind in ("RUN_STARTED", "RUN_ERROR"), "the first event must be RUN_STARTED"
        if kind == "RUN_STARTED":
            assert not active, "RUN_STARTED while a run is active"
            active, finished, errored = True, False, False
            texts, calls, spans, reasoning = set(), set(), set(), set()
        elif kind == "RUN_FINISHED":
            assert not (texts or calls or spans or reasoning), "RUN_FINISHED with something open"
            active, finished = False, True
        elif kind == "RUN_ERROR":
            active, errored = False, True
        elif kind == "TEXT_MESSAGE_START":
            assert event["messageId"] not in texts
            texts.add(event["messageId"])
        elif kind in ("TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END"):
            assert event["messageId"] in texts, f"{kind} for a message not open"
            if kind == "TEXT_MESSAGE_END":
                texts.discard(event["messageId"])
            else:
                assert event["delta"]
        elif kind == "TOOL_CALL_START":
            assert event["toolCallId"] not in calls
            calls.add(event["toolCallId"])
        elif kind in ("TOOL_CALL_ARGS", "TOOL_CALL_END"):
            assert event["toolCallId"] in calls
            if kind == "TOOL_CALL_END":
                calls.discard(event["toolCallId"])
        elif kind in ("REASONING_START", "REASONING_MESSAGE_START"):
            opened = spans if kind == "REASONING_START" else reasoning
            assert event["messageId"] not in opened
            opened.add(event["messageId"])
        elif kind in ("REASONING_MESSAGE_CONTENT", "REASONING_MESSAGE_END", "REASONING_END"):
            opened = spans if kind == "REASONING_END" else reasoning
            assert event["messageId"] in opened
            if kind != "REASONING_MESSAGE_CONTENT":
                opened.discard(event["messageId"])


def _apply(events: list[dict[str, Any]], view: dict[str, Any]) -> None:
    """What the client builds from the events (as @ag-ui/client's reducer does)."""
    for event in events:
        kind = event["type"]
        if kind in ("TEXT_MESSAGE_START", "REASONING_MESSAGE_START"):
            view["messages"].setdefault(event["messageId"], "")
        elif kind in ("TEXT_MESSAGE_CONTENT", "REASONING_MESSAGE_CONTENT"):
            view["messages"][event["messageId"]] += event["delta"]
        elif kind == "TOOL_CALL_START":
            view["calls"].setdefault(event["toolCallId"], "")
        elif kind == "TOOL_CALL_ARGS":
            view["calls"][event["toolCallId"]] += event["delta"]
        elif kind == "TOOL_CALL_RESULT":
            assert event["messageId"] not in view["results"], "a result applied twice"
            view["results"][event["messageId"]] = event["content"]
        elif kind in ("RUN_FINISHED", "RUN_ERROR"):
            view["ends"].append(json.dumps(event, sort_keys=True))


def _view(*streams: list[dict[str, Any]]) -> dict[str, Any]:
    view: dict[str, Any] = {"messages": {}, "calls": {}, "results": {}, "ends": []}
    for stream in streams:
        _apply(stream, view)
    return view


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kernel_runs(), st.data())
def test_every_stream_is_valid_and_a_reconnect_anywhere_loses_and_repeats_nothing(run: tuple[list[m.Event], RunRecord], data: st.DataObject) -> None:
    events, record = run
    frames = _frames(events, record)
    protocol_events([payload for payload, _ in frames])
    full = [json.loads(payload) for payload, _ in frames]
    _verify(full)
    # The connection drops after any frame; the client resumes after the last id it has.
    cut = data.draw(st.integers(0, len(frames)))
    received = full[:cut]
    last_id = next((event_id for _, event_id in reversed(frames[:cut]) if event_id is not None), None)
    resumed = [json.loads(payload) for payload, _ in _frames(events, record, after=int(last_id) if last_id else 0)]
    _verify(resumed)
    assert _view(received, resumed) == _view(full)
    ids = [int(event_id) for _, event_id in frames if event_id is not None]
    assert ids == sorted(set(ids))
