"""The sans-IO Packet codec on plain data: packets -> commands, events/replies -> answers."""

from __future__ import annotations

import json
from enum import Enum
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kernel import KernelError, RunWatch
from kernel import model as m
from transports.packet import codec
from transports.packet.codec import Answer, RunCollector, decode, packet_kind
from transports.packet.wire import PacketResponse, PacketType

IDS = {"session_id": "packet", "request_id": "r1"}


class Mine(Enum):
    STATUS = "get_status"
    OTHER = "get_weather"


def test_packet_kind_matches_by_value() -> None:
    assert packet_kind(PacketType.GET_STATUS) == "get_status"
    assert packet_kind(Mine.STATUS) == "get_status"
    assert packet_kind("process_message") == "process_message"
    assert packet_kind(Mine.OTHER) is None
    assert packet_kind(3) is None
    assert {t.value for t in PacketType} == codec.KINDS and len(codec.KINDS) == 8


def test_decode_transcript() -> None:
    assert decode(PacketType.PROCESS_MESSAGE, {"user_input": "你好"}, **IDS) == m.Prompt(text="你好", **IDS)
    assert decode(Mine.STATUS, {}, **IDS) == m.GetStatus(**IDS)
    assert decode("execute_tool", {"tool_name": "memory_recall", "arguments": {"query_intent": "x"}}, **IDS) == m.ExecuteTool(
        name="memory_recall", arguments={"query_intent": "x"}, **IDS
    )
    assert decode("execute_tool", {"tool_name": "t", "arguments": None}, **IDS) == m.ExecuteTool(name="t", arguments={}, **IDS)
    assert decode("get_settings", None, **IDS) == m.GetSettings(**IDS)
    assert decode("get_history", {}, **IDS) == m.GetHistory(limit=500, **IDS)
    assert decode("save_history", {"messages": []}, **IDS) == m.SaveHistory(messages=(), **IDS)
    assert decode("save_history", {"messages": [{"role": "assistant", "content": "hi", "extra": 1}]}, **IDS) == m.SaveHistory(
        messages=(m.Message(role="assistant", content="hi"),), **IDS
    )
    assert decode("set_settings", {"api_config": {"api_key": "sk-1", "model": "deepseek-chat"}, "tool_limits": {"memory_query_max": 30}}, **IDS) == (
        codec.SettingsUpdate(
            command=m.UpdateSettings(changes={"provider": {"openai": {"api_key": "sk-1", "model": "deepseek-chat"}}, "tools": {"limits": {"memory_query_max": 30}}}, **IDS)
        )
    )
    assert decode("shutdown", {}, **IDS) == codec.Shutdown()


def test_settings_edge_cases() -> None:
    def changes(body: dict[str, Any]) -> Any:
        update = decode("set_settings", body, **IDS)
        return update.command if isinstance(update, codec.SettingsUpdate) else update

    assert changes({}) == m.UpdateSettings(changes={}, **IDS)
    # A masked key read back from get_settings is not a key: the stored one stays.
    assert changes({"api_config": {"api_key": "sk-…abcd", "base_url": ""}}).changes == {"provider": {"openai": {"base_url": None}}}
    assert changes({"api_config": {"api_key": ""}}).changes == {"provider": {"openai": {"api_key": None}}}
    assert changes({"api_config": {"model": ""}}) == codec.fail("api_config.model must not be empty")
    assert changes({"api_config": {"model": 4}}) == codec.fail("api_config.model must be a string")
    assert changes({"tool_limits": {"plugin_query_max": 7}}).changes == {"tools": {"limits": {"plugin_query_max": 7}}}
    assert changes({"tool_limits": {"memory_query_max": True}}) == codec.fail("tool_limits.memory_query_max must be an integer >= 1 (got True)")
    assert changes({"tool_limits": {"memory_query_max": 0}}) == codec.fail("tool_limits.memory_query_max must be an integer >= 1 (got 0)")
    assert changes({"tool_limits": 5}) == codec.fail("invalid set_settings body: Expected `object | null`, got `int` - at `$.tool_limits`")


