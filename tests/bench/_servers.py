"""Servers under test, each run in its own process by the benchmarks.

    python -m tests.bench._servers bare     --backend trio
    python -m tests.bench._servers gateway  --backend asyncio --transport openfang --merge off --set coalesce_ms=0
    python -m tests.bench._servers gateway  --transport openfang --transport agent-cli   # READY <port>,<port>
    python -m tests.bench._servers upstream --backend asyncio [--words-per-s 500]
    python -m tests.bench._servers cli      --merge off -- serve --transport stdio ...
    python -m tests.bench._servers pipe     --lines FILE

Each prints ``READY <port or url>`` on stdout once listening and runs until its stdin
is closed (or it is killed). A separate process per server keeps the client's work
(in the benchmark process) off the server's core, gives a clean RSS to measure, and
lets the baseline and the gateway run under identical conditions.

* ``bare``: a raw ASGI WebSocket app on hypercorn, the baseline. Per connection it
  understands ``load <json list of frames>`` (answers ``loaded``), ``go`` (pushes the
  loaded frames, one ``websocket.send`` each, as fast as hypercorn takes them),
  ``handoff`` (the same frames through a producer task and a writer task, one scheduling
  round per frame: :func:`push_through_handoff`),
  ``stream <json spec>`` (pushes stamped frames paced like the bench provider) and
  ``ping`` (answers ``pong``).
* ``gateway``: the kernel with :class:`~tests.bench._provider.BenchProvider` and one
  transport, with the kernel's merging of waiting text deltas on or off.
* ``upstream``: the fake OpenAI server (tests/fakes) in echo mode, in one burst or
  paced at ``--words-per-s``, framed as api.openai.com frames a stream (a first chunk with
  the role alone, sent with the headers; ``service_tier``, ``system_fingerprint`` and
  ``usage`` on every chunk), so a client calling it directly parses what it would parse from
  OpenAI.
* ``cli``: the real ``gateway`` command line with the bench provider registered as
  ``bench`` (select it with ``[provider] default = "bench"``), optionally merging off.
* ``pipe``: the stdio baseline, a bare pipe writer (see :func:`run_pipe`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import socket
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import msgspec
import sniffio


def disable_delta_merging() -> None:
    """Switch off every merging of text deltas, so that one model delta is one frame.

    * the kernel's merging of adjacent text deltas waiting in a subscriber buffer:
      ``kernel.hub.Subscription._offer`` merges only when both events are
      ``kernel.hub.TextDelta`` instances; pointing that module-level name at a class
      no event is an instance of disables exactly that branch and nothing else;
    * the agent-cli codec's merging of adjacent ``Stream`` chunks within one batch of
      ready events: its ``on_events`` is called once per event instead.

    (OpenFang's coalescer is switched off by its own ``coalesce_ms=0``.)
    """
    from kernel import hub
    from transports.agent_cli.codec import AgentCliCodec

    class _NoEventIsThis:
        pass

    hub.TextDelta = _NoEventIsThis  # type: ignore[attr-defined,misc]
    one_batch = AgentCliCodec.on_events

    def one_event_at_a_time(self: AgentCliCodec, events: list[Any], now: float = 0.0) -> list[str]:
        return [frame for event in events for frame in one_batch(self, [event], now)]

    AgentCliCodec.on_events = one_event_at_a_time  # type: ignore[method-assign]


def apply_what_if() -> None:
    """Opt-in experiments on the code under test, named in ``$BENCH_WHAT_IF`` (comma-separated).

    ``fast-send-lock``: the shared WebSocket wrapper's send lock and the stdio line
    writer's lock become ``anyio.Lock(fast_acquire=True)``. anyio's default lock yields
    to the event loop on every uncontended acquire, i.e. once per frame or line
    written; this measures what the recommended fix would give (see
    docs/performance.md) without editing the shared plumbing.
    """
    import os

    wanted = {w.strip() for w in os.environ.get("BENCH_WHAT_IF", "").split(",") if w.strip()}
    unknown = wanted - {"fast-send-lock"}
    if unknown:
        raise SystemExit(f"unknown BENCH_WHAT_IF experiment(s): {', '.join(sorted(unknown))}")
    if "fast-send-lock" in wanted:
        from transports.shared import _lines, _websocket

        ws_init = _websocket.WebSocket.__init__
        lw_init = _lines.LineWriter.__init__

        def ws_patched(self: Any, *a: Any, **k: Any) -> None:
            ws_init(self, *a, **k)
            self._send_lock = anyio.Lock(fast_acquire=True)

        def lw_patched(self: Any, *a: Any, **k: Any) -> None:
            lw_init(self, *a, **k)
            self._lock = anyio.Lock(fast_acquire=True)

        _websocket.WebSocket.__init__ = ws_patched  # type: ignore[method-assign]
        _lines.LineWriter.__init__ = lw_patched  # type: ignore[method-assign]


def ready(value: object) -> None:
    sys.stdout.write(f"READY {value}\n")
    sys.stdout.flush()


async def until_stdin_closes() -> None:
    def read_all() -> None:
        while sys.stdin.buffer.read(65536):
            pass

    await anyio.to_thread.run_sync(read_all, abandon_on_cancel=True)


def listen() -> tuple[int, int]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    sock.setblocking(False)
    port = sock.getsockname()[1]
    return sock.detach(), port


# ------------------------------------------------------------------ bare baseline

_encode = msgspec.json.Encoder().encode


def stamped_frame(text: str) -> str:
    """The baseline's latency frame, shaped like an agent-cli ``Stream`` frame."""
    return _encode({"request_id": "r", "response": {"Stream": text}, "error": None, "token_usage": None}).decode()


async def bare_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "websocket":
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return
    await receive()  # websocket.connect
    await send({"type": "websocket.accept"})
    frames: list[str] = []
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return
        text = message.get("text") or (message.get("bytes") or b"").decode()
        command, _, arg = text.partition(" ")
        if command == "load":
            frames = json.loads(arg)
            await send({"type": "websocket.send", "text": "loaded"})
        elif command == "go":
            for frame in frames:
                await send({"type": "websocket.send", "text": frame})
        elif command == "handoff":
            await push_through_handoff(frames, send)
        elif command == "stream":
            spec = json.loads(arg)
            n, interval = int(spec["n"]), 1.0 / float(spec["rate"])
            due = time.monotonic()
            for _ in range(n):
                due += interval
                pause = due - time.monotonic()
                if pause > 0:
                    await anyio.sleep(pause)
                await send({"type": "websocket.send", "text": stamped_frame(f"{time.monotonic():.6f} ")})
            await send({"type": "websocket.send", "text": _encode({"request_id": "r", "response": {"Complete": {}}}).decode()})
        elif command == "ping":
            await send({"type": "websocket.send", "text": "pong"})


async def push_through_handoff(frames: list[str], send: Any) -> None:
    """The frames as a model's task and a writer's task move them, with nothing else: the
    producer yields to the scheduler once per frame (as a provider reading each token from its
    socket does) and hands the frame over; the writer, woken, sends what is ready, one
    ``websocket.send`` per frame, and waits again. The floor under a gateway's per-delta
    stream: the round trip between two tasks that the bare push, with no model, never pays."""
    ready: deque[str] = deque()
    wake = anyio.Event()
    produced = False

    async def produce() -> None:
        nonlocal produced
        for frame in frames:
            await anyio.lowlevel.checkpoint()
            ready.append(frame)
            wake.set()
        produced = True
        wake.set()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(produce)
        while True:
            while ready:
                await send({"type": "websocket.send", "text": ready.popleft()})
            if produced:
                return
            wake = anyio.Event()  # nothing ran since the last check: no hand-over is missed
            await wake.wait()


async def serve_on_hypercorn(app: Any, config: Any, ready_value: object) -> None:
    """Serve ``app`` with hypercorn on the backend running (the same worker the gateway uses)
    until stdin closes; ``ready_value`` is reported once the socket listens."""
    stop = anyio.Event()
    if sniffio.current_async_library() == "trio":
        from hypercorn.trio import serve
    else:
        from hypercorn.asyncio import serve  # type: ignore[assignment]
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: serve(app, config, shutdown_trigger=stop.wait, mode="asgi"))
        ready(ready_value)  # the socket listens already; connections queue until hypercorn accepts them
        await until_stdin_closes()
        tg.cancel_scope.cancel()


