"""The OpenFang codec on transcripts (frames in, kernel commands out; kernel events in,
OpenFang's turn sequence out), the coalescer on an explicit clock, and a fuzz test."""

from __future__ import annotations

import json

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from kernel import model as m
from transports.openfang.codec import (
    CLIENT_GONE,
    Action,
    Connection,
    DecodeContext,
    Decoded,
    LocalCommand,
    Outbound,
    Ping,
    SessionFacts,
    TurnEncoder,
    Upload,
    command_result,
    compact_message,
    context_pressure,
    decode_frame,
    next_verbose,
    sanitize_user_input,
)
from transports.openfang.rest_codec import SseEncoder, history_json
from transports.openfang.sessionids import alias
from transports.openfang.wire import (
    AgentsUpdated,
    CommandResult,
    ErrorOut,
    Pong,
    ResponseOut,
    TextDeltaOut,
    decode,
    encode,
)
from transports.shared.coalesce import DeltaCoalescer

AGENT = "3a1f159c-51da-580d-a4eb-98d4826ded8e"
CTX = DecodeContext(agent_id=AGENT, request_id="r1", kernel_commands=("model", "help", "history"))


def item(text: str, ctx: DecodeContext = CTX) -> object:
    return decode_frame(text, ctx).item


def test_message_frames_become_prompts() -> None:
    assert item('{"type":"message","content":"hi"}') == m.Prompt(text="hi", agent_id=AGENT, request_id="r1")
    # The seed's frame: session_id picks the session.
    seeded = item('{"type":"message","content":"Hello, how are you?","session_id":"session_123"}')
    assert seeded == m.Prompt(text="Hello, how are you?", agent_id=AGENT, request_id="r1", session_id="session_123")
    # Not JSON: the frame is the content.  Missing type: a message.
    assert item("just text") == m.Prompt(text="just text", agent_id=AGENT, request_id="r1")
    assert item('{"content":"no type"}') == m.Prompt(text="no type", agent_id=AGENT, request_id="r1")
    assert item("{broken json") == m.Prompt(text="{broken json", agent_id=AGENT, request_id="r1")


def test_message_errors_use_openfang_wording() -> None:
    assert item('{"type":"message","content":""}') == ErrorOut(content="Missing or empty 'content' field")
    assert item('{"type":"message","content":"   "}') == ErrorOut(content="Missing or empty 'content' field")
    assert item('{"type":"message"}') == ErrorOut(content="Missing or empty 'content' field")
    assert item('{"type":"message","content":5}') == ErrorOut(content="Missing or empty 'content' field")
    assert item("42") == ErrorOut(content="Missing or empty 'content' field")
    assert item('{"type":"dance"}') == ErrorOut(content="Unknown message type: dance")
    assert item('{"type":"message","content":"\\u0000\\u0001"}') == ErrorOut(content="Message content is empty after sanitization")
    assert item('{"type":"message","content":"x","session_id":""}') == ErrorOut(content="Invalid session_id")
    assert item('{"type":"message","content":"x","session_id":5}') == ErrorOut(content="Invalid session_id")


def test_sanitizer_matches_openfang() -> None:
    assert sanitize_user_input("hello\x00world") == "helloworld"
    assert sanitize_user_input("hello\nworld\t!") == "hello\nworld\t!"
    assert sanitize_user_input('{"type":"message","content":"actual message"}') == "actual message"
    assert sanitize_user_input('{"key":"value"}') == '{"key":"value"}'
    assert sanitize_user_input("  hello  ") == "hello"


def test_attachments_resolve_uploaded_files() -> None:
    png = Upload(filename="a.png", content_type="image/png", data=b"\x89PNG")
    notes = Upload(filename="n.txt", content_type="text/plain", data=b"notes")
    ctx = msgspec.structs.replace(CTX, uploads={"f1": png, "f2": notes})
    frame = json.dumps({"type": "message", "content": "look", "attachments": [
        {"file_id": "f1", "filename": "a.png", "content_type": "image/png"}, {"file_id": "f2"}, "junk", {"x": 1},
    ]})
    prompt = item(frame, ctx)
    assert isinstance(prompt, m.Prompt)
    assert prompt.parts == (m.ImagePart(data=b"\x89PNG", mime_type="image/png"), m.FilePart(name="n.txt", data=b"notes", content_type="text/plain"))
    missing = item('{"content":"x","attachments":[{"file_id":"gone"}]}', ctx)
    assert missing == ErrorOut(content="Attachment not found: gone (upload it again)")