def test_application_settings_in_api_config() -> None:
    """TrulyMEM's settings page posts back what get_settings showed, its own keys included."""
    app = {"message_timeout": 600, "enable_web": True, "enable_tui": False, "web_port": 4096}
    update = decode("set_settings", {"api_config": {"model": "m", **app}}, **IDS)
    assert update == codec.SettingsUpdate(command=m.UpdateSettings(changes={"provider": {"openai": {"model": "m"}}}, **IDS), app=app)
    assert decode("set_settings", {"api_config": {"message_timeout": 0.5}}, **IDS).app == {"message_timeout": 0.5}  # type: ignore[union-attr]
    bad = {
        "message_timeout": (0, True, "600", float("inf"), 86_401),
        "web_port": (0, 65_536, 80.0, True, "4096"),
        "enable_web": (1, "yes", None),
    }
    for key, values in bad.items():
        for value in values:
            answer = decode("set_settings", {"api_config": {key: value}}, **IDS)
            assert isinstance(answer, Answer) and answer["error"].startswith(f"api_config.{key} must be "), (key, value)
    assert decode("set_settings", {"api_config": {"token": "x"}}, **IDS) == codec.fail(
        "unknown api_config field 'token'; expected api_key, base_url, model, message_timeout, enable_web, enable_tui, web_port"
    )


def test_answer_shape() -> None:
    answer = codec.ok({"content": "hi"})
    assert answer == {"success": True, "data": {"content": "hi"}}
    assert json.dumps(answer) == '{"success": true, "data": {"content": "hi"}}'
    assert answer["content"] == "hi" and answer.get("content") is None and "content" not in answer
    try:
        answer["missing"]
    except KeyError:
        pass
    else:
        raise AssertionError("a missing key must raise KeyError")
    assert codec.fail("timeout") == {"success": False, "error": "timeout"}
    assert PacketResponse.from_answer("x", codec.fail("boom")) == PacketResponse(id="x", success=False, error="boom")
    assert codec.error_answer(KernelError("not_found", "Unknown tool: t")) == {"success": False, "error": "Unknown tool: t"}


def _run(*events: m.Event) -> list[Answer | None]:
    """The collector fed as the run follower feeds it: only the events of request r1's run."""
    watch, collector = RunWatch("r1"), RunCollector()
    return [collector.feed(e) if watch.feed(e) else None for e in events]


def test_run_collector_transcript() -> None:
    ids = {"session_id": "packet", "run_id": "run1", "request_id": "r1"}
    other = {"session_id": "packet", "run_id": "run0", "request_id": "someone-else"}
    answers = _run(
        m.RunStarted(**ids),
        m.TextDelta(**other, text="not ours"),
        m.ToolCallStarted(**ids, call_id="c1", name="memory_commit", arguments='{"subject": "a"}'),
        m.ToolResult(**ids, call_id="c1", name="memory_commit", result="ok"),
        m.ToolCallStarted(**ids, call_id="c2", name="persona_get", arguments="{}"),
        m.ToolResult(**ids, call_id="c2", name="persona_get", result="tool call rejected: limit", outcome="limit_reached", is_error=True, rejected=True),
        m.ToolCallStarted(**ids, call_id="c3", name="t", arguments="not json"),
        m.ToolResult(**ids, call_id="c3", name="t", result="tool error: bad", outcome="error", is_error=True),
        m.RunFinished(**other, text="not ours"),
        m.RunFinished(**ids, text="done", rejected_tools=(("persona_get", "tool call rejected: limit"),)),
    )
    assert answers[:-1] == [None] * 9
    assert answers[-1] == {
        "success": True,
        "data": {
            "success": True,
            "content": "done",
            "tool_calls": [
                {"name": "memory_commit", "arguments": {"subject": "a"}, "result": "ok"},
                {"name": "t", "arguments": "not json", "result": "tool error: bad"},
            ],
            "rejected_tools": [["persona_get", "tool call rejected: limit"]],
        },
    }


def test_run_collector_failures() -> None:
    ids = {"session_id": "packet", "run_id": "run1", "request_id": "r1"}
    failed = m.RunFailed(**ids, error=m.ErrorInfo(code="provider_error", message="upstream exploded"))
    assert _run(failed) == [codec.fail("upstream exploded")]
    assert _run(m.RunFinished(**ids, text="part", interrupted=True)) == [codec.fail("The run was interrupted before its answer was complete")]
    drained = m.RunFinished(**ids, text="part", interrupted=True, interrupt_cause="drain")
    assert _run(drained) == [codec.fail("The gateway is draining: the run was interrupted before its answer was complete")]


