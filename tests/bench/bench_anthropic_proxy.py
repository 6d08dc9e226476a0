"""Anthropic proxy: the gateway's ``/v1/messages`` in front of an OpenAI-compatible upstream,
against LiteLLM's ``/v1/messages`` in front of the same upstream (issue 22).

Both translate Anthropic's Messages API to chat completions: the gateway through its
Anthropic dialect and ``openai`` provider, LiteLLM 1.108.7 through its adapter
(``--peer litellm`` adds it; it is installed into the bench cache on first use, see
_peers.py). The upstream is the fake OpenAI server in echo mode, in its own process: a
200-word prompt comes back as 200 content chunks in one **burst**, or **paced** at 500
chunks a second. The same ``anthropic.AsyncAnthropic`` client calls both proxies; the
baseline is the ``openai`` client calling the upstream directly (it speaks no Messages
API), rounds alternating between the targets so that drift hits all alike.

Figures (medians; "added" = through the proxy minus direct):

* **time to first token** of a burst stream: ``create(stream=True)`` to the first
  ``text_delta``. Target ≤ +2 ms.
* **200-chunk stream to the end**, burst; **paced stream**, first token and end.
* **non-stream answer**: the same 200 words as one ``message``.
* **CPU per 200-chunk stream**: the proxy process tree's CPU time (/proc) over the
  burst-stream rounds per request. Target: ≤ 1/10 of LiteLLM's.
* **RSS after the run**.

Every answer is checked: its text must equal the prompt.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anthropic
import openai

from . import _harness as h
from . import _peers
from .bench_openai_proxy import API_KEY, PACED_WORDS_PER_S, PROMPT, WORDS, complete_once, cpu_per_request, gateway, rotations, stream_once

BENCH = "anthropic-proxy"
#: LiteLLM's Messages API over chat completions, as the gateway's (1.108.7 otherwise sends an
#: ``openai/`` model's messages to the upstream's Responses API, which most servers lack).
LITELLM_SETTINGS = {"use_chat_completions_url_for_anthropic_messages": True}


@dataclass
class Target:
    """One way to reach the upstream: directly (OpenAI's API) or through a proxy (Anthropic's)."""

    name: str
    #: (stream: first-token ms, end ms, chunks) and (non-stream: ms), burst and paced.
    stream: Callable[[bool], Any]
    complete: Callable[[], Any]
    cpu_s: Callable[[], float]
    rss_kib: Callable[[], int]
    ttft_ms: list[float] = field(default_factory=list)
    total_ms: list[float] = field(default_factory=list)
    paced_ttft_ms: list[float] = field(default_factory=list)
    paced_total_ms: list[float] = field(default_factory=list)
    complete_ms: list[float] = field(default_factory=list)
    cpu_ms: dict[str, float] = field(default_factory=dict)


async def messages_stream(client: anthropic.AsyncAnthropic, model: str) -> tuple[float, float, int]:
    """Milliseconds to the first ``text_delta`` and to the end, and the deltas received."""
    watch = h.Stopwatch()
    first = 0.0
    parts: list[str] = []
    stream = await client.messages.create(model=model, max_tokens=4096, messages=[{"role": "user", "content": PROMPT}], stream=True)
    async with stream:
        async for event in stream:
            if event.type == "content_block_delta" and event.delta.type == "text_delta" and event.delta.text:
                if not parts:
                    first = watch.elapsed
                parts.append(event.delta.text)
            elif event.type == "message_stop":
                break
    total = watch.elapsed
    if "".join(parts) != PROMPT:
        raise RuntimeError(f"{BENCH} ({model}): streamed text differs: {''.join(parts)[:80]!r}")
    return first * 1000, total * 1000, len(parts)


async def messages_complete(client: anthropic.AsyncAnthropic, model: str) -> float:
    watch = h.Stopwatch()
    answer = await client.messages.create(model=model, max_tokens=4096, messages=[{"role": "user", "content": PROMPT}])
    total = watch.elapsed
    text = "".join(block.text for block in answer.content if block.type == "text")
    if text != PROMPT:
        raise RuntimeError(f"{BENCH} ({model}): non-stream answer differs: {text[:80]!r}")
    return total * 1000


def proxy_target(name: str, base_url: str, api_key: str, models: tuple[str, str], cpu_s: Callable[[], float], rss_kib: Callable[[], int], stack: contextlib.AsyncExitStack) -> Target:
    """A proxy's Messages API; ``models``: its names of the burst and the paced upstream."""
    client = anthropic.AsyncAnthropic(base_url=base_url, api_key=api_key, max_retries=0)
    stack.push_async_callback(client.close)
    return Target(
        name, lambda paced: messages_stream(client, models[paced]), lambda: messages_complete(client, models[0]), cpu_s, rss_kib,
    )


