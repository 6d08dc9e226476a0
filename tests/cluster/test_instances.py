"""Real ``gateway serve`` processes sharing sessions through PostgreSQL and Redis.

Each test starts two instances (on the backend it names; one pair mixes asyncio and trio)
on ephemeral ports, with a store schema and a Redis key prefix of its own, the echo model
streaming slowly. Clients talk to each instance in its own dialect; nothing between the
instances but the two shared services.
"""

from __future__ import annotations

import json
import signal
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import websockets

from tests.asyncio_clients import in_asyncio
from tests.reliability._support import GatewayChild, gateway_child
from tests.services import free_port, postgres_schema, redis_url, start_redis
from tests.subprocess_gateway import gateway_env

pytestmark = pytest.mark.anyio

LONG = " ".join(f"word{i}" for i in range(60))  # 3 s at 0.05 s a word


@asynccontextmanager
async def instances(tmp_path: Path, backends: list[str], *, redis: str | None = None, delay_s: str = "0.05") -> AsyncIterator[list[GatewayChild]]:
    prefix = f"gwtest-{uuid.uuid4().hex[:10]}"
    with postgres_schema() as store_url:
        async with AsyncExitStack() as stack:
            children = []
            for i, backend in enumerate(backends):
                config = tmp_path / f"gateway-{i}.toml"
                config.write_text(f'[cluster]\ninstance_id = "{prefix}-{i}"\nkey_prefix = "{prefix}"\nlease_s = 1.5\nforward_timeout_s = 5.0\n')
                env = gateway_env(tmp_path / "unused.db", GATEWAY_DB=store_url, GATEWAY_REDIS_URL=redis or redis_url(), GATEWAY_ECHO_DELAY_S=delay_s)
                args = ["serve", "--config", str(config), "--backend", backend, "-t", "openfang", "-t", "http", "--set", "openfang.port=0", "--set", "http.port=0"]
                child = await stack.enter_async_context(gateway_child(args, env, cwd=tmp_path))
                await child.wait_ready(["openfang", "http"])
                children.append(child)
            yield children


async def sse_events(url: str, path: str, out: list[dict[str, Any]], *, headers: dict[str, str] | None = None, until: str = "run_finished") -> None:
    """Native SSE events (with their ids) until one of type ``until`` (or a run_failed)."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as client, client.stream("GET", path, headers=headers or {}) as response:
        assert response.status_code == 200, await response.aread()
        event_id = None
        async for line in response.aiter_lines():
            if line.startswith("id: "):
                event_id = int(line[4:])
            elif line.startswith("data: "):
                event = json.loads(line[6:])
                event["_id"] = event_id
                out.append(event)
                if event["type"] in (until, "run_failed"):
                    return


async def openfang_prompt(base: str, agent: str, text: str) -> tuple[str, list[dict[str, Any]]]:
    """Send ``text`` over OpenFang's socket; the session it went to and the frames until the response."""

    async def client() -> tuple[str, list[dict[str, Any]]]:
        async with websockets.connect(base.replace("http", "ws") + f"/api/agents/{agent}/ws", proxy=None) as ws:
            await ws.send(json.dumps({"type": "message", "content": text}))
            got = []
            async for frame in ws:
                message = json.loads(frame)
                got.append(message)
                if message["type"] == "response":
                    break
        async with httpx.AsyncClient(base_url=base, timeout=10) as http:
            sessions = (await http.get(f"/api/agents/{agent}/sessions")).json()
        active = next(s for s in sessions["sessions"] if s.get("active"))
        return active["session_id"], got

    return await in_asyncio(client)


async def agent_of(child: GatewayChild) -> str:
    async with httpx.AsyncClient(base_url=child.urls["openfang"], timeout=10) as client:
        return str((await client.get("/api/agents")).json()[0]["id"])