async def serve_bare(args: argparse.Namespace) -> None:
    from transports.shared import ServerConfig, build_hypercorn_config

    fd, port = listen()
    # The same hypercorn settings the gateway's transports use (ping interval, backlog,
    # no access log), except a message limit big enough for the ``load`` message.
    config = build_hypercorn_config(ServerConfig(), f"fd://{fd}")
    config.websocket_max_message_size = 256 * 1024 * 1024
    config.backlog = 1024
    await serve_on_hypercorn(bare_app, config, port)


# ------------------------------------------------------------------ bare relay (the library floor)


def relay_app(upstream: str) -> Any:
    """The least a proxy on the gateway's libraries can do: hypercorn in, the request's body sent
    on as it is through one httpcore2 pool (the pool the gateway's upstream hop uses), the
    answer's pieces handed back as they arrive. No parsing, no session, no translation: what it
    adds to a request is the libraries' floor under the gateway's own added time."""
    import httpcore2

    # Idle connections go after 2 s, before the upstream's hypercorn closes them (5 s): no retry
    # here, so a request must never go out on a connection its server is closing.
    pool = httpcore2.AsyncConnectionPool(max_connections=64, keepalive_expiry=2.0)
    base = upstream.rstrip("/")
    kept = (b"authorization", b"content-type")

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await bare_app(scope, receive, send)
            return
        body = bytearray()
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        path = scope["path"].removeprefix("/v1")
        headers = [(k, v) for k, v in scope["headers"] if k in kept]
        async with pool.stream("POST", base + path, headers=headers, content=bytes(body)) as response:
            answer = [(k, v) for k, v in response.headers if k.lower() == b"content-type"]
            await send({"type": "http.response.start", "status": response.status, "headers": answer})
            async for piece in response.aiter_stream():
                await send({"type": "http.response.body", "body": piece, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    return app


async def serve_relay(args: argparse.Namespace) -> None:
    from transports.shared import ServerConfig, build_hypercorn_config

    fd, port = listen()
    await serve_on_hypercorn(relay_app(args.upstream), build_hypercorn_config(ServerConfig(), f"fd://{fd}"), f"http://127.0.0.1:{port}/v1")


# ------------------------------------------------------------------ gateway


def _transport_class(name: str) -> type:
    if name == "openfang":
        from transports.openfang.server import OpenFangTransport

        return OpenFangTransport
    if name == "agent-cli":
        from transports.agent_cli.server import AgentCliTransport

        return AgentCliTransport
    raise SystemExit(f"unknown transport {name}")


async def serve_gateway(args: argparse.Namespace) -> None:
    from kernel import Kernel, SQLiteStore
    from kernel.settings import SessionSettings, Settings
    from transports.base import load_config

    from ._provider import BenchProvider

    apply_what_if()
    if args.merge == "off":
        disable_delta_merging()
    settings = Settings(session=SessionSettings(subscriber_buffer=args.buffer, event_retention=max(args.buffer, 4096)))
    settings.provider.default = "bench"
    data: dict[str, Any] = {}
    for item in args.set:
        key, _, value = item.partition("=")
        try:
            data[key] = json.loads(value)
        except ValueError:
            data[key] = value
    classes = [_transport_class(name) for name in args.transport or ["agent-cli"]]
    # No limits in a benchmark: the ones each transport has (http has no WebSocket ones).
    unlimited = {"port": 0, "max_connections_per_ip": 0, "rate_limit_per_minute": 0, "requests_per_minute_per_ip": 0}
    configs = [load_config(cls, {**{k: v for k, v in unlimited.items() if k in cls.Config.__struct_fields__}, **data}) for cls in classes]
    with contextlib.ExitStack() as stack:
        db = args.db or str(Path(stack.enter_context(tempfile.TemporaryDirectory())) / "bench.db")
        kernel = Kernel(settings, providers={"bench": lambda _s: BenchProvider()}, store=SQLiteStore(db), observers=telemetry(args.telemetry))
        async with kernel, anyio.create_task_group() as tg:
            urls = [await tg.start(cls().serve, kernel, config) for cls, config in zip(classes, configs)]
            ready(",".join(str(url).rsplit(":", 1)[1] for url in urls))  # one port per --transport, in order
            await until_stdin_closes()
            tg.cancel_scope.cancel()


def telemetry(which: str) -> list[Any]:
    """The observers of ``--telemetry``: none, the metrics, or the metrics and the traces
    (exported as the OTEL_* variables of the environment say)."""
    if which == "off":
        return []
    from plugins.telemetry.metrics import PrometheusMetrics
    from plugins.telemetry.otel import tracing_observer

    return [PrometheusMetrics] if which == "metrics" else [PrometheusMetrics, tracing_observer]


# ------------------------------------------------------------------ OTLP receiver


async def serve_otlp(args: argparse.Namespace) -> None:
    """An OTLP/HTTP trace receiver: ``POST /v1/traces`` (protobuf) counted; ``GET /spans`` says how many."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from transports.shared import ServerConfig, serve_asgi

    received = {"spans": 0, "requests": 0}

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                await send({"type": message["type"] + ".complete"})
                if message["type"] == "lifespan.shutdown":
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        answer = b""
        if scope["method"] == "POST":
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            received["requests"] += 1
            received["spans"] += sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
        else:
            answer = json.dumps(received).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": answer})

    async with anyio.create_task_group() as tg:
        host, port = await tg.start(serve_asgi, app, ServerConfig(port=0))
        ready(f"http://{host}:{port}")
        await until_stdin_closes()
        tg.cancel_scope.cancel()


# ------------------------------------------------------------------ fake upstream


async def serve_upstream(args: argparse.Namespace) -> None:
    from tests.fakes.openai_server import echo, fake_openai_server

    with open(args.arrivals, "a", buffering=1) if args.arrivals else contextlib.nullcontext() as stamps:  # a line each, as it comes
        async with fake_openai_server([echo(args.words_per_s, openai_framing=True)]) as server:
            if stamps is not None:
                server.on_request = lambda at: print(repr(at), file=stamps)
            ready(server.base_url)
            await until_stdin_closes()


def run_cli(args: argparse.Namespace) -> int:
    """The real ``gateway`` command line, plus the ``bench`` provider (and merging off if asked)."""
    apply_what_if()
    if args.merge == "off":
        disable_delta_merging()
    from gateway import app
    from gateway.cli import main

    from ._provider import BenchProvider

    load_registry = app.load_registry

    def with_bench_provider(*a: Any, **k: Any) -> Any:
        registry = load_registry(*a, **k)
        registry.providers["bench"] = lambda _settings: BenchProvider()
        return registry

    app.load_registry = with_bench_provider  # type: ignore[assignment]
    return main(args.argv)


def run_pipe(args: argparse.Namespace) -> int:
    """The stdio baseline: write the lines of a file to stdout, one ``write`` each, when told.

    ``READY`` first; then one byte on stdin starts a round (every line once, as fast as
    the pipe takes them); EOF on stdin ends the process.
    """
    import os

    lines = [line + b"\n" for line in Path(args.lines).read_bytes().splitlines()]
    ready("pipe")
    while sys.stdin.buffer.read(1):
        for line in lines:
            view = memoryview(line)
            while view:
                view = view[os.write(1, view):]
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench._servers")
    parser.add_argument("kind", choices=("bare", "gateway", "upstream", "relay", "cli", "pipe", "otlp"))
    parser.add_argument("--lines", help="for pipe: the file of lines to write")
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio", help="asyncio's event loop (uvloop: as gateway serve --loop uvloop)")
    parser.add_argument("--transport", action="append", help="for gateway: openfang or agent-cli (default), repeatable: one kernel, one port each")
    parser.add_argument("--merge", choices=("on", "off"), default="on")
    parser.add_argument("--db", help="for gateway: the SQLite store (default: a temporary directory)")
    parser.add_argument("--buffer", type=int, default=512, help="kernel subscriber buffer (events)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="transport config override")
    parser.add_argument("--upstream", help="for relay: the upstream's base URL")
    parser.add_argument("--words-per-s", type=float, default=None, help="for upstream: pace the echo (default: one burst)")
    parser.add_argument("--arrivals", help="for upstream: append the time each request reaches it (perf_counter) to this file")
    parser.add_argument("--telemetry", choices=("off", "metrics", "tracing"), default="off", help="for gateway: the observers (tracing: OTEL_* variables)")
    argv = sys.argv[1:]
    rest = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = parser.parse_args(argv[: len(argv) - len(rest) - (1 if rest or "--" in argv else 0)])
    args.argv = rest  # for cli: the gateway command line, after "--"
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    if args.kind == "cli":
        return run_cli(args)
    if args.kind == "pipe":
        return run_pipe(args)
    target = {"bare": serve_bare, "gateway": serve_gateway, "upstream": serve_upstream, "relay": serve_relay, "otlp": serve_otlp}[args.kind]
    try:
        options = {"use_uvloop": True} if args.backend == "asyncio" and args.loop == "uvloop" else {}
        anyio.run(target, args, backend=args.backend, backend_options=options)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
