"""The wire framing and the sans-IO codec, on the captured transcript of protocols/acp.md and fuzzed."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel import model as m
from transports.acp import codec as acp
from transports.acp import session_meta
from transports.acp.codec import negotiate_version
from transports.acp.jsonrpc import (
    Ignored,
    JsonRpcCodec,
    Notification,
    Reject,
    Request,
    Response,
    RpcError,
    RpcFailure,
    decode_params,
)
from transports.acp.wire import (
    AgentMessageChunk,
    AuthenticateParams,
    CancelRequestParams,
    HttpMcpServer,
    InitializeParams,
    ListSessionsParams,
    LoadSessionParams,
    NameValue,
    NewSessionParams,
    PromptParams,
    SessionNotification,
    SessionParams,
    SetConfigOptionParams,
    SetModelParams,
    SetModeParams,
    StdioMcpServer,
    Text,
    TextBlock,
)


def wire(value: Any) -> Any:
    """What the value looks like on the wire, as plain JSON data."""
    return json.loads(msgspec.json.encode(value))


# The example exchange of protocols/acp.md, as captured (client -> agent lines verbatim).
C_INIT = b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":true}},"clientInfo":{"name":"mini-client","version":"0.1"}}}'
C_NEW = b'{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/home/u/project","mcpServers":[]}}'
C_PROMPT = b'{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"S","prompt":[{"type":"text","text":"hello world"}]}}'
A_CHUNK = b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"S","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"echo: "}}}}'
A_END = b'{"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}'
C_ALLOW = b'{"jsonrpc":"2.0","id":0,"result":{"outcome":{"outcome":"selected","optionId":"allow"}}}'
C_CANCEL = b'{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"S"}}'
A_CANCELLED = b'{"jsonrpc":"2.0","id":4,"result":{"stopReason":"cancelled"}}'


def test_transcript_client_lines_decode() -> None:
    codec = JsonRpcCodec()
    init = codec.decode(C_INIT)
    assert isinstance(init, Request) and init.id == 0 and init.method == "initialize"
    params = decode_params(init.params, InitializeParams)
    assert params.protocol_version == 1
    assert params.client_capabilities.fs.read_text_file and not params.client_capabilities.fs.write_text_file
    new = codec.decode(C_NEW)
    assert isinstance(new, Request) and decode_params(new.params, NewSessionParams).cwd == "/home/u/project"
    prompt = codec.decode(C_PROMPT)
    assert isinstance(prompt, Request)
    decoded = decode_params(prompt.params, PromptParams)
    assert decoded.session_id == "S" and decoded.prompt == [TextBlock("hello world")]
    assert acp.prompt_parts(decoded.prompt) == (m.TextPart("hello world"),)
    cancel = codec.decode(C_CANCEL)
    assert cancel == Notification("session/cancel", {"sessionId": "S"})
    assert decode_params(cancel.params, SessionParams).session_id == "S"


def test_transcript_agent_lines_encode_exactly() -> None:
    codec = JsonRpcCodec()
    update = SessionNotification("S", AgentMessageChunk(content=Text("echo: ")))
    assert codec.notification("session/update", update) == A_CHUNK
    assert codec.result(2, {"stopReason": "end_turn"}) == A_END
    assert codec.result(4, {"stopReason": "cancelled"}) == A_CANCELLED


def test_outgoing_ids_start_at_zero_and_correlate() -> None:
    codec = JsonRpcCodec()
    rid, line = codec.request("session/request_permission", {"sessionId": "S"})
    assert rid == 0 and json.loads(line) == {"jsonrpc": "2.0", "id": 0, "method": "session/request_permission", "params": {"sessionId": "S"}}
    answer = codec.decode(C_ALLOW)
    assert answer == Response(0, "session/request_permission", result={"outcome": {"outcome": "selected", "optionId": "allow"}})
    assert isinstance(codec.decode(C_ALLOW), Ignored), "a second answer to the same id is stray"
    rid1, _ = codec.request("fs/read_text_file", {})
    assert rid1 == 1
    codec.forget(rid1)
    assert isinstance(codec.decode(b'{"jsonrpc":"2.0","id":1,"result":{"content":"late"}}'), Ignored)
    rid2, _ = codec.request("fs/read_text_file", {})
    failed = codec.decode(b'{"jsonrpc":"2.0","id":2,"error":{"code":-32002,"message":"no such file"}}')
    assert failed == Response(rid2, "fs/read_text_file", error=RpcError(code=-32002, message="no such file"))
    _rid3, _ = codec.request("fs/read_text_file", {})
    odd = codec.decode(b'{"jsonrpc":"2.0","id":3,"error":"boom"}')
    assert isinstance(odd, Response) and odd.error is not None and odd.error.code == -32603
    assert isinstance(codec.decode(b'{"jsonrpc":"2.0","id":"0","result":{}}'), Ignored)
    assert isinstance(codec.decode(b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}'), Ignored)


@pytest.mark.parametrize(
    ("line", "rid", "code"),
    [
        (b"garbage", None, -32700),
        (b'{"jsonrpc":"2.0","id":1,', None, -32700),
        (b"[]", None, -32600),
        (b"42", None, -32600),
        (b'{"id":3,"method":"initialize"}', 3, -32600),
        (b'{"jsonrpc":"2.0","id":4}', 4, -32600),
        (b'{"jsonrpc":"2.0","id":5,"method":["x"]}', 5, -32600),
        (b'{"jsonrpc":"2.0","id":true,"method":"x"}', None, -32600),
    ],
)
def test_malformed_lines_are_rejected(line: bytes, rid: Any, code: int) -> None:
    rejected = JsonRpcCodec().decode(line)
    assert isinstance(rejected, Reject)
    reply = json.loads(rejected.reply)
    assert reply["id"] == rid and reply["error"]["code"] == code and reply["jsonrpc"] == "2.0"


def test_params_validation() -> None:
    with pytest.raises(RpcFailure) as bad:
        decode_params({"cwd": 1}, NewSessionParams)
    assert bad.value.error.code == -32602 and "$.cwd" in bad.value.error.message
    with pytest.raises(RpcFailure):
        decode_params([1, 2], NewSessionParams)
    with pytest.raises(RpcFailure):
        decode_params(None, LoadSessionParams)
    with pytest.raises(RpcFailure):
        decode_params({"sessionId": "S", "prompt": [{"type": "video"}]}, PromptParams)
    with pytest.raises(RpcFailure):
        decode_params({"sessionId": "S", "prompt": [{"type": "image", "data": "***", "mimeType": "image/png"}]}, PromptParams)
    assert decode_params({"sessionId": "S", "modeId": "ask"}, SetModeParams).mode_id == "ask"
    assert decode_params({"sessionId": "S", "modelId": "m", "_meta": {}}, SetModelParams).model_id == "m"
    assert decode_params({}, InitializeParams).protocol_version == 1


def test_version_negotiation() -> None:
    assert negotiate_version(1) == 1
    assert negotiate_version(5) == 1
    assert negotiate_version("2025-06-18") == 1
    assert negotiate_version(0) == 1


def test_prompt_blocks_to_parts() -> None:
    blocks = decode_params(
        {
            "sessionId": "S",
            "prompt": [
                {"type": "text", "text": "see"},
                {"type": "image", "data": "aGk=", "mimeType": "image/jpeg"},
                {"type": "resource", "resource": {"uri": "file:///a.py", "text": "x = 1", "mimeType": "text/x-python"}},
                {"type": "resource", "resource": {"uri": "file:///p.png", "blob": "aGk=", "mimeType": "image/png"}},
                {"type": "resource", "resource": {"uri": "file:///b.bin", "blob": "aGk="}},
                {"type": "resource_link", "uri": "file:///c.md", "name": "c.md"},
            ],
        },
        PromptParams,
    ).prompt
    assert acp.prompt_parts(blocks) == (
        m.TextPart("see"),
        m.ImagePart(b"hi", "image/jpeg"),
        m.FilePart("file:///a.py", b"x = 1", "text/x-python"),
        m.ImagePart(b"hi", "image/png"),
        m.FilePart("file:///b.bin", b"hi", "application/octet-stream"),
        m.TextPart("[linked resource: c.md <file:///c.md>]"),
    )
    for bad in ([], [TextBlock("   ")]):
        with pytest.raises(RpcFailure):
            acp.prompt_parts(bad)
    with pytest.raises(RpcFailure):
        acp.prompt_parts(decode_params({"sessionId": "S", "prompt": [{"type": "resource", "resource": {"uri": "u"}}]}, PromptParams).prompt)


def test_slash_commands() -> None:
    known = {"help", "model"}
    assert acp.slash_command((m.TextPart("/help"),), known) == ("help", "")
    assert acp.slash_command((m.TextPart(" /model  gpt-4o "),), known) == ("model", "gpt-4o")
    assert acp.slash_command((m.TextPart('/tool write_file {"a": 1}'),), known) is None
    assert acp.slash_command((m.TextPart("/help"), m.TextPart("more")), known) is None
    update = acp.available_commands([m.CommandInfo(name="model", description="d", usage="[NAME]")])
    assert wire(update) == {
        "sessionUpdate": "available_commands_update",
        "availableCommands": [{"name": "model", "description": "d", "input": {"hint": "[NAME]"}}],
    }


def test_tool_kinds_and_titles() -> None:
    assert acp.tool_kind("read_file", "files", "query") == "read"
    assert acp.tool_kind("write_file", "files", "update") == "edit"
    assert acp.tool_kind("web_fetch") == "fetch"
    assert acp.tool_kind("think") == "think"
    assert acp.tool_kind("current_time", "clock") == "other"
    assert acp.tool_kind("memory_store", "memory", "update") == "edit"
    assert acp.tool_title("read_file", {"path": "a.txt"}) == "Read file a.txt"
    assert acp.tool_title("current_time", "not json") == "Current time"
    assert acp.tool_title("docs__search_pages", {"path": "guide"}) == "Search pages (docs) guide"


def _run_ids() -> dict[str, Any]:
    return {"session_id": "S", "run_id": "r", "request_id": "q"}


def test_session_stream_updates() -> None:
    stream = acp.SessionStream("/p", 1000)
    ids = _run_ids()
    chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}, "messageId": "r-0"}
    assert wire(stream.updates(m.TextDelta(**ids, text="hi"))) == [chunk]
    thought = {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "hm"}, "messageId": "r-0"}
    assert wire(stream.updates(m.ReasoningDelta(**ids, text="hm"))) == [thought]
    assert stream.updates(m.TextDelta(**ids, text="")) == []
    call = m.ToolCallStarted(
        **ids, call_id="c0", name="write_file", arguments='{"path": "d/x.txt", "content": "new"}', category="files", access="update", needs_approval=True
    )
    assert wire(stream.updates(call)) == [
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "c0",
            "title": "Write file d/x.txt",
            "kind": "edit",
            "status": "pending",
            "rawInput": {"path": "d/x.txt", "content": "new"},
            "content": [{"type": "diff", "path": "/p/d/x.txt", "newText": "new"}],
            "locations": [{"path": "/p/d/x.txt"}],
        }
    ]
    read = m.ToolCallStarted(**ids, call_id="c1", name="read_file", arguments='{"path": "/abs/y", "line": 3}', category="files")
    start, running = wire(stream.updates(read))
    assert start["locations"] == [{"path": "/abs/y", "line": 3}] and running == {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "in_progress"}
    done = wire(stream.updates(m.ToolResult(**ids, call_id="c1", name="read_file", result="text")))
    assert done == [{"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "completed", "content": [{"type": "content", "content": {"type": "text", "text": "text"}}]}]
    rejected = wire(stream.updates(m.ToolResult(**ids, call_id="c0", name="write_file", result="no", outcome="rejected", is_error=True, rejected=True)))
    assert rejected[0]["status"] == "failed"
    end = m.RunFinished(**ids, text="hi", usage=m.Usage(input_tokens=10, output_tokens=5))
    assert wire(stream.updates(end)) == [{"sessionUpdate": "usage_update", "used": 15, "size": 1000}]
    for quiet in (m.RunStarted(**ids), m.TurnStarted(**ids, turn=1), m.ToolApprovalRequested(**ids, call_id="c", name="n", arguments="{}")):
        assert stream.updates(quiet) == []


def test_each_model_call_is_one_message_and_usage_counts_the_context() -> None:
    stream = acp.SessionStream("/p", 100)
    ids = _run_ids()
    first = stream.updates(m.TurnStarted(**ids, turn=3, iteration=0), m.TextDelta(**ids, text="a"), m.ReasoningDelta(**ids, text="b"))
    second = stream.updates(m.TurnStarted(**ids, turn=4, iteration=1), m.TextDelta(**ids, text="c"))
    assert [u["messageId"] for u in wire(first)] == ["r-0", "r-0"] and [u["messageId"] for u in wire(second)] == ["r-1"]
    end = m.RunFinished(**ids, text="ac", usage=m.Usage(input_tokens=900, output_tokens=20), context_tokens=480)
    assert wire(stream.updates(end)) == [{"sessionUpdate": "usage_update", "used": 500, "size": 500}]
    other = dict(ids, run_id="r2")
    assert [u["messageId"] for u in wire(stream.updates(m.TextDelta(**other, text="d")))] == ["r2-0"]


PLAN = {"entries": [{"content": "read the code", "priority": "high", "status": "completed"}, {"content": "fix it", "priority": "medium", "status": "in_progress"}]}


def test_a_successful_update_plan_call_becomes_the_editors_plan() -> None:
    stream = acp.SessionStream("/p", 100)
    ids = _run_ids()
    call = m.ToolCallStarted(**ids, call_id="p1", name="update_plan", arguments=json.dumps(PLAN), category="plan")
    start = wire(stream.updates(call))
    assert [u["sessionUpdate"] for u in start] == ["tool_call", "tool_call_update"] and start[0]["kind"] == "think"
    done = wire(stream.updates(m.ToolResult(**ids, call_id="p1", name="update_plan", result="plan updated: 2 steps")))
    assert done[1] == {"sessionUpdate": "plan", "entries": PLAN["entries"]}
    # A plan the tool refused (or arguments that are no plan) shows nothing.
    bad = m.ToolCallStarted(**ids, call_id="p2", name="update_plan", arguments=json.dumps(PLAN))
    stream.updates(bad)
    failed = stream.updates(m.ToolResult(**ids, call_id="p2", name="update_plan", result="tool error: invalid", outcome="error", is_error=True))
    assert [u["sessionUpdate"] for u in wire(failed)] == ["tool_call_update"]
    stream.updates(m.ToolCallStarted(**ids, call_id="p3", name="update_plan", arguments='{"entries": "soon"}'))
    assert len(stream.updates(m.ToolResult(**ids, call_id="p3", name="update_plan", result="ok"))) == 1
    assert acp.plan_entries("not json") is None and acp.plan_entries('{"entries": [{"content": "x"}]}') is None


def test_a_terminal_stays_in_its_tool_call_to_the_end() -> None:
    stream = acp.SessionStream("/p", 100)
    ids = _run_ids()
    stream.updates(m.ToolCallStarted(**ids, call_id="t1", name="run_command", arguments='{"command": "ls", "args": ["-l", "a b"]}', needs_approval=True))
    assert wire(stream.show_terminal("t1", "term-7")) == {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "t1",
        "status": "in_progress",
        "content": [{"type": "terminal", "terminalId": "term-7"}],
    }
    [done] = wire(stream.updates(m.ToolResult(**ids, call_id="t1", name="run_command", result="tool error: exit code 2", outcome="error", is_error=True)))
    assert done["status"] == "failed" and done["content"] == [{"type": "terminal", "terminalId": "term-7"}]
    stream.updates(m.RunFinished(**ids, text=""))
    [later] = wire(stream.updates(m.ToolResult(**ids, call_id="t1", name="run_command", result="again")))
    assert later["content"][0]["type"] == "content", "forgotten at the run's end"
    assert acp.tool_title("run_command", {"command": "ls", "args": ["-l", "a b"]}) == "Run command ls -l 'a b'"


def test_calls_a_run_leaves_open_end_failed_before_its_usage() -> None:
    stream = acp.SessionStream("/p", 100)
    ids = _run_ids()
    stream.updates(m.ToolCallStarted(**ids, call_id="a", name="current_time", arguments="{}"))
    stream.updates(m.ToolResult(**ids, call_id="a", name="current_time", result="noon"))
    stream.updates(m.ToolCallStarted(**ids, call_id="b", name="run_command", arguments='{"command": "sleep"}', needs_approval=True))
    stream.show_terminal("b", "t9")
    ended = wire(stream.updates(m.RunFinished(**ids, text="", interrupted=True, stop_reason="interrupted")))
    assert [(u["sessionUpdate"], u.get("toolCallId"), u.get("status")) for u in ended] == [("tool_call_update", "b", "failed"), ("usage_update", None, None)]
    assert ended[0]["content"] == [{"type": "terminal", "terminalId": "t9"}]
    stream.updates(m.ToolCallStarted(**ids, call_id="c", name="current_time", arguments="{}"))
    failed = wire(stream.updates(m.RunFailed(**ids, error=m.ErrorInfo(code="internal", message="x"))))
    assert failed == [
        {"sessionUpdate": "tool_call_update", "toolCallId": "c", "status": "failed", "content": [{"type": "content", "content": {"type": "text", "text": "interrupted before the tool finished"}}]}
    ]


def test_a_call_refused_without_a_question_is_never_shown_running() -> None:
    stream = acp.SessionStream("/p", 1000)
    ids = _run_ids()
    refused = m.ToolCallStarted(**ids, call_id="c2", name="write_file", arguments="{}", access="update", refused=True)
    declined = m.ToolResult(**ids, call_id="c2", name="write_file", result="tool call rejected: no", outcome="rejected", is_error=True, rejected=True)
    assert [(u["sessionUpdate"], u["status"]) for u in wire(stream.updates(refused, declined))] == [("tool_call", "pending"), ("tool_call_update", "failed")]
    quick = m.ToolCallStarted(**ids, call_id="c3", name="current_time", arguments="{}")
    failed = m.ToolResult(**ids, call_id="c3", name="current_time", result="tool error: clock broke", outcome="error", is_error=True)
    assert [u["status"] for u in wire(stream.updates(quick, failed))] == ["pending", "in_progress", "failed"]


def test_prompt_answers() -> None:
    ids = _run_ids()
    done = m.RunFinished(**ids, text="hi", usage=m.Usage(input_tokens=1, output_tokens=2), stop_reason="turn_limit")
    assert acp.prompt_answer(done, cancelled=False) == {"stopReason": "max_turn_requests", "usage": {"inputTokens": 1, "outputTokens": 2, "totalTokens": 3}}
    assert acp.prompt_answer(done, cancelled=True) == {"stopReason": "cancelled"}
    assert acp.prompt_answer(None, cancelled=False) == {"stopReason": "cancelled"}
    with pytest.raises(RpcFailure) as failed:
        acp.prompt_answer(m.RunFailed(**ids, error=m.ErrorInfo(code="provider_error", message="down")), cancelled=False)
    assert failed.value.error == RpcError(code=-32603, message="down", data={"code": "provider_error"})


def test_stop_reasons_and_errors() -> None:
    ids = _run_ids()
    expected = {"end_turn": "end_turn", "max_tokens": "max_tokens", "tool_iterations": "max_turn_requests", "turn_limit": "max_turn_requests", "refusal": "refusal", "interrupted": "cancelled"}
    for kernel_reason, acp_reason in expected.items():
        assert acp.stop_reason(m.RunFinished(**ids, text="", stop_reason=kernel_reason)) == acp_reason  # type: ignore[arg-type]
    assert acp.stop_reason(m.RunFinished(**ids, text="", interrupted=True)) == "cancelled"
    assert acp.kernel_failure(m.ErrorInfo(code="not_found", message="gone")).error.code == -32002
    assert acp.kernel_failure(m.ErrorInfo(code="invalid_request", message="bad")).error.code == -32602
    failure = acp.kernel_failure(m.ErrorInfo(code="rate_limited", message="slow down", details={"retry_after_s": 2}))
    assert failure.error == RpcError(code=-32603, message="slow down", data={"code": "rate_limited", "details": {"retry_after_s": 2}})


def test_permission_request_and_decisions() -> None:
    event = m.ToolApprovalRequested(**_run_ids(), call_id="c9", name="write_file", arguments='{"path": "a", "content": "b"}')
    params = acp.permission_request("S", event, "/w", category="files", access="update")
    assert params["toolCall"]["toolCallId"] == "c9" and params["toolCall"]["kind"] == "edit"
    assert params["toolCall"]["rawInput"] == {"path": "a", "content": "b"}
    assert [o["kind"] for o in params["options"]] == ["allow_once", "allow_always", "reject_once", "reject_always"]
    selected = lambda option: {"outcome": {"outcome": "selected", "optionId": option}}
    assert acp.permission_decision(selected("allow_once")) == (True, False, None)
    assert acp.permission_decision(selected("allow_always")) == (True, True, None)
    assert acp.permission_decision(selected("reject_once"))[:2] == (False, False)
    assert acp.permission_decision(selected("reject_always"))[:2] == (False, True)
    assert acp.permission_decision(selected("allow"))[:2] == (False, False), "the transcript's foreign option id is not ours"
    assert acp.permission_decision({"outcome": {"outcome": "cancelled"}}) == (False, False, "cancelled")
    assert acp.permission_decision(None)[0] is False


def test_history_replay() -> None:
    history = [
        m.Message(role="system", content="be nice"),
        m.Message(role="user", content="hello"),
        m.Message(role="user", parts=(m.TextPart("look"), m.ImagePart(b"hi", "image/png"), m.FilePart("a.md", b"# a", "text/markdown"))),
        m.Message(role="assistant", content="calling", tool_calls=(m.ToolCall(id="c1", name="read_file", arguments='{"path": "a"}'),)),
        m.Message(role="tool", tool_call_id="c1", name="read_file", content="tool error: no such file", outcome="error"),
        m.Message(role="assistant", content="done"),
    ]
    replay = wire(acp.history_updates(history, "/w"))
    assert [u["sessionUpdate"] for u in replay] == [
        "user_message_chunk",
        "user_message_chunk",
        "user_message_chunk",
        "user_message_chunk",
        "agent_message_chunk",
        "tool_call",
        "tool_call_update",
        "agent_message_chunk",
    ]
    assert [u.get("messageId") for u in replay] == ["history-1", "history-2", "history-2", "history-2", "history-3", None, None, "history-5"]
    assert replay[2]["content"] == {"type": "image", "data": "aGk=", "mimeType": "image/png"}
    assert replay[3]["content"] == {"type": "resource", "resource": {"uri": "a.md", "text": "# a", "mimeType": "text/markdown"}}
    assert replay[6]["status"] == "failed"


def test_history_replay_reads_outcomes_not_text() -> None:
    history = [
        m.Message(role="assistant", tool_calls=(m.ToolCall(id="c1", name="t", arguments="{}"), m.ToolCall(id="c2", name="t", arguments="{}"))),
        m.Message(role="tool", tool_call_id="c1", name="t", content="tool error: only looks like a failure"),
        m.Message(role="tool", tool_call_id="c2", name="t", content="fine", outcome="rejected"),
    ]
    assert [u.get("status") for u in wire(acp.history_updates(history, "/w"))] == ["pending", "pending", "completed", "failed"]


def test_history_replay_restores_the_plan() -> None:
    history = [
        m.Message(role="assistant", tool_calls=(m.ToolCall(id="p", name="update_plan", arguments=json.dumps(PLAN)),)),
        m.Message(role="tool", tool_call_id="p", name="update_plan", content="plan updated", outcome="ok"),
        m.Message(role="assistant", tool_calls=(m.ToolCall(id="q", name="update_plan", arguments='{"entries": []}'),)),
        m.Message(role="tool", tool_call_id="q", name="update_plan", content="tool error", outcome="error"),
    ]
    replay = wire(acp.history_updates(history, "/w"))
    assert [u for u in replay if u["sessionUpdate"] == "plan"] == [{"sessionUpdate": "plan", "entries": PLAN["entries"]}]


def test_initialize_and_modes() -> None:
    result = acp.initialize_result(1, "1.2.3")
    assert result["agentCapabilities"] == {
        "loadSession": True,
        "promptCapabilities": {"image": True, "audio": False, "embeddedContext": True},
        "mcpCapabilities": {"http": True, "sse": False},
        "sessionCapabilities": {"list": {}, "resume": {}, "close": {}, "delete": {}},
        "auth": {"logout": {}},
    }
    assert result["authMethods"] == [] and result["agentInfo"]["name"] == "gateway" and result["agentInfo"]["version"] == "1.2.3"
    assert acp.prompt_options("ask").ask_before_tool_execution is True
    assert acp.prompt_options("default").ask_before_tool_execution is None
    assert acp.prompt_options("default").approval == m.ApprovalPolicy(mode="ask", turn_limit="stop")
    assert session_meta.check_mode("ask") == "ask"
    with pytest.raises(RpcFailure):
        session_meta.check_mode("yolo")


# ---------------------------------------------------------------- fuzz

_PARAMS_OF: dict[str, type[Any]] = {
    "initialize": InitializeParams,
    "authenticate": AuthenticateParams,
    "session/new": NewSessionParams,
    "session/load": LoadSessionParams,
    "session/resume": LoadSessionParams,
    "session/list": ListSessionsParams,
    "session/close": SessionParams,
    "session/delete": SessionParams,
    "session/prompt": PromptParams,
    "session/cancel": SessionParams,
    "session/set_mode": SetModeParams,
    "session/set_model": SetModelParams,
    "session/set_config_option": SetConfigOptionParams,
    "$/cancel_request": CancelRequestParams,
}
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=8,
)
_METHODS = [*_PARAMS_OF, "x"]
_messages = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "1.0"]) | _json,
        "id": st.integers(min_value=-2, max_value=3) | st.text(max_size=3) | st.none() | _json,
        "method": st.sampled_from(_METHODS) | _json,
        "params": _json
        | st.fixed_dictionaries(
            {"sessionId": st.text(max_size=5), "prompt": st.lists(st.fixed_dictionaries({"type": st.sampled_from(["text", "image", "resource", "resource_link", "audio"])}, optional={"text": _json, "data": _json, "uri": _json, "resource": _json}), max_size=3)}
        ),
        "result": _json,
        "error": _json,
    },
)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200) | _messages.map(lambda d: json.dumps(d).encode()))
def test_fuzz_decode_never_raises(line: bytes) -> None:
    codec = JsonRpcCodec()
    codec.request("session/request_permission", {})
    message = codec.decode(line)
    assert isinstance(message, (Request, Notification, Response, Reject, Ignored))
    if isinstance(message, Reject):
        assert json.loads(message.reply)["error"]["code"] in (-32700, -32600)
    if isinstance(message, (Request, Notification)) and message.method in _PARAMS_OF:
        try:
            params = decode_params(message.params, _PARAMS_OF[message.method])
            if isinstance(params, PromptParams):
                acp.prompt_parts(params.prompt)
        except RpcFailure as failure:
            assert failure.error.code == -32602
    if isinstance(message, Response):
        acp.permission_decision(message.result)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40), st.text(max_size=60), st.sampled_from(["query", "update"]))
def test_fuzz_tool_mapping_never_raises(name: str, arguments: str, access: str) -> None:
    ids = _run_ids()
    stream = acp.SessionStream("/w", 10)
    updates = stream.updates(m.ToolCallStarted(**ids, call_id="c", name=name, arguments=arguments, access=access))
    assert updates and msgspec.json.encode(updates)
    assert acp.permission_request("S", m.ToolApprovalRequested(**ids, call_id="c", name=name, arguments=arguments), "/w")


def test_the_editors_mcp_servers() -> None:
    stdio = {"name": "files", "command": "/usr/bin/mcp-files", "args": ["--root", "/w"], "env": [{"name": "TOKEN", "value": "t"}], "_meta": {"x": 1}}
    http = {"type": "http", "name": "docs", "url": "https://docs.example/mcp", "headers": [{"name": "Authorization", "value": "Bearer b"}]}
    servers = acp.mcp_servers([stdio, {**stdio, "type": "stdio", "name": "again"}, http])
    assert [type(s).__name__ for s in servers] == ["StdioMcpServer", "StdioMcpServer", "HttpMcpServer"]
    assert servers[0] == StdioMcpServer(name="files", command="/usr/bin/mcp-files", args=["--root", "/w"], env=[NameValue("TOKEN", "t")])
    assert servers[2] == HttpMcpServer(name="docs", url="https://docs.example/mcp", headers=[NameValue("Authorization", "Bearer b")])
    assert acp.mcp_servers([]) == ()
    for entries, message in (
        ([{"type": "sse", "name": "old", "url": "http://h/sse", "headers": []}], "mcpServers[0] (old): 'sse' MCP servers are not supported"),
        ([http, {"name": "x"}], "mcpServers[1] (x): Object missing required field `command`"),
        (["files"], "mcpServers[0]: expected an object"),
        ([{"type": "http", "name": "h", "url": 7}], "mcpServers[0] (h): Expected `str`, got `int`"),
    ):
        with pytest.raises(RpcFailure) as failure:
            acp.mcp_servers(entries)
        assert failure.value.error.code == -32602 and message in failure.value.error.message


@settings(max_examples=200, deadline=None)
@given(st.lists(_json | st.fixed_dictionaries({}, optional={"type": _json | st.sampled_from(["stdio", "http", "sse"]), "name": _json, "command": _json, "url": _json, "args": _json, "env": _json, "headers": _json}), max_size=3))
def test_fuzz_mcp_servers_are_servers_or_invalid_params(entries: list[Any]) -> None:
    try:
        servers = acp.mcp_servers(entries)
    except RpcFailure as failure:
        assert failure.error.code == -32602 and failure.error.message.startswith("Invalid params: mcpServers[")
    else:
        assert len(servers) == len(entries) and all(isinstance(s, StdioMcpServer | HttpMcpServer) for s in servers)
