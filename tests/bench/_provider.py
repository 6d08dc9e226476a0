"""The benchmark model: emits exactly the deltas a benchmark asks for.

The prompt text is a JSON object, ``{"n": 5000, "size": 6, "rate": 0, "stamp": false}``:

* ``n`` text deltas of ``size`` characters each (the last character a space);
* ``rate`` 0 = as fast as possible, with one cooperative checkpoint after every
  ``every`` deltas (default 1: a scheduling round per delta, as a provider reading
  each token from a socket would have; 0: none at all, the whole reply is handed over
  in one go, as from an upstream that is faster than the gateway); ``rate`` > 0 =
  paced at that many deltas per second on an absolute schedule (no drift);
* ``stamp`` true = each delta's text is ``time.monotonic()`` at the moment it is
  emitted (``"12345.678901 "``), so a client in another process on the same machine
  (CLOCK_MONOTONIC is system-wide on Linux) can compute the delivery delay even when
  the kernel or the transport merged several deltas into one frame.

A prompt that is not such an object streams ``ok``.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator, AsyncIterator

import anyio
import anyio.lowlevel

from kernel.model import Usage
from kernel.provider import Chunk, FinishChunk, ProviderRequest, TextChunk, UsageChunk


def delta_text(index: int, size: int) -> str:
    """The ``index``-th unstamped delta: ``size`` characters, digits then a space."""
    width = max(size - 1, 0)
    return (str(index).rjust(width, "0")[-width:] if width else "") + " "


def parse_spec(text: str) -> dict[str, float]:
    try:
        spec = json.loads(text)
    except ValueError:
        return {}
    return spec if isinstance(spec, dict) else {}


class BenchProvider:
    name = "bench"

    @property
    def model(self) -> str:
        return "bench-1"

    async def stream(self, request: ProviderRequest) -> AsyncGenerator[Chunk, None]:
        last = request.messages[-1].content if request.messages else ""
        spec = parse_spec(last)
        n = int(spec.get("n", 1))
        size = int(spec.get("size", 6))
        rate = float(spec.get("rate", 0))
        stamp = bool(spec.get("stamp", False))
        every = int(spec.get("every", 1))
        if not spec:
            yield TextChunk("ok")
            n = 0
        interval = 1.0 / rate if rate > 0 else 0.0
        due = time.monotonic()
        for i in range(n):
            if interval:
                due += interval
                pause = due - time.monotonic()
                if pause > 0:
                    await anyio.sleep(pause)
                else:
                    await anyio.lowlevel.checkpoint()
            yield TextChunk(f"{time.monotonic():.6f} " if stamp else delta_text(i, size))
            if not interval and every and (i + 1) % every == 0:
                await anyio.lowlevel.checkpoint()
        yield UsageChunk(Usage(input_tokens=1, output_tokens=n))
        yield FinishChunk("stop")

    async def aclose(self) -> None:
        return None