def test_commands_map_to_kernel_commands_or_local_answers() -> None:
    assert decode_frame('{"type":"command","command":"stop"}', CTX) == Decoded(m.Interrupt(request_id="r1"), "stop")
    assert item('{"type":"command","command":"new"}') == m.ClearContext(request_id="r1")
    assert item('{"type":"command","command":"reset","session_id":"s"}') == m.ClearContext(request_id="r1", session_id="s")
    assert item('{"type":"command","command":"model","args":"gpt-4o"}') == m.RunCommand(request_id="r1", name="model", args="gpt-4o")
    assert item('{"type":"command","command":"history","args":"3"}') == m.RunCommand(request_id="r1", name="history", args="3")
    for name in ("context", "verbose", "queue", "usage", "compact", "help"):
        assert item(json.dumps({"type": "command", "command": name, "args": "on"})) == LocalCommand(name=name, args="on")
    assert item('{"type":"command","command":"selfdestruct"}') == ErrorOut(content="Unknown command: selfdestruct")
    assert item('{"type":"command"}') == ErrorOut(content="Unknown command: ")
    assert item('{"type":"ping"}') == Ping()


def test_approval_extension_commands_and_typed_answers() -> None:
    pending = msgspec.structs.replace(CTX, pending_approval="call_9")
    assert item('{"type":"command","command":"approve"}', pending) == m.ResolveToolApproval(request_id="r1", call_id="call_9", approved=True)
    assert item('{"type":"command","command":"approve","args":"always"}', pending) == m.ResolveToolApproval(
        request_id="r1", call_id="call_9", approved=True, remember=True
    )
    assert item("/deny too risky", pending) == m.ResolveToolApproval(request_id="r1", call_id="call_9", approved=False, reason="too risky")
    assert item('{"type":"message","content":"/approve"}', pending) == m.ResolveToolApproval(request_id="r1", call_id="call_9", approved=True)
    # Without a pending question "/approve" is just text for the model.
    assert item("/approve", CTX) == m.Prompt(text="/approve", agent_id=AGENT, request_id="r1")
    turns = msgspec.structs.replace(CTX, awaiting_turns=True)
    assert item("/continue", turns) == m.ResolveTurnLimit(request_id="r1", confirmed=True)
    assert item("/stop", turns) == m.Interrupt(request_id="r1")


def test_command_results_use_openfang_texts() -> None:
    assert command_result("stop", m.Done(message="interrupted")) == CommandResult(command="stop", message="Run cancelled.")
    idle = m.KernelError("invalid_request", "No active model output to interrupt")
    assert command_result("stop", idle) == CommandResult(command="stop", message="No active run to cancel.")
    assert command_result("new", m.Done()) == CommandResult(command="new", message="Session reset. Chat history cleared.")
    queued = command_result("reset", m.Accepted(session_id="s", queued=True))
    assert isinstance(queued, CommandResult) and "when the current run ends" in queued.message
    out = command_result("model", m.CommandOutput(name="model", output="Model: x"))
    assert out == CommandResult(command="model", message="Model: x")
    assert command_result("approve", m.KernelError("invalid_request", "no pending tool approval")) == ErrorOut(content="no pending tool approval")
    assert next_verbose("full", "") == "off" and next_verbose("off", "") == "on" and next_verbose("on", "FULL") == "full"
    assert [context_pressure(t, 100) for t in (10, 51, 71, 86, 500)] == ["low", "medium", "high", "critical", "critical"]


def run_events(*events: m.Event) -> list[m.Event]:
    return list(events)


def E(cls: type, request_id: str = "r1", **kw: object) -> m.Event:
    """A run event of run ``run`` in session ``s``, started by ``request_id``."""
    return cls(session_id="s", run_id="run", request_id=request_id, **kw)


def wire(events: list[m.Event], encoder: TurnEncoder | None = None) -> list[dict[str, object]]:
    encoder = encoder or TurnEncoder({"r1"})
    return [json.loads(encode(out)) for ev in events for out in encoder.feed(ev)]


