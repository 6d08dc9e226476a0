"""The OpenFang WebSocket against a real hypercorn server and a real ``websockets`` client."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from typing import Any

import anyio
import pytest
import websockets

from kernel import model as m
from kernel.testing import ScriptedProvider, text_turn, tool_turn
from kernel.tools import Tool
from plugins.providers.echo import EchoProvider
from tests.asyncio_clients import in_asyncio
from tests.cycles import garbage_of
from tests.kernel.helpers import StallingStore
from transports.openfang.sessionids import alias

from ._helpers import (
    connect,
    make_config,
    recv,
    recv_until,
    serving,
    turn,
    upgrade_status,
)

pytestmark = pytest.mark.anyio


async def _clock(args: dict[str, Any], ctx: Any) -> str:
    return f"12:00 {args.get('tz', '')}".strip()


CLOCK = Tool(name="clock", description="The time", parameters={"type": "object", "properties": {"tz": {"type": "string"}}}, handler=_clock)
GUARDED = Tool(name="guarded", description="Needs a yes", parameters={"type": "object"}, handler=_clock, requires_approval=True)


async def test_plain_turn_sends_openfangs_exact_sequence() -> None:
    async with serving(ScriptedProvider([text_turn("Hello", " world", usage=(12, 34))])) as server:

        async def client() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
            async with websockets.connect(server.ws_url) as ws:
                hello = [await recv(ws), await recv(ws)]
                await ws.send(json.dumps({"type": "message", "content": "hi"}))
                return hello, await recv_until(ws, "response", "error")

        hello, frames = await in_asyncio(client)
    assert hello[0] == {"type": "connected", "agent_id": server.agent_id}
    assert hello[1]["type"] == "agents_updated"
    assert hello[1]["agents"][0] == {
        "id": server.agent_id, "name": "General Assistant", "state": "Running", "model_provider": "scripted", "model_name": "scripted-1",
    }
    assert turn(frames) == ["typing:start", "phase:streaming", "text_delta", "phase:done", "typing:stop", "response"]
    assert frames[-1] == {
        "type": "response", "content": "Hello world", "input_tokens": 12, "output_tokens": 34,
        "iterations": 0, "cost_usd": None, "context_pressure": "low",
    }
    assert "".join(f["content"] for f in frames if f["type"] == "text_delta") == "Hello world"


async def test_tool_turn_sends_tool_cards_with_ids() -> None:
    provider = ScriptedProvider([tool_turn("clock", '{"tz":"UTC"}', call_id="call_7"), text_turn("It is ", "noon")])
    async with serving(provider, tools=[CLOCK]) as server:

        async def client() -> list[dict[str, Any]]:
            ws = await connect(server.ws_url)
            async with ws:
                await ws.send('{"type":"message","content":"what time is it?"}')
                return await recv_until(ws, "response", "error")

        frames = await in_asyncio(client)
    assert turn(frames) == [
        "typing:start", "phase:streaming", "typing:tool", "tool_start", "tool_end", "phase:tool_use",
        "tool_result", "phase:thinking", "text_delta", "phase:done", "typing:stop", "response",
    ]
    by_type = {f["type"]: f for f in frames}
    assert frames[2] == {"type": "typing", "state": "tool", "tool": "clock"}
    assert by_type["tool_start"] == {"type": "tool_start", "id": "call_7", "tool": "clock"}
    assert by_type["tool_end"] == {"type": "tool_end", "id": "call_7", "tool": "clock", "input": '{"tz":"UTC"}'}
    assert frames[5] == {"type": "phase", "phase": "tool_use", "detail": "clock"}
    assert by_type["tool_result"] == {"type": "tool_result", "id": "call_7", "tool": "clock", "result": "12:00 UTC", "is_error": False}
    assert by_type["response"]["content"] == "It is noon" == "".join(f["content"] for f in frames if f["type"] == "text_delta")


async def test_ping_plain_text_and_bad_frames_keep_the_socket_open() -> None:
    async with serving(ScriptedProvider([text_turn("ok")])) as server:

        async def client() -> dict[str, Any]:
            seen: dict[str, Any] = {}
            ws = await connect(server.ws_url)
            async with ws:
                await ws.send('{"type":"ping"}')
                seen["pong"] = await recv(ws)
                await ws.send("plain words, not JSON")
                seen["plain"] = (await recv_until(ws, "response"))[-1]
                await ws.send('{"content":"no type field"}')
                seen["untyped"] = (await recv_until(ws, "response"))[-1]
                await ws.send('{"type":"message","content":""}')
                seen["empty"] = await recv(ws)
                await ws.send('{"type":"dance"}')
                seen["unknown"] = await recv(ws)
                await ws.send(json.dumps({"type": "message", "content": "x" * 70_000}))
                seen["oversize"] = await recv(ws)
                await ws.send(b"\xff\xfe binary")
                seen["binary"] = await recv(ws)
                await ws.send('{"type":"ping"}')
                seen["still_open"] = await recv(ws)
            return seen

        seen = await in_asyncio(client)
        prompts = [r.messages[-1].content for r in server.kernel.provider_for(server.kernel.agent(None)).requests]  # type: ignore[attr-defined]
    assert seen["pong"] == {"type": "pong"} and seen["still_open"] == {"type": "pong"}
    assert seen["plain"]["type"] == seen["untyped"]["type"] == "response"
    assert prompts == ["plain words, not JSON", "no type field"]
    assert seen["empty"] == {"type": "error", "content": "Missing or empty 'content' field"}
    assert seen["unknown"] == {"type": "error", "content": "Unknown message type: dance"}
    assert seen["oversize"] == {"type": "error", "content": "Message too large (max 64KB)"}
    assert seen["binary"]["type"] == "error"


async def test_rate_limit_answers_with_an_error_frame() -> None:
    async with serving(config=make_config(rate_limit_per_minute=3)) as server:

        async def client() -> list[dict[str, Any]]:
            ws = await connect(server.ws_url)
            async with ws:
                for _ in range(4):
                    await ws.send('{"type":"ping"}')
                frames = [await recv(ws) for _ in range(4)]
                return frames

        frames = await in_asyncio(client)
    assert frames[:3] == [{"type": "pong"}] * 3
    assert frames[3] == {"type": "error", "content": "Rate limit exceeded. Max 3 messages per minute."}


class CountingProvider(ScriptedProvider):
    """A scripted model that counts the chunks it produced and holds back its last one
    until ``release`` is set, so what a client saw can be ordered against its stream."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.produced = 0
        self.release = threading.Event()

    async def stream(self, request: Any) -> Any:
        self.requests.append(request)
        turn = self.turns[0]
        for chunk in turn:
            await anyio.sleep(self.delay_s)
            while self.produced == len(turn) - 1 and not self.release.is_set():
                await anyio.sleep(0.01)
            self.produced += 1
            yield chunk


