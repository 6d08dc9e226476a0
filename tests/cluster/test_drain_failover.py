"""Issue 29's cluster items with real ``gateway serve`` processes on PostgreSQL and Redis.

1. After the owner is SIGKILLed, a command that arrives while its lease is still live waits
   for the lease, not for ``forward_timeout_s``: the session is taken over when the lease ends.
2. A draining instance gives each session's lease up as its run ends, and a prompt forwarded
   to it meanwhile is handed over (carried out by the instance that forwarded it), neither
   refused nor cut; every prompt is stored once.
3. An instance that gets SIGTERM while one of its requests waits on a dead owner answers that
   request with a clear ``draining`` error in the dialect's shape, and logs it.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import anyio
import coredis
import httpx
import pytest

from tests.cluster._support import gateway_instances, stderr_of
from tests.services import redis_url

pytestmark = pytest.mark.anyio

LONG = " ".join(f"word{i}" for i in range(60))  # 3 s at 0.05 s a word
JSON = {"accept": "application/json"}


async def prompt(base: str, session: str, text: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        return await client.post(f"/v1/sessions/{session}/prompt", json={"text": text}, headers=JSON)


async def create(base: str, *sessions: str) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=10) as client:
        for session in sessions:
            assert (await client.post("/v1/sessions", json={"session_id": session})).status_code in (200, 201)


async def history(base: str, session: str) -> list[str]:
    async with httpx.AsyncClient(base_url=base, timeout=10) as client:
        messages = (await client.get(f"/v1/sessions/{session}/history")).json()["messages"]
    return [m["content"] for m in messages if m["role"] == "user"]


async def events_until_end(base: str, path: str, out: list[dict[str, Any]]) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=60) as client, client.stream("GET", path) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                out.append(json.loads(line[6:]))
                if out[-1]["type"] in ("run_finished", "run_failed"):
                    return


async def test_failover_after_a_sigkill_takes_the_lease_not_the_forward_timeout(tmp_path: Path, anyio_backend: str) -> None:
    backend = anyio_backend  # the instances run on the test's backend too
    lease_s = 1.5
    async with gateway_instances(tmp_path, [backend, backend], transports=["http"], lease_s=lease_s, forward_timeout_s=30.0) as (a, b):
        await create(a.urls["http"], "s")
        assert (await prompt(a.urls["http"], "s", "first")).status_code == 200  # A holds the lease
        a.process.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        answer = await prompt(b.urls["http"], "s", "after")  # forwarded to the dead owner first
        took = time.monotonic() - killed
        assert answer.status_code == 200 and answer.json()["text"] == "echo: after", answer.text
        assert took < lease_s + 1.0, f"takeover after {took:.2f}s: bounded by lease_s ({lease_s}), not forward_timeout_s (30)"
        assert "taking the session over" in stderr_of(b)
        assert await history(b.urls["http"], "s") == ["first", "after"]  # the withdrawn command ran once


async def test_a_draining_instance_finishes_its_run_then_hands_the_session_over(tmp_path: Path, anyio_backend: str) -> None:
    backend = anyio_backend  # the instances run on the test's backend too
    async with gateway_instances(tmp_path, [backend, backend], transports=["http"], drain_s=20.0) as (a, b):
        await create(a.urls["http"], "busy", "idle")
        assert (await prompt(a.urls["http"], "busy", "first")).status_code == 200
        assert (await prompt(a.urls["http"], "idle", "first")).status_code == 200  # both owned by A
        async with httpx.AsyncClient(base_url=a.urls["http"], timeout=60) as on_a:
            accepted = (await on_a.post("/v1/sessions/busy/prompt?wait=false", json={"text": LONG})).json()
            events: list[dict[str, Any]] = []
            async with anyio.create_task_group() as tg:
                tg.start_soon(events_until_end, a.urls["http"], f"/v1/sessions/busy/events?run_id={accepted['run_id']}&after=0", events)
                with anyio.fail_after(20):
                    while not any(e["type"] == "text_delta" for e in events):
                        await anyio.sleep(0.02)
                a.process.send_signal(signal.SIGTERM)
                with anyio.fail_after(10):
                    while (await on_a.get("/readyz")).status_code == 200:
                        await anyio.sleep(0.02)
                # The idle session's lease went at once: B serves its next prompt itself.
                idle = await prompt(b.urls["http"], "idle", "second")
                assert idle.status_code == 200 and idle.json()["text"] == "echo: second", idle.text
                assert events[-1]["type"] not in ("run_finished", "run_failed")  # A's run still goes on
                # Forwarded to A while its run goes on: A refuses it (draining), B waits for the
                # lease, which A gives up as its run ends, and carries it out.
                handed = await prompt(b.urls["http"], "busy", "next")
            assert handed.status_code == 200 and handed.json()["text"] == "echo: next", handed.text
        end = events[-1]
        assert end["type"] == "run_finished" and not end.get("interrupted") and end["text"] == "echo: " + LONG  # drained whole
        with anyio.fail_after(20):
            assert await a.process.wait() == 0
        assert "continues here" in stderr_of(b)
        assert await history(b.urls["http"], "busy") == ["first", LONG, "next"]
        assert await history(b.urls["http"], "idle") == ["first", "second"]


async def test_sigterm_while_a_request_waits_on_a_dead_owner_answers_it_draining_and_logs_it(tmp_path: Path, anyio_backend: str) -> None:
    backend = anyio_backend  # the instances run on the test's backend too
    prefix = f"gwtest-wait-{backend}-{time.monotonic_ns() % 10**8}"
    async with gateway_instances(tmp_path, [backend, backend], transports=["http"], lease_s=4.0, drain_s=0.3, prefix=prefix) as (a, b):
        await create(a.urls["http"], "x")
        assert (await prompt(a.urls["http"], "x", "first")).status_code == 200
        a.process.send_signal(signal.SIGKILL)
        await a.process.wait()
        answers: list[httpx.Response] = []

        async def ask() -> None:
            answers.append(await prompt(b.urls["http"], "x", "stranded"))

        redis = coredis.Redis.from_url(redis_url())
        async with redis, anyio.create_task_group() as tg:
            tg.start_soon(ask)
            with anyio.fail_after(10):  # the command waits in the dead owner's inbox
                while not await redis.llen(f"{prefix}:inbox:{prefix}-0"):
                    await anyio.sleep(0.02)
            b.process.send_signal(signal.SIGTERM)
        with anyio.fail_after(20):
            assert await b.process.wait() == 0
    answer = answers[0]
    assert answer.status_code == 503 and answer.headers["retry-after"] == "1", answer.text
    assert answer.json()["error"]["code"] == "draining" and "retry" in answer.json()["error"]["message"]
    log = stderr_of(b)
    assert "session x" in log and ("waited on instance" in log or "is draining: refused" in log), log[-2000:]
