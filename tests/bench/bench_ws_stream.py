"""WebSocket streaming throughput: openfang and agent-cli against a bare hypercorn push.

What is measured: the model (:class:`~tests.bench._provider.BenchProvider`) emits ``n``
text deltas of ``size`` characters as fast as it can; the figure is **model deltas
delivered per second**: ``n`` divided by the time from sending the prompt to receiving
the frame that completes the turn (openfang ``response``, agent-cli ``Complete``),
with every delta's text verified to have arrived.

Baseline: a bare raw-ASGI app on the same hypercorn (same backend, same settings)
pushing, to the same ``websockets`` client, exactly the frames the gateway sent with
coalescing off (captured in this run: same count, same sizes, the turn's non-delta
frames included), one ``websocket.send`` each.

The floor of a per-delta stream: the same app moving the same frames from a producer task,
which yields to the scheduler once per frame as the per-delta model does, to a writer task
that sends them (``_servers.push_through_handoff``). Any server whose model and writer are
two tasks pays that round trip per delta; the bare push, with no model, does not. The
per-delta rows with coalescing off are also reported against it (no target: what is left
above it is the gateway's own share).

Variants:

* **coalescing off**: openfang ``coalesce_ms=0`` and the kernel's merging of waiting
  deltas switched off in the gateway process, so every model delta is one frame, as
  in the baseline: the ratio is the gateway's per-frame cost against hypercorn's own.
  Target ≥ 0.8×.
* **coalescing on**: openfang as shipped (its 100 ms / 200 character window) and
  agent-cli with the same window (``coalesce_ms=100``; it ships off), plus the
  kernel's merging. Fewer, larger frames carry the same deltas. Target ≥ 2×.

Each variant runs with and without permessage-deflate (``websockets`` offers it by
default; ``compression=None`` does not), on the asyncio and trio workers.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

from kernel.settings import AgentSettings

from . import _harness as h
from ._provider import delta_text

AGENT_ID = AgentSettings().agent_id()
TRANSPORTS = ("openfang", "agent-cli")
COMPRESSIONS = (None, "deflate")


def ws_url(transport: str, port: int) -> str:
    if transport == "openfang":
        return f"ws://127.0.0.1:{port}/api/agents/{AGENT_ID}/ws"
    return f"ws://127.0.0.1:{port}/"


def is_final(transport: str) -> Callable[[str], bool]:
    """A cheap end-of-turn test, applied identically to gateway and baseline frames."""
    marker = '"type":"response"' if transport == "openfang" else '"Complete"'
    return lambda frame: marker in frame


def is_error(transport: str, frame: str) -> bool:
    if transport == "openfang":
        return frame.startswith('{"type":"error"')
    return '"error":null' not in frame and '"error":' in frame


async def open_socket(transport: str, port: int, compression: str | None) -> ClientConnection:
    ws = await connect(ws_url(transport, port), compression=compression, max_size=None, ping_interval=None, open_timeout=20)
    if transport == "openfang":  # connected + agents_updated come first
        for _ in range(2):
            await asyncio.wait_for(ws.recv(), 10)
    return ws


class Prompter:
    """Builds one dialect's prompt frames for a benchmark spec."""

    def __init__(self, transport: str) -> None:
        self.transport = transport
        self.session = str(uuid.uuid4())
        self.count = 0

    def prompt(self, spec: dict[str, Any]) -> str:
        self.count += 1
        text = json.dumps(spec)
        if self.transport == "openfang":
            return json.dumps({"type": "message", "content": text, "session_id": self.session})
        return json.dumps({"request_id": f"r{self.count}", "input": {"Text": text}, "stream": True})


async def receive_turn(ws: ClientConnection, final: Callable[[str], bool], timeout_s: float = 120.0) -> list[str]:
    frames: list[str] = []
    async with asyncio.timeout(timeout_s):
        while True:
            frame = await ws.recv()
            assert isinstance(frame, str)
            frames.append(frame)
            if final(frame):
                return frames


def delta_texts(transport: str, frames: list[str]) -> str:
    out = []
    for frame in frames:
        obj = json.loads(frame)
        if transport == "openfang":
            if obj.get("type") == "text_delta":
                out.append(obj["content"])
        elif isinstance(obj.get("response"), dict) and "Stream" in obj["response"]:
            out.append(obj["response"]["Stream"])
    return "".join(out)