def test_plain_turn_sequence() -> None:
    events = run_events(
        E(m.RunStarted), E(m.TurnStarted, turn=1), E(m.TextDelta, text="Hel"), E(m.TextDelta, text="lo"),
        E(m.RunFinished, text="Hello", usage=m.Usage(input_tokens=12, output_tokens=34)),
    )
    mine = {"r1"}
    assert wire(events, TurnEncoder(mine)) == [
        {"type": "typing", "state": "start"},
        {"type": "phase", "phase": "streaming", "detail": None},
        {"type": "text_delta", "content": "Hel"},
        {"type": "text_delta", "content": "lo"},
        {"type": "phase", "phase": "done", "detail": None},
        {"type": "typing", "state": "stop"},
        {"type": "response", "content": "Hello", "input_tokens": 12, "output_tokens": 34, "iterations": 0, "cost_usd": None, "context_pressure": "low"},
    ]
    assert mine == set(), "a finished request is forgotten (the set stays bounded)"


def test_tool_turn_sequence_and_verbose_levels() -> None:
    events = run_events(
        E(m.RunStarted), E(m.TurnStarted, turn=1),
        E(m.ToolCallStarted, call_id="call_1", name="clock", arguments='{"tz":"UTC"}'),
        E(m.ToolResult, call_id="call_1", name="clock", result="12:00"),
        E(m.TurnStarted, turn=2, iteration=1), E(m.TextDelta, text="noon"),
        E(m.RunFinished, text="noon", usage=m.Usage(input_tokens=1, output_tokens=1), iterations=1, tool_calls=1),
    )
    assert [(f["type"], f.get("state") or f.get("phase")) for f in wire(events)] == [
        ("typing", "start"), ("phase", "streaming"), ("typing", "tool"), ("tool_start", None), ("tool_end", None),
        ("phase", "tool_use"), ("tool_result", None), ("phase", "thinking"), ("text_delta", None),
        ("phase", "done"), ("typing", "stop"), ("response", None),
    ]
    frames = wire(events)
    assert frames[2] == {"type": "typing", "state": "tool", "tool": "clock"}
    assert frames[3] == {"type": "tool_start", "id": "call_1", "tool": "clock"}
    assert frames[4] == {"type": "tool_end", "id": "call_1", "tool": "clock", "input": '{"tz":"UTC"}'}
    assert frames[5] == {"type": "phase", "phase": "tool_use", "detail": "clock"}
    assert frames[6] == {"type": "tool_result", "id": "call_1", "tool": "clock", "result": "12:00", "is_error": False}
    quiet = TurnEncoder({"r1"}, verbose="off")
    off = wire(events, quiet)
    assert not any(f["type"] == "tool_end" for f in off)
    assert {"type": "tool_result", "id": "call_1", "tool": "clock", "is_error": False} in off


def test_interrupted_failed_silent_and_empty_turns() -> None:
    interrupted = wire(run_events(E(m.RunStarted), E(m.TextDelta, text="par"), E(m.RunFinished, text="par", interrupted=True, stop_reason="interrupted")))
    assert interrupted[-2:] == [
        {"type": "typing", "state": "stop"},
        {"type": "response", "content": "par", "input_tokens": 0, "output_tokens": 0, "iterations": 0, "cost_usd": None, "context_pressure": "low", "interrupted": True},
    ]
    failed = wire(run_events(E(m.RunStarted), E(m.RunFailed, error=m.ErrorInfo(code="provider_error", message="upstream exploded"))))
    assert failed[-2:] == [{"type": "typing", "state": "stop"}, {"type": "error", "content": "upstream exploded"}]
    silent = wire(run_events(E(m.RunStarted), E(m.TextDelta, text="NO_REPLY"), E(m.RunFinished, text="NO_REPLY", usage=m.Usage(input_tokens=4, output_tokens=1))))
    assert silent[-2:] == [{"type": "typing", "state": "stop"}, {"type": "silent_complete", "input_tokens": 4, "output_tokens": 1}]
    empty = wire(run_events(E(m.RunStarted), E(m.RunFinished, text="", usage=m.Usage(input_tokens=3, output_tokens=0))))
    deltas = "".join(f["content"] for f in empty if f["type"] == "text_delta")  # type: ignore[misc]
    assert deltas.startswith("[The agent completed processing") and empty[-1]["content"] == deltas


def test_a_full_context_warns_before_the_turn_ends() -> None:
    frames = wire(run_events(E(m.RunStarted), E(m.TextDelta, text="x"), E(m.RunFinished, text="x", usage=m.Usage(input_tokens=180_000))))
    assert frames[-4] == {"type": "phase", "phase": "context_warning", "detail": "Context window 90% full; /new starts over"}
    assert frames[-1]["context_pressure"] == "critical"


