"""OpenAI proxy: what the gateway adds in front of an OpenAI-compatible upstream (issue 17).

The upstream is the fake OpenAI server (tests/fakes/openai_server.py) in echo mode, in its
own process: a prompt of 200 words comes back as 200 content chunks, either in one
**burst** (the upstream is faster than the proxy, its chunks arrive together) or
**paced** at 500 chunks per second (each chunk arrives on its own, as tokens do). The
same ``openai.AsyncOpenAI`` client, in this process, calls the upstream directly (the
baseline) and through the gateway (``python -m gateway serve --transport http`` with the
``openai`` provider pointed at the same fake, an agent with no tools and no system
prompt: a plain proxy), rounds alternating so that drift hits both alike, and, with
``--peer litellm``, through a LiteLLM proxy in front of the same fakes (tests/bench/_peers.py).

Figures (medians of the rounds; "added" = through the proxy minus direct):

* **time to first token** of a burst stream: ``create(stream=True)`` to the first chunk
  with content. Target ≤ +2.5 ms (issue 27).
* **200-chunk stream to the end**, burst. Target ≤ +5 ms.
* **non-stream answer** (``stream=False``), the same 200 words in one JSON. Target ≤ +2.5 ms.
* **paced stream**: first token and end (the same targets).
* **16 concurrent burst streams**: requests per second against direct. Target ≥ 2×.
* **CPU per 200-chunk request**: the proxy process's own CPU time (/proc schedstat, all
  threads) over the burst-stream rounds, divided by its requests; baseline: the fake
  upstream's CPU per request it served. Target ≤ 10 ms.
* **RSS after the run**: the proxy process (its tree for LiteLLM); baseline: the fake
  upstream's. Target ≤ 80 MiB.
* **time to first token, the gateway's own echo model** (no upstream hop): the gateway's
  own share, for diagnosis.
* **the library floor**: a bare relay on the gateway's own libraries (hypercorn in, the body
  sent on unchanged through an httpcore2 pool, the answer's bytes handed back as they arrive:
  ``tests/bench/_servers.py relay``), measured in the same rounds: what any proxy on this
  stack adds before doing anything, and the gateway's own share above it.

Every answer is checked: the text must equal the prompt.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx2
import openai

from . import _harness as h
from . import _peers
from ._provider import delta_text

API_KEY = "sk-bench-not-a-real-key"
WORDS = 200
PACED_WORDS_PER_S = 500.0
CONCURRENCY = 16
#: Issue 27's targets: added time to first token and non-stream time, CPU per 200-chunk
#: stream, 16 concurrent streams against direct (issue 17 had 1 ms, 3 ms, 8 ms, 0.9x).
TTFT_MS = 2.5
NON_STREAM_MS = 2.5
CPU_MS = 10.0
CONCURRENT_X = 2.0
PROMPT = " ".join(delta_text(i, 8).strip() for i in range(WORDS))
#: The gateway as a plain proxy: one agent, no tools, no system prompt, no limits in the way.
GATEWAY_CONFIG = """\
[provider]
default = "{provider}"

[provider.openai]
model = "fake-model"

[[agents]]
name = "proxy"
system_prompt = ""
tools = []

