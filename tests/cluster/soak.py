"""The rolling-restart soak: three ``gateway serve`` instances on one PostgreSQL schema and one
Redis of their own, clients in three dialects spread over them, while each instance in turn is
drained (SIGTERM) and started again, one is SIGKILLed, and Redis restarts once.

Used by the suite's short run (tests/cluster/test_soak.py) and by ``python -m tests.bench soak
--minutes N`` (tests/bench/bench_soak.py). What it counts, per prompt (every prompt's text is
unique, so the store says where each one went):

* **acknowledged** — the client saw its run start (a delta, ``run_started``, a ``Stream``
  chunk), or the store holds it; such a prompt must be stored exactly once, and is never
  sent again;
* **refused** — answered with an error before any sign of a run (a draining or unreachable
  instance): sent again elsewhere, after the store confirmed it was not taken;
* **terminal** — how its stream ended in its dialect: whole (the echo of the prompt), a
  failure frame (``owner_lost`` after a SIGKILL, ...), or **cut** (the connection ended with
  no terminal event: allowed only on the instance that was SIGKILLed).

A drained run must be whole (``drain_s`` is far longer than a run). The takeover probe: a
session owned by the instance about to be SIGKILLed is prompted on another one right after
the kill; the time to its answer is bounded by ``lease_s`` + 1 s.
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import anyio
import httpx
import psycopg
from anyio.abc import TaskGroup, TaskStatus
from wsproto.utilities import RemoteProtocolError

from plugins.stores.postgres import split_url
from tests.cluster._support import gateway_instance, stderr_of
from tests.reliability._support import GatewayChild, RawWebSocket
from tests.services import free_port, postgres_schema, start_redis

TRANSPORTS = ("openfang", "http", "agent-cli")
BACKENDS = ("asyncio", "trio", "asyncio")
LEASE_S = 1.5
DRAIN_S = 15.0
#: The longest a client waits for its prompt's end (a drain, then a forward timeout, fit in it).
PROMPT_S = 45.0
WORDS = 10  # a prompt of ten words: an echo of about half a second at 0.05 s a word
DRAINED = "draining: the run was interrupted"

Dialect = Literal["openfang", "http", "agent-cli"]
Ending = Literal["whole", "failed", "cut", "refused"]


@dataclass
class Attempt:
    prompt: str
    dialect: Dialect
    instance: int
    sent: float
    acked: bool = False
    ending: Ending | None = None
    detail: str = ""
    took_s: float = 0.0
    phase: str = "calm"
    pid: int = 0  # the instance's process (an instance restarted is another one)
    wall: float = field(default_factory=time.time)  # when it was sent, as the instances' logs tell time


@dataclass
class Report:
    attempts: list[Attempt] = field(default_factory=list)
    sent: list[str] = field(default_factory=list)
    stored: Counter[str] = field(default_factory=Counter)
    killed: set[int] = field(default_factory=set)  # pids of the SIGKILLed processes
    takeover_s: float | None = None
    events: list[str] = field(default_factory=list)
    stderr: dict[int, str] = field(default_factory=dict)
    duplicate_rows: list[dict[str, Any]] = field(default_factory=list)  # a duplicate's stored rows

    def acknowledged(self) -> set[str]:
        return {a.prompt for a in self.attempts if a.acked} | {p for p in self.sent if self.stored[p]}

    def lost(self) -> list[str]:
        return sorted(p for p in self.acknowledged() if self.stored[p] != 1)

    def duplicated(self) -> list[str]:
        return sorted(p for p, n in self.stored.items() if n > 1)

    def without_terminal(self) -> list[Attempt]:
        """Runs whose stream ended with no terminal event, but on the SIGKILLed instance."""
        return [a for a in self.attempts if a.ending == "cut" and a.acked and a.pid not in self.killed]

    def drained_cut(self) -> list[Attempt]:
        return [a for a in self.attempts if a.ending == "failed" and DRAINED in a.detail]

    def log_excerpt(self, attempt: Attempt, margin_s: float = 2.0) -> str:
        """The instances' warnings and errors from around an attempt (what a failure is traced with)."""
        start, end = attempt.wall - margin_s, attempt.wall + attempt.took_s + margin_s
        lines = []
        for index, log in sorted(self.stderr.items()):
            for line in log.splitlines():
                stamp = _log_time(line)
                if stamp is not None and start <= stamp <= end and (" WARNING " in line or " ERROR " in line):
                    lines.append(f"instance {index}: {line}")
        return "\n".join(lines)

    def latency_ms(self, phase: str | None = None) -> list[float]:
        return sorted(a.took_s * 1000 for a in self.attempts if a.ending == "whole" and (phase is None or a.phase == phase))

    def summary(self) -> dict[str, Any]:
        calm, rolling = self.latency_ms("calm"), self.latency_ms("rolling")
        endings = Counter(a.ending or "none" for a in self.attempts)
        failures = Counter(a.detail.split(":")[0] for a in self.attempts if a.ending in ("failed", "refused"))
        return {
            "prompts": len(self.sent), "acknowledged": len(self.acknowledged()), "lost": len(self.lost()),
            "duplicated": len(self.duplicated()), "without_terminal": len(self.without_terminal()),
            "drained_cut": len(self.drained_cut()), "endings": dict(endings), "failures": dict(failures),
            "takeover_s": self.takeover_s, "p50_calm_ms": _pct(calm, 50), "p99_calm_ms": _pct(calm, 99),
            "p50_rolling_ms": _pct(rolling, 50), "p99_rolling_ms": _pct(rolling, 99),
            "added_p99_ms": _pct(rolling, 99) - _pct(calm, 99) if calm and rolling else None,
            "slowest_s": max((a.took_s for a in self.attempts), default=0.0),
        }