def test_replies_to_answers() -> None:
    assert codec.reply_answer("execute_tool", m.ToolOutput(name="t", result="r")) == codec.ok({"success": True, "result": "r"})
    assert codec.reply_answer("execute_tool", m.ToolOutput(name="t", result="tool error: x", is_error=True)) == codec.fail("tool error: x")
    view = {"provider": {"openai": {"api_key": "sk-…abcd", "base_url": None, "model": "m"}}, "tools": {"limits": {"memory_query_max": 2}}}
    assert codec.reply_answer("get_settings", m.SettingsView(settings=view)) == codec.ok(
        {"api_config": {"api_key": "sk-…abcd", "base_url": None, "model": "m"}, "tool_limits": {"memory_query_max": 2}}
    )
    assert codec.reply_answer("set_settings", m.SettingsView(settings=view)) == codec.ok({"status": "settings_updated"})
    assert codec.reply_answer("save_history", m.Done(message="history cleared")) == codec.ok({"status": "history_saved"})
    assert codec.reply_answer("get_status", m.Done()) == codec.fail("unexpected kernel reply Done")
    history = (
        m.Message(role="user", content="hi"),
        m.Message(role="assistant", tool_calls=(m.ToolCall(id="c", name="t", arguments="{}"),)),
        m.Message(role="tool", content="result", tool_call_id="c"),
        m.Message(role="user", parts=(m.TextPart("look"), m.ImagePart(b"x"))),
        m.Message(role="assistant", content="done"),
    )
    assert codec.reply_answer("get_history", m.HistoryView(session_id="s", messages=history)) == codec.ok(
        {"history": [{"role": "user", "content": "hi"}, {"role": "user", "content": "look\n[image image/png]"}, {"role": "assistant", "content": "done"}]}
    )


def test_status_data() -> None:
    report = m.StatusReport(version="1", uptime_s=1.5, provider="echo", model="echo", sessions=1, active_runs=0, agents=1)
    data = codec.status_data(report, {"provider": {"openai": {"base_url": "u"}}}, {"db_path": "g.db"})
    assert (data["running"], data["graph_initialized"], data["client_initialized"]) == (True, True, False)
    assert data["config"]["db_path"] == "g.db" and data["config"]["notice"] == codec.ECHO_NOTICE
    real = codec.status_data(m.StatusReport(version="1", uptime_s=1, provider="openai", model="m", sessions=0, active_runs=0, agents=1), {}, {})
    assert real["client_initialized"] is True and "notice" not in real["config"]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
KEYS = st.sampled_from(
    ["user_input", "tool_name", "arguments", "api_config", "tool_limits", "messages", "role", "content", "api_key", "memory_query_max", "message_timeout", "web_port"]
)
BODIES = JSON | st.dictionaries(KEYS, JSON, max_size=4)
TYPES = st.sampled_from([*PacketType, *Mine, None, 3]) | st.text(max_size=15)


@settings(max_examples=200, deadline=None)
@given(TYPES, BODIES)
def test_decode_never_raises(packet_type: Any, body: Any) -> None:
    result = decode(packet_type, body, **IDS)
    if isinstance(result, Answer):
        assert result["success"] is False and isinstance(result["error"], str)
    else:
        assert isinstance(result, (codec.Shutdown, codec.SettingsUpdate, *m.Command.__args__))  # type: ignore[attr-defined]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["r1", "r2"]), st.sampled_from(["a", "b"]), st.text(max_size=20), st.booleans()), max_size=8))
def test_collector_never_raises(calls: list[tuple[str, str, str, bool]]) -> None:
    collector = RunCollector()
    for request_id, call_id, text, rejected in calls:
        ids = {"session_id": "s", "run_id": "x", "request_id": request_id}
        assert collector.feed(m.ToolCallStarted(**ids, call_id=call_id, name="t", arguments=text)) is None
        outcome = "rejected" if rejected else "ok"
        assert collector.feed(m.ToolResult(**ids, call_id=call_id, name="t", result=text, outcome=outcome, rejected=rejected)) is None
    answer = collector.feed(m.RunFinished(session_id="s", run_id="x", request_id="r1", text="t"))
    assert answer is not None and answer["success"] is True