async def test_stop_interrupts_a_running_turn() -> None:
    provider = CountingProvider([text_turn(*["word "] * 60)], delay_s=0.03)
    chunks = len(provider.turns[0])
    async with serving(provider) as server:

        async def client() -> tuple[list[dict[str, Any]], int]:
            ws = await connect(server.ws_url)
            async with ws:
                await ws.send('{"type":"message","content":"talk a lot"}')
                frames = await recv_until(ws, "text_delta")
                await ws.send('{"type":"command","command":"stop"}')
                frames += await recv_until(ws, "command_result", "response", "error")
                produced_at_ack = provider.produced  # the model's progress when the stop was acknowledged
                provider.release.set()  # a stop that did not interrupt would now let the turn complete
                if frames[-1]["type"] == "command_result":
                    frames += await recv_until(ws, "response", "error")
                else:  # the turn's end overtook the acknowledgement
                    frames.append(await recv(ws))
                return frames, produced_at_ack

        frames, produced_at_ack = await in_asyncio(client)
    assert produced_at_ack < chunks, "stop must be acknowledged before the model's stream is over"
    assert {"type": "command_result", "command": "stop", "message": "Run cancelled."} in frames
    rest = [f for f in frames if f["type"] != "command_result"]
    assert turn(rest)[-2:] == ["typing:stop", "response"]
    response = rest[-1]
    assert response["interrupted"] is True
    streamed = "".join(f["content"] for f in rest if f["type"] == "text_delta")
    assert response["content"] == streamed and 0 < len(streamed) < len("word ") * 60


