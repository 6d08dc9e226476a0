"""Diagnostic: where a proxied request's CPU goes in the gateway, by sampling (no probes in it).

    python -m tests.bench.diag_spy [--words 3] [--requests 1500] [--backend asyncio|trio]

Runs the fake upstream and the real ``gateway`` CLI as an OpenAI proxy in front of it, sends
``--requests`` streamed chat completions one after another with the ``openai`` SDK, and samples
the gateway process with py-spy (``pip install py-spy``; not a dependency of the project) at
2 kHz meanwhile. Prints the gateway's CPU per request and its self time by module: the event
loop, h11, anyio, httpcore2, hypercorn, and the gateway's own packages. Unlike cProfile, sampling
adds nothing to the process it measures, so the shares are those of the real run.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import _harness as h
from .bench_openai_proxy import API_KEY, GATEWAY_CONFIG

RATE_HZ = 2000
OWN = ("kernel", "transports", "plugins", "gateway")


def module_of(frame: str) -> str:
    """``fn (path/to/file.py:12)`` -> the top package (the gateway's: two levels)."""
    found = re.search(r"\((.*?):\d+\)$", frame)
    path = found.group(1) if found else frame
    parts = path.split("/")
    return "gateway " + "/".join(parts[:2]) if parts[0] in OWN else parts[0]


def summarize(raw: Path, requests: int) -> str:
    """py-spy's raw output (``stack count`` lines) -> CPU per request, self time by module."""
    by_module: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        if not line.strip():
            continue
        stack, count = line.rsplit(" ", 1)
        by_module[module_of(stack.split(";")[-1])] += int(count)
    total = sum(by_module.values())
    per_request = 1000 / RATE_HZ / requests
    lines = [f"busy CPU per request: {total * per_request:.3f} ms ({total} samples)", "self time by module, ms per request:"]
    lines += [f"  {name:38} {count * per_request:6.3f}  {100 * count / total:5.1f} %" for name, count in by_module.most_common(25)]
    own = sum(count for name, count in by_module.items() if name.startswith("gateway "))
    lines.append(f"the gateway's own code: {own * per_request:.3f} ms per request ({100 * own / total:.1f} %)")
    return "\n".join(lines)


async def measure(backend: str, words: int, requests: int) -> str:
    import openai

    prompt = " ".join(f"{i:07d}" for i in range(words))
    config = h.scratch_dir() / "diag-spy.toml"
    config.write_text(GATEWAY_CONFIG.format(provider="openai"))
    async with h.child("upstream", "--backend", "asyncio") as upstream:
        env = h.child_env(OPENAI_API_KEY=API_KEY, OPENAI_BASE_URL=upstream.ready, GATEWAY_DB=str(h.scratch_dir() / "diag-spy.db"))
        async with h.gateway_cli(
            ["serve", "--transport", "http", *h.backend_args(backend), "--port", "0", "--config", str(config)], env,
            r"transport http ready on (http://\S+)",
        ) as (process, ready):
            client = openai.AsyncOpenAI(base_url=ready.group(1) + "/v1", api_key=API_KEY, max_retries=0)

            async def one() -> None:
                stream = await client.chat.completions.create(model="proxy", messages=[{"role": "user", "content": prompt}], stream=True)
                async with stream:
                    async for _ in stream:
                        pass

            for _ in range(50):  # warm-up: imports, connections
                await one()
            with tempfile.TemporaryDirectory() as scratch:
                raw = Path(scratch) / "spy.raw"
                spy = subprocess.Popen(
                    ["py-spy", "record", "--pid", str(process.pid), "--rate", str(RATE_HZ), "--format", "raw",
                     "--output", str(raw), "--nonblocking"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )
                await asyncio.sleep(1.0)  # py-spy attaches
                started = time.perf_counter()
                for _ in range(requests):
                    await one()
                took = time.perf_counter() - started
                spy.send_signal(signal.SIGINT)
                spy.wait(30)
                await client.close()
                return f"{backend}: {requests} requests of {words} words in {took:.2f} s\n" + summarize(raw, requests)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.diag_spy")
    parser.add_argument("--backend", choices=(*h.BACKENDS, h.UVLOOP), default="asyncio")
    parser.add_argument("--words", type=int, default=3, help="the prompt's words: the upstream echoes them as chunks")
    parser.add_argument("--requests", type=int, default=1500)
    args = parser.parse_args()
    if shutil.which("py-spy") is None:
        print("py-spy is not installed: pip install py-spy", file=sys.stderr)
        return 2
    print(asyncio.run(measure(args.backend, args.words, args.requests)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