def test_other_clients_runs_and_approvals() -> None:
    assert wire(run_events(E(m.RunStarted, "someone-else"), E(m.TextDelta, "someone-else", text="x"))) == []
    encoder = TurnEncoder({"r1"})
    asked = wire(run_events(E(m.RunStarted), E(m.ToolApprovalRequested, call_id="c1", name="write_file", arguments="{}", timeout_s=300.0)), encoder)
    assert asked[-1]["type"] == "command_result" and asked[-1]["approval"]["id"] == "c1"  # type: ignore[index]
    assert "/approve" in asked[-1]["message"] and encoder.pending_approval == "c1"  # type: ignore[operator]
    wire(run_events(E(m.ToolResult, call_id="c1", name="write_file", result="declined", is_error=True, rejected=True)), encoder)
    assert encoder.pending_approval is None
    limit = wire(run_events(E(m.TurnLimitReached, current_turns=5, max_turns=5)), encoder)
    assert limit[0]["command"] == "turn_limit" and encoder.awaiting_turns


def test_coalescer_on_an_explicit_clock() -> None:
    c = DeltaCoalescer(window_s=0.1, max_chars=10)
    assert c.deadline is None
    assert c.push("abc", now=1.0) is None and c.deadline == 1.1
    assert c.push("def", now=1.05) is None and c.deadline == 1.1  # the window starts with the first piece
    assert c.due(1.09) is None
    assert c.due(1.1) == "abcdef" and c.deadline is None
    assert c.push("0123456789xyz", now=2.0) == "0123456789xyz"  # size limit: at once
    assert c.push("q", now=3.0) is None and c.flush() == "q" and c.flush() is None
    off = DeltaCoalescer(window_s=0, max_chars=200)
    assert off.push("a", now=0) == "a" and off.deadline is None


def test_outbound_flushes_text_before_any_other_event() -> None:
    out = Outbound(TurnEncoder({"r1"}), DeltaCoalescer(0.1, 200))
    events = run_events(E(m.RunStarted), E(m.TextDelta, text="a"), E(m.TextDelta, text="b"))
    frames = out.feed(events, now=0.0)
    assert [type(f).__name__ for f in frames] == ["Typing", "Phase"] and out.deadline == 0.1
    assert out.tick(0.05) == [] and out.tick(0.1) == [TextDeltaOut(content="ab")]
    frames = out.feed(run_events(E(m.TextDelta, text="c"), E(m.RunFinished, text="abc")), now=1.0)
    assert frames[0] == TextDeltaOut(content="c") and isinstance(frames[-1], ResponseOut) and frames[-1].content == "abc"


def test_wire_round_trip() -> None:
    frame = encode(CommandResult(command="context", message="m", context_pressure="low"))
    assert json.loads(frame) == {"type": "command_result", "command": "context", "message": "m", "context_pressure": "low"}
    assert decode(frame) == CommandResult(command="context", message="m", context_pressure="low")


def _prompted(conn: Connection, text: str, session_id: str = "s") -> str:
    """Send a message through ``conn`` to ``session_id``; the request id of its run."""
    action = conn.receive(text)
    assert isinstance(action, Action) and isinstance(action.command, m.Prompt)
    if not conn.follows(session_id):
        conn.follow(session_id)
    prompt = conn.sending(action.command, session_id)
    assert prompt.session_id == session_id and prompt.request_id is not None
    return prompt.request_id


def test_a_connection_decodes_with_its_own_state_and_sets_the_policy_on_prompts() -> None:
    policy = m.ApprovalPolicy(mode="reject", reason="not here")
    conn = Connection(AGENT, approval=policy)
    assert conn.receive('{"type":"ping"}') == [Pong()]
    assert conn.receive('{"type":"dance"}') == [ErrorOut(content="Unknown message type: dance")]
    first, second = conn.receive("hi"), conn.receive("hi")
    assert isinstance(first, Action) and isinstance(first.command, m.Prompt) and isinstance(second, Action)
    assert first.command.options.approval == policy and first.command.request_id != second.command.request_id
    stop = conn.receive('{"type":"command","command":"stop"}')
    assert isinstance(stop, Action) and stop.name == "stop" and isinstance(stop.command, m.Interrupt)
    assert conn.last_session is None
    _prompted(conn, "go")
    assert conn.last_session == "s"


