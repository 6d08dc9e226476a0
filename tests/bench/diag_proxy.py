"""Diagnostic: where the first token of a proxied stream spends its time in the gateway.

    python -m tests.bench.diag_proxy [--backend asyncio|asyncio+uvloop|trio] [--requests 120] [--rounds]

Runs the fake upstream (one burst of 200 chunks) and the real ``gateway`` CLI as an
OpenAI proxy in front of it, the gateway with probes on its first-token path, and sends
``--requests`` streamed requests through it with the ``openai`` SDK (and as many directly
to the upstream, alternating). Prints the client's median time to first token both ways,
then the median time of each step after the OpenAI route is entered:

  provider called        the ephemeral session opened, the run started, the request built
  upstream headers       ``ChatHop.post`` returned (the request went out on the SDK
                         client's httpcore2 pool, the upstream answered with its headers)
  first text chunk       the provider decoded the first content event
  first delta published  the kernel published it (the writer is woken)
  read_run returned      the route has the first batch
  headers sent           the SSE response started (``http.response.start``)
  first frame written    the first chunk handed to hypercorn, and back (the role chunk,
                         sent once the upstream accepted)
  first text written     the first chunk that carries text, handed to hypercorn and back
  last delta published   the end of the burst

Then the gateway's main thread from the route's start to the first text written: how long it
ran (``CLOCK_THREAD_CPUTIME_ID``), how long it waited for a CPU while it could run (the
scheduler's run-queue delay, ``/proc/thread-self/schedstat``) and how long it slept (the rest):
on two cores the client, the gateway and the upstream can all be runnable at once, and the
gateway's wait for a core is time the benchmark charges to it without any of its code running.

The probes wrap functions of the gateway (including the private ``kernel.hub``) in the
child process only; the figures are for diagnosis, not for the results table.

``--rounds`` (plain asyncio: uvloop's loop and trio's cannot be probed this way) also times every callback the event loop runs from the moment
hypercorn reads a request to its first frame written, grouped by whose it is (hypercorn's
connection, the OpenAI route, the run, ...), and the loop's waits in ``epoll``: the gateway
process's busy time on the first token's path, and how long it only waited for the upstream.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import re
import signal
import statistics
import sys
import time
from typing import Any

from . import _harness as h

PROMPT = " ".join(f"{i:07d}" for i in range(200))
STEPS = [
    ("provider", "provider called"),
    ("headers", "upstream headers"),
    ("chunk", "first text chunk"),
    ("published", "first delta published"),
    ("read_run", "read_run returned"),
    ("sse", "headers sent"),
    ("write", "first frame write starts"),
    ("written", "first frame written"),
    ("text", "first text written"),
    ("last", "last delta published"),
]
#: A chunk that carries text (the role chunk's content is empty).
TEXT = re.compile(rb'"content":"[^"]')


def thread_times() -> tuple[float, float]:
    """This thread's time on a CPU and its time waiting for one (run-queue delay), in seconds."""
    with open("/proc/thread-self/schedstat", "rb") as stat:
        waited = int(stat.read().split()[1]) / 1e9
    return time.thread_time(), waited


