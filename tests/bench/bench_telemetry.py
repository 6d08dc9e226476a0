"""What telemetry costs (issue 24, "Overhead"): metrics on (the default) and traces exported to
a local OTLP receiver, against a gateway with both off — measured in the same run.

* **openai-proxy CPU**: three ``gateway serve --transport http`` processes in front of the same
  fake upstream (tests/bench/bench_openai_proxy.py's setup): ``metrics = false`` and no OTEL_*
  variables (off), the default (metrics), the default plus ``OTEL_EXPORTER_OTLP_ENDPOINT`` of
  an OTLP/HTTP receiver in its own process (tracing). Rounds of 200-chunk burst streams
  alternate between them; the figure is each process's CPU per stream (/proc schedstat) and
  its ratio to the off gateway's. Targets: metrics ≤ +5 %, tracing ≤ +15 %. The receiver's
  span count is checked: every run's spans arrived.
* **per-delta WebSocket throughput** (tests/bench/bench_ws_stream.py's setup, openfang,
  coalescing as shipped, the model handing over one delta per scheduling round): the same
  three telemetry settings in three gateway processes, turns interleaved. Target: metrics and
  tracing each ≥ 0.95× the off gateway's deltas per second.
"""

from __future__ import annotations

import contextlib
import json
import sys
import urllib.request
from collections.abc import AsyncIterator

import openai

from . import _harness as h
from .bench_openai_proxy import API_KEY, GATEWAY_CONFIG, WORDS, client, stream_once
from .bench_ws_stream import Measured, Stream

VARIANTS = ("off", "metrics", "tracing")
CPU_TARGETS = {"metrics": 1.05, "tracing": 1.15}
WS_TARGET = 0.95


@contextlib.asynccontextmanager
async def proxy(backend: str, upstream_url: str, variant: str, otlp_url: str) -> AsyncIterator[tuple[openai.AsyncOpenAI, int]]:
    """``gateway serve`` as a proxy of ``upstream_url`` with ``variant``'s telemetry; (client, pid)."""
    config = h.scratch_dir() / f"telemetry-{variant}-{backend}.toml"
    config.write_text(("metrics = false\n" if variant == "off" else "") + GATEWAY_CONFIG.format(provider="openai"))
    otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": otlp_url, "OTEL_SERVICE_NAME": "gateway-bench"} if variant == "tracing" else {}
    env = h.child_env(GATEWAY_DB=str(h.scratch_dir() / f"telemetry-{variant}-{backend}.db"), OPENAI_API_KEY=API_KEY, OPENAI_BASE_URL=upstream_url, **otel)
    for key in [k for k in env if k.startswith("OTEL_") and k not in otel]:
        del env[key]
    args = ["serve", "--transport", "http", *h.backend_args(backend), "--port", "0", "--quiet", "--config", str(config)]
    async with h.gateway_cli(args, env, r"transport http ready on (http://\S+)") as (process, ready):
        api = client(ready.group(1) + "/v1")
        try:
            yield api, process.pid
        finally:
            await api.close()


def received_spans(otlp_url: str) -> int:
    with urllib.request.urlopen(f"{otlp_url}/spans", timeout=5) as answer:
        return int(json.loads(answer.read())["spans"])


