"""Session methods, ``$/cancel_request`` and the terminal tool, in-process over OS pipes.

Raw JSON-RPC where the SDK has no method (``session/delete``, ``logout``,
``$/cancel_request``), and what an SDK client never does: answering a terminal
request with an error, or never answering ``wait_for_exit``.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from kernel import Follower
from kernel import model as m
from kernel.settings import Settings
from kernel.testing import ScriptedProvider, running_kernel, text_turn, tool_turn
from plugins.tools.builtin import BUILTIN_TOOLS
from transports.acp import AcpConfig

from ._pipes import editor, prompt, updates

pytestmark = pytest.mark.anyio


class SlowModels(ScriptedProvider):
    """A provider whose model list never comes (an upstream that hangs on GET /models)."""

    async def list_models(self) -> list[str]:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


def slow_words(n: int = 300) -> list[list[Any]]:
    return [text_turn(*[f"w{i} " for i in range(n)])]


async def test_cancel_request_cancels_a_request_and_a_prompt_answers_cancelled() -> None:
    async with running_kernel(SlowModels()) as kernel, editor(kernel, AcpConfig(model_list_timeout_s=60), new_session=False) as (pipe, _):
        await pipe.send({"jsonrpc": "2.0", "id": "new-1", "method": "session/new", "params": {"cwd": "/project"}})
        await pipe.send({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": "new-1"}})
        cancelled, _ = await pipe.until("new-1")
        assert cancelled["error"] == {"code": -32800, "message": "Request cancelled"}
        # Unknown or malformed cancellations change nothing.
        await pipe.send({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 12345}})
        await pipe.send({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"nope": 1}})
        alive, _ = await pipe.call("init-2", "initialize", {"protocolVersion": 1})
        assert alive["result"]["protocolVersion"] == 1
    # With a short bound on the model list, session/new answers (offering the session's model).
    provider = SlowModels([*slow_words(), text_turn("short")], delay_s=0.01)
    async with running_kernel(provider) as kernel, editor(kernel, AcpConfig(model_list_timeout_s=0.05)) as (pipe, session):
        await pipe.send({"jsonrpc": "2.0", "id": 7, "method": "session/prompt", "params": prompt(session, "long")})
        while (await pipe.receive()).get("params", {}).get("update", {}).get("sessionUpdate") != "agent_message_chunk":
            pass
        await pipe.send({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 7}})
        answer, _ = await pipe.until(7)
        assert answer["result"] == {"stopReason": "cancelled"}
        again, _ = await pipe.call(8, "session/prompt", prompt(session, "short"))
        assert again["result"]["stopReason"] == "end_turn"
        # Cancelled on the very next line, maybe before its handler ran: still "cancelled".
        provider.turns = slow_words() * 3
        for rid in ("p1", "p2", "p3"):
            await pipe.send({"jsonrpc": "2.0", "id": rid, "method": "session/prompt", "params": prompt(session, "long")})
            await pipe.send({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": rid}})
            early, _ = await pipe.until(rid)
            assert early["result"] == {"stopReason": "cancelled"}


async def test_delete_close_logout_and_authenticate() -> None:
    provider = ScriptedProvider([text_turn("hello")])
    async with running_kernel(provider) as kernel, editor(kernel) as (pipe, session):
        await pipe.call(2, "session/prompt", prompt(session, "remember me"))
        listed, _ = await pipe.call(3, "session/list", {})
        assert [s["sessionId"] for s in listed["result"]["sessions"]] == [session]
        assert (await pipe.call(4, "session/delete", {"sessionId": session}))[0]["result"] == {}
        with pytest.raises(m.KernelError):
            await kernel.execute(m.GetSession(session_id=session))
        gone, _ = await pipe.call(5, "session/prompt", prompt(session, "hello?"))
        assert gone["error"]["code"] == -32002
        assert (await pipe.call(6, "session/delete", {"sessionId": session}))[0]["result"] == {}, "deleting twice is no error"
        assert (await pipe.call(7, "session/list", {}))[0]["result"] == {"sessions": []}
        # A session of the store this editor never opened (another client's) is deleted too.
        other = await kernel.execute(m.OpenSession(label="another client's"))
        assert isinstance(other, m.SessionOpened)
        listed, _ = await pipe.call("list-2", "session/list", {"cwd": "/elsewhere"})
        assert [(s["sessionId"], s["cwd"]) for s in listed["result"]["sessions"]] == [(other.session.session_id, "/elsewhere")]
        assert (await pipe.call("del-2", "session/delete", {"sessionId": other.session.session_id}))[0]["result"] == {}
        assert (await pipe.call("list-3", "session/list", {}))[0]["result"] == {"sessions": []}
        assert (await pipe.call(8, "session/close", {"sessionId": "never-opened"}))[0]["error"]["code"] == -32002
        assert (await pipe.call(9, "logout", {}))[0]["result"] == {}
        assert (await pipe.call(10, "authenticate", {"methodId": "anything"}))[0]["result"] == {}
        assert (await pipe.call(11, "authenticate", {}))[0]["result"] == {}
        assert (await pipe.call("11b", "authenticate", [1]))[0]["error"]["code"] == -32602
        relative, _ = await pipe.call(12, "session/list", {"cwd": "relative"})
        assert relative["error"]["code"] == -32602


async def test_close_cancels_the_prompt_and_lets_another_client_keep_the_session() -> None:
    provider = ScriptedProvider(slow_words(), delay_s=0.01)
    async with running_kernel(provider) as kernel, editor(kernel, fs=True, terminal=True) as (pipe, session):
        live = kernel.sessions[session]
        assert live.files is not None and [t.name for s in live.tool_sources for t in s.tools()] == ["run_command"]
        async with await Follower.open(kernel, session, client="other"):
            await pipe.send({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": prompt(session, "long")})
            while (await pipe.receive()).get("params", {}).get("update", {}).get("sessionUpdate") != "agent_message_chunk":
                pass
            await pipe.send({"jsonrpc": "2.0", "id": 3, "method": "session/close", "params": {"sessionId": session}})
            answers = {}
            while len(answers) < 2:
                message = await pipe.receive()
                if "method" not in message:
                    answers[message["id"]] = message
            assert answers[2]["result"] == {"stopReason": "cancelled"} and answers[3]["result"] == {}
            # Watched by another client: still loaded, but without this editor's files and terminal.
            assert kernel.sessions[session] is live and live.files is None and live.tool_sources == ()
        reply, _ = await pipe.call(4, "session/resume", {"sessionId": session, "cwd": "/project"})
        assert reply["result"]["modes"]["currentModeId"] == "default"
        assert (await pipe.call(5, "session/close", {"sessionId": session}))[0]["result"] == {}
        assert session not in kernel.sessions, "nobody follows it any more: unloaded"


def run_command_turn(command: str = "make") -> list[Any]:
    return tool_turn("run_command", f'{{"command": "{command}", "args": ["test"]}}', call_id="call_t")


async def test_a_command_that_outlives_the_tool_timeout_is_killed_and_released() -> None:
    settings = Settings()
    settings.tools.timeout_s = 0.3
    provider = ScriptedProvider([run_command_turn(), text_turn("gave up")])
    answers = {
        "session/request_permission": {"result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}},
        "terminal/create": {"result": {"terminalId": "t-1"}},
        "terminal/wait_for_exit": None,  # never answered
        "terminal/kill": {"result": {}},
        "terminal/release": {"result": {}},
    }
    async with running_kernel(provider, settings=settings) as kernel, editor(kernel, terminal=True) as (pipe, session):
        reply, before = await pipe.call(2, "session/prompt", prompt(session, "build it"), lambda r: answers[r["method"]])
    assert reply["result"]["stopReason"] == "end_turn"
    asked = [(r["method"], r["params"].get("terminalId")) for r in pipe.requests]
    assert asked == [
        ("session/request_permission", None),
        ("terminal/create", None),
        ("terminal/wait_for_exit", "t-1"),
        ("terminal/kill", "t-1"),
        ("terminal/release", "t-1"),
    ]
    create = pipe.requests[1]["params"]
    assert create == {"sessionId": session, "command": "make", "args": ["test"], "cwd": "/project", "outputByteLimit": 1048576}
    shown, done = [u for u in updates(before, "tool_call_update") if u.get("content")][-2:]
    assert shown["content"] == done["content"] == [{"type": "terminal", "terminalId": "t-1"}]
    assert done["status"] == "failed"
    [tool] = [msg for msg in provider.requests[1].messages if msg.role == "tool"]
    assert tool.content == "tool error: run_command timed out after 0.3s"


async def test_a_terminal_the_editor_refuses_or_a_directory_outside_is_a_tool_error() -> None:
    outside = tool_turn("run_command", '{"command": "ls", "cwd": "../.."}', call_id="call_o")
    provider = ScriptedProvider([run_command_turn("rm"), text_turn("ok"), outside, text_turn("ok")])
    answers = {
        "session/request_permission": {"result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}},
        "terminal/create": {"error": {"code": -32603, "message": "terminals are disabled"}},
    }
    async with running_kernel(provider, tools=BUILTIN_TOOLS) as kernel, editor(kernel, terminal=True) as (pipe, session):
        refused, refused_updates = await pipe.call(2, "session/prompt", prompt(session, "clean up"), lambda r: answers[r["method"]])
        escaped, escaped_updates = await pipe.call(3, "session/prompt", prompt(session, "look around"), lambda r: answers[r["method"]])
    assert refused["result"]["stopReason"] == escaped["result"]["stopReason"] == "end_turn"
    assert [r["method"] for r in pipe.requests] == ["session/request_permission", "terminal/create", "session/request_permission"]
    [failed] = [u for u in updates(refused_updates, "tool_call_update") if u["status"] == "failed"]
    assert "terminal/create: terminals are disabled" in failed["content"][0]["content"]["text"]
    [failed] = [u for u in updates(escaped_updates, "tool_call_update") if u["status"] == "failed"]
    assert "outside the project directory /project" in failed["content"][0]["content"]["text"]


async def test_the_turn_limit_option_stops_a_prompt_at_the_limit() -> None:
    provider = ScriptedProvider([tool_turn("current_time", "{}", call_id=f"c{i}") for i in range(8)])
    async with running_kernel(provider, tools=BUILTIN_TOOLS) as kernel, editor(kernel) as (pipe, session):
        chosen, _ = await pipe.call(2, "session/set_config_option", {"sessionId": session, "configId": "max_turns", "value": "5"})
        assert {o["id"]: o["currentValue"] for o in chosen["result"]["configOptions"]}["max_turns"] == "5"
        reply, _ = await pipe.call(3, "session/prompt", prompt(session, "what time is it, again and again"))
    assert reply["result"]["stopReason"] == "max_turn_requests"
    assert len(provider.requests) == 5