def probe_gateway(argv: list[str]) -> int:
    """The gateway CLI with probes; prints one ``TIMELINE`` line of medians at exit."""
    import kernel.hub as hub
    import plugins.providers.openai as provider_module
    import plugins.providers.upstream_http as upstream_http
    import transports.http.openai.routes as routes
    import transports.shared._sse as sse
    from gateway.cli import main
    from kernel import model as m

    marks: dict[str, float] = {}
    requests: list[dict[str, float]] = []
    now = time.perf_counter

    def wrap_async(owner: Any, name: str, before: str | None = None, after: str | None = None) -> None:
        original = getattr(owner, name)

        async def probed(*args: Any, **kwargs: Any) -> Any:
            if before is not None:
                marks.setdefault(before, now())
            result = await original(*args, **kwargs)
            if after is not None:
                marks.setdefault(after, now())
            return result

        setattr(owner, name, probed)

    chat = routes.OpenAIApi.chat_completions

    async def chat_completions(self: Any, request: Any) -> Any:
        marks.clear()
        marks["route"] = now()
        ran, waited = thread_times()
        marks["ran"], marks["waited"] = -ran, -waited
        try:
            return await chat(self, request)
        finally:
            requests.append(dict(marks))

    routes.OpenAIApi.chat_completions = chat_completions  # type: ignore[method-assign]
    stream = provider_module.OpenAIProvider.stream

    async def probed_stream(self: Any, request: Any) -> Any:
        marks.setdefault("provider", now())
        async for chunk in stream(self, request):
            if type(chunk).__name__ == "TextChunk":
                marks.setdefault("chunk", now())
            yield chunk

    provider_module.OpenAIProvider.stream = probed_stream  # type: ignore[method-assign]
    wrap_async(upstream_http.ChatHop, "post", after="headers")
    publish = hub.EventHub.publish

    def probed_publish(self: Any, event: Any) -> Any:
        if isinstance(event, m.TextDelta):
            marks.setdefault("published", now())
            marks["last"] = now()
        return publish(self, event)

    hub.EventHub.publish = probed_publish  # type: ignore[method-assign]
    read_run = routes.read_run

    async def probed_read_run(*args: Any, **kwargs: Any) -> Any:
        result = await read_run(*args, **kwargs)
        if kwargs.get("until") is not None:
            marks.setdefault("read_run", now())
        return result

    routes.read_run = probed_read_run
    stream_init = sse.SSEStream.__init__

    def probed_init(self: Any, *args: Any, **kwargs: Any) -> None:
        marks.setdefault("sse", now())
        stream_init(self, *args, **kwargs)

    sse.SSEStream.__init__ = probed_init  # type: ignore[method-assign]
    send_raw = sse.SSEStream.send_raw

    async def probed_write(self: Any, events: bytes, **options: Any) -> Any:
        first = "write" not in marks
        text = "text" not in marks and TEXT.search(events) is not None
        marks.setdefault("write", now())
        result = await send_raw(self, events, **options)
        if first:
            marks["written"] = now()
        if text:
            marks["text"] = now()
            ran, waited = thread_times()
            marks["ran"] += ran
            marks["waited"] += waited
        return result

    sse.SSEStream.send_raw = probed_write  # type: ignore[method-assign]

    if "--rounds" in argv:
        argv.remove("--rounds")
        rounds_probe(marks, now)

    def report() -> None:
        measured = requests[10:]
        cells = []
        for key, _ in STEPS:
            values = [(r[key] - r["route"]) * 1000 for r in measured if key in r]
            cells.append(f"{key}={statistics.median(values):.3f}" if values else f"{key}=nan")
        for key in ("ran", "waited"):
            values = [r[key] * 1000 for r in measured if "text" in r]
            cells.append(f"{key}={statistics.median(values):.3f}" if values else f"{key}=nan")
        slept = [(r["text"] - r["route"] - r["ran"] - r["waited"]) * 1000 for r in measured if "text" in r]
        cells.append(f"slept={statistics.median(slept):.3f}" if slept else "slept=nan")
        sys.stderr.write("TIMELINE " + " ".join(cells) + "\n")
        sys.stderr.flush()

    atexit.register(report)
    return main(argv)


#: Whose a callback of the loop is, by the coroutines its task is in (first match wins).
OWNERS = [
    ("Session.actor", "the run (the session's task)"),
    ("chat_completions", "the OpenAI route (hypercorn's app task)"),
    ("wait_disconnect", "the disconnect watch"),
    ("_server_callback", "hypercorn's connection task"),
    ("_read_ready", "socket reads (asyncio's transports)"),
]


def rounds_probe(marks: dict[str, float], now: Any) -> None:
    """Time each loop callback and each wait in ``epoll`` between a request's arrival and its
    first frame written; print the medians per request at exit (``ROUNDS`` lines)."""
    import asyncio.events
    import collections
    import selectors

    import hypercorn.protocol.h11 as hypercorn_h11

    window: dict[str, Any] = {"open": False, "busy": collections.Counter(), "rounds": 0}
    requests: list[tuple[collections.Counter[str], int]] = []
    handle_request = hypercorn_h11.H11Protocol.handle

    async def probed_handle(self: Any, event: Any) -> Any:
        if not (type(event).__name__ == "RawData" and event.data[:5] == b"POST "):
            return await handle_request(self, event)
        marks.pop("written", None)  # the last request's; the route clears the rest
        window.update(open=True, busy=collections.Counter(), rounds=0)
        started = now()
        result = await handle_request(self, event)
        window["busy"]["hypercorn's connection task"] += now() - started
        return result

    hypercorn_h11.H11Protocol.handle = probed_handle  # type: ignore[method-assign]

    def owner(callback: Any) -> str:
        task = getattr(callback, "__self__", None)
        names = []
        if isinstance(task, asyncio.Task):
            coro: Any = task.get_coro()
            while coro is not None and len(names) < 16:
                names.append(getattr(coro, "__qualname__", ""))
                coro = getattr(coro, "cr_await", None) or getattr(coro, "ag_await", None)
        else:
            names.append(getattr(callback, "__qualname__", type(callback).__name__))
        chain = ">".join(names)
        return next((label for key, label in OWNERS if key in chain), "other")

    run_handle = asyncio.events.Handle._run

    def probed_run(self: Any) -> None:
        if not window["open"]:
            return run_handle(self)
        started = now()
        run_handle(self)
        if window["open"]:
            window["busy"][owner(self._callback)] += now() - started
            if "written" in marks:
                window["open"] = False
                requests.append((window["busy"], window["rounds"]))
        return None

    asyncio.events.Handle._run = probed_run  # type: ignore[method-assign]
    select = selectors.EpollSelector.select

    def probed_select(self: Any, timeout: float | None = None) -> Any:
        started = now()
        ready = select(self, timeout)
        if window["open"]:
            window["rounds"] += 1
            window["busy"]["waiting in epoll" if timeout != 0 else "epoll, nothing to wait for"] += now() - started
        return ready

    selectors.EpollSelector.select = probed_select  # type: ignore[method-assign]

    def report() -> None:
        measured = requests[10:]
        if not measured:
            return
        labels = sorted({label for busy, _ in measured for label in busy})
        for label in labels:
            sys.stderr.write(f"ROUNDS {label}={statistics.median(busy[label] for busy, _ in measured) * 1000:.3f}\n")
        sys.stderr.write(f"ROUNDS loop rounds={statistics.median(r for _, r in measured)}\n")
        sys.stderr.flush()

    atexit.register(report)