[transports.http]
requests_per_minute_per_ip = 0
"""


@dataclass
class Target:
    """One way to reach the upstream: directly, through the gateway, through a peer."""

    name: str
    client: openai.AsyncOpenAI
    model: str
    #: The client and model that reach the paced upstream.
    paced_client: openai.AsyncOpenAI
    paced_model: str
    cpu_s: Callable[[], float]
    rss_kib: Callable[[], int]
    ttft_ms: list[float] = field(default_factory=list)
    total_ms: list[float] = field(default_factory=list)
    chunks: list[int] = field(default_factory=list)
    paced_ttft_ms: list[float] = field(default_factory=list)
    paced_total_ms: list[float] = field(default_factory=list)
    paced_chunks: list[int] = field(default_factory=list)
    complete_ms: list[float] = field(default_factory=list)
    concurrent_rps: list[float] = field(default_factory=list)
    cpu_ms: dict[str, float] = field(default_factory=dict)


async def stream_once(
    client: openai.AsyncOpenAI, model: str, prompt: str = PROMPT, answer: str | None = None, history: Sequence[Any] = ()
) -> tuple[float, float, int]:
    """Milliseconds to the first content chunk and to the end, and the content chunks received;
    the text must be ``answer`` (default: the prompt, echoed). ``history``: earlier messages
    sent before the prompt (the upstream echoes the last user message only)."""
    watch = h.Stopwatch()
    first = 0.0
    parts: list[str] = []
    stream = await client.chat.completions.create(model=model, messages=[*history, {"role": "user", "content": prompt}], stream=True)
    async with stream:
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                if not parts:
                    first = watch.elapsed
                parts.append(chunk.choices[0].delta.content)
    total = watch.elapsed
    text = "".join(parts)
    expected = prompt if answer is None else answer
    if text != expected:
        raise RuntimeError(f"openai-proxy ({model}): streamed text differs ({len(text)} of {len(expected)} characters)")
    return first * 1000, total * 1000, len(parts)


async def complete_once(client: openai.AsyncOpenAI, model: str, history: Sequence[Any] = ()) -> float:
    watch = h.Stopwatch()
    answer = await client.chat.completions.create(model=model, messages=[*history, {"role": "user", "content": PROMPT}])
    total = watch.elapsed
    if answer.choices[0].message.content != PROMPT:
        raise RuntimeError(f"openai-proxy ({model}): non-stream answer differs: {str(answer.choices[0].message.content)[:80]!r}")
    return total * 1000


def rotations(targets: list[Target], rounds: int) -> Iterator[Target]:
    """Each round visits every target once, starting one further each round."""
    for round_ in range(rounds):
        for i in range(len(targets)):
            yield targets[(round_ + i) % len(targets)]


async def concurrent_rps(target: Target, model: str, requests_each: int) -> float:
    async def worker() -> None:
        for _ in range(requests_each):
            await stream_once(target.client, model)

    watch = h.Stopwatch()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return CONCURRENCY * requests_each / watch.elapsed


async def cpu_per_request(targets: list[Target], upstream: h.Child, phase: str, run: Callable[[], Any], requests: int) -> None:
    """Run a phase; record each proxy's CPU per request and the upstream's (as the baseline)."""
    before = {t.name: t.cpu_s() for t in targets}
    upstream_before = upstream.cpu_s()
    await run()
    await asyncio.sleep(0.2)  # let the proxies finish what follows an answer (closing, cleanup)
    for t in targets:
        t.cpu_ms[phase] = (t.cpu_s() - before[t.name]) * 1000 / requests
    upstream_ms = (upstream.cpu_s() - upstream_before) * 1000 / (requests * len(targets))
    for t in targets:
        t.cpu_ms[f"upstream {phase}"] = upstream_ms


async def measure(targets: list[Target], burst_upstream: h.Child, settings: h.Settings) -> None:
    """Fill every target's samples, rounds alternating between the targets."""
    started = time.perf_counter()
    rounds = settings.pick(60, 8)
    paced_rounds = settings.pick(12, 3)
    requests_each = settings.pick(4, 2)
    reps = settings.pick(3, 1)
    for target in targets:  # warm-up: connections, imports, first runs
        for _ in range(3):
            await stream_once(target.client, target.model)
            await complete_once(target.client, target.model)

    async def burst_streams() -> None:
        for target in rotations(targets, rounds):
            first, total, count = await stream_once(target.client, target.model)
            target.ttft_ms.append(first)
            target.total_ms.append(total)
            target.chunks.append(count)

    async def non_stream() -> None:
        for target in rotations(targets, rounds):
            target.complete_ms.append(await complete_once(target.client, target.model))

    await cpu_per_request(targets, burst_upstream, "stream", burst_streams, rounds)
    await cpu_per_request(targets, burst_upstream, "non-stream", non_stream, rounds)
    for target in rotations(targets, paced_rounds):
        first, total, count = await stream_once(target.paced_client, target.paced_model)
        target.paced_ttft_ms.append(first)
        target.paced_total_ms.append(total)
        target.paced_chunks.append(count)
    for _ in range(reps):
        for target in targets:
            try:
                target.concurrent_rps.append(await concurrent_rps(target, target.model, requests_each))
            except openai.APIError as error:
                raise RuntimeError(f"{target.name}: {CONCURRENCY} concurrent streams failed: {error!r}") from error
    print(f"   measured {', '.join(t.name for t in targets)} in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)


def added_row(variant: str, backend: str, direct: list[float], via: list[float], limit: float | None, details: dict[str, Any]) -> h.Result:
    d, g = sorted(direct), sorted(via)
    added = h.median(g) - h.median(d)
    return h.Result(
        bench="openai-proxy", variant=variant, backend=backend, metric="ms (p50)", baseline=h.median(d), gateway=h.median(g),
        ratio=None, shown=f"{added:+.2f} ms", target="report" if limit is None else f"<= +{limit:g} ms",
        met=None if limit is None else added <= limit,
        details={"added_ms": round(added, 3), "direct_p90_ms": round(h.percentile(d, 90), 3),
                 "via_p90_ms": round(h.percentile(g, 90), 3), "samples": len(g), **details},
    )


def floor_rows(direct: Target, relay: Target, via: Target, backend: str) -> list[h.Result]:
    """What the bare relay adds (the libraries' floor) and the gateway's own share above it."""
    out = []
    for what, d, r, g in (
        ("time to first token", direct.ttft_ms, relay.ttft_ms, via.ttft_ms),
        ("non-stream answer", direct.complete_ms, relay.complete_ms, via.complete_ms),
        ("paced stream, time to first token", direct.paced_ttft_ms, relay.paced_ttft_ms, via.paced_ttft_ms),
    ):
        floor = h.median(r) - h.median(d)
        own = h.median(g) - h.median(r)
        out.append(added_row(f"library floor (bare hypercorn + httpcore2 relay): {what}", backend, d, r, None,
                             {"gateway_over_floor_ms": round(own, 3)}))
        out.append(h.Result(
            bench="openai-proxy", variant=f"gateway's own share above the floor: {what}", backend=backend, metric="ms (p50)",
            baseline=h.median(r), gateway=h.median(g), ratio=None, shown=f"{own:+.2f} ms", target="report", met=None,
            details={"floor_added_ms": round(floor, 3), "gateway_added_ms": round(h.median(g) - h.median(d), 3)},
        ))
    relay_cpu, gateway_cpu = relay.cpu_ms["stream"], via.cpu_ms["stream"]
    out.append(h.Result(
        bench="openai-proxy", variant=f"library floor: CPU per {WORDS}-chunk stream (the relay's; gateway: the gateway's)", backend=backend,
        metric="ms CPU", baseline=relay_cpu, gateway=gateway_cpu, ratio=gateway_cpu / relay_cpu, target="report", met=None,
        details={"upstream_cpu_ms": round(relay.cpu_ms["upstream stream"], 3)},
    ))
    return out


def rows(direct: Target, via: Target, backend: str, who: str) -> list[h.Result]:
    chunks = {"content_chunks_received": {"direct": h.median(direct.chunks), who: h.median(via.chunks)}}
    paced_chunks = {"content_chunks_received": {"direct": h.median(direct.paced_chunks), who: h.median(via.paced_chunks)}}
    d_rps, g_rps = h.median(direct.concurrent_rps), h.median(via.concurrent_rps)
    cpu, upstream_cpu = via.cpu_ms["stream"], via.cpu_ms["upstream stream"]
    rss_mib, upstream_rss_mib = via.rss_kib() / 1024, direct.rss_kib() / 1024
    return [
        added_row(f"{who}: burst stream, time to first token", backend, direct.ttft_ms, via.ttft_ms, TTFT_MS, chunks),
        added_row(f"{who}: burst stream, {WORDS} chunks to the end", backend, direct.total_ms, via.total_ms, 5.0, chunks),
        added_row(f"{who}: non-stream answer", backend, direct.complete_ms, via.complete_ms, NON_STREAM_MS, {}),
        added_row(f"{who}: paced stream ({PACED_WORDS_PER_S:g}/s), time to first token", backend, direct.paced_ttft_ms, via.paced_ttft_ms, TTFT_MS, paced_chunks),
        added_row(f"{who}: paced stream, {WORDS} chunks to the end", backend, direct.paced_total_ms, via.paced_total_ms, 5.0, paced_chunks),
        h.Result(
            bench="openai-proxy", variant=f"{who}: {CONCURRENCY} concurrent burst streams", backend=backend, metric="req/s",
            baseline=d_rps, gateway=g_rps, ratio=g_rps / d_rps, target=f">= {CONCURRENT_X:g}x", met=g_rps / d_rps >= CONCURRENT_X,
            details={"req_per_s": {"direct": direct.concurrent_rps, who: via.concurrent_rps}},
        ),
        h.Result(
            bench="openai-proxy", variant=f"{who}: CPU per {WORDS}-chunk stream (baseline: the upstream's)", backend=backend,
            metric="ms CPU", baseline=upstream_cpu, gateway=cpu, ratio=cpu / upstream_cpu, target=f"<= {CPU_MS:g} ms", met=cpu <= CPU_MS,
            details={"cpu_ms_per_request": {k: round(v, 3) for k, v in via.cpu_ms.items()}},
        ),
        h.Result(
            bench="openai-proxy", variant=f"{who}: RSS after the run (baseline: the upstream's)", backend=backend, metric="MiB",
            baseline=upstream_rss_mib, gateway=rss_mib, ratio=rss_mib / upstream_rss_mib, target="<= 80 MiB", met=rss_mib <= 80.0,
        ),
    ]


@contextlib.asynccontextmanager
async def gateway(backend: str, upstream_url: str | None, name: str) -> AsyncIterator[tuple[str, int]]:
    """The real gateway CLI as a proxy of ``upstream_url`` (None: its own echo model); (base URL, pid)."""
    config = h.scratch_dir() / f"proxy-{name}-{backend}.toml"
    config.write_text(GATEWAY_CONFIG.format(provider="openai" if upstream_url else "echo"))
    extra = {"OPENAI_API_KEY": API_KEY, "OPENAI_BASE_URL": upstream_url} if upstream_url else {}
    env = h.child_env(GATEWAY_DB=str(h.scratch_dir() / f"proxy-{name}-{backend}.db"), **extra)
    args = ["serve", "--transport", "http", *h.backend_args(backend), "--port", "0", "--config", str(config)]
    async with h.gateway_cli(args, env, r"transport http ready on (http://\S+)") as (process, ready):
        yield ready.group(1) + "/v1", process.pid


@contextlib.asynccontextmanager
async def direct_relay_gateway(
    backend: str, name: str, *upstream_args: str
) -> AsyncIterator[tuple[dict[str, tuple[openai.AsyncOpenAI, str]], dict[str, int]]]:
    """The fake upstream (``upstream_args``: its pacing), the bare relay and the gateway in front
    of it, each its own process, as the diagnostics compare them: a client and model name per
    target (``direct``, ``relay``, ``gateway``), closed at the end, and each process's pid."""
    async with h.child("upstream", "--backend", "asyncio", *upstream_args) as upstream:
        async with h.child("relay", *h.backend_args(backend), "--upstream", upstream.ready) as relay:
            async with gateway(backend, upstream.ready, name) as (url, gateway_pid):
                targets = {
                    "direct": (client(upstream.ready), "fake-model"),
                    "relay": (client(relay.ready), "fake-model"),
                    "gateway": (client(url), "proxy"),
                }
                try:
                    yield targets, {"upstream": upstream.pid, "relay": relay.pid, "gateway": gateway_pid}
                finally:
                    for each, _ in targets.values():
                        await each.close()


#: The clients let an idle connection go after 2 s, before the servers do (hypercorn after 5 s):
#: with the SDK's default 5 s, a connection idle while another target's phase ran could be
#: taken for a request just as its server closed it (a ReadError with no retry, seen once).
CLIENT_LIMITS = httpx2.Limits(max_connections=1000, max_keepalive_connections=100, keepalive_expiry=2.0)


def client(base_url: str, api_key: str = API_KEY) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=base_url, api_key=api_key, max_retries=0, http_client=openai.DefaultAsyncHttpxClient(limits=CLIENT_LIMITS)
    )