def check_turn(transport: str, frames: list[str], expected: str) -> None:
    bad = [f for f in frames if is_error(transport, f)]
    if bad:
        raise RuntimeError(f"{transport}: error frame during the stream: {bad[0][:300]}")
    got = delta_texts(transport, frames)
    if got != expected:
        raise RuntimeError(f"{transport}: delivered text differs ({len(got)} of {len(expected)} characters)")


class Measured:
    def __init__(self) -> None:
        self.times: list[float] = []
        self.frames: list[int] = []
        self.bytes: list[int] = []
        self.cpu: list[float] = []

    def add(self, elapsed: float, frames: list[str], cpu_s: float) -> None:
        self.times.append(elapsed)
        self.frames.append(len(frames))
        self.bytes.append(sum(len(f.encode()) for f in frames))
        self.cpu.append(cpu_s)

    def per_s(self, count: float) -> float:
        return count / h.median(self.times)

    def summary(self, n: int) -> dict[str, Any]:
        t = h.median(self.times)
        return {
            "deltas_per_s": round(n / t),
            "frames_per_s": round(h.median(self.frames) / t),
            "payload_bytes_per_s": round(h.median(self.bytes) / t),
            "frames_per_turn": h.median(self.frames),
            "server_cpu_us_per_delta": round(h.median(self.cpu) / n * 1e6, 2),
            "seconds": [round(x, 4) for x in self.times],
        }


class Stream:
    """One open socket to the gateway: prompts a spec and times the turn."""

    def __init__(self, transport: str, ws: ClientConnection, server: h.Child) -> None:
        self.transport = transport
        self.ws = ws
        self.server = server
        self.prompter = Prompter(transport)
        self.final = is_final(transport)

    @classmethod
    async def open(cls, transport: str, server: h.Child, compression: str | None) -> Stream:
        return cls(transport, await open_socket(transport, server.port, compression), server)

    async def turn(self, spec: dict[str, Any]) -> tuple[float, list[str], float]:
        cpu = self.server.cpu_s()
        watch = h.Stopwatch()
        await self.ws.send(self.prompter.prompt(spec))
        frames = await receive_turn(self.ws, self.final)
        elapsed = watch.elapsed
        cpu = self.server.cpu_s() - cpu
        check_turn(self.transport, frames, expected_text(spec))
        return elapsed, frames, cpu


class Baseline:
    """One open socket to the bare app, loaded with the frames to push."""

    def __init__(self, ws: ClientConnection, frames: list[str], final: Callable[[str], bool], server: h.Child) -> None:
        self.server = server
        self.ws = ws
        self.frames = frames
        self.final = final

    @classmethod
    async def open(cls, server: h.Child, compression: str | None, frames: list[str], final: Callable[[str], bool]) -> Baseline:
        ws = await connect(f"ws://127.0.0.1:{server.port}/", compression=compression, max_size=None, ping_interval=None)
        await ws.send("load " + json.dumps(frames))
        if await ws.recv() != "loaded":
            raise RuntimeError("baseline: load failed")
        return cls(ws, frames, final, server)

    async def turn(self, command: str = "go") -> tuple[float, list[str], float]:
        """``go``: the bare push; ``handoff``: through two tasks, a round per frame."""
        cpu = self.server.cpu_s()
        watch = h.Stopwatch()
        await self.ws.send(command)
        got = await receive_turn(self.ws, self.final)
        elapsed = watch.elapsed
        cpu = self.server.cpu_s() - cpu
        if len(got) != len(self.frames):
            raise RuntimeError("baseline: frame count differs")
        return elapsed, got, cpu


def baseline_frames(transport: str, captured: list[str], n: int, size: int) -> list[str]:
    """The turn's frames with exactly one frame per delta, in the dialect's own shape.

    Built from a captured gateway turn: the frames before the first delta frame and
    after the last one are kept as they are; the delta frames are regenerated from the
    first one as a template (the gateway encodes compact JSON, so the template's text
    field is the literal text between its prefix and suffix).
    """
    kinds = [bool(json.loads(f).get("type") == "text_delta") if transport == "openfang" else '"Stream"' in f for f in captured]
    first = kinds.index(True)
    last = len(kinds) - 1 - kinds[::-1].index(True)
    template = captured[first]
    text = delta_texts(transport, [template])
    prefix, _, suffix = template.partition(json.dumps(text)[1:-1])
    deltas = [prefix + delta_text(i, size) + suffix for i in range(n)]
    frames = captured[:first] + deltas + captured[last + 1 :]
    if delta_texts(transport, frames) != expected_text({"n": n, "size": size}):
        raise RuntimeError("baseline frames do not carry the turn's text")
    return frames