async def test_two_sockets_on_one_agent_each_get_their_own_turn() -> None:
    async with serving(EchoProvider(delay_s=0.01)) as server:

        async def client() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
            a = await connect(server.ws_url)
            b = await connect(server.ws_url)
            async with a, b:
                await a.send('{"type":"message","content":"alpha"}')
                await b.send('{"type":"message","content":"beta"}')
                return await recv_until(a, "response"), await recv_until(b, "response")

        frames_a, frames_b = await in_asyncio(client)
        assert len(server.kernel.sessions) == 1, "both sockets use the agent's active session"
    assert frames_a[-1]["content"] == "echo: alpha" and frames_b[-1]["content"] == "echo: beta"
    assert "beta" not in json.dumps(frames_a) and "alpha" not in json.dumps(frames_b)


async def test_session_id_in_a_frame_picks_the_session() -> None:
    """A frame's ``session_id`` is the session of that name in every dialect (the seed's
    ``session_123``, stdio's ``notes``), also when it names the UUID that session is shown as."""
    async with serving(ScriptedProvider([text_turn("hi")])) as server:
        await server.kernel.execute(m.OpenSession(session_id="notes", agent_id=server.agent_id))  # as stdio makes them
        fresh = str(uuid.uuid4())

        async def client() -> None:
            ws = await connect(server.ws_url)
            async with ws:
                for name in ("session_123", alias("session_123"), "notes", alias("notes"), fresh.replace("-", "")):
                    await ws.send(json.dumps({"type": "message", "content": f"to {name}", "session_id": name}))
                    await recv_until(ws, "response")

        await in_asyncio(client)

        async def said(session_id: str) -> list[str]:
            history = await server.kernel.execute(m.GetHistory(session_id=session_id))
            assert isinstance(history, m.HistoryView)
            return [msg.content for msg in history.messages if msg.role == "user"]

        assert await said("session_123") == ["to session_123", f"to {alias('session_123')}"]
        assert await said("notes") == ["to notes", f"to {alias('notes')}"]
        assert await said(fresh) == [f"to {fresh.replace('-', '')}"]  # a new UUID-named session gets the canonical id


async def test_commands_over_the_socket() -> None:
    provider = ScriptedProvider([tool_turn("clock", "{}"), text_turn("done")])
    async with serving(provider, tools=[CLOCK]) as server:

        async def client() -> list[dict[str, Any]]:
            out = []
            ws = await connect(server.ws_url)
            async with ws:
                for command, args in [("verbose", "off"), ("queue", ""), ("stop", ""), ("model", ""), ("help", ""), ("zap", "")]:
                    await ws.send(json.dumps({"type": "command", "command": command, "args": args}))
                    out.append(await recv(ws))
                await ws.send('{"type":"message","content":"time?"}')
                out.append(await recv_until(ws, "response"))
                for command in ("context", "usage", "new"):
                    await ws.send(json.dumps({"type": "command", "command": command}))
                    out.append(await recv(ws))
            return out

        verbose, queue, stop, model, help_, zap, quiet_turn, context, usage, new = await in_asyncio(client)
        assert server.kernel.sessions[next(iter(server.kernel.sessions))].context == []
    assert verbose == {"type": "command_result", "command": "verbose", "message": "Verbose level: **off**"}
    assert queue == {"type": "command_result", "command": "queue", "message": "Agent is idle."}
    assert stop == {"type": "command_result", "command": "stop", "message": "No active run to cancel."}
    assert model["type"] == "command_result" and "scripted" in model["message"]
    assert "/verbose" in help_["message"] and "/history" in help_["message"]
    assert zap == {"type": "error", "content": "Unknown command: zap"}
    assert "tool_end" not in turn(quiet_turn) and {"type": "tool_result", "id": "call_1", "tool": "clock", "is_error": False} in quiet_turn
    assert context["command"] == "context" and context["context_pressure"] == "low"
    assert usage["message"] == "Session usage: ~7 in / ~7 out (~14 total)"
    assert new == {"type": "command_result", "command": "new", "message": "Session reset. Chat history cleared."}