async def proxy_cpu(settings: h.Settings, backend: str, upstream: h.Child, otlp: h.Child) -> list[h.Result]:
    rounds = settings.pick(200, 12)
    async with contextlib.AsyncExitStack() as stack:
        gateways = {v: await stack.enter_async_context(proxy(backend, upstream.ready, v, otlp.ready)) for v in VARIANTS}
        for api, _ in gateways.values():  # warm-up
            for _ in range(3):
                await stream_once(api, "proxy")
        await _settle()
        spans_before = received_spans(otlp.ready)
        # Each process's whole CPU over the phase (its export thread's too), settled after it.
        before = {v: h.cpu_s(pid) for v, (_, pid) in gateways.items()}
        for round_ in range(rounds):
            for i in range(len(VARIANTS)):  # each round starts one further: drift hits all alike
                variant = VARIANTS[(round_ + i) % len(VARIANTS)]
                await stream_once(gateways[variant][0], "proxy")
        await _settle()
        cpu = {v: h.cpu_s(pid) - before[v] for v, (_, pid) in gateways.items()}
    # Each traced run is one invoke_agent and one chat span; the batch processor exports within 5 s.
    spans = received_spans(otlp.ready) - spans_before
    per_stream = {v: cpu[v] * 1000 / rounds for v in VARIANTS}
    results = []
    for variant in ("metrics", "tracing"):
        ratio = per_stream[variant] / per_stream["off"]
        results.append(h.Result(
            bench="telemetry", variant=f"openai-proxy: CPU per {WORDS}-chunk stream, {variant} vs both off", backend=backend,
            metric="ms CPU", baseline=per_stream["off"], gateway=per_stream[variant], ratio=ratio,
            shown=f"{(ratio - 1) * 100:+.1f} %", target=f"<= +{(CPU_TARGETS[variant] - 1) * 100:g} %", met=ratio <= CPU_TARGETS[variant],
            details={"cpu_ms_per_stream": {v: round(c, 3) for v, c in per_stream.items()}, "rounds": rounds,
                     **({"spans_received": spans, "runs_traced": rounds} if variant == "tracing" else {})},
        ))
    return results


async def _settle() -> None:
    import asyncio

    await asyncio.sleep(6.0)  # the tracing gateway's batch processor exports every 5 s


async def ws_throughput(settings: h.Settings, backend: str, otlp: h.Child) -> list[h.Result]:
    n = settings.pick(3000, 600)
    reps = settings.pick(15, 3)
    spec = {"n": n, "size": 6, "every": 1}  # per delta: one delta per scheduling round
    env = h.child_env(OTEL_EXPORTER_OTLP_ENDPOINT=otlp.ready, OTEL_SERVICE_NAME="gateway-bench")
    async with contextlib.AsyncExitStack() as stack:
        servers = {}
        for variant in VARIANTS:
            servers[variant] = await stack.enter_async_context(
                h.child("gateway", *h.backend_args(backend), "--transport", "openfang", "--telemetry", variant, env=env if variant == "tracing" else None)
            )
        streams = {v: await Stream.open("openfang", servers[v], None) for v in VARIANTS}
        try:
            for stream in streams.values():
                await stream.turn(spec)
            measured = {v: Measured() for v in VARIANTS}
            for rep in range(reps):
                for i in range(len(VARIANTS)):
                    variant = VARIANTS[(rep + i) % len(VARIANTS)]
                    measured[variant].add(*await streams[variant].turn(spec))
        finally:
            for stream in streams.values():
                await stream.ws.close()
    off = measured["off"].per_s(n)
    return [
        h.Result(
            bench="telemetry", variant=f"openfang per-delta WebSocket throughput, {variant} vs both off", backend=backend,
            metric="deltas/s", baseline=off, gateway=measured[variant].per_s(n), ratio=measured[variant].per_s(n) / off,
            target=f">= {WS_TARGET:g}x", met=measured[variant].per_s(n) / off >= WS_TARGET,
            details={
                "n": n, "reps": reps, "off": measured["off"].summary(n), variant: measured[variant].summary(n),
                # Less sensitive to the machine's other load than the median wall time: the server's own
                # CPU per delta, and the best turn of each (the least disturbed by other processes).
                "server_cpu_ratio": round(h.median(measured[variant].cpu) / h.median(measured["off"].cpu), 3),
                "best_turn_ratio": round(min(measured["off"].times) / min(measured[variant].times), 3),
            },
        )
        for variant in ("metrics", "tracing")
    ]


async def run(settings: h.Settings) -> list[h.Result]:
    results: list[h.Result] = []
    async with h.children(("upstream", "--backend", "asyncio"), ("otlp", "--backend", "asyncio")) as (upstream, otlp):
        for backend in settings.backends:
            results += await proxy_cpu(settings, backend, upstream, otlp)
            results += await ws_throughput(settings, backend, otlp)
            print(f"   telemetry {backend}: done", file=sys.stderr, flush=True)
    return results