async def echo_share(backend: str, direct: Target, rounds: int) -> h.Result:
    """The gateway answering from its own echo model vs the upstream answering directly."""
    async with gateway(backend, None, "echo") as (url, _):
        echo = client(url)
        own: list[float] = []
        base: list[float] = []
        for _ in range(3):
            await stream_once(echo, "proxy", "hello there", "echo: hello there")
        for _ in range(rounds):
            base.append((await stream_once(direct.client, direct.model, "hello there"))[0])
            own.append((await stream_once(echo, "proxy", "hello there", "echo: hello there"))[0])
        await echo.close()
    return added_row("gateway's own echo model (no upstream hop), time to first token", backend, base, own, None,
                     {"note": "the gateway answering by itself vs the fake upstream answering directly"})


async def run(settings: h.Settings) -> list[h.Result]:
    results: list[h.Result] = []
    peers = [p for p in settings.peers if p in _peers.PEERS]
    burst_spec = ("upstream", "--backend", "asyncio")
    paced_spec = (*burst_spec, "--words-per-s", str(PACED_WORDS_PER_S))
    async with h.children(burst_spec, paced_spec) as (burst_up, paced_up), contextlib.AsyncExitStack() as stack:
        def opened(base_url: str, api_key: str = API_KEY) -> openai.AsyncOpenAI:
            new = client(base_url, api_key)
            stack.push_async_callback(new.close)
            return new

        paced_direct = opened(paced_up.ready)
        peer_targets: list[Target] = []
        for _name in peers:  # litellm, the only peer so far
            peer = await stack.enter_async_context(_peers.litellm_proxy({"burst": burst_up.ready, "paced": paced_up.ready}, API_KEY))
            peer_client = opened(peer.base_url, peer.api_key)
            peer_targets.append(Target(f"{peer.name} {peer.version}", peer_client, "burst", peer_client, "paced", peer.cpu_s, peer.rss_kib))
        for index, backend in enumerate(settings.backends):
            direct = Target("direct", opened(burst_up.ready), "fake-model", paced_direct, "fake-model", burst_up.cpu_s, burst_up.rss_kib)
            async with (
                gateway(backend, burst_up.ready, "burst") as (url, pid), gateway(backend, paced_up.ready, "paced") as (paced_url, _),
                h.child("relay", *h.backend_args(backend), "--upstream", burst_up.ready) as relay_up,
                h.child("relay", *h.backend_args(backend), "--upstream", paced_up.ready) as paced_relay,
            ):
                via = Target("gateway", opened(url), "proxy", opened(paced_url), "proxy",
                             lambda pid=pid: h.cpu_s(pid), lambda pid=pid: h.rss_kib(pid))  # type: ignore[misc]
                relay = Target("relay", opened(relay_up.ready), "fake-model", opened(paced_relay.ready), "fake-model", relay_up.cpu_s, relay_up.rss_kib)
                # The peers run once, beside the first backend's gateway (they bring their own server stack).
                others = peer_targets if index == 0 else []
                await measure([direct, via, relay, *others], burst_up, settings)
                results += rows(direct, via, backend, "gateway")
                results += floor_rows(direct, relay, via, backend)
                for other in others:
                    results += rows(direct, other, "asyncio", other.name)
            results.append(await echo_share(backend, direct, settings.pick(60, 8)))
    return results