async def test_tool_approval_is_asked_and_answered_over_the_socket() -> None:
    provider = ScriptedProvider([tool_turn("guarded", "{}", call_id="c1"), text_turn("ran"), tool_turn("guarded", "{}", call_id="c2"), text_turn("skipped")])
    async with serving(provider, tools=[GUARDED]) as server:

        async def client() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
            ws = await connect(server.ws_url)
            async with ws:
                await ws.send('{"type":"message","content":"go"}')
                first = await recv_until(ws, "command_result")
                await ws.send('{"type":"command","command":"approve"}')
                first += await recv_until(ws, "response")
                await ws.send('{"type":"message","content":"again"}')
                second = await recv_until(ws, "command_result")
                await ws.send("/deny not now")  # typed in the dashboard as a message
                second += await recv_until(ws, "response")
            return first, second

        first, second = await in_asyncio(client)
    asked = next(f for f in first if f["type"] == "command_result" and f["command"] == "approval")
    assert asked["approval"]["id"] == "c1" and asked["approval"]["tool"] == "guarded" and "/approve" in asked["message"]
    assert {"type": "command_result", "command": "approve", "message": "Approved: the tool runs now."} in first
    result = next(f for f in first if f["type"] == "tool_result")
    assert result["is_error"] is False and first[-1]["content"] == "ran"
    denied = next(f for f in second if f["type"] == "tool_result")
    assert denied["is_error"] is True and "not now" in denied["result"]
    assert {"type": "command_result", "command": "deny", "message": "Denied: the tool will not run."} in second


async def test_tool_approval_policy_decides_instead_of_asking_the_socket() -> None:
    provider = ScriptedProvider([tool_turn("guarded", "{}", call_id="c1"), text_turn("without it")])
    async with serving(provider, tools=[GUARDED], config=make_config(tool_approval="reject")) as server:

        async def client() -> list[dict[str, Any]]:
            ws = await connect(server.ws_url)
            async with ws:
                await ws.send("go")
                return await recv_until(ws, "response")

        frames = await in_asyncio(client)
    assert not any(f["type"] == "command_result" for f in frames), "nobody is asked"
    result = next(f for f in frames if f["type"] == "tool_result")
    assert result["is_error"] is True and "declined" in result["result"] and frames[-1]["content"] == "without it"


async def test_queue_reports_a_running_turn() -> None:
    provider = CountingProvider([text_turn("a", "b")])
    async with serving(provider) as server:

        async def client() -> list[dict[str, Any]]:
            ws = await connect(server.ws_url)
            async with ws:
                await ws.send("go")
                await recv_until(ws, "text_delta")  # the model holds its last chunk: the turn is running
                await ws.send('{"type":"command","command":"queue"}')
                busy = await recv_until(ws, "command_result")
                provider.release.set()
                await recv_until(ws, "response")
                await ws.send('{"type":"command","command":"queue"}')
                return [busy[-1], await recv(ws)]

        busy, idle = await in_asyncio(client)
    assert busy == {"type": "command_result", "command": "queue", "message": "Agent is processing a request..."}
    assert idle == {"type": "command_result", "command": "queue", "message": "Agent is idle."}