async def measure(backend: str, requests: int, rounds: bool = False) -> None:
    import openai

    from .bench_openai_proxy import API_KEY, GATEWAY_CONFIG

    config = h.scratch_dir() / "diag-proxy.toml"
    config.write_text(GATEWAY_CONFIG.format(provider="openai"))
    async with h.child("upstream", "--backend", "asyncio") as upstream:
        env = h.child_env(OPENAI_API_KEY=API_KEY, OPENAI_BASE_URL=upstream.ready, GATEWAY_DB=str(h.scratch_dir() / "diag-proxy.db"))
        log = h.open_stderr_file()
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.bench.diag_proxy", "--probe", "--", *(["--rounds"] if rounds else []),
            "serve", "--transport", "http", *h.backend_args(backend),
            "--port", "0", "--config", str(config), stdin=asyncio.subprocess.DEVNULL, stderr=log, env=env, cwd=str(h.ROOT),
        )
        log.close()
        try:
            found = None
            for _ in range(600):
                found = re.search(r"transport http ready on (http://\S+)", open(log.name).read())
                if found or process.returncode is not None:
                    break
                await asyncio.sleep(0.05)
            if found is None:
                raise SystemExit(f"the gateway did not start:\n{open(log.name).read()[-3000:]}")
            clients = {
                "direct": (openai.AsyncOpenAI(base_url=upstream.ready, api_key=API_KEY, max_retries=0), "fake-model"),
                "gateway": (openai.AsyncOpenAI(base_url=found.group(1) + "/v1", api_key=API_KEY, max_retries=0), "proxy"),
            }
            ttft: dict[str, list[float]] = {name: [] for name in clients}
            for index in range(requests + 10):
                for name, (client, model) in clients.items():
                    watch = h.Stopwatch()
                    first = None
                    stream = await client.chat.completions.create(model=model, messages=[{"role": "user", "content": PROMPT}], stream=True)
                    async with stream:
                        async for chunk in stream:
                            if first is None and chunk.choices and chunk.choices[0].delta.content:
                                first = watch.elapsed * 1000
                    if index >= 10 and first is not None:
                        ttft[name].append(first)
            for client, _ in clients.values():
                await client.close()
        finally:
            process.send_signal(signal.SIGTERM)
            await process.wait()
        timeline = next((line for line in open(log.name).read().splitlines() if line.startswith("TIMELINE ")), "")
    direct, via = statistics.median(ttft["direct"]), statistics.median(ttft["gateway"])
    print(f"{backend}: time to first token, client side: direct {direct:.2f} ms, through the gateway {via:.2f} ms ({via - direct:+.2f} ms)")
    values = dict(cell.split("=") for cell in timeline.split()[1:])
    print("  after the OpenAI route is entered (gateway process, medians):")
    for key, label in STEPS:
        print(f"    {label:<26} {float(values.get(key, 'nan')):7.3f} ms")
    ran, waited, slept = (float(values.get(key, "nan")) for key in ("ran", "waited", "slept"))
    print("  the gateway's main thread from the route's start to the first text written (medians):")
    print(f"    running {ran:.3f} ms, waiting for a CPU {waited:.3f} ms, asleep {slept:.3f} ms")
    spent = [line[7:].rsplit("=", 1) for line in open(log.name).read().splitlines() if line.startswith("ROUNDS ")]
    if spent:
        print("  from hypercorn reading the request to the first frame written, by whose work (medians, ms):")
        for label, value in spent:
            print(f"    {label:<42} {value:>7}")


def main() -> int:
    if "--probe" in sys.argv:
        return probe_gateway(sys.argv[sys.argv.index("--") + 1 :])
    parser = argparse.ArgumentParser(prog="python -m tests.bench.diag_proxy")
    parser.add_argument("--backend", choices=(*h.BACKENDS, h.UVLOOP), action="append", help="the gateway's backend (default: asyncio and trio)")
    parser.add_argument("--requests", type=int, default=120)
    parser.add_argument("--rounds", action="store_true", help="also time the event loop's callbacks by owner (plain asyncio)")
    args = parser.parse_args()
    for backend in args.backend or h.BACKENDS:
        if args.rounds and backend != "asyncio":
            print(f"{backend}: --rounds times plain asyncio's loop only; the timeline follows", file=sys.stderr)
        asyncio.run(measure(backend, args.requests, rounds=args.rounds and backend == "asyncio"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