@pytest.mark.parametrize("backends", [["asyncio", "asyncio"], ["trio", "trio"], ["asyncio", "trio"]], ids=["asyncio", "trio", "mixed"])
async def test_a_conversation_started_on_one_instance_is_watched_and_continued_on_another(tmp_path: Path, backends: list[str]) -> None:
    async with instances(tmp_path, backends) as (a, b):
        agent = await agent_of(a)
        session, frames = await openfang_prompt(a.urls["openfang"], agent, "hello from A")
        assert frames[-1]["content"] == "echo: hello from A"
        watched: list[dict[str, Any]] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(sse_events, b.urls["http"], f"/v1/sessions/{session}/events", watched)
            await anyio.sleep(0.3)  # the watcher is subscribed (a follower from now on)
            async with httpx.AsyncClient(base_url=b.urls["http"], timeout=60) as client:
                answer = await client.post(f"/v1/sessions/{session}/prompt", json={"text": LONG}, headers={"accept": "application/json"})
            assert answer.status_code == 200 and answer.json()["text"] == "echo: " + LONG
        text = "".join(e["text"] for e in watched if e["type"] == "text_delta")
        assert text == "echo: " + LONG and watched[-1]["type"] == "run_finished"  # every delta, in order
        ids = [e["_id"] for e in watched]
        assert ids == sorted(ids) and len(set(ids)) == len(ids)
        async with httpx.AsyncClient(base_url=b.urls["http"], timeout=10) as client:
            history = (await client.get(f"/v1/sessions/{session}/history")).json()["messages"]
        assert [m["content"] for m in history if m["role"] == "user"] == ["hello from A", LONG]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
async def test_an_interrupt_and_an_approval_sent_to_one_instance_act_on_the_others_run(tmp_path: Path, backend: str) -> None:
    async with instances(tmp_path, [backend, backend]) as (a, b):
        async with httpx.AsyncClient(base_url=a.urls["http"], timeout=60) as on_a, httpx.AsyncClient(base_url=b.urls["http"], timeout=60) as on_b:
            await on_a.post("/v1/sessions", json={"session_id": "long"})
            accepted = (await on_a.post("/v1/sessions/long/prompt?wait=false", json={"text": LONG})).json()
            events: list[dict[str, Any]] = []
            async with anyio.create_task_group() as tg:
                tg.start_soon(sse_events, b.urls["http"], f"/v1/sessions/long/events?run_id={accepted['run_id']}&after=0", events)
                with anyio.fail_after(20):
                    while not any(e["type"] == "text_delta" for e in events):
                        await anyio.sleep(0.05)
                assert (await on_b.post("/v1/sessions/long/interrupt")).status_code == 200  # to B; the run is on A
            assert events[-1]["type"] == "run_finished" and events[-1]["interrupted"] is True

            await on_a.post("/v1/sessions", json={"session_id": "ask"})
            target = tmp_path / "approved.txt"
            args = json.dumps({"path": str(target.name), "content": "written by A, approved on B"})
            accepted = (await on_a.post("/v1/sessions/ask/prompt?wait=false", json={"text": f"/tool write_file {args}"})).json()
            events = []
            async with anyio.create_task_group() as tg:
                tg.start_soon(sse_events, a.urls["http"], f"/v1/sessions/ask/events?run_id={accepted['run_id']}&after=0", events)
                with anyio.fail_after(20):
                    while not (asked := [e for e in events if e["type"] == "tool_approval_requested"]):
                        await anyio.sleep(0.05)
                answer = await on_b.post("/v1/sessions/ask/approvals", json={"call_id": asked[0]["call_id"], "approved": True})
                assert answer.status_code == 200, answer.text
            result = next(e for e in events if e["type"] == "tool_result")
            assert result.get("outcome", "ok") == "ok" and not result.get("is_error") and events[-1]["type"] == "run_finished"  # defaults are left out
            assert target.read_text() == "written by A, approved on B"


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
async def test_when_the_owner_is_killed_its_run_ends_owner_lost_and_another_instance_goes_on(tmp_path: Path, backend: str) -> None:
    async with instances(tmp_path, [backend, backend]) as (a, b):
        async with httpx.AsyncClient(base_url=a.urls["http"], timeout=60) as on_a:
            await on_a.post("/v1/sessions", json={"session_id": "doomed"})
            await on_a.post("/v1/sessions/doomed/prompt", json={"text": "first"}, headers={"accept": "application/json"})
            accepted = (await on_a.post("/v1/sessions/doomed/prompt?wait=false", json={"text": LONG})).json()
        events: list[dict[str, Any]] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(sse_events, b.urls["http"], f"/v1/sessions/doomed/events?run_id={accepted['run_id']}&after=0", events)
            with anyio.fail_after(20):
                while not any(e["type"] == "text_delta" for e in events):
                    await anyio.sleep(0.05)
            a.process.send_signal(signal.SIGKILL)  # no goodbye: its lease expires (1.5 s)
        lost = events[-1]
        assert lost["type"] == "run_failed" and lost["error"]["code"] == "owner_lost" and lost["run_id"] == accepted["run_id"]
        ids = [e["_id"] for e in events if e["_id"] is not None]
        assert ids == sorted(ids) and len(set(ids)) == len(ids)  # the seq went on, none reused
        async with httpx.AsyncClient(base_url=b.urls["http"], timeout=60) as on_b:
            answer = await on_b.post("/v1/sessions/doomed/prompt", json={"text": "after"}, headers={"accept": "application/json"})
            assert answer.status_code == 200 and answer.json()["text"] == "echo: after"
            history = (await on_b.get("/v1/sessions/doomed/history")).json()["messages"]
        assert [m["content"] for m in history if m["role"] == "user"] == ["first", LONG, "after"]  # nothing acknowledged lost