def _log_time(line: str) -> float | None:
    try:
        return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    except ValueError:
        return None


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    return values[min(len(values) - 1, round(q / 100 * (len(values) - 1)))]


class Cluster:
    """The three instances (each restartable under its own instance id) and the Redis. Each
    instance lives in a task of its own (``tasks``), which enters and leaves its context."""

    def __init__(self, tmp_path: Path, store_url: str, tasks: TaskGroup) -> None:
        self.tmp_path = tmp_path
        self.store_url = store_url
        self.prefix = f"gwsoak-{random.getrandbits(40):010x}"
        self.redis_port = free_port()
        (tmp_path / "redis").mkdir(exist_ok=True)
        self.redis = start_redis(self.redis_port, tmp_path / "redis")
        self.live: dict[int, GatewayChild | None] = dict.fromkeys(range(len(BACKENDS)))
        self._release: dict[int, anyio.Event] = {}
        self._gone: dict[int, anyio.Event] = {}
        self._tasks = tasks

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    async def start(self, index: int) -> GatewayChild:
        child: GatewayChild = await self._tasks.start(self._instance, index)
        self.live[index] = child
        return child

    async def _instance(self, index: int, *, task_status: TaskStatus[GatewayChild]) -> None:
        release, gone = self._release[index], self._gone[index] = anyio.Event(), anyio.Event()
        try:
            async with gateway_instance(
                self.tmp_path, index, BACKENDS[index], self.store_url, self.prefix, transports=TRANSPORTS, redis=self.redis_url,
                lease_s=LEASE_S, forward_timeout_s=30.0, drain_s=DRAIN_S, delay_s="0.05",
            ) as child:
                task_status.started(child)
                await release.wait()
        finally:
            gone.set()

    async def stop(self, index: int, report: Report, how: signal.Signals) -> None:
        child = self.live[index]
        assert child is not None
        if how == signal.SIGKILL:
            report.killed.add(child.process.pid)
        self.live[index] = None  # draining or dead: no new traffic is sent to it
        if child.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):  # already killed (the takeover probe)
                child.process.send_signal(how)
        with anyio.move_on_after(DRAIN_S + 15):
            await child.process.wait()
        code = child.process.returncode
        if code is None:
            raise AssertionError(f"instance {index} did not exit {DRAIN_S + 15:g}s after {how.name}:\n{stderr_of(child)[-4000:]}")
        report.events.append(f"{time.strftime('%X')} instance {index} {how.name}: exit {code}")
        report.stderr[index] = report.stderr.get(index, "") + stderr_of(child)
        self._release[index].set()
        await self._gone[index].wait()
        if how == signal.SIGTERM:
            assert code == 0, stderr_of(child)[-3000:]

    def restart_redis(self, report: Report) -> None:
        self.redis.terminate()
        self.redis.wait(10)
        self.redis = start_redis(self.redis_port, self.tmp_path / "redis")  # empty: leases and streams gone
        report.events.append(f"{time.strftime('%X')} redis restarted")

    def pick(self, hint: int) -> tuple[int, GatewayChild] | None:
        for step in range(len(BACKENDS)):
            index = (hint + step) % len(BACKENDS)
            child = self.live[index]
            if child is not None:
                return index, child
        return None

    def close(self) -> None:
        self.redis.terminate()
        self.redis.wait(10)


