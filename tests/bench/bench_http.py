"""OpenAI-compatible HTTP: the gateway's ``/v1/chat/completions`` against its upstream.

The upstream is the fake OpenAI server (tests/fakes/openai_server.py) in echo mode,
unpaced, in its own process. The same ``openai.AsyncOpenAI`` client in this process
calls it directly and through the gateway (``python -m gateway serve --transport
http``, its ``openai`` provider pointed at the fake with ``OPENAI_BASE_URL`` /
``OPENAI_API_KEY``), requests alternating so that drift hits both alike.

* **Added time to first token**: the time from ``create(stream=True)`` to the first
  chunk carrying content, through the gateway minus direct, medians of many short
  requests. Target ≤ 2 ms.
* **Streaming throughput**: a prompt of ``n`` words echoed back as ``n`` content
  chunks; content deltas per second (``n`` / time to the end of the stream, the text
  verified) through the gateway against direct. Target ≥ 0.8×.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import openai

from . import _harness as h
from ._provider import delta_text

API_KEY = "sk-bench-not-a-real-key"


async def first_token_and_text(client: openai.AsyncOpenAI, model: str, prompt: str) -> tuple[float, float, str, int]:
    """Seconds to the first content chunk, seconds to the end, the text, content chunks."""
    watch = h.Stopwatch()
    first = 0.0
    parts: list[str] = []
    stream = await client.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}], stream=True)
    async with stream:
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                if not parts:
                    first = watch.elapsed
                parts.append(chunk.choices[0].delta.content)
    return first, watch.elapsed, "".join(parts), len(parts)


async def run(settings: h.Settings) -> list[h.Result]:
    requests = settings.pick(150, 20)
    n = settings.pick(4000, 1000)
    reps = settings.pick(3, 1)
    long_prompt = " ".join(delta_text(i, 8).strip() for i in range(n))
    results: list[h.Result] = []
    async with h.child("upstream", "--backend", "asyncio") as upstream:
        base_url = upstream.ready
        direct = openai.AsyncOpenAI(base_url=base_url, api_key=API_KEY, max_retries=0)
        for backend in settings.backends:
            with tempfile.TemporaryDirectory() as tmp:
                env = h.child_env(OPENAI_API_KEY=API_KEY, OPENAI_BASE_URL=base_url, GATEWAY_DB=str(Path(tmp) / "gw.db"))
                echo_env = h.child_env(GATEWAY_DB=str(Path(tmp) / "echo.db"))  # no API key: the offline echo model
                args = ["serve", "--transport", "http", "--backend", backend, "--port", "0", "-o", "http.rate_limit_per_minute=0"]
                ready_line = r"transport http ready on (http://\S+)"
                async with h.gateway_cli(args, env, ready_line) as (_, ready), h.gateway_cli(args, echo_env, ready_line) as (_, echo_ready):
                    via = openai.AsyncOpenAI(base_url=ready.group(1) + "/v1", api_key="unused", max_retries=0)
                    echo = openai.AsyncOpenAI(base_url=echo_ready.group(1) + "/v1", api_key="unused", max_retries=0)
                    results += await measure(backend, direct, via, echo, requests, n, reps, long_prompt)
                    await via.close()
                    await echo.close()
        await direct.close()
    return results


async def measure(
    backend: str, direct: openai.AsyncOpenAI, via: openai.AsyncOpenAI, echo: openai.AsyncOpenAI, requests: int, n: int, reps: int, long_prompt: str
) -> list[h.Result]:
    clients = {"direct": (direct, "fake-model"), "gateway": (via, "General Assistant")}
    short = {**clients, "echo": (echo, "General Assistant")}
    expected = {"direct": "hello there", "gateway": "hello there", "echo": "echo: hello there"}
    for client, model in short.values():  # warm-up: connections, imports, first run
        for _ in range(3):
            await first_token_and_text(client, model, "hello there")
    ttft: dict[str, list[float]] = {name: [] for name in short}
    for _ in range(requests):
        for name, (client, model) in short.items():
            first, _, text, _ = await first_token_and_text(client, model, "hello there")
            if text != expected[name]:
                raise RuntimeError(f"http ({name}): unexpected answer {text[:80]!r}")
            ttft[name].append(first * 1000)
    times: dict[str, list[float]] = {"direct": [], "gateway": []}
    chunks: dict[str, list[int]] = {"direct": [], "gateway": []}
    for round_ in range(reps + 1):
        for name, (client, model) in clients.items():
            _, total, text, count = await first_token_and_text(client, model, long_prompt)
            if text != long_prompt:
                raise RuntimeError(f"http ({name}): streamed text differs ({len(text)} of {len(long_prompt)} characters)")
            if round_:
                times[name].append(total)
                chunks[name].append(count)
    d, g, e = (sorted(ttft[k]) for k in ("direct", "gateway", "echo"))
    added = h.median(g) - h.median(d)
    through = {k: n / h.median(v) for k, v in times.items()}
    ratio = through["gateway"] / through["direct"]
    return [
        h.Result(
            bench="http", variant="openai SDK, time to first token (ms)", backend=backend, metric="ms (median)",
            baseline=h.median(d), gateway=h.median(g), ratio=None, shown=f"{added:+.2f} ms", target="<= +2 ms", met=added <= 2.0,
            details={"requests": requests, "added_ms": round(added, 3), "direct_p90_ms": round(h.percentile(d, 90), 3),
                     "gateway_p90_ms": round(h.percentile(g, 90), 3)},
        ),
        h.Result(
            bench="http", variant="TTFT, gateway's own echo model (no upstream hop)", backend=backend, metric="ms (median)",
            baseline=h.median(d), gateway=h.median(e), ratio=None, shown=f"{h.median(e) - h.median(d):+.2f} ms", target="report",
            details={"requests": requests, "note": "the gateway answering from its echo model vs the fake upstream answering directly"},
        ),
        h.Result(
            bench="http", variant=f"openai SDK, stream of {n} words", backend=backend, metric="deltas/s",
            baseline=through["direct"], gateway=through["gateway"], ratio=ratio, target=">= 0.8x", met=ratio >= 0.8,
            details={"n": n, "seconds": {k: [round(x, 4) for x in v] for k, v in times.items()},
                     "content_chunks_per_stream": {k: h.median(v) for k, v in chunks.items()}},
        ),
    ]

