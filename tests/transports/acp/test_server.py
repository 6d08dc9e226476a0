"""The ACP server in-process over OS pipes, on asyncio and trio, with a scripted model.

These cover what the echo model cannot produce (reasoning, a turn limit, a
failing provider, token limits) and the editor misbehaving (never answering a
permission or file request, answering with an error, going away mid-question).
"""

from __future__ import annotations

import anyio
import pytest

from kernel.model import GetHistory, HistoryView, Usage
from kernel.provider import FinishChunk, ReasoningChunk, TextChunk, UsageChunk
from kernel.settings import AgentSettings, SessionSettings, Settings
from kernel.testing import (
    ScriptedProvider,
    failing_turn,
    running_kernel,
    text_turn,
    tool_turn,
)
from plugins.tools.builtin import BUILTIN_TOOLS
from transports.acp import AcpConfig

from ._pipes import editor, prompt, updates

pytestmark = pytest.mark.anyio


async def test_reasoning_and_max_tokens() -> None:
    turn = [ReasoningChunk("thinking hard"), TextChunk("partial"), UsageChunk(Usage(input_tokens=2, output_tokens=1)), FinishChunk("length")]
    async with running_kernel(ScriptedProvider([turn])) as kernel, editor(kernel) as (pipe, session):
        reply, before = await pipe.call(2, "session/prompt", prompt(session, "go"))
    assert reply["result"]["stopReason"] == "max_tokens"
    assert [u["content"]["text"] for u in updates(before, "agent_thought_chunk")] == ["thinking hard"]
    assert updates(before, "usage_update")[-1] == {"sessionUpdate": "usage_update", "used": 3, "size": 128000}


async def test_turn_limit_ends_with_max_turn_requests() -> None:
    provider = ScriptedProvider([tool_turn("current_time", "{}"), text_turn("never")])
    async with running_kernel(provider, tools=BUILTIN_TOOLS, agent=AgentSettings(max_turns=1)) as kernel, editor(kernel) as (pipe, session):
        reply, before = await pipe.call(2, "session/prompt", prompt(session, "what time is it"))
    assert reply["result"]["stopReason"] == "max_turn_requests"
    assert [u["status"] for u in updates(before, "tool_call_update")] == ["in_progress", "completed"]
    assert len(provider.requests) == 1


