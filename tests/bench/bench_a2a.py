"""A2A: the gateway's A2A transport against a2a-sdk's reference server (Starlette), the same
a2a-sdk client (JSON-RPC binding, streaming) calling both (issue 25).

Both servers have the same echo behaviour: a prompt ``{"n": N, "size": 6}`` is answered with
exactly the N chunks ``00000 00001 …`` of the bench model (tests/bench/_provider.py) — the
gateway through its kernel and the bench provider, the reference through an ``AgentExecutor``
that emits each chunk as a ``TaskArtifactUpdateEvent`` with ``TaskUpdater``. Each runs in its
own process (the gateway on asyncio and on trio; the reference on asyncio, the only loop the
SDK's server supports); rounds alternate between them.

Figures (medians):

* **time to first artifact chunk**: ``send_message`` of a 50-chunk prompt to the first
  ``artifact_update``;
* **chunks/s in a 2,000-chunk stream**: 2,000 / the time to the stream's end (the text is
  checked whole; the gateway may merge ready chunks into fewer events — the client gets the
  same text, sooner). Target: ≥ 3× the reference's;
* **CPU per task**: the server process's CPU time (/proc) over 200-chunk streamed tasks, per
  task. Target: ≤ 1/3 of the reference's.

``python -m tests.bench.bench_a2a serve gateway|reference [--backend trio]`` runs one server
(``READY <port>`` on stdout, stops when stdin closes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from . import _harness as h

BENCH = "a2a"
CHUNK = 6


def expected(n: int) -> str:
    from ._provider import delta_text

    return "".join(delta_text(i, CHUNK) for i in range(n))


# ------------------------------------------------------------------ the servers


def _listen() -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    return sock


def _stdin_closed(callback: object) -> None:
    def wait() -> None:
        sys.stdin.read()
        callback()  # type: ignore[operator]

    threading.Thread(target=wait, daemon=True).start()


def serve_reference() -> None:
    from a2a.server.agent_execution import AgentExecutor, RequestContext
    from a2a.server.events import EventQueue
    from a2a.server.tasks import TaskUpdater
    from a2a.types import Part, Task, TaskState, TaskStatus
    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    from tests.plugins.a2a._reference import reference_app

    from ._provider import delta_text

    class BenchEcho(AgentExecutor):
        async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
            updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
            n = int(json.loads(context.get_user_input()).get("n", 1))
            await event_queue.enqueue_event(Task(id=updater.task_id, context_id=updater.context_id, status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED)))
            await updater.start_work()
            for i in range(n):
                await updater.add_artifact([Part(text=delta_text(i, CHUNK))], artifact_id="answer", append=i > 0, last_chunk=i == n - 1)
            await updater.complete()

        async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
            await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()

    sock = _listen()
    port = sock.getsockname()[1]
    config = Config()
    config.bind = [f"fd://{sock.detach()}"]
    config.accesslog = None
    config.graceful_timeout = 0.5

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        _stdin_closed(lambda: loop.call_soon_threadsafe(stop.set))
        app = reference_app(f"http://127.0.0.1:{port}", BenchEcho())  # type: ignore[arg-type]
        print(f"READY {port}", flush=True)
        await serve(app, config, shutdown_trigger=stop.wait, mode="asgi")  # type: ignore[arg-type]

    asyncio.run(main())


def serve_gateway(backend: str) -> None:
    import anyio

    from kernel import Kernel, SQLiteStore
    from kernel.settings import Settings
    from transports.a2a.config import A2AConfig
    from transports.a2a.server import A2ATransport

    from ._provider import BenchProvider

    settings = Settings()
    settings.provider.default = "bench"
    config = A2AConfig(port=0, requests_per_minute_per_ip=0, max_body_reads_per_ip=0, sse_keepalive_s=0)

    async def main() -> None:
        stop = anyio.Event()
        token = anyio.lowlevel.current_token()
        _stdin_closed(lambda: anyio.from_thread.run_sync(stop.set, token=token))
        with tempfile.TemporaryDirectory() as tmp:
            kernel = Kernel(settings, providers={"bench": lambda _s: BenchProvider()}, store=SQLiteStore(Path(tmp) / "bench.db"))
            async with kernel, anyio.create_task_group() as tg:
                url = await tg.start(A2ATransport().serve, kernel, config)
                print(f"READY {str(url).rsplit(':', 1)[1]}", flush=True)
                await stop.wait()
                tg.cancel_scope.cancel()

    anyio.run(main, **h.run_options(backend))


@contextlib.asynccontextmanager
async def server(kind: str, backend: str = "asyncio") -> AsyncIterator[tuple[int, int]]:
    """One server process: yields its port and pid."""
    log = tempfile.NamedTemporaryFile("w", suffix=".log", delete=False)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.bench.bench_a2a", "serve", kind, "--backend", backend,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=log, env=h.child_env(), cwd=str(h.ROOT),
    )
    log.close()
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 60)
        if not line.startswith(b"READY "):
            raise RuntimeError(f"{kind} server did not start:\n{Path(log.name).read_text()[-3000:]}")
        yield int(line.split()[1]), process.pid
    finally:
        await h.stop_process(process)
        with contextlib.suppress(OSError):
            os.unlink(log.name)


# ------------------------------------------------------------------ the client


@dataclass
class Target:
    name: str
    backend: str
    pid: int
    client: object
    ttft_ms: list[float] = field(default_factory=list)
    chunks_per_s: list[float] = field(default_factory=list)
    events: list[int] = field(default_factory=list)
    cpu_ms_per_task: float = 0.0


async def stream(client: object, n: int) -> tuple[float, float, int]:
    """Seconds to the first artifact chunk and to the end, and the artifact events received."""
    from a2a.types import Message, Part, Role, SendMessageRequest

    message = Message(role=Role.ROLE_USER, message_id=uuid.uuid4().hex, parts=[Part(text=json.dumps({"n": n, "size": CHUNK}))])
    watch = h.Stopwatch()
    first = 0.0
    parts: list[str] = []
    async for event in client.send_message(SendMessageRequest(message=message)):  # type: ignore[attr-defined]
        if event.HasField("artifact_update"):
            if not parts:
                first = watch.elapsed
            parts.extend(p.text for p in event.artifact_update.artifact.parts)
    total = watch.elapsed
    text = "".join(parts)
    if text != expected(n):
        raise RuntimeError(f"{BENCH}: the streamed text differs ({len(text)} of {len(expected(n))} characters)")
    return first, total, len(parts)


async def measure(targets: list[Target], settings: h.Settings) -> None:
    rounds = settings.pick(30, 5)
    long_rounds = settings.pick(5, 2)
    cpu_tasks = settings.pick(40, 8)
    long_n = 2000
    for target in targets:  # warm-up
        for _ in range(3):
            await stream(target.client, 50)
    for _ in range(rounds):
        for target in targets:
            first, _, _ = await stream(target.client, 50)
            target.ttft_ms.append(first * 1000)
    for _ in range(long_rounds):
        for target in targets:
            _, total, events = await stream(target.client, long_n)
            target.chunks_per_s.append(long_n / total)
            target.events.append(events)
    for target in targets:
        before = h.cpu_s(target.pid)
        for _ in range(cpu_tasks):
            await stream(target.client, 200)
        target.cpu_ms_per_task = (h.cpu_s(target.pid) - before) * 1000 / cpu_tasks


async def run(settings: h.Settings) -> list[h.Result]:
    import httpx
    from a2a.client import ClientConfig, create_client

    results: list[h.Result] = []
    async with contextlib.AsyncExitStack() as stack:
        http = await stack.enter_async_context(httpx.AsyncClient(timeout=httpx.Timeout(120.0), limits=httpx.Limits(max_connections=8)))

        async def target(name: str, kind: str, backend: str) -> Target:
            port, pid = await stack.enter_async_context(server(kind, backend))
            config = ClientConfig(streaming=True, supported_protocol_bindings=["JSONRPC"], httpx_client=http)
            client = await create_client(f"http://127.0.0.1:{port}", client_config=config)
            return Target(name, backend, pid, client)

        reference = await target("reference", "reference", "asyncio")
        gateways = [await target("gateway", "gateway", backend) for backend in settings.backends]
        started = time.perf_counter()
        await measure([reference, *gateways], settings)
        print(f"   measured the reference and {len(gateways)} gateway(s) in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
        ref_ttft, ref_rate = h.median(reference.ttft_ms), h.median(reference.chunks_per_s)
        for gw in gateways:
            ttft = h.median(gw.ttft_ms)
            rate = h.median(gw.chunks_per_s)
            results += [
                h.Result(
                    bench=BENCH, variant="time to first artifact chunk (50-chunk task)", backend=gw.backend, metric="ms (p50)",
                    baseline=ref_ttft, gateway=ttft, ratio=ttft / ref_ttft, shown=f"{ttft - ref_ttft:+.2f} ms", target="report",
                    details={"reference_p90_ms": round(h.percentile(sorted(reference.ttft_ms), 90), 3), "gateway_p90_ms": round(h.percentile(sorted(gw.ttft_ms), 90), 3)},
                ),
                h.Result(
                    bench=BENCH, variant="chunks/s, 2,000-chunk stream", backend=gw.backend, metric="chunks/s",
                    baseline=ref_rate, gateway=rate, ratio=rate / ref_rate, target=">= 3x", met=rate >= 3 * ref_rate,
                    details={"reference_events": h.median(reference.events), "gateway_events": h.median(gw.events)},
                ),
                h.Result(
                    bench=BENCH, variant="server CPU per task (200 chunks)", backend=gw.backend, metric="ms",
                    baseline=reference.cpu_ms_per_task, gateway=gw.cpu_ms_per_task, ratio=gw.cpu_ms_per_task / reference.cpu_ms_per_task,
                    target="<= 1/3", met=gw.cpu_ms_per_task * 3 <= reference.cpu_ms_per_task,
                ),
            ]
        for t in (reference, *gateways):
            await t.client.close()  # type: ignore[attr-defined]
    return results


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.bench_a2a")
    parser.add_argument("command", choices=("serve",))
    parser.add_argument("kind", choices=("gateway", "reference"))
    parser.add_argument("--backend", choices=(*h.BACKENDS, h.UVLOOP), default="asyncio")
    args = parser.parse_args()
    if args.kind == "reference":
        serve_reference()
    else:
        serve_gateway(args.backend)
    return 0


if __name__ == "__main__":
    sys.exit(main())