async def test_text_deltas_are_coalesced_and_coalescing_can_be_disabled() -> None:
    chunks = [f"{i:02d}-chunk. " for i in range(40)]  # 10 characters each
    for coalesce_ms, check in ((100.0, lambda n: n <= 4), (0.0, lambda n: n >= 10)):
        provider = ScriptedProvider([text_turn(*chunks)], delay_s=0.0 if coalesce_ms else 0.01)
        async with serving(provider, config=make_config(coalesce_ms=coalesce_ms)) as server:

            async def client() -> list[dict[str, Any]]:
                ws = await connect(server.ws_url)
                async with ws:
                    await ws.send("go")
                    return await recv_until(ws, "response")

            frames = await in_asyncio(client)
        deltas = [f["content"] for f in frames if f["type"] == "text_delta"]
        assert "".join(deltas) == "".join(chunks) == frames[-1]["content"]
        assert check(len(deltas)), (coalesce_ms, len(deltas))


async def test_upgrade_failures_answer_with_http_status() -> None:
    async with serving(config=make_config(max_connections_per_ip=1)) as server:

        async def client() -> dict[str, int]:
            statuses = {
                "bad_uuid": await upgrade_status(server.ws_for("default")),
                "unknown": await upgrade_status(server.ws_for(str(uuid.uuid4()))),
                "origin": await upgrade_status(server.ws_url, origin="http://evil.example"),
                "good_origin": await upgrade_status(server.ws_url, origin="http://localhost:5173"),
            }
            held = await connect(server.ws_url)
            async with held:
                statuses["per_ip"] = await upgrade_status(server.ws_url)
            return statuses

        statuses = await in_asyncio(client)
    assert statuses == {"bad_uuid": 400, "unknown": 404, "origin": 403, "good_origin": 0, "per_ip": 429}


async def test_upgrade_requires_the_token_when_one_is_configured() -> None:
    async with serving(config=make_config(token="s3cret")) as server:

        async def client() -> list[int]:
            return [
                await upgrade_status(server.ws_url),
                await upgrade_status(server.ws_for("default")),  # auth is checked before the id
                await upgrade_status(server.ws_url + "?token=wrong"),
                await upgrade_status(server.ws_url + "?token=s3cret"),
                await upgrade_status(server.ws_url, additional_headers={"Authorization": "Bearer s3cret"}),
            ]

        assert await in_asyncio(client) == [401, 401, 401, 0, 0]


async def test_shutdown_closes_open_sockets_with_1001_promptly() -> None:
    connected = threading.Event()
    result: dict[str, Any] = {}
    async with serving(ScriptedProvider([text_turn(*["x"] * 100)], delay_s=0.05)) as server:

        async def client() -> None:
            ws = await connect(server.ws_url)
            await ws.send("keep talking")
            await recv_until(ws, "text_delta")
            connected.set()
            try:
                while True:
                    await ws.recv()
            except websockets.ConnectionClosed as exc:
                result["code"] = exc.rcvd.code if exc.rcvd else None
                result["at"] = time.monotonic()

        async with anyio.create_task_group() as tg:
            tg.start_soon(in_asyncio, client)
            with anyio.fail_after(5):
                while not connected.is_set():
                    await anyio.sleep(0.01)
            stopped_at = time.monotonic()
            server.scope.cancel()
    assert result["code"] == 1001
    assert result["at"] - stopped_at < 1.0


async def test_idle_socket_gets_an_error_then_a_close() -> None:
    async with serving(config=make_config(idle_timeout_s=0.3)) as server:

        async def client() -> tuple[dict[str, Any], int | None]:
            ws = await connect(server.ws_url)
            frame = await recv(ws)
            try:
                await asyncio.wait_for(ws.recv(), 5)
            except websockets.ConnectionClosed as exc:
                return frame, exc.rcvd.code if exc.rcvd else None
            return frame, None

        frame, code = await in_asyncio(client)
    assert frame == {"type": "error", "content": "Connection closed due to inactivity (0.3 s timeout)"}
    assert code == 1000


