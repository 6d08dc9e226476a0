"""The native REST + SSE API over a real server, with httpx as the client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest

from kernel import Kernel
from kernel.settings import AgentSettings, OpenAISettings, ProviderSettings, Settings
from kernel.testing import ScriptedProvider, running_kernel, text_turn, tool_turn
from plugins.commands.builtin import BUILTIN_COMMANDS

from ._helpers import (
    ADD_TOOL,
    DANGER_TOOL,
    SSE,
    SSEParser,
    client,
    http_server,
    sse_events,
)

pytestmark = pytest.mark.anyio

TOKEN = "native-token"
SECRET = "sk-secret-abcdef123456"


@asynccontextmanager
async def native(
    provider: ScriptedProvider | None = None, *, agent: AgentSettings | None = None, **config: Any
) -> AsyncIterator[tuple[Kernel, httpx.AsyncClient]]:
    settings = Settings(
        agents=[agent or AgentSettings(name="Helper")],
        provider=ProviderSettings(openai=OpenAISettings(api_key=SECRET)),
    )
    async with running_kernel(provider, settings=settings, tools=[ADD_TOOL, DANGER_TOOL], commands=BUILTIN_COMMANDS) as kernel:
        config.setdefault("token", TOKEN)
        async with http_server(kernel, **config) as url, client(url, config["token"]) as http:
            yield kernel, http


async def new_session(http: httpx.AsyncClient, **body: Any) -> str:
    response = await http.post("/v1/sessions", json=body)
    assert response.status_code == 201, response.text
    return response.json()["session"]["session_id"]


async def collect(response: httpx.Response, until: str = "run_finished", parser: SSEParser | None = None) -> list[SSE]:
    events: list[SSE] = []
    async for event in sse_events(response, parser):
        events.append(event)
        if event.event == until:
            break
    return events


def assert_error(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["error"]["code"] == code and body["error"]["message"]


async def test_read_only_endpoints() -> None:
    async with native() as (_, http):
        assert (await http.get("/health", headers={"authorization": ""})).json()["status"] == "ok"
        status = (await http.get("/v1/status")).json()
        assert status["type"] == "status" and status["agents"] == 1
        agents = (await http.get("/v1/agents")).json()["agents"]
        assert [a["name"] for a in agents] == ["Helper"] and "add" in agents[0]["tools"]
        tools = {t["name"]: t for t in (await http.get("/v1/tools")).json()["tools"]}
        assert tools["danger"]["requires_approval"] is True and tools["add"]["parameters"]["type"] == "object"
        commands = [c["name"] for c in (await http.get("/v1/commands")).json()["commands"]]
        assert "help" in commands


async def test_session_lifecycle() -> None:
    async with native() as (_, http):
        first = await new_session(http, agent="Helper", label="mine")
        custom = await new_session(http, session_id="my-session.1")
        assert custom == "my-session.1"
        again = await http.post("/v1/sessions", json={"session_id": "my-session.1"})
        assert again.status_code == 200 and again.json()["session"]["session_id"] == "my-session.1"
        info = (await http.get(f"/v1/sessions/{first}")).json()["session"]
        assert info["label"] == "mine" and info["state"] == "idle"
        listed = {s["session_id"] for s in (await http.get("/v1/sessions")).json()["sessions"]}
        assert {first, custom} <= listed
        by_agent = (await http.get("/v1/sessions", params={"agent": "Helper"})).json()["sessions"]
        assert len(by_agent) == 2
        assert_error(await http.get("/v1/sessions", params={"agent": "nobody"}), 404, "not_found")
        assert_error(await http.post("/v1/sessions", json={"agent": "nobody"}), 404, "not_found")
        assert_error(await http.post("/v1/sessions", json={"session_id": "bad id/x"}), 400, "invalid_request")
        deleted = await http.delete(f"/v1/sessions/{first}")
        assert deleted.status_code == 200 and deleted.json()["type"] == "ok"
        assert_error(await http.delete(f"/v1/sessions/{first}"), 404, "not_found")
        assert_error(await http.get(f"/v1/sessions/{first}"), 404, "not_found")


async def test_prompt_streams_kernel_events_as_sse() -> None:
    async with native(ScriptedProvider([text_turn("Hello", " world")])) as (_, http):
        session = await new_session(http)
        async with http.stream("POST", f"/v1/sessions/{session}/prompt", json={"text": "hi", "request_id": "r1"}) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            run_id = response.headers["x-run-id"]
            events = [event async for event in sse_events(response)]  # the stream ends with the run
        kinds = [event.event for event in events]
        assert kinds[0] == "run_started" and kinds[-1] == "run_finished" and "text_delta" in kinds
        for event in events:
            body = event.json()
            assert body["type"] == event.event and str(body["seq"]) == event.id
            assert body["run_id"] == run_id and body["request_id"] == "r1"
        assert [int(e.id) for e in events] == sorted(int(e.id) for e in events)
        assert events[-1].json()["text"] == "Hello world"


async def test_prompt_json_answer_and_async_mode() -> None:
    provider = ScriptedProvider([tool_turn("add", '{"a": 1, "b": 2}', call_id="c1"), text_turn("three")])
    async with native(provider) as (_, http):
        session = await new_session(http)
        response = await http.post(f"/v1/sessions/{session}/prompt", json={"text": "1+2"}, headers={"accept": "application/json"})
        assert response.status_code == 200
        result = response.json()
        assert result["type"] == "run_result" and result["text"] == "three" and result["stop_reason"] == "end_turn"
        assert result["usage"] == {"input_tokens": 7, "output_tokens": 7}
        assert result["tool_calls"] == [
            {"call_id": "c1", "name": "add", "arguments": '{"a": 1, "b": 2}', "result": "3", "is_error": False, "rejected": False}
        ]
        accepted = await http.post(f"/v1/sessions/{session}/prompt", params={"wait": "false"}, json={"text": "again"})
        assert accepted.status_code == 202 and accepted.json()["type"] == "accepted" and accepted.json()["run_id"]
        regenerated = await http.post(f"/v1/sessions/{session}/regenerate", headers={"accept": "application/json"})
        assert regenerated.status_code == 200 and regenerated.json()["type"] == "run_result"


async def test_prompt_json_run_failure_maps_status() -> None:
    from kernel.testing import failing_turn

    provider = ScriptedProvider([failing_turn("too many", code="rate_limited", status=429)])
    async with native(provider) as (_, http):
        session = await new_session(http)
        response = await http.post(f"/v1/sessions/{session}/prompt", json={"text": "hi"}, headers={"accept": "application/json"})
        assert_error(response, 429, "rate_limited")
        assert response.json()["error"]["details"]["status"] == 429
        provider.turns = [failing_turn("boom")]
        response = await http.post(f"/v1/sessions/{session}/prompt", json={"text": "hi"}, headers={"accept": "application/json"})
        assert_error(response, 502, "provider_error")


async def test_reconnect_with_last_event_id_loses_nothing() -> None:
    pieces = [f"w{i} " for i in range(30)]
    async with native(ScriptedProvider([text_turn(*pieces)], delay_s=0.02)) as (_, http):
        session = await new_session(http)
        first: list[SSE] = []
        parser = SSEParser()
        async with http.stream("POST", f"/v1/sessions/{session}/prompt", json={"text": "go"}) as response:
            run_id = response.headers["x-run-id"]
            async for event in sse_events(response, parser):
                first.append(event)
                if sum(e.event == "text_delta" for e in first) == 3:
                    break  # the client drops mid-run
        assert parser.last_id == first[-1].id
        await anyio.sleep(0.1)  # the run goes on meanwhile
        async with http.stream(
            "GET", f"/v1/sessions/{session}/events", params={"run_id": run_id}, headers={"last-event-id": parser.last_id}
        ) as response:
            assert response.status_code == 200
            second = await collect(response)
        seqs = [int(e.id) for e in first + second]
        assert seqs == sorted(set(seqs)), "no duplicates, in order"
        text = "".join(e.json()["text"] for e in first + second if e.event == "text_delta")
        assert second[-1].event == "run_finished" and text == second[-1].json()["text"] == "".join(pieces)
        # ?after= replays the retained events of a finished run too.
        async with http.stream("GET", f"/v1/sessions/{session}/events", params={"after": "0", "run_id": run_id}) as response:
            replay = await collect(response)
        assert replay[0].event == "run_started" and replay[-1].event == "run_finished"


async def test_events_stream_follows_the_session() -> None:
    async with native(ScriptedProvider([text_turn("a", "b")], delay_s=0.01)) as (_, http):
        session = await new_session(http)
        async with http.stream("GET", f"/v1/sessions/{session}/events") as response:
            assert response.status_code == 200
            posted = await http.post(f"/v1/sessions/{session}/prompt", params={"wait": "0"}, json={"text": "x"})
            assert posted.status_code == 202
            events = await collect(response)
        assert events[0].event == "run_started" and events[-1].json()["run_id"] == posted.json()["run_id"]
        assert_error(await http.get(f"/v1/sessions/{session}/events", params={"after": "abc"}), 400, "invalid_request")
        assert_error(await http.get("/v1/sessions/nope/events"), 404, "not_found")
        head = await http.head(f"/v1/sessions/{session}/events")
        assert head.status_code == 200 and head.headers["content-type"] == "text/event-stream"


async def test_interrupt_while_streaming() -> None:
    async with native(ScriptedProvider([text_turn(*["tick "] * 300)], delay_s=0.01)) as (_, http):
        session = await new_session(http)
        assert_error(await http.post(f"/v1/sessions/{session}/interrupt"), 400, "invalid_request")  # idle
        events: list[SSE] = []
        async with http.stream("POST", f"/v1/sessions/{session}/prompt", json={"text": "go"}) as response:
            async for event in sse_events(response):
                events.append(event)
                if event.event == "text_delta" and sum(e.event == "text_delta" for e in events) == 2:
                    reply = await http.post(f"/v1/sessions/{session}/interrupt")
                    assert reply.status_code == 200 and reply.json()["message"] == "interrupted"
        finished = events[-1].json()
        assert events[-1].event == "run_finished" and finished["interrupted"] is True
        assert finished["stop_reason"] == "interrupted" and 0 < len(finished["text"]) < len("tick " * 300)


async def test_tool_approval_over_http() -> None:
    provider = ScriptedProvider([tool_turn("danger", "{}", call_id="call_9"), text_turn("all done")])
    async with native(provider) as (_, http):
        session = await new_session(http)
        assert_error(await http.post(f"/v1/sessions/{session}/approvals", json={"approved": True}), 400, "invalid_request")
        events: list[SSE] = []
        async with http.stream("POST", f"/v1/sessions/{session}/prompt", json={"text": "go"}) as response:
            async for event in sse_events(response):
                events.append(event)
                if event.event == "tool_approval_requested":
                    assert event.json()["call_id"] == "call_9"
                    state = (await http.get(f"/v1/sessions/{session}")).json()["session"]["state"]
                    assert state == "awaiting_tool_approval"
                    assert_error(await http.post(f"/v1/sessions/{session}/approvals", json={"approved": "yes"}), 400, "invalid_request")
                    wrong = await http.post(f"/v1/sessions/{session}/approvals", json={"call_id": "other", "approved": True})
                    assert_error(wrong, 404, "not_found")
                    reply = await http.post(
                        f"/v1/sessions/{session}/approvals", json={"call_id": "call_9", "approved": True, "reason": "fine"}
                    )
                    assert reply.status_code == 200 and reply.json()["message"] == "approved"
        result = next(e.json() for e in events if e.event == "tool_result")
        assert result["result"] == "done" and not result.get("rejected", False)
        assert events[-1].json()["text"] == "all done"


async def test_a_question_left_open_by_a_client_that_went_away_is_declined() -> None:
    """The run goes on without its SSE client; nobody is left to answer its question."""
    provider = ScriptedProvider([tool_turn("danger", "{}", call_id="call_9"), text_turn("without it")])
    async with native(provider) as (_, http):
        session = await new_session(http)
        async with http.stream("POST", f"/v1/sessions/{session}/prompt", json={"text": "go"}) as response:
            run_id = response.headers["x-run-id"]
            await collect(response, until="tool_approval_requested")
        async with http.stream("GET", f"/v1/sessions/{session}/events", params={"after": "0", "run_id": run_id}) as response:
            events = await collect(response)
        result = next(e.json() for e in events if e.event == "tool_result")
        assert result["outcome"] == "rejected" and "the client went away" in result["error"]
        assert events[-1].json()["text"] == "without it"


async def test_a_prompt_may_bring_its_own_approval_policy() -> None:
    provider = ScriptedProvider([tool_turn("danger", "{}", call_id="call_9"), text_turn("all done")])
    async with native(provider) as (_, http):
        session = await new_session(http)
        body = {"text": "go", "options": {"approval": {"mode": "reject", "allow_tools": ["danger"]}}}
        async with http.stream("POST", f"/v1/sessions/{session}/prompt", json=body) as response:
            events = await collect(response)
        assert "tool_approval_requested" not in [e.event for e in events]
        assert next(e.json() for e in events if e.event == "tool_result")["result"] == "done"


async def test_turn_limit_confirmation_over_http() -> None:
    async with native(ScriptedProvider([text_turn("one")]), agent=AgentSettings(name="Helper", max_turns=1)) as (_, http):
        session = await new_session(http)
        assert_error(await http.post(f"/v1/sessions/{session}/turn-limit", json={"confirmed": True}), 400, "invalid_request")
        first = await http.post(f"/v1/sessions/{session}/prompt", json={"text": "a"}, headers={"accept": "application/json"})
        assert first.json()["stop_reason"] == "end_turn"
        events: list[SSE] = []
        async with http.stream("POST", f"/v1/sessions/{session}/prompt", json={"text": "b"}) as response:
            async for event in sse_events(response):
                events.append(event)
                if event.event == "turn_limit_reached":
                    assert event.json()["max_turns"] == 1
                    assert_error(await http.post(f"/v1/sessions/{session}/turn-limit", json={}), 400, "invalid_request")
                    reply = await http.post(f"/v1/sessions/{session}/turn-limit", json={"confirmed": True})
                    assert reply.status_code == 200 and reply.json()["message"] == "confirmed"
        assert events[-1].event == "run_finished" and events[-1].json().get("stop_reason", "end_turn") == "end_turn" and not events[-1].json().get("interrupted")


async def test_commands_tools_and_history() -> None:
    async with native(ScriptedProvider([text_turn("answer")])) as (kernel, http):
        session = await new_session(http)
        helped = await http.post(f"/v1/sessions/{session}/commands", json={"command": "/help"})
        assert helped.status_code == 200 and helped.json()["type"] == "command_output" and "/status" in helped.json()["output"]
        by_name = await http.post(f"/v1/sessions/{session}/commands", json={"name": "history", "args": "5"})
        assert by_name.json()["output"] == "No messages yet."
        assert_error(await http.post(f"/v1/sessions/{session}/commands", json={"command": "/nope"}), 404, "not_found")
        assert_error(await http.post(f"/v1/sessions/{session}/commands", json={}), 400, "invalid_request")

        direct = await http.post("/v1/tools/add", json={"arguments": {"a": 40, "b": 2}})
        assert direct.json() == {"type": "tool_output", "name": "add", "result": "42"}
        in_session = await http.post("/v1/tools/current_time" if "current_time" in kernel.tools else "/v1/tools/add", json={"session_id": session})
        assert in_session.status_code == 200
        assert_error(await http.post("/v1/tools/nope", json={}), 404, "not_found")
        assert_error(await http.post("/v1/tools/add", json={"session_id": "missing"}), 404, "not_found")
        assert_error(await http.post("/v1/tools/add", json={"arguments": [1]}), 400, "invalid_request")

        await http.post(f"/v1/sessions/{session}/prompt", json={"text": "question"}, headers={"accept": "application/json"})
        history = (await http.get(f"/v1/sessions/{session}/history")).json()
        assert history["type"] == "history" and [(m["role"], m["content"]) for m in history["messages"]] == [
            ("user", "question"), ("assistant", "answer")
        ]
        limited = (await http.get(f"/v1/sessions/{session}/history", params={"limit": "1"})).json()["messages"]
        assert [m["role"] for m in limited] == ["assistant"]
        assert_error(await http.get(f"/v1/sessions/{session}/history", params={"limit": "0"}), 400, "invalid_request")
        cleared = await http.delete(f"/v1/sessions/{session}/history")
        assert cleared.status_code == 200
        assert (await http.get(f"/v1/sessions/{session}/history")).json()["messages"] == []
        assert_error(await http.get("/v1/sessions/missing/history"), 404, "not_found")


async def test_settings_are_masked_and_masks_never_written_back() -> None:
    async with native() as (kernel, http):
        settings = (await http.get("/v1/settings")).json()["settings"]
        masked = settings["provider"]["openai"]["api_key"]
        assert masked != SECRET and masked.endswith(SECRET[-4:])
        settings["provider"]["openai"]["model"] = "gpt-changed"
        patched = await http.patch("/v1/settings", json={"provider": settings["provider"]})
        assert patched.status_code == 200, patched.text
        assert patched.json()["settings"]["provider"]["openai"]["model"] == "gpt-changed"
        assert kernel.settings.provider.openai.api_key == SECRET
        assert SECRET not in patched.text
        assert_error(await http.patch("/v1/settings", json={"session": {"inbox_size": 0}}), 400, "invalid_request")
        assert_error(await http.patch("/v1/settings", json=[1, 2]), 400, "invalid_request")


async def test_bad_requests_get_json_errors_and_the_server_keeps_serving() -> None:
    async with native(max_body_bytes=2048) as (_, http):
        session = await new_session(http)
        prompt = f"/v1/sessions/{session}/prompt"
        assert_error(await http.post(prompt, content=b"{not json"), 400, "parse_error")
        assert_error(await http.post(prompt, json={"text": 5}), 400, "invalid_request")
        assert_error(await http.post(prompt, json={"text": "hi", "surprise": 1}), 400, "invalid_request")
        assert_error(await http.post(prompt, json={}), 400, "invalid_request")
        assert_error(await http.post(prompt, content=b""), 400, "invalid_request")
        assert_error(await http.post("/v1/sessions/missing/prompt", json={"text": "hi"}), 404, "not_found")
        assert_error(await http.post(prompt, json={"text": "x" * 5000}), 413, "too_large")

        async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: counted while read
            for _ in range(3):
                yield b"x" * 1000

        assert_error(await http.post(prompt, content=chunked()), 413, "too_large")
        assert_error(await http.get("/v1/nothing-here"), 404, "not_found")
        wrong_method = await http.put("/v1/agents")
        assert_error(wrong_method, 405, "method_not_allowed")
        assert "GET" in wrong_method.headers["allow"]
        assert (await http.get("/v1/status")).status_code == 200


async def test_auth_origin_host_and_rate_limit() -> None:
    async with native(requests_per_minute_per_ip=8) as (_, http):
        assert_error(await http.get("/v1/agents", headers={"authorization": "Bearer wrong"}), 401, "unauthorized")
        unauthenticated = await http.get("/v1/agents", headers={"authorization": ""})
        assert_error(unauthenticated, 401, "unauthorized")
        assert unauthenticated.headers["www-authenticate"] == "Bearer"
        assert (await http.get("/v1/agents", params={"token": TOKEN}, headers={"authorization": ""})).status_code == 200
        assert_error(await http.get("/v1/agents", headers={"origin": "http://evil.example"}), 403, "forbidden")
        assert (await http.get("/v1/agents", headers={"host": "gateway.example"})).status_code == 200  # token set
        statuses = [(await http.get("/v1/status")).status_code for _ in range(6)]
        assert statuses[-1] == 429
        limited = await http.get("/v1/status")
        assert_error(limited, 429, "rate_limited")
        assert int(limited.headers["retry-after"]) >= 1
        assert (await http.get("/health")).status_code == 200


async def test_loopback_without_token_checks_host_and_cors_when_enabled() -> None:
    async with native(token=None, cors_origins=["http://app.example"]) as (_, http):
        assert (await http.get("/v1/agents")).status_code == 200  # no token needed on loopback
        assert_error(await http.get("/v1/agents", headers={"host": "attacker.example:8000"}), 403, "forbidden")
        assert (await http.get("/v1/agents", headers={"host": "localhost:8000"})).status_code == 200
        preflight = await http.options(
            "/v1/sessions", headers={"origin": "http://app.example", "access-control-request-method": "POST"}
        )
        assert preflight.status_code == 204
        assert preflight.headers["access-control-allow-origin"] == "http://app.example"
        allowed = await http.get("/v1/agents", headers={"origin": "http://app.example"})
        assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == "http://app.example"
        assert_error(await http.get("/v1/agents", headers={"origin": "http://other.example"}), 403, "forbidden")