# ------------------------------------------------------------------ one prompt per dialect


def _openfang(url: str, session: str, text: str, attempt: Attempt) -> None:
    ws = RawWebSocket(url, timeout_s=PROMPT_S)
    deadline = time.monotonic() + PROMPT_S  # pings keep a socket busy: bound the wait itself
    try:
        ws.send_text(json.dumps({"type": "message", "content": text, "session_id": session}))
        ws.read_until(lambda texts: time.monotonic() > deadline or any(json.loads(t)["type"] in ("response", "error") for t in texts), timeout_s=PROMPT_S)
    finally:
        ws.close()
    got = [json.loads(t) for t in ws.texts]
    attempt.acked = any(f["type"] == "text_delta" for f in got)
    last = next((f for f in reversed(got) if f["type"] in ("response", "error")), None)
    if last is None:
        attempt.ending = "cut"
    elif last["type"] == "response":
        attempt.ending, attempt.detail = ("whole" if last["content"] == f"echo: {text}" else "failed"), last["content"][:80]
    else:
        attempt.ending, attempt.detail = ("failed" if attempt.acked else "refused"), last["content"]


def _agent_cli(ws: RawWebSocket, text: str, attempt: Attempt, request_id: str) -> None:
    ws.send_text(json.dumps({"request_id": request_id, "input": {"Text": text}, "stream": True}))

    deadline = time.monotonic() + PROMPT_S

    def ended(texts: list[str]) -> bool:
        return time.monotonic() > deadline or any(_cli_terminal(json.loads(t), request_id) for t in texts)

    ws.read_until(ended, timeout_s=PROMPT_S)
    mine = [f for f in map(json.loads, ws.texts) if f.get("request_id") == request_id]
    attempt.acked = any("Stream" in f["response"] for f in mine)
    last = next((f for f in reversed(mine) if _cli_terminal(f, request_id)), None)
    streamed = "".join(f["response"]["Stream"] for f in mine if "Stream" in f["response"])
    if last is None:
        attempt.ending = "cut"
    elif last.get("error"):
        attempt.ending, attempt.detail = ("failed" if attempt.acked else "refused"), last["error"]
    else:
        attempt.ending = "whole" if streamed == f"echo: {text}" and not last["response"]["Complete"].get("interrupted") else "failed"


def _cli_terminal(frame: dict[str, Any], request_id: str) -> bool:
    return frame.get("request_id") == request_id and (bool(frame.get("error")) or "Complete" in frame["response"])


async def _http(base: str, session: str, text: str, attempt: Attempt) -> None:
    last: dict[str, Any] | None = None
    # Keep-alive comments keep a stream busy: bound the wait itself (a run that never ends is cut).
    with anyio.move_on_after(PROMPT_S):
        last = await _http_stream(base, session, text, attempt)
    if attempt.ending == "refused":
        return
    if last is None:
        attempt.ending = "cut"
    elif last["type"] == "run_finished" and not last.get("interrupted") and last["text"] == f"echo: {text}":
        attempt.ending = "whole"
    else:
        attempt.ending = "failed"
        attempt.detail = f"{last['error']['code']}: {last['error']['message']}" if "error" in last else f"interrupted {last.get('interrupt_cause')}"


async def _http_stream(base: str, session: str, text: str, attempt: Attempt) -> dict[str, Any] | None:
    async with httpx.AsyncClient(base_url=base, timeout=PROMPT_S) as client:
        async with client.stream("POST", f"/v1/sessions/{session}/prompt", json={"text": text}) as response:
            if response.status_code != 200:
                body = json.loads(await response.aread())
                attempt.ending, attempt.detail = "refused", f"{body['error']['code']}: {body['error']['message']}"
                return None
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                event = json.loads(line[6:])
                if event["type"] == "run_started":
                    attempt.acked = True
                if event["type"] in ("run_finished", "run_failed", "subscriber_lagged"):  # lagged: told the rest is lost
                    return dict(event)
    return None


# ------------------------------------------------------------------ the soak