async def test_agents_updated_is_sent_again_only_when_the_list_changes() -> None:
    async with serving(config=make_config(agents_poll_s=0.05)) as server:

        async def client() -> dict[str, Any]:
            ws = await connect(server.ws_url)
            async with ws:
                await ws.send('{"type":"ping"}')
                assert await recv(ws) == {"type": "pong"}  # nothing else in between: no change yet
                changed.set()
                return await recv(ws)

        changed = threading.Event()

        async def add_agent() -> None:
            while not changed.is_set():
                await anyio.sleep(0.01)
            agents = [{"name": "General Assistant"}, {"name": "Researcher"}]
            await server.kernel.update_settings({"agents": agents})

        async with anyio.create_task_group() as tg:
            tg.start_soon(add_agent)
            update = await in_asyncio(client)
    assert update["type"] == "agents_updated"
    assert [a["name"] for a in update["agents"]] == ["General Assistant", "Researcher"]


async def test_a_question_left_by_a_closed_socket_is_declined_at_once() -> None:
    provider = ScriptedProvider([tool_turn("guarded", "{}", call_id="c1"), text_turn("never mind")])
    async with serving(provider, tools=[GUARDED]) as server:

        async def client() -> None:
            ws = await connect(server.ws_url)
            async with ws:
                await ws.send("go")
                await recv_until(ws, "command_result")

        await in_asyncio(client)
        with anyio.fail_after(3):
            await server.kernel.wait_idle(3)
            while any(s.busy for s in server.kernel.sessions.values()):
                await anyio.sleep(0.01)
        tool_message = provider.requests[-1].messages[-1]
    assert tool_message.role == "tool" and "the client disconnected" in tool_message.content


async def test_a_session_closed_under_a_run_that_has_not_ended_ends_the_sockets_turn_with_an_error(tmp_path: object) -> None:
    """The run outlives its session's unload (its store stalls on the answer): the socket's
    turn ends in OpenFang's error frame, not in silence, and the socket goes on."""
    store = StallingStore(f"{tmp_path}/g.db")
    async with serving(ScriptedProvider([text_turn("partial", " answer"), text_turn("again")]), store=store) as server:

        async def close_the_session_when_stalled() -> None:
            await store.stalled.wait()
            [session_id] = list(server.kernel.sessions)
            await server.kernel.unload_session(session_id, grace_s=0.2)
            store.release.set()

        async def client() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
            ws = await connect(server.ws_url)
            async with ws:
                await ws.send('{"type":"message","content":"hi"}')
                cut = await recv_until(ws, "response", "error")
                await ws.send('{"type":"message","content":"again"}')
                return cut, await recv_until(ws, "response", "error")

        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(close_the_session_when_stalled)
                cut, again = await in_asyncio(client)
        finally:
            store.release.set()
    assert turn(cut)[-2:] == ["typing:stop", "error"] and cut[-1]["content"] == m.SESSION_CLOSED
    assert "".join(f["content"] for f in cut if f["type"] == "text_delta") == "partial answer"
    assert again[-1]["type"] == "response" and again[-1]["content"] == "again"


async def test_a_socket_that_ends_leaves_no_task_of_its_own_in_a_reference_cycle() -> None:
    """Its poll of the agent list and its forward of the session it followed are stopped,
    not cancelled from outside, when the socket is done (kernel/companions.py): no frame, no
    ``CancelledError`` is left for the garbage collector."""
    async with serving(ScriptedProvider([text_turn("Hello", " world")])) as server:

        async def sockets() -> None:
            async def go() -> None:
                for _ in range(3):
                    async with websockets.connect(server.ws_url) as ws:
                        await recv(ws)
                        await recv(ws)
                        await ws.send(json.dumps({"type": "message", "content": "hi"}))
                        assert (await recv_until(ws, "response", "error"))[-1]["type"] == "response"

            await in_asyncio(go)
            with anyio.fail_after(5):  # the server's side of the last socket ends after the client's
                while any(session.hub.subscriber_count for session in server.kernel.sessions.values()):
                    await anyio.sleep(0.01)

        garbage = await garbage_of(sockets)
    assert garbage["frame"] == 0 and garbage["CancelledError"] == 0, garbage.most_common(12)