def test_a_connection_answers_and_declines_the_questions_of_its_own_runs() -> None:
    conn = Connection(AGENT, coalesce_s=0)
    rid = _prompted(conn, "go")
    assert isinstance(conn.receive("/approve").command, m.Prompt), "no question yet: just text"  # type: ignore[union-attr]
    ask = m.ToolApprovalRequested(session_id="s", run_id="run", request_id=rid, call_id="c1", name="guarded", arguments="{}")
    frames = conn.on_events("s", [m.RunStarted(session_id="s", run_id="run", request_id=rid), ask], now=0.0)
    assert isinstance(frames[-1], CommandResult) and frames[-1].command == "approval"
    answer = conn.receive("/deny not now")
    assert isinstance(answer, Action) and answer.name == "deny"
    assert isinstance(answer.command, m.ResolveToolApproval) and (answer.command.call_id, answer.command.approved, answer.command.reason) == ("c1", False, "not now")
    limit = m.TurnLimitReached(session_id="s", run_id="run", request_id=rid, current_turns=3, max_turns=3)
    conn.on_events("s", [limit], now=0.0)
    assert isinstance(conn.receive("/continue").command, m.ResolveTurnLimit)  # type: ignore[union-attr]
    # The socket goes away with both questions open: they are declined at once, then forgotten.
    assert conn.unfollow("s") == [
        m.ResolveToolApproval(session_id="s", call_id="c1", approved=False, reason=CLIENT_GONE),
        m.ResolveTurnLimit(session_id="s", confirmed=False, reason=CLIENT_GONE),
    ]
    assert conn.unfollow("s") == [] and not conn.follows("s")


def test_a_connection_renders_only_its_own_runs_and_reports_lost_events() -> None:
    conn = Connection(AGENT, coalesce_s=1.0, coalesce_chars=1000)
    rid = _prompted(conn, "go")
    mine = [m.RunStarted(session_id="s", run_id="run", request_id=rid), m.TextDelta(session_id="s", run_id="run", request_id=rid, text="par")]
    theirs = [m.RunStarted(session_id="s", run_id="other", request_id="someone"), m.TextDelta(session_id="s", run_id="other", request_id="someone", text="x")]
    assert [type(f).__name__ for f in conn.on_events("s", mine + theirs, now=0.0)] == ["Typing", "Phase"]
    assert conn.deadline("s") == 1.0 and conn.on_events("s", [], now=0.5) == []
    lagged = m.SubscriberLagged(session_id="s", last_seq=9, error=m.ErrorInfo(code="rate_limited", message="too slow"))
    assert conn.on_events("s", [lagged], now=0.6) == [
        TextDeltaOut(content="par"), ErrorOut(content="This connection fell behind and missed events: too slow"),
    ]


def test_a_connection_sends_the_agent_list_again_only_when_it_changed() -> None:
    conn = Connection(AGENT)
    one = [m.AgentInfo(id=AGENT, name="General Assistant")]
    hello = conn.hello(one)
    assert [type(f).__name__ for f in hello] == ["Connected", "AgentsUpdated"]
    assert conn.agents_changed(one) == []
    changed = conn.agents_changed([*one, m.AgentInfo(id="b", name="Researcher")])
    assert isinstance(changed[0], AgentsUpdated) and [a.name for a in changed[0].agents] == ["General Assistant", "Researcher"]


