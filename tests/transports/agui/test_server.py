"""The AG-UI transport over a real server with httpx: runs, interrupts, reconnects and the
thread as a kernel session shared with other dialects. Every event is checked against
ag-ui-protocol's models."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest

from kernel import Kernel
from kernel import model as m
from kernel.settings import AgentSettings, Settings
from kernel.testing import ScriptedProvider, failing_turn, running_kernel, text_turn, tool_turn
from tests.transports.http._helpers import ADD_TOOL, DANGER_TOOL, http_server
from transports.agui import AguiConfig, AguiTransport

from ._helpers import Stream, StreamReader, agui_server, read_stream, run_input, user

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def agui(provider: ScriptedProvider, *, agent: AgentSettings | None = None, **config: Any) -> AsyncIterator[tuple[Kernel, httpx.AsyncClient]]:
    settings = Settings(agents=[agent or AgentSettings(name="Helper", system_prompt="Be helpful.")])
    async with running_kernel(provider, settings=settings, tools=[ADD_TOOL, DANGER_TOOL]) as kernel:
        async with agui_server(kernel, **config) as url, httpx.AsyncClient(base_url=url, timeout=20.0) as http:
            yield kernel, http


async def post(http: httpx.AsyncClient, body: dict[str, Any], path: str = "") -> Stream:
    async with http.stream("POST", path, json=body, headers={"accept": "text/event-stream"}) as response:
        return await read_stream(response)


async def history(kernel: Kernel, thread_id: str) -> list[tuple[str, str]]:
    reply = await kernel.execute(m.GetHistory(session_id=thread_id))
    assert isinstance(reply, m.HistoryView)
    return [(msg.role, msg.content) for msg in reply.messages]


async def until(condition: Any, what: str) -> None:
    """Wait (bounded) for ``await condition()`` to hold."""
    try:
        with anyio.fail_after(10):
            while not await condition():
                await anyio.sleep(0.01)
    except TimeoutError:
        pytest.fail(f"no {what} within 10 s")


# ---------------------------------------------------------------- runs


async def test_a_run_streams_its_events_with_kernel_seqs_as_ids() -> None:
    async with agui(ScriptedProvider([text_turn("Hello", " world")])) as (_, http):
        stream = await post(http, run_input("t1", "run-1", [user("Hi")]))
    assert stream.status == 200
    assert stream.types[:2] == ["RUN_STARTED", "TEXT_MESSAGE_START"] and stream.types[-2:] == ["TEXT_MESSAGE_END", "RUN_FINISHED"]
    assert set(stream.types[2:-2]) == {"TEXT_MESSAGE_CONTENT"} and stream.text() == "Hello world"  # deltas may merge
    assert stream.events[0] == {"type": "RUN_STARTED", "threadId": "t1", "runId": "run-1", "protocolVersion": "1.0"}
    # An id on the last event of each kernel event, rising; the events before it carry none.
    assert stream.ids[0] is not None and stream.ids[1] is None and stream.ids[2] is not None
    numbered = [int(i) for i in stream.ids if i is not None]
    assert numbered == sorted(numbered) and len(set(numbered)) == len(numbered)
    finished = stream.events[-1]
    assert finished["outcome"] == {"type": "success"} and finished["usage"] == [{"inputTokens": 3, "outputTokens": 5, "totalTokens": 8}]


async def test_the_agents_prompt_is_extended_by_system_messages_and_context_and_images_reach_the_model() -> None:
    provider = ScriptedProvider([text_turn("seen")])
    png = base64.b64encode(b"\x89PNG fake").decode()
    message = {"id": "u1", "role": "user", "content": [{"type": "text", "text": "What is this?"}, {"type": "image", "source": {"type": "data", "value": png, "mimeType": "image/png"}}]}
    body = run_input("t-img", "r1", [{"id": "s1", "role": "system", "content": "Answer in French."}, message], context=[{"description": "page", "value": "checkout"}])
    async with agui(provider) as (_, http):
        stream = await post(http, body)
    assert stream.text() == "seen"
    system, sent = provider.requests[0].messages
    assert system.content == "Be helpful.\n\nAnswer in French.\n\nContext from the application:\n- page: checkout"
    assert sent.parts == (m.TextPart("What is this?"), m.ImagePart(data=b"\x89PNG fake", mime_type="image/png"))


async def test_a_new_thread_takes_the_clients_copy_and_a_known_one_keeps_its_own() -> None:
    provider = ScriptedProvider([text_turn("third")])
    earlier = [user("first", "u1"), {"id": "a1", "role": "assistant", "content": "second"}]
    async with agui(provider) as (kernel, http):
        await post(http, run_input("t-seed", "r1", [*earlier, user("again", "u2")]))
        assert await history(kernel, "t-seed") == [("user", "first"), ("assistant", "second"), ("user", "again"), ("assistant", "third")]
        # Next time the thread's own history wins: the client's copy is read for what is new.
        await post(http, run_input("t-seed", "r2", [user("edited", "u1"), {"id": "a2", "role": "assistant", "content": "x"}, user("more", "u3")]))
    assert await_last(provider) == [("user", "first"), ("assistant", "second"), ("user", "again"), ("assistant", "third"), ("user", "more")]


def await_last(provider: ScriptedProvider) -> list[tuple[str, str]]:
    return [(msg.role, msg.content) for msg in provider.requests[-1].messages if msg.role != "system"]


async def test_a_failed_run_is_retried_without_a_second_copy_of_its_prompt() -> None:
    provider = ScriptedProvider([failing_turn("upstream exploded"), text_turn("fine now")])
    async with agui(provider) as (kernel, http):
        failed = await post(http, run_input("t-retry", "r1", [user("Hi")]))
        assert failed.types == ["RUN_STARTED", "RUN_ERROR"] and failed.events[-1]["code"] == "provider_error"
        retried = await post(http, run_input("t-retry", "r2", [user("Hi")]))
        assert retried.text() == "fine now"
        assert await history(kernel, "t-retry") == [("user", "Hi"), ("assistant", "fine now")]


async def test_nothing_new_is_answered_with_the_threads_messages() -> None:
    async with agui(ScriptedProvider([text_turn("Hello")])) as (_, http):
        await post(http, run_input("t-sync", "r1", [user("Hi")]))
        stream = await post(http, run_input("t-sync", "r2", [user("Hi"), {"id": "x", "role": "assistant", "content": "Hello"}]))
    assert stream.types == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    assert [(msg["role"], msg["content"]) for msg in stream.events[1]["messages"]] == [("user", "Hi"), ("assistant", "Hello")]


# ---------------------------------------------------------------- questions


async def test_a_turn_limit_is_an_interrupt_that_resume_continues() -> None:
    provider = ScriptedProvider([tool_turn("add", '{"a": 1, "b": 1}'), text_turn("two")])
    async with agui(provider, agent=AgentSettings(name="Helper", max_turns=1)) as (kernel, http):
        first = await post(http, run_input("t-turns", "r1", [user("1+1")]))
        (interrupt,) = first.events[-1]["outcome"]["interrupts"]
        assert interrupt["reason"] == "turn_limit" and interrupt["metadata"] == {"currentTurns": 1, "maxTurns": 1}
        info = await kernel.execute(m.GetSession(session_id="t-turns"))
        assert isinstance(info, m.SessionOpened) and info.session.state == "awaiting_turn_confirmation"
        resume = [{"interruptId": interrupt["id"], "status": "resolved", "payload": True}]
        second = await post(http, run_input("t-turns", "r2", [user("1+1")], resume=resume))
    assert second.events[0]["runId"] == "r2" and second.text() == "two" and second.events[-1]["outcome"] == {"type": "success"}


async def test_resume_must_answer_the_open_interrupt() -> None:
    async with agui(ScriptedProvider([tool_turn("danger", "{}"), text_turn("over")])) as (_, http):
        first = await post(http, run_input("t-res", "r1", [user("go")]))
        interrupt_id = first.events[-1]["outcome"]["interrupts"][0]["id"]

        async def resume(entries: list[dict[str, Any]]) -> Stream:
            return await post(http, run_input("t-res", "r2", [user("go")], resume=entries))

        unknown = await resume([{"interruptId": "approval:1:nope", "status": "resolved"}])
        assert (unknown.status, unknown.body and _error(unknown)["code"]) == (409, "invalid_request")
        two = await resume([{"interruptId": interrupt_id, "status": "resolved"}] * 2)
        assert two.status == 400 and "one entry" in _error(two)["message"]
        bad = await resume([{"interruptId": interrupt_id, "status": "resolved", "payload": {"approved": "yes"}}])
        assert bad.status == 400 and "payload" in _error(bad)["message"]
        ignored = await post(http, run_input("t-res", "r3", [user("go"), user("other", "u2")]))
        assert ignored.status == 409 and _error(ignored)["code"] == "busy"
        cancelled = await resume([{"interruptId": interrupt_id, "status": "cancelled"}])
    result = cancelled.of("TOOL_CALL_RESULT")[0]
    assert "cancelled by the user" in result["content"] and cancelled.text() == "over"


def _error(stream: Stream) -> dict[str, Any]:
    import json

    body: dict[str, Any] = json.loads(stream.body)
    assert body["type"] == "RUN_ERROR" and set(body) == {"type", "message", "code"}
    return body


async def test_a_policy_that_rejects_asks_nobody() -> None:
    async with agui(ScriptedProvider([tool_turn("danger", "{}"), text_turn("ok")]), tool_approval="reject") as (_, http):
        stream = await post(http, run_input("t-reject", "r1", [user("go")]))
    assert "RUN_FINISHED" == stream.types[-1] and stream.events[-1]["outcome"] == {"type": "success"}
    assert len(stream.of("RUN_FINISHED")) == 1 and "tool_approval policy" in stream.of("TOOL_CALL_RESULT")[0]["content"]


# ---------------------------------------------------------------- clients that leave, stop, come back


async def test_a_run_goes_on_when_its_client_leaves() -> None:
    provider = ScriptedProvider([text_turn(*[f"w{i} " for i in range(40)])], delay_s=0.005)
    async with agui(provider) as (kernel, http):
        async with http.stream("POST", "", json=run_input("t-leave", "r1", [user("Talk")])) as response:
            await StreamReader(response).read(until="TEXT_MESSAGE_CONTENT")

        async def answered() -> bool:
            return len(await history(kernel, "t-leave")) == 2

        await until(answered, "the run's answer")
        assert (await history(kernel, "t-leave"))[1] == ("assistant", "".join(f"w{i} " for i in range(40)))


async def test_the_interrupt_route_stops_a_run() -> None:
    provider = ScriptedProvider([text_turn(*[f"w{i} " for i in range(400)])], delay_s=0.01)
    async with agui(provider) as (_, http):
        async with http.stream("POST", "", json=run_input("t-stop", "r1", [user("Talk")])) as response:
            reader = StreamReader(response)
            await reader.read(until="TEXT_MESSAGE_CONTENT")
            stopped = await http.post("/threads/t-stop/interrupt")
            assert stopped.status_code == 200 and stopped.json() == {"threadId": "t-stop", "interrupted": True}
            rest = await reader.read()
        assert rest.events[-1]["outcome"] == {"type": "cancelled"} and rest.events[-1]["result"] == {"stopReason": "interrupted"}
        idle = await http.post("/threads/t-stop/interrupt")
        assert idle.status_code == 400 and idle.json()["type"] == "RUN_ERROR"
        unknown = await http.post("/threads/nobody/interrupt")
        assert unknown.status_code == 404 and unknown.json()["code"] == "not_found"


async def test_a_second_client_joins_a_live_run_from_its_start_and_a_late_one_gets_nothing_twice() -> None:
    provider = ScriptedProvider([text_turn(*[f"w{i} " for i in range(30)])], delay_s=0.01)
    async with agui(provider) as (_, http):
        async with http.stream("POST", "", json=run_input("t-join", "r1", [user("Talk")])) as response:
            reader = StreamReader(response)
            await reader.read(until="TEXT_MESSAGE_CONTENT")
            async with http.stream("GET", "/threads/t-join/events") as joined:
                watched = await read_stream(joined)
            own = await reader.read()
        assert watched.events[0]["runId"] == "r1" and watched.text() == "".join(f"w{i} " for i in range(30))
        assert watched.types[-1] == "RUN_FINISHED" and own.types[-1] == "RUN_FINISHED"
        last = own.ids[-1]
        async with http.stream("GET", "/threads/t-join/events", headers={"last-event-id": str(last)}) as late:
            nothing = await read_stream(late)
        assert nothing.status == 200 and nothing.events == []


async def test_a_reconnect_into_a_run_paused_at_an_interrupt_resumes_through_it() -> None:
    async with agui(ScriptedProvider([tool_turn("danger", "{}"), text_turn("after")])) as (_, http):
        first = await post(http, run_input("t-pause", "r1", [user("go")]))
        call_event = next(i for i, e in zip(first.ids, first.events, strict=True) if e["type"] == "TOOL_CALL_ARGS" and i)
        async with http.stream("GET", "/threads/t-pause/events", headers={"last-event-id": call_event}) as response:
            caught_up = await read_stream(response)
        # The client had the call's start and arguments: it gets the call opened again and closed, then the interrupt.
        assert caught_up.types == ["RUN_STARTED", "TOOL_CALL_START", "TOOL_CALL_END", "RUN_FINISHED"]
        assert caught_up.events[-1] == first.events[-1]
        interrupt_id = first.events[-1]["outcome"]["interrupts"][0]["id"]
        await post(http, run_input("t-pause", "r2", [user("go")], resume=[{"interruptId": interrupt_id, "status": "resolved"}]))
        async with http.stream("GET", "/threads/t-pause/events", headers={"last-event-id": first.ids[-1] or ""}) as response:
            resumed = await read_stream(response)
    assert resumed.types[:2] == ["RUN_STARTED", "TOOL_CALL_RESULT"] and resumed.events[0]["runId"] == "r2" and resumed.text() == "after"


async def test_bad_reconnects_are_refused() -> None:
    async with agui(ScriptedProvider()) as (_, http):
        unknown = await http.get("/threads/nobody/events")
        assert unknown.status_code == 404 and unknown.json()["type"] == "RUN_ERROR"
        await post(http, run_input("t-bad", "r1", [user("Hi")]))
        for value in ("abc", "-3", "1.5"):
            bad = await http.get("/threads/t-bad/events", headers={"last-event-id": value})
            assert bad.status_code == 400 and "Last-Event-ID" in bad.json()["message"]


# ---------------------------------------------------------------- one kernel, several dialects


async def test_a_thread_is_a_kernel_session_other_dialects_continue() -> None:
    provider = ScriptedProvider([text_turn("from agui"), text_turn("from http"), text_turn("agui again")])
    async with running_kernel(provider) as kernel:
        async with agui_server(kernel) as url, http_server(kernel) as native_url:
            async with httpx.AsyncClient(base_url=url, timeout=20.0) as http, httpx.AsyncClient(base_url=native_url, timeout=20.0) as native:
                await post(http, run_input("shared-thread", "r1", [user("one", "u1")]))
                answer = await native.post("/v1/sessions/shared-thread/prompt", json={"text": "two"}, headers={"accept": "application/json"})
                assert answer.status_code == 200 and answer.json()["text"] == "from http"
                async with http.stream("GET", "/threads/shared-thread/events") as response:
                    snapshot = await read_stream(response)
                assert snapshot.types == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
                seen = snapshot.events[1]["messages"]
                assert [(msg["role"], msg["content"]) for msg in seen] == [("user", "one"), ("assistant", "from agui"), ("user", "two"), ("assistant", "from http")]
                again = await post(http, run_input("shared-thread", "r2", [*seen, user("three", "u3")]))
                assert again.text() == "agui again"
    assert [(msg.role, msg.content) for msg in provider.requests[-1].messages][-1] == ("user", "three")


async def test_the_transport_serves_what_the_gateway_starts() -> None:
    async with running_kernel(ScriptedProvider([text_turn("served")])) as kernel, anyio.create_task_group() as tg:
        base = await tg.start(AguiTransport().serve, kernel, AguiConfig(port=0, sse_keepalive_s=0.0))
        async with httpx.AsyncClient(timeout=20.0) as http:
            stream = await post(http, run_input("t-served", "r1", [user("Hi")]), path=f"{base}/agui")
        tg.cancel_scope.cancel()
    assert stream.text() == "served" and AguiTransport.name == "agui"