_expected: dict[tuple[int, int], str] = {}


def expected_text(spec: dict[str, Any]) -> str:
    key = (spec["n"], spec["size"])
    if key not in _expected:
        _expected[key] = "".join(delta_text(i, spec["size"]) for i in range(spec["n"]))
    return _expected[key]


#: How the model hands its deltas over (see tests/bench/_provider.py): ``every`` = deltas per scheduling round.
MODES = {"burst": 0, "per-delta": 1}
TARGETS = {"off": 0.8, "on": 2.0}


async def measure(transport: str, bare: h.Child, gw_off: h.Child, gw_on: h.Child, compression: str | None, n: int, reps: int) -> dict[str, Measured]:
    """Baseline and gateway turns interleaved round by round, so drift hits all alike."""
    specs = {mode: {"n": n, "size": 6, "every": every} for mode, every in MODES.items()}
    off = await Stream.open(transport, gw_off, compression)
    on = await Stream.open(transport, gw_on, compression)
    base: Baseline | None = None
    try:
        # Warm-up: also captures the frames (one per delta) that the baseline pushes.
        for mode in MODES:
            _, frames, _ = await off.turn(specs[mode])
            await on.turn(specs[mode])
        base = await Baseline.open(bare, compression, baseline_frames(transport, frames, n, 6), off.final)
        await base.turn()
        await base.turn("handoff")
        out = {"baseline": Measured(), "handoff": Measured()} | {f"{c}/{mode}": Measured() for c in ("off", "on") for mode in MODES}
        for _ in range(reps):
            out["baseline"].add(*await base.turn())
            out["handoff"].add(*await base.turn("handoff"))
            for mode in MODES:
                out[f"off/{mode}"].add(*await off.turn(specs[mode]))
                out[f"on/{mode}"].add(*await on.turn(specs[mode]))
        return out
    finally:
        for ws in (off.ws, on.ws, base.ws if base else None):
            if ws is not None:
                await ws.close()


async def run(settings: h.Settings) -> list[h.Result]:
    n = settings.pick(3000, 600)
    reps = settings.pick(3, 1)
    results: list[h.Result] = []
    for backend in settings.backends:
        for transport in TRANSPORTS:
            off_set = ["--set", "coalesce_ms=0"] if transport == "openfang" else []
            on_set = ["--set", "coalesce_ms=100"] if transport == "agent-cli" else []
            # Coalescing off: a kernel buffer big enough that nothing is cut off while one frame per delta drains.
            async with h.children(
                ["bare", *h.backend_args(backend)],
                ["gateway", *h.backend_args(backend), "--transport", transport, "--merge", "off", "--buffer", str(2 * n + 64), *off_set],
                ["gateway", *h.backend_args(backend), "--transport", transport, *on_set],
            ) as (bare, gw_off, gw_on):
                for compression in COMPRESSIONS:
                    m = await measure(transport, bare, gw_off, gw_on, compression, n, reps)
                    deflate = "deflate" if compression else "no deflate"
                    b = m["baseline"].per_s(n)
                    for key, measured in m.items():
                        if key in ("baseline", "handoff"):
                            continue
                        coalescing, mode = key.split("/")
                        g = measured.per_s(n)
                        target = TARGETS[coalescing]
                        results.append(h.Result(
                            bench="ws-stream", variant=f"{transport}, coalescing {coalescing}, {mode}, {deflate}", backend=backend,
                            metric="deltas/s", baseline=b, gateway=g, ratio=g / b, target=f">= {target:g}x", met=g / b >= target,
                            details={"n": n, "delta_chars": 6, "baseline": m["baseline"].summary(n), "gateway": measured.summary(n)},
                        ))
                        if key == "off/per-delta":
                            floor = m["handoff"].per_s(n)
                            results.append(h.Result(
                                bench="ws-stream", variant=f"{transport}, coalescing off, per-delta, {deflate}: against the two-task floor",
                                backend=backend, metric="deltas/s", baseline=floor, gateway=g, ratio=g / floor, target="report",
                                details={"n": n, "delta_chars": 6, "floor": m["handoff"].summary(n), "gateway": measured.summary(n)},
                            ))
    return results