class Soak:
    def __init__(self, cluster: Cluster, report: Report) -> None:
        self.cluster = cluster
        self.report = report
        self.phase = "calm"
        self.running = True
        self.agent = ""

    async def stored_somewhere(self, text: str) -> bool:
        """Whether the store holds ``text`` as a user message."""
        return (await stored_prompts(self.cluster.store_url))[text] > 0

    async def prompt(self, name: str, hint: int, send: Callable[[int, GatewayChild, Attempt], Awaitable[None]], text: str) -> None:
        """Send ``text`` until some instance acknowledges it (or the soak ends)."""
        self.report.sent.append(text)
        while self.running:
            picked = self.cluster.pick(hint)
            if picked is None:
                await anyio.sleep(0.1)
                continue
            index, child = picked
            attempt = Attempt(text, name, index, time.monotonic(), phase=self.phase, pid=child.process.pid)  # type: ignore[arg-type]
            self.report.attempts.append(attempt)
            try:
                await send(index, child, attempt)
            except (OSError, httpx.HTTPError, ValueError, KeyError, RemoteProtocolError) as exc:  # the last: a socket closed mid-handshake
                if attempt.ending is None:
                    attempt.ending, attempt.detail = ("cut" if attempt.acked else "refused"), f"{type(exc).__name__}: {exc}"
            attempt.took_s = time.monotonic() - attempt.sent
            if attempt.acked or attempt.ending in ("whole", "failed"):
                return
            if await self.stored_somewhere(text):  # refused (or cut before any sign of a run), or so it looked: the store knows
                attempt.acked = True
                return
            attempt.ending = "refused"  # not taken: a socket that was already closing, a refusal
            hint += 1
            await anyio.sleep(0.05)

    async def openfang_conversation(self, number: int) -> None:
        session = f"soak-of-{number}"
        for turn in range(10_000):
            if not self.running:
                return

            async def send(index: int, child: GatewayChild, attempt: Attempt) -> None:
                url = child.urls["openfang"].replace("http", "ws") + f"/api/agents/{self.agent}/ws"
                await anyio.to_thread.run_sync(_openfang, url, session, attempt.prompt, attempt)

            await self.prompt("openfang", number + turn, send, words(f"of{number}t{turn}"))

    async def http_conversation(self, number: int) -> None:
        session = f"soak-http-{number}"
        for turn in range(10_000):
            if not self.running:
                return

            async def send(index: int, child: GatewayChild, attempt: Attempt) -> None:
                await _http(child.urls["http"], session, attempt.prompt, attempt)

            await self.prompt("http", number + turn + 1, send, words(f"http{number}t{turn}"))

    async def agent_cli_conversation(self, number: int) -> None:
        """One socket (one session) per instance visit: the conversation goes on on it until
        its instance drains and closes it, then on a new socket elsewhere."""
        turn = 0
        sockets: dict[int, RawWebSocket] = {}
        try:
            while self.running:
                text = words(f"cli{number}t{turn}")
                turn += 1

                async def send(index: int, child: GatewayChild, attempt: Attempt) -> None:
                    ws = sockets.get(index)
                    if ws is None or ws.close_code is not None:
                        url = child.urls["agent-cli"].replace("http", "ws") + "/"
                        ws = sockets[index] = await anyio.to_thread.run_sync(lambda: RawWebSocket(url, timeout_s=PROMPT_S))
                    try:
                        await anyio.to_thread.run_sync(_agent_cli, ws, attempt.prompt, attempt, f"r{len(self.report.attempts)}")
                    except OSError:
                        sockets.pop(index, None)
                        raise
                    if attempt.ending == "cut":
                        sockets.pop(index, None)

                await self.prompt("agent-cli", number + turn + 2, send, text)
        finally:
            for ws in sockets.values():
                ws.close()

    async def probe_takeover(self, victim: int) -> None:
        """Own a session on ``victim``, SIGKILL it, and time a prompt for it on another instance."""
        child = self.cluster.live[victim]
        assert child is not None
        async with httpx.AsyncClient(base_url=child.urls["http"], timeout=30) as client:
            await client.post("/v1/sessions", json={"session_id": "soak-probe"})
            answer = await client.post("/v1/sessions/soak-probe/prompt", json={"text": "before"}, headers={"accept": "application/json"})
            assert answer.status_code == 200, answer.text
        other = self.cluster.pick(victim + 1)
        assert other is not None and other[0] != victim
        child.process.send_signal(signal.SIGKILL)  # its lease is live for up to lease_s more
        killed = time.monotonic()
        async with httpx.AsyncClient(base_url=other[1].urls["http"], timeout=60) as client:
            answer = await client.post("/v1/sessions/soak-probe/prompt", json={"text": "after"}, headers={"accept": "application/json"})
        self.report.takeover_s = time.monotonic() - killed
        assert answer.status_code == 200 and answer.json()["text"] == "echo: after", answer.text
        await self.cluster.stop(victim, self.report, signal.SIGKILL)


