"""The official ``@ag-ui/client`` HttpAgent (under Node) against the gateway: a text turn,
the agent's tool, a client tool, an approval interrupt and its resume, and a reconnect in
the middle of a run. Every stream passes the client's own verifier (``verifyEvents``) and
its schemas, which warn about anything they strip: no warning is allowed."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from kernel import Kernel, ProviderRequest, TextChunk
from kernel import model as m
from kernel.testing import ScriptedProvider, running_kernel, text_turn, tool_turn
from tests.transports.http._helpers import ADD_TOOL, DANGER_TOOL

from ._helpers import agui_server, client_modules, run_client, text_of, types

pytestmark = pytest.mark.anyio

WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city, looked up by the front-end",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.fixture(scope="module")
def modules() -> tuple[str, Path]:
    return client_modules()


async def _history(kernel: Kernel, thread_id: str) -> tuple[m.Message, ...]:
    reply = await kernel.execute(m.GetHistory(session_id=thread_id))
    assert isinstance(reply, m.HistoryView)
    return reply.messages


def _served(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(msg["role"], text_of(msg)) for msg in messages]


async def test_text_turns(modules: tuple[str, Path]) -> None:
    provider = ScriptedProvider([text_turn("Hello", " there"), text_turn("Second", " answer")])
    async with running_kernel(provider) as kernel, agui_server(kernel) as url:
        seen = await run_client(modules, url, "thread-text", [{"do": "say", "text": "Hi"}, {"do": "run"}, {"do": "say", "text": "Again"}, {"do": "run"}])
        history = await _history(kernel, "thread-text")
    first, second = seen["runs"]
    assert types(first) == ["RUN_STARTED", "TEXT_MESSAGE_START", *["TEXT_MESSAGE_CONTENT"] * (len(first["events"]) - 4), "TEXT_MESSAGE_END", "RUN_FINISHED"]
    assert first["finished"] == [{"outcome": "success", "result": {"stopReason": "end_turn"}, "pendingToolCallIds": []}]
    assert _served(seen["messages"]) == [("user", "Hi"), ("assistant", "Hello there"), ("user", "Again"), ("assistant", "Second answer")]
    assert second["finished"][0]["outcome"] == "success"
    # The second run sent the model the thread once: only the new user turn was added.
    sent = [(msg.role, msg.content) for msg in provider.requests[1].messages if msg.role != "system"]
    assert sent == [("user", "Hi"), ("assistant", "Hello there"), ("user", "Again")]
    assert [(msg.role, msg.content) for msg in history] == [*sent, ("assistant", "Second answer")]


async def test_the_agents_own_tool(modules: tuple[str, Path]) -> None:
    provider = ScriptedProvider([tool_turn("add", '{"a": 2, "b": 3}', call_id="call_add"), text_turn("It is 5")])
    async with running_kernel(provider, tools=[ADD_TOOL]) as kernel, agui_server(kernel) as url:
        seen = await run_client(modules, url, "thread-tool", [{"do": "say", "text": "2+3?"}, {"do": "run"}])
    (run,) = seen["runs"]
    assert types(run)[:6] == ["RUN_STARTED", "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT", "TEXT_MESSAGE_START"]
    result = next(e for e in run["events"] if e["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] == "call_add" and result["content"] == "5"
    asked, call, answer, text = seen["messages"]
    assert (asked["role"], asked["content"]) == ("user", "2+3?")
    assert call["role"] == "assistant" and call["toolCalls"] == [{"id": "call_add", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]
    assert (answer["role"], answer["toolCallId"], answer["content"]) == ("tool", "call_add", "5")
    assert answer["metadata"] == {"outcome": "ok"}  # the structured outcome, kept on the client's message
    assert (text["role"], text["content"]) == ("assistant", "It is 5")
    assert run["finished"][0]["pendingToolCallIds"] == []  # the agent's call was answered in the run


async def test_a_client_tool_round_trip(modules: tuple[str, Path]) -> None:
    provider = ScriptedProvider([tool_turn("get_weather", '{"city": "Oslo"}', call_id="call_w"), text_turn("Sunny in Oslo")])
    async with running_kernel(provider) as kernel, agui_server(kernel) as url:
        steps = [
            {"do": "say", "text": "Weather in Oslo?"},
            {"do": "run", "tools": [WEATHER]},
            {"do": "answer_tools", "content": "sunny, 21 C"},
            {"do": "run", "tools": [WEATHER]},
        ]
        seen = await run_client(modules, url, "thread-client-tool", steps)
        history = await _history(kernel, "thread-client-tool")
    first, second = seen["runs"]
    assert types(first) == ["RUN_STARTED", "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "RUN_FINISHED"]
    assert first["finished"][0]["outcome"] == "success" and first["finished"][0]["pendingToolCallIds"] == ["call_w"]
    assert provider.requests[0].tools[-1].name == "get_weather"  # offered to the model as the client sent it
    assert "".join(e["delta"] for e in second["events"] if e["type"] == "TEXT_MESSAGE_CONTENT") == "Sunny in Oslo"
    answered = next(msg for msg in provider.requests[1].messages if msg.role == "tool")
    assert (answered.tool_call_id, answered.content) == ("call_w", "sunny, 21 C")
    assert [msg.role for msg in history] == ["user", "assistant", "tool", "assistant"]


@pytest.mark.parametrize("approved", [True, False])
async def test_an_approval_interrupt_and_its_resume(modules: tuple[str, Path], approved: bool) -> None:
    provider = ScriptedProvider([tool_turn("danger", "{}", call_id="call_d"), text_turn("Over")])
    async with running_kernel(provider, tools=[DANGER_TOOL]) as kernel, agui_server(kernel) as url:
        answer = {"status": "resolved", "payload": {"approved": approved, "reason": "not today"}}
        seen = await run_client(modules, url, "thread-approval", [{"do": "say", "text": "Do it"}, {"do": "run"}, {"do": "run", "resume": answer}])
        history = await _history(kernel, "thread-approval")
    first, second = seen["runs"]
    assert types(first) == ["RUN_STARTED", "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "RUN_FINISHED"]
    (finished,) = first["finished"]
    assert finished["outcome"] == "interrupt"
    (interrupt,) = finished["interrupts"]
    assert interrupt["reason"] == "tool_approval" and interrupt["toolCallId"] == "call_d"
    assert interrupt["responseSchema"]["required"] == ["approved"]
    assert types(second)[:2] == ["RUN_STARTED", "TOOL_CALL_RESULT"] and types(second)[-1] == "RUN_FINISHED"
    assert second["finished"][0]["outcome"] == "success" and seen["pendingInterrupts"] == []
    result = next(e for e in second["events"] if e["type"] == "TOOL_CALL_RESULT")
    tool_message = next(msg for msg in history if msg.role == "tool")
    if approved:
        assert result["content"] == "done" and tool_message.outcome == "ok" and result["metadata"] == {"outcome": "ok"}
    else:
        assert "not today" in result["content"] and tool_message.outcome == "rejected" and result["metadata"]["outcome"] == "rejected"
    # The waiting kernel run went on: one user turn, two model calls.
    assert len(provider.requests) == 2 and [msg.role for msg in history] == ["user", "assistant", "tool", "assistant"]


class GatedProvider:
    """Streams ``before`` words, waits for ``gate``, then streams ``after`` words."""

    name = "gated"
    model = "gated-1"

    def __init__(self, before: list[str], after: list[str]) -> None:
        self.before, self.after = before, after
        self.gate = anyio.Event()

    async def stream(self, request: ProviderRequest) -> AsyncGenerator[Any, None]:
        for word in self.before:
            yield TextChunk(word)
        with anyio.fail_after(60):
            await self.gate.wait()
        for word in self.after:
            await anyio.lowlevel.checkpoint()
            yield TextChunk(word)

    async def aclose(self) -> None:
        return None


async def test_a_reconnect_in_the_middle_of_a_run_loses_nothing(modules: tuple[str, Path]) -> None:
    before = [f"w{i} " for i in range(5)]
    after = [f"w{i} " for i in range(5, 40)]
    provider = GatedProvider(before, after)
    async with running_kernel(provider) as kernel, agui_server(kernel, on_reconnect=provider.gate) as url:
        steps = [{"do": "say", "text": "Talk"}, {"do": "run", "cutAfter": 3}, {"do": "connect"}, {"do": "connect_fresh"}]
        seen = await run_client(modules, url, "thread-reconnect", steps)
        history = await _history(kernel, "thread-reconnect")
    cut, resumed, fresh = seen["runs"]
    full = "".join(before + after)
    assert types(cut)[:3] == ["RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT"]
    assert cut["errors"] == [{"message": "the connection was lost", "code": "abort"}]
    started, opened = cut["events"][0], cut["events"][1]
    # The reconnect opens the same run and message again, and carries on where the cut was.
    assert resumed["events"][0]["type"] == "RUN_STARTED" and resumed["events"][0]["runId"] == started["runId"]
    assert resumed["events"][1] == {"type": "TEXT_MESSAGE_START", "messageId": opened["messageId"], "role": "assistant"}
    assert types(resumed)[-2:] == ["TEXT_MESSAGE_END", "RUN_FINISHED"]
    got = cut["events"][2]["delta"] + "".join(e["delta"] for e in resumed["events"] if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert got == full
    assert _served(seen["messages"]) == [("user", "Talk"), ("assistant", full)]
    assert [(msg.role, msg.content) for msg in history] == [("user", "Talk"), ("assistant", full)]
    # A client that connects afresh (a reloaded page) gets the thread's messages.
    assert types(fresh) == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"] and fresh["finished"][0]["outcome"] == "success"
    assert _served(fresh["messages"]) == [("user", "Talk"), ("assistant", full)]