def test_local_commands_answer_from_the_connection_and_the_sessions_facts() -> None:
    conn = Connection(AGENT)
    assert conn.local(LocalCommand(name="verbose", args="off")) == [CommandResult(command="verbose", message="Verbose level: **off**")]
    assert not LocalCommand(name="verbose").needs_session and LocalCommand(name="queue").needs_session
    busy = m.SessionInfo(session_id="s", agent_id=AGENT, run_id="run", usage=m.Usage(input_tokens=3, output_tokens=4))
    queued = m.SessionInfo(session_id="s", agent_id=AGENT, queued=1)
    commands = (m.CommandInfo(name="history", description="past messages"),)
    facts = SessionFacts(session_id="s", info=busy, history_window=20, commands=commands)
    assert conn.local(LocalCommand(name="queue"), facts) == [CommandResult(command="queue", message="Agent is processing a request...")]
    assert conn.local(LocalCommand(name="queue"), SessionFacts(session_id="s", info=queued))[0].message == "Agent is processing a request..."  # type: ignore[union-attr]
    assert conn.local(LocalCommand(name="queue"), SessionFacts(session_id="s")) == [CommandResult(command="queue", message="Agent is idle.")]
    assert conn.local(LocalCommand(name="usage"), facts) == [CommandResult(command="usage", message="Session usage: ~3 in / ~4 out (~7 total)")]
    assert "/history` — past messages" in conn.local(LocalCommand(name="help"), facts)[0].message  # type: ignore[union-attr]
    stored = SessionFacts(session_id="s", info=m.SessionInfo(session_id="s", agent_id=AGENT, message_count=7), history_window=20)
    assert conn.local(LocalCommand(name="compact"), stored) == [CommandResult(command="compact", message=compact_message(7, 20))]
    assert compact_message(7, 20).startswith("No compaction needed (7 messages; the model always sees the newest 20)")
    context = conn.local(LocalCommand(name="context"), SessionFacts(session_id="notes", info=stored.info, history_window=20))[0]
    assert context.message.startswith(f"Session {alias('notes')}: 7 messages in history")  # type: ignore[union-attr]


def test_tool_errors_are_read_from_outcomes_never_from_text() -> None:
    calls = (m.ToolCall(id="a", name="t", arguments="{}"), m.ToolCall(id="b", name="t", arguments="{}"), m.ToolCall(id="c", name="t", arguments="{}"))
    messages = [
        m.Message(role="assistant", tool_calls=calls),
        m.Message(role="tool", tool_call_id="a", content="tool error: looks bad, but it ran", outcome="ok"),
        m.Message(role="tool", tool_call_id="b", content="no", outcome="rejected"),
        m.Message(role="tool", tool_call_id="c", content="tool call rejected: an old row without an outcome"),
    ]
    cards = history_json("s", AGENT, messages)["messages"][0]["tools"]
    assert [card["is_error"] for card in cards] == [False, True, False]
    failed = E(m.ToolResult, call_id="x", name="t", result="boom", outcome="timed_out")
    assert wire([failed])[0]["is_error"] is True
    stream = SseEncoder(DeltaCoalescer(0.1, 200))
    frames = stream.feed([E(m.ToolCallStarted, call_id="x", name="t", arguments="{}"), failed], now=0.0)
    assert json.loads(frames[-1][1])["is_error"] is True


def test_sse_chunks_are_coalesced_and_flushed_before_any_other_event() -> None:
    stream = SseEncoder(DeltaCoalescer(0.1, 200))
    assert stream.feed([E(m.RunStarted), E(m.TextDelta, text="a"), E(m.TextDelta, text="b")], now=0.0) == [
        ("phase", b'{"phase":"streaming","detail":null}'),
    ]
    assert stream.deadline == 0.1 and stream.tick(0.05) == [] and stream.tick(0.1) == [("chunk", b'{"content":"ab","done":false}')]
    events = stream.feed([E(m.TextDelta, text="c"), E(m.RunFinished, text="abc")], now=1.0)
    assert [name for name, _ in events] == ["chunk", "phase", "done"] and stream.finished


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
frame_like = st.fixed_dictionaries(
    {"type": st.sampled_from(["message", "command", "ping", "bogus"]) | json_values},
    optional={
        "content": json_values, "command": st.sampled_from(["stop", "new", "verbose", "approve", "zap"]) | json_values,
        "args": json_values, "session_id": json_values, "attachments": json_values,
    },
)


@given(st.text(max_size=300) | json_values.map(json.dumps) | frame_like.map(json.dumps))
def test_fuzz_any_frame_yields_a_command_or_an_error(frame: str) -> None:
    ctx = DecodeContext(agent_id=AGENT, request_id="r", uploads={}, kernel_commands=("model",), pending_approval="c")
    decoded = decode_frame(frame, ctx)
    assert isinstance(decoded.item, (m.Prompt, m.Interrupt, m.ClearContext, m.RunCommand, m.ResolveToolApproval, m.ResolveTurnLimit, Ping, LocalCommand, ErrorOut))
    if isinstance(decoded.item, ErrorOut):
        assert encode(decoded.item)  # always encodable
    if isinstance(decoded.item, m.Prompt):
        assert decoded.item.text and decoded.item.text == decoded.item.text.strip()