async def measure(targets: list[Target], burst_upstream: h.Child, settings: h.Settings) -> None:
    started = time.perf_counter()
    rounds = settings.pick(60, 8)
    paced_rounds = settings.pick(12, 3)
    for target in targets:  # warm-up: connections, imports, first runs
        for _ in range(3):
            await target.stream(False)
            await target.complete()

    async def burst_streams() -> None:
        for target in rotations(targets, rounds):  # type: ignore[arg-type]
            first, total, _ = await target.stream(False)
            target.ttft_ms.append(first)
            target.total_ms.append(total)

    async def non_stream() -> None:
        for target in rotations(targets, rounds):  # type: ignore[arg-type]
            target.complete_ms.append(await target.complete())

    await cpu_per_request(targets, burst_upstream, "stream", burst_streams, rounds)  # type: ignore[arg-type]
    await cpu_per_request(targets, burst_upstream, "non-stream", non_stream, rounds)  # type: ignore[arg-type]
    for target in rotations(targets, paced_rounds):  # type: ignore[arg-type]
        first, total, _ = await target.stream(True)
        target.paced_ttft_ms.append(first)
        target.paced_total_ms.append(total)
    print(f"   measured {', '.join(t.name for t in targets)} in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)


def added(variant: str, backend: str, direct: list[float], via: list[float], limit: float | None) -> h.Result:
    d, g = sorted(direct), sorted(via)
    extra = h.median(g) - h.median(d)
    return h.Result(
        bench=BENCH, variant=variant, backend=backend, metric="ms (p50)", baseline=h.median(d), gateway=h.median(g), ratio=None,
        shown=f"{extra:+.2f} ms", target="report" if limit is None else f"<= +{limit:g} ms", met=None if limit is None else extra <= limit,
        details={"added_ms": round(extra, 3), "direct_p90_ms": round(h.percentile(d, 90), 3), "via_p90_ms": round(h.percentile(g, 90), 3), "samples": len(g)},
    )


def rows(direct: Target, via: Target, backend: str, cpu_target: float | None) -> list[h.Result]:
    who = via.name
    cpu = via.cpu_ms["stream"]
    rss_mib = via.rss_kib() / 1024
    return [
        added(f"{who}: burst stream, time to first token", backend, direct.ttft_ms, via.ttft_ms, 2.0 if who == "gateway" else None),
        added(f"{who}: burst stream, {WORDS} chunks to the end", backend, direct.total_ms, via.total_ms, None),
        added(f"{who}: non-stream answer", backend, direct.complete_ms, via.complete_ms, None),
        added(f"{who}: paced stream ({PACED_WORDS_PER_S:g}/s), time to first token", backend, direct.paced_ttft_ms, via.paced_ttft_ms, 2.0 if who == "gateway" else None),
        added(f"{who}: paced stream, {WORDS} chunks to the end", backend, direct.paced_total_ms, via.paced_total_ms, None),
        h.Result(
            bench=BENCH, variant=f"{who}: CPU per {WORDS}-chunk stream (baseline: the upstream's)", backend=backend, metric="ms CPU",
            baseline=via.cpu_ms["upstream stream"], gateway=cpu, ratio=cpu / via.cpu_ms["upstream stream"],
            target="report" if cpu_target is None else f"<= {cpu_target:.2f} ms (1/10 of LiteLLM's)",
            met=None if cpu_target is None else cpu <= cpu_target,
            details={"cpu_ms_per_request": {k: round(v, 3) for k, v in via.cpu_ms.items()}},
        ),
        h.Result(
            bench=BENCH, variant=f"{who}: RSS after the run (baseline: the upstream's)", backend=backend, metric="MiB",
            baseline=direct.rss_kib() / 1024, gateway=rss_mib, ratio=rss_mib / (direct.rss_kib() / 1024), target="report",
        ),
    ]


def _root(base_url: str) -> str:
    """The Anthropic SDK's base URL: the server's root (it adds ``/v1/messages``)."""
    return base_url.removesuffix("/v1")


async def run(settings: h.Settings) -> list[h.Result]:
    results: list[h.Result] = []
    burst_spec = ("upstream", "--backend", "asyncio")
    paced_spec = (*burst_spec, "--words-per-s", str(PACED_WORDS_PER_S))
    async with h.children(burst_spec, paced_spec) as (burst_up, paced_up), contextlib.AsyncExitStack() as stack:
        direct_burst = openai.AsyncOpenAI(base_url=burst_up.ready, api_key=API_KEY, max_retries=0)
        direct_paced = openai.AsyncOpenAI(base_url=paced_up.ready, api_key=API_KEY, max_retries=0)
        stack.push_async_callback(direct_burst.close)
        stack.push_async_callback(direct_paced.close)

        async def direct_stream(paced: bool) -> tuple[float, float, int]:
            return await stream_once(direct_paced if paced else direct_burst, "fake-model")

        peers: list[Target] = []
        if "litellm" in settings.peers:
            peer = await stack.enter_async_context(_peers.litellm_proxy({"burst": burst_up.ready, "paced": paced_up.ready}, API_KEY, LITELLM_SETTINGS))
            peers.append(proxy_target(f"{peer.name} {peer.version}", _root(peer.base_url), peer.api_key, ("burst", "paced"), peer.cpu_s, peer.rss_kib, stack))
        for index, backend in enumerate(settings.backends):
            direct = Target("direct", direct_stream, lambda: complete_once(direct_burst, "fake-model"), burst_up.cpu_s, burst_up.rss_kib)
            async with gateway(backend, burst_up.ready, "anthropic-burst") as (url, pid), gateway(backend, paced_up.ready, "anthropic-paced") as (paced_url, _):
                via = proxy_target("gateway", _root(url), API_KEY, ("proxy", "proxy"), lambda pid=pid: h.cpu_s(pid), lambda pid=pid: h.rss_kib(pid), stack)  # type: ignore[misc]
                paced_via = proxy_target("gateway", _root(paced_url), API_KEY, ("proxy", "proxy"), via.cpu_s, via.rss_kib, stack)
                via.stream = lambda paced, burst=via.stream, slow=paced_via.stream: (slow if paced else burst)(paced)
                others = peers if index == 0 else []  # the peers run once, beside the first backend's gateway
                await measure([direct, via, *others], burst_up, settings)
                peer_cpu = others[0].cpu_ms["stream"] / 10 if others else None
                results += rows(direct, via, backend, peer_cpu)  # while the gateway runs: its RSS
                for other in others:
                    results += rows(direct, other, "asyncio", None)
    return results
