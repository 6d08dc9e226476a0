"""Scale on one process: 1,000 WebSocket streams, OpenFang and Agent-CLI mixed.

``streams`` sockets (1,000; 200 with ``--quick``), half OpenFang and half Agent-CLI,
to **one** gateway process (one kernel serving both transports, each on its port),
each stream fed ``rate`` deltas per second (50) by the paced bench model for
``seconds``; starts are spread over one delta interval. Every delta carries its
emission time (see tests/bench/bench_latency.py); every stream must receive every
delta, in order, or the benchmark fails.

Baseline: the bare hypercorn app pushing frames of the same shape on the same
schedule, with as many sockets, to the same client. Rows: p50 and p99 added delivery
delay (gateway minus baseline), and the gateway's RSS after the run (with 1,000
sessions loaded). Variants: coalescing off everywhere (OpenFang ``coalesce_ms=0``;
Agent-CLI ships off) — the target applies here: p99 added ≤ 100 ms, RSS ≤ 150 MiB —
and OpenFang as shipped (its 100 ms window delays text by design).
"""

from __future__ import annotations

from typing import Any

from . import _harness as h
from .bench_latency import measure_sockets

CASES = {
    "coalescing off": ["--set", "coalesce_ms=0"],
    "openfang as shipped (100 ms window)": [],
}
P99_TARGET_MS = 100.0
RSS_TARGET_MIB = 150.0


async def run(settings: h.Settings) -> list[h.Result]:
    streams = settings.pick(1000, 200)
    rate = 50.0
    seconds = settings.pick(4.0, 1.0)
    h.raise_nofile(4 * streams + 256)
    results: list[h.Result] = []
    for backend in settings.backends:
        gateway = ["gateway", *h.backend_args(backend), "--transport", "openfang", "--transport", "agent-cli", "--buffer", "1024"]
        async with h.children(["bare", *h.backend_args(backend)], *([*gateway, *args] for args in CASES.values())) as (bare, *gateways):
            base = await measure_sockets("bare", bare, [("bare", bare.port, streams)], rate, seconds)
            for label, child in zip(CASES, gateways):
                openfang_port, agent_cli_port = child.ports
                half = streams // 2
                m = await measure_sockets(label, child, [("openfang", openfang_port, half), ("agent-cli", agent_cli_port, streams - half)], rate, seconds)
                variant = f"mixed, {label}, {streams} streams x {rate:g}/s"
                details: dict[str, Any] = {"baseline": base, "gateway": m}
                for q in ("p50", "p99"):
                    b, g = base[f"{q}_ms"], m[f"{q}_ms"]
                    target, met = ("<= +100 ms", g - b <= P99_TARGET_MS) if q == "p99" and label == "coalescing off" else ("report", None)
                    results.append(h.Result(
                        bench="scale", variant=variant, backend=backend, metric=f"{q} ms", baseline=b, gateway=g, ratio=None,
                        shown=f"{g - b:+.1f} ms", target=target, met=met, details=details,
                    ))
                results.append(h.Result(
                    bench="scale", variant=variant, backend=backend, metric="RSS MiB", baseline=base["rss_mib"], gateway=m["rss_mib"],
                    ratio=None, shown=f"{m['rss_mib']:.0f} MiB", target="<= 150 MiB", met=m["rss_mib"] <= RSS_TARGET_MIB, details=details,
                ))
    return results