async def test_redis_restarted_mid_stream(tmp_path: Path) -> None:
    """The owner's own clients never notice; the remote follower is told of the gap; once
    Redis is back, cross-instance commands and followers work again without a restart."""
    port = free_port()
    redis_dir = tmp_path / "redis"
    redis_dir.mkdir()
    server = start_redis(port, redis_dir)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        async with instances(tmp_path, ["asyncio", "trio"], redis=url) as (a, b):
            async with httpx.AsyncClient(base_url=a.urls["http"], timeout=60) as on_a:
                await on_a.post("/v1/sessions", json={"session_id": "through"})
                accepted = (await on_a.post("/v1/sessions/through/prompt?wait=false", json={"text": LONG})).json()
                remote: list[dict[str, Any]] = []
                local: list[dict[str, Any]] = []
                async with anyio.create_task_group() as tg:
                    tg.start_soon(sse_events, b.urls["http"], f"/v1/sessions/through/events?run_id={accepted['run_id']}&after=0", remote, )
                    tg.start_soon(sse_events, a.urls["http"], f"/v1/sessions/through/events?run_id={accepted['run_id']}&after=0", local)
                    with anyio.fail_after(20):
                        while not any(e["type"] == "text_delta" for e in remote):
                            await anyio.sleep(0.05)
                    server.terminate()
                    server.wait(10)
                    await anyio.sleep(0.5)
                    server = start_redis(port, redis_dir)  # empty: the stream and the leases are gone
                assert local[-1]["type"] == "run_finished" and local[-1]["text"] == "echo: " + LONG
                assert remote[-1]["type"] in ("subscriber_lagged", "run_finished")
                if remote[-1]["type"] == "subscriber_lagged":
                    assert remote[-1]["error"]["code"] == "rate_limited"  # told, not silently skipped
            async with httpx.AsyncClient(base_url=b.urls["http"], timeout=60) as on_b:
                with anyio.fail_after(30):
                    while True:
                        answer = await on_b.post("/v1/sessions/through/prompt", json={"text": "again"}, headers={"accept": "application/json"})
                        if answer.status_code == 200:
                            break
                        assert answer.json()["error"]["code"] == "unavailable", answer.text
                        await anyio.sleep(0.3)
            assert answer.json()["text"] == "echo: again"
    finally:
        server.terminate()
        server.wait(10)