async def test_failed_run_is_a_json_rpc_error() -> None:
    async with running_kernel(ScriptedProvider([failing_turn("upstream exploded")])) as kernel, editor(kernel) as (pipe, session):
        reply, _ = await pipe.call(2, "session/prompt", prompt(session, "go"))
        error = reply["error"]
        assert error["code"] == -32603 and "upstream exploded" in error["message"]
        assert error["data"]["code"] == "provider_error"
        empty, _ = await pipe.call(3, "session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "  "}]})
        audio, _ = await pipe.call(4, "session/prompt", {"sessionId": session, "prompt": [{"type": "audio", "data": "AA==", "mimeType": "audio/wav"}]})
    assert empty["error"]["code"] == -32602 and audio["error"]["code"] == -32602


async def test_file_requests_time_out_or_fail_as_tool_errors() -> None:
    provider = ScriptedProvider([tool_turn("read_file", '{"path": "src/a.py"}'), text_turn("ok")])
    config = AcpConfig(fs_timeout_s=0.2)
    async with running_kernel(provider, tools=BUILTIN_TOOLS) as kernel, editor(kernel, config, fs=True) as (pipe, session):
        silent, before = await pipe.call(2, "session/prompt", prompt(session, "read it"))
        assert pipe.requests[-1]["method"] == "fs/read_text_file"
        assert pipe.requests[-1]["params"] == {"sessionId": session, "path": "/project/src/a.py"}
        provider.requests.clear()
        refused, after = await pipe.call(3, "session/prompt", prompt(session, "again"), lambda _m: {"error": {"code": -32002, "message": "no such buffer"}})
    assert silent["result"]["stopReason"] == "end_turn" and refused["result"]["stopReason"] == "end_turn"
    [timed_out] = [u for u in updates(before, "tool_call_update") if u["status"] == "failed"]
    assert "did not answer fs/read_text_file within 0.2s" in timed_out["content"][0]["content"]["text"]
    [error] = [u for u in updates(after, "tool_call_update") if u["status"] == "failed"]
    assert "no such buffer" in error["content"][0]["content"]["text"]


async def test_permission_timeout_rejects_and_late_answer_is_ignored() -> None:
    provider = ScriptedProvider([tool_turn("write_file", '{"path": "a.txt", "content": "x"}'), text_turn("ok")])
    async with running_kernel(provider, tools=BUILTIN_TOOLS) as kernel, editor(kernel, AcpConfig(permission_timeout_s=0.2)) as (pipe, session):
        reply, before = await pipe.call(2, "session/prompt", prompt(session, "write"))
        [question] = pipe.requests
        assert question["id"] == 0 and question["method"] == "session/request_permission"
        await pipe.send({"jsonrpc": "2.0", "id": 0, "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}})
        provider.requests.clear()
        again, _ = await pipe.call(3, "session/prompt", prompt(session, "hello"))
    assert reply["result"]["stopReason"] == "end_turn" and again["result"]["stopReason"] == "end_turn"
    assert updates(before, "tool_call_update")[-1]["status"] == "failed"


async def test_reject_always_is_remembered() -> None:
    provider = ScriptedProvider([tool_turn("write_file", '{"path": "a.txt", "content": "x"}'), text_turn("ok")])
    answer = lambda _m: {"result": {"outcome": {"outcome": "selected", "optionId": "reject_always"}}}
    async with running_kernel(provider, tools=BUILTIN_TOOLS) as kernel, editor(kernel) as (pipe, session):
        first, _ = await pipe.call(2, "session/prompt", prompt(session, "write"), answer)
        provider.requests.clear()
        second, before = await pipe.call(3, "session/prompt", prompt(session, "write again"), answer)
    assert len(pipe.requests) == 1
    assert [u["status"] for u in updates(before, "tool_call_update")] == ["failed"]
    assert first["result"]["stopReason"] == second["result"]["stopReason"] == "end_turn"


async def test_cancel_while_asking_and_queued_prompts_all_answer_cancelled() -> None:
    provider = ScriptedProvider([tool_turn("write_file", '{"path": "a.txt", "content": "x"}'), text_turn("ok")], delay_s=0.01)
    async with running_kernel(provider, tools=BUILTIN_TOOLS) as kernel, editor(kernel) as (pipe, session):
        await pipe.send({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": prompt(session, "write")})
        await pipe.send({"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": prompt(session, "queued")})
        while (message := await pipe.receive()).get("method") != "session/request_permission":
            pass
        await pipe.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}})
        answers = {}
        while len(answers) < 2:
            message = await pipe.receive()
            if "method" not in message:
                assert message["id"] not in answers, "a prompt was answered twice"
                answers[message["id"]] = message
        # The editor answers the stale question late; nothing breaks.
        await pipe.send({"jsonrpc": "2.0", "id": 0, "result": {"outcome": {"outcome": "cancelled"}}})
        after, _ = await pipe.call(4, "session/set_mode", {"sessionId": session, "modeId": "ask"})
    assert answers[2]["result"] == {"stopReason": "cancelled"} and answers[3]["result"] == {"stopReason": "cancelled"}
    assert after["result"] == {}


async def test_eof_while_asking_rejects_and_returns() -> None:
    provider = ScriptedProvider([tool_turn("write_file", '{"path": "a.txt", "content": "x"}'), text_turn("ok")])
    async with running_kernel(provider, tools=BUILTIN_TOOLS) as kernel:
        with anyio.fail_after(15):
            async with editor(kernel) as (pipe, session):
                await pipe.send({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": prompt(session, "write")})
                while (await pipe.receive()).get("method") != "session/request_permission":
                    pass
            # editor() closed stdin and waited for the gateway to close stdout: serve returned,
            # having let the session go (nobody else follows it).
        assert session not in kernel.sessions
        stored = await kernel.execute(GetHistory(session_id=session))
        assert isinstance(stored, HistoryView)
        history = [m.content for m in stored.messages if m.role == "tool"]
    assert history and "declined" in history[0]


async def test_request_limit_refuses_at_once_and_cancel_still_works() -> None:
    provider = ScriptedProvider([text_turn(*[f"w{i} " for i in range(200)])], delay_s=0.01)
    async with running_kernel(provider) as kernel, editor(kernel, AcpConfig(max_concurrent_requests=1)) as (pipe, session):
        await pipe.send({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": prompt(session, "long")})
        refused, _ = await pipe.call(3, "session/prompt", prompt(session, "second"))
        assert refused["error"]["code"] == -32603 and refused["error"]["data"] == {"code": "busy"}
        await pipe.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}})
        cancelled, _ = await pipe.until(2)
        assert cancelled["result"] == {"stopReason": "cancelled"}
        as_request, _ = await pipe.call(4, "session/cancel", {"sessionId": session})
    assert as_request == {"jsonrpc": "2.0", "id": 4, "result": None}


async def test_a_prompt_whose_run_end_was_lost_is_answered_cancelled() -> None:
    settings = Settings()
    settings.session = SessionSettings(subscriber_buffer=8, subscriber_buffer_bytes=8192, lag_grace_s=0.2, event_retention=4, event_retention_bytes=4096)
    provider = ScriptedProvider([text_turn(*["x" * 1000 for _ in range(300)])])
    async with running_kernel(provider, settings=settings) as kernel, editor(kernel) as (pipe, session):
        await pipe.send({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": prompt(session, "flood")})
        # The editor stops reading: stdout fills, the forwarder falls behind and is cut off,
        # and the run ends while its events are gone for good.
        live = kernel.sessions[session]
        with anyio.fail_after(10):
            while live.usage.output_tokens == 0 or live.busy:
                await anyio.sleep(0.05)
        lost, _ = await pipe.until(2)
        assert lost["result"] == {"stopReason": "cancelled"}
        provider.turns = [text_turn("back")]
        again, before = await pipe.call(3, "session/prompt", prompt(session, "again"))
    assert again["result"]["stopReason"] == "end_turn"
    assert "back" in "".join(u["content"]["text"] for u in updates(before, "agent_message_chunk"))