def words(tag: str) -> str:
    return " ".join(f"{tag}w{i}" for i in range(WORDS))


async def stored_prompts(store_url: str) -> Counter[str]:
    """Every user message in the store, read from PostgreSQL itself (asking an instance would
    load the sessions there, and move their leases)."""

    def read() -> Counter[str]:
        url, schema = split_url(store_url)
        with psycopg.connect(url) as conn:
            rows = conn.execute(f'SELECT body FROM "{schema}".messages').fetchall()
        bodies = [json.loads(bytes(row[0])) for row in rows]
        return Counter(b.get("content", "") for b in bodies if b.get("role") == "user")

    return await anyio.to_thread.run_sync(read)


async def stored_rows(store_url: str, texts: set[str]) -> list[dict[str, Any]]:
    """The stored user messages whose text is one of ``texts``, with where they came from
    (session, row id, run and request ids, time): what a duplicate is traced back with."""

    def read() -> list[dict[str, Any]]:
        url, schema = split_url(store_url)
        with psycopg.connect(url) as conn:
            rows = conn.execute(f'SELECT id, session_id, body, created_at FROM "{schema}".messages ORDER BY id').fetchall()
        found = []
        for row_id, session_id, body, created_at in rows:
            message = json.loads(bytes(body))
            if message.get("role") == "user" and message.get("content") in texts:
                found.append({"row": row_id, "session": session_id, "created_at": created_at, **{k: message.get(k) for k in ("content", "run_id", "request_id")}})
        return found

    return await anyio.to_thread.run_sync(read)


@asynccontextmanager
async def soak_cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    with postgres_schema() as store_url:
        async with anyio.create_task_group() as tasks:
            cluster = Cluster(tmp_path, store_url, tasks)
            try:
                for index in range(len(BACKENDS)):
                    await cluster.start(index)
                yield cluster
            finally:
                for release in cluster._release.values():
                    release.set()  # each instance's context kills what still runs
                cluster.close()


async def run_soak(
    tmp_path: Path, *, report: Report | None = None, rounds: int = 1, calm_s: float = 4.0, settle_s: float = 2.0, per_dialect: int = 2
) -> Report:
    """``rounds`` of: SIGTERM and restart each instance in turn; then (first round) a SIGKILL
    with the takeover probe, and a Redis restart. Clients run throughout. ``report`` is filled
    as it goes (the instances' logs too, also when the soak fails)."""
    report = report if report is not None else Report()
    async with soak_cluster(tmp_path) as cluster:
        try:
            await _soak(cluster, report, rounds=rounds, calm_s=calm_s, settle_s=settle_s, per_dialect=per_dialect)
            report.stored = await stored_prompts(cluster.store_url)
            if report.duplicated():
                report.duplicate_rows = await stored_rows(cluster.store_url, set(report.duplicated()))
        finally:
            for index, child in cluster.live.items():
                if child is not None:
                    report.stderr[index] = report.stderr.get(index, "") + stderr_of(child)
    return report


async def _soak(cluster: Cluster, report: Report, *, rounds: int, calm_s: float, settle_s: float, per_dialect: int) -> None:
    soak = Soak(cluster, report)
    first = cluster.live[0]
    assert first is not None
    async with httpx.AsyncClient(base_url=first.urls["openfang"], timeout=10) as client:
        soak.agent = (await client.get("/api/agents")).json()[0]["id"]
    async with httpx.AsyncClient(base_url=first.urls["http"], timeout=10) as client:
        for number in range(per_dialect):
            await client.post("/v1/sessions", json={"session_id": f"soak-http-{number}"})
    async with anyio.create_task_group() as clients:
        for number in range(per_dialect):
            clients.start_soon(soak.openfang_conversation, number)
            clients.start_soon(soak.http_conversation, number)
            clients.start_soon(soak.agent_cli_conversation, number)
        await anyio.sleep(calm_s)
        soak.phase = "rolling"
        for round_ in range(rounds):
            for index in range(len(BACKENDS) - 1):
                await cluster.stop(index, report, signal.SIGTERM)
                await cluster.start(index)
                await anyio.sleep(settle_s)
            victim = len(BACKENDS) - 1
            if round_ == 0:
                await soak.probe_takeover(victim)
            else:
                await cluster.stop(victim, report, signal.SIGTERM)
            await cluster.start(victim)
            await anyio.sleep(settle_s)
            if round_ == 0:
                cluster.restart_redis(report)
                await anyio.sleep(settle_s)
        soak.running = False  # each client ends with its prompt in flight
