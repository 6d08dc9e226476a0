"""stdio throughput: the gateway's JSON lines against a bare pipe of the same lines.

Baseline: a child Python process (``tests.bench._servers pipe``) writing, to its
stdout pipe, the exact lines a gateway turn produced with one line per model delta
(captured in this run), one ``write`` system call per line, as fast as the pipe takes
them: what any stdio server that streams each event as it happens must do at least.

Gateway, all through the real command line (``python -m gateway serve --transport
stdio``, ``GATEWAY_DB`` in a temporary directory), the parent reading stdout until
``run_finished``:

* **echo, as shipped**: the offline echo model answering a prompt of ``n`` words (it
  streams ``echo: `` and the words, one delta each, without pausing); the kernel
  merges deltas that wait for the writer, so fewer, longer lines carry them.
* **bench model** (the same CLI with the benchmark provider registered, see
  ``_servers.run_cli``): ``n`` deltas, either handed over at once (``burst``) or one
  per scheduling round (``per-delta``), with the kernel's merging on (as shipped) or
  off (one line per delta: the same lines as the baseline).

The figure is model deltas delivered per second (the whole text verified), so a
merged line counts for every delta it carries; lines/s is in the JSON details.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from . import _harness as h
from ._provider import delta_text

FINISHED = b'"type":"run_finished"'


class LineProcess:
    """A child whose stdout carries JSON lines; we read it in big chunks."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.pending = b""

    async def until(self, marker: bytes, timeout_s: float = 120.0) -> list[bytes]:
        """Read until a complete line containing ``marker``; returns the lines read."""
        assert self.process.stdout is not None
        chunks = [self.pending]
        tail = self.pending
        async with asyncio.timeout(timeout_s):
            while True:
                at = tail.find(marker)
                if at >= 0 and tail.find(b"\n", at) >= 0:
                    break
                chunk = await self.process.stdout.read(1 << 18)
                if not chunk:
                    raise RuntimeError("the process closed its stdout")
                chunks.append(chunk)
                tail = tail[-len(marker) - 1 :] + chunk if at < 0 else tail + chunk
        data = b"".join(chunks)
        end = data.index(b"\n", data.index(marker)) + 1
        self.pending = data[end:]
        return data[:end].splitlines()

    async def send(self, data: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data)
        await self.process.stdin.drain()


@contextlib.asynccontextmanager
async def line_process(args: list[str], env: dict[str, str]) -> Any:
    stderr = h.open_stderr_file()
    process = await asyncio.create_subprocess_exec(
        sys.executable, *args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=stderr, env=env, cwd=str(h.ROOT), limit=1 << 24,
    )
    stderr.close()
    try:
        yield LineProcess(process)
    except BaseException:
        sys.stderr.write(Path(stderr.name).read_text(errors="replace")[-3000:])
        raise
    finally:
        await h.stop_process(process, timeout_s=10)
        with contextlib.suppress(OSError):
            os.unlink(stderr.name)


def delta_text_of(lines: list[bytes]) -> str:
    out = []
    for line in lines:
        if b'"type":"text_delta"' in line:
            out.append(json.loads(line)["text"])
    return "".join(out)


class Gateway:
    def __init__(self, proc: LineProcess, expected: str, make_prompt: Any) -> None:
        self.proc = proc
        self.expected = expected
        self.make_prompt = make_prompt
        self.count = 0

    async def ready(self) -> None:
        await self.proc.until(b'"type":"session"', timeout_s=30)

    async def turn(self) -> tuple[float, list[bytes]]:
        self.count += 1
        line = json.dumps({"type": "prompt", "text": self.make_prompt(), "request_id": f"b{self.count}"}).encode() + b"\n"
        watch = h.Stopwatch()
        await self.proc.send(line)
        lines = await self.proc.until(FINISHED)
        elapsed = watch.elapsed
        got = delta_text_of(lines)
        if got != self.expected:
            raise RuntimeError(f"stdio: delivered text differs ({len(got)} of {len(self.expected)} characters)")
        return elapsed, lines


class Series:
    def __init__(self) -> None:
        self.times: list[float] = []
        self.lines: list[int] = []

    def add(self, elapsed: float, lines: list[bytes]) -> None:
        self.times.append(elapsed)
        self.lines.append(len(lines))

    def summary(self, n: int) -> dict[str, Any]:
        t = h.median(self.times)
        return {"deltas_per_s": round(n / t), "lines_per_s": round(h.median(self.lines) / t), "lines_per_turn": h.median(self.lines), "seconds": [round(x, 4) for x in self.times]}


async def run(settings: h.Settings) -> list[h.Result]:
    n = settings.pick(10000, 3000)
    reps = settings.pick(3, 1)
    results: list[h.Result] = []
    words = " ".join(delta_text(i, 8).strip() for i in range(n))
    echo_expected = "echo: " + words
    bench_expected = "".join(delta_text(i, 6) for i in range(n))
    specs = {mode: json.dumps({"n": n, "size": 6, "every": every}) for mode, every in (("burst", 0), ("per-delta", 1))}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "on.toml").write_text('[provider]\ndefault = "bench"\n')
        (root / "off.toml").write_text(f'[provider]\ndefault = "bench"\n[session]\nsubscriber_buffer = {2 * n + 64}\nevent_retention = {2 * n + 64}\n')
        for backend in settings.backends:
            env = h.child_env(GATEWAY_DB=str(root / f"{backend}-echo.db"))
            serve = ["serve", "--transport", "stdio", *h.backend_args(backend)]
            cli = ["-m", "tests.bench._servers", "cli"]
            async with (
                line_process(["-m", "gateway", *serve], env) as echo_proc,
                line_process([*cli, "--", *serve, "-c", str(root / "on.toml"), "--db", str(root / f"{backend}-on.db")], env) as on_proc,
                line_process([*cli, "--merge", "off", "--", *serve, "-c", str(root / "off.toml"), "--db", str(root / f"{backend}-off.db")], env) as off_proc,
            ):
                echo = Gateway(echo_proc, echo_expected, lambda: words)
                on = {mode: Gateway(on_proc, bench_expected, lambda s=specs[mode]: s) for mode in specs}
                off = {mode: Gateway(off_proc, bench_expected, lambda s=specs[mode]: s) for mode in specs}
                for gateway in (echo, on["burst"], off["burst"]):
                    await gateway.ready()
                # Warm-up turns; the merging-off burst turn gives the baseline its lines.
                for gateway in (echo, *on.values(), *off.values()):
                    _, lines = await gateway.turn()
                    if gateway is off["burst"]:
                        captured = lines
                if sum(b'"type":"text_delta"' in line for line in captured) != n:
                    raise RuntimeError("stdio: with merging off every delta should be its own line")
                (root / "lines").write_bytes(b"\n".join(captured) + b"\n")
                async with line_process([*cli[:2], "pipe", "--lines", str(root / "lines")], h.child_env()) as pipe:
                    await pipe.until(b"READY")
                    base = Series()
                    series: dict[str, Series] = {}
                    for round_ in range(reps + 1):
                        await pipe.send(b"g")
                        watch = h.Stopwatch()
                        lines = await pipe.until(FINISHED)
                        if round_:
                            base.add(watch.elapsed, lines)
                        if len(lines) != len(captured):
                            raise RuntimeError("stdio baseline: line count differs")
                        if not round_:
                            continue
                        for key, gateway in (("echo, as shipped", echo), *((f"bench {m}, merging on", g) for m, g in on.items()), *((f"bench {m}, merging off", g) for m, g in off.items())):
                            series.setdefault(key, Series()).add(*await gateway.turn())
                b = n / h.median(base.times)
                for key, s in series.items():
                    deltas = n + 1 if key.startswith("echo") else n  # echo streams "echo: " first
                    g = deltas / h.median(s.times)
                    results.append(h.Result(
                        bench="stdio", variant=key, backend=backend, metric="deltas/s", baseline=b, gateway=g,
                        ratio=g / b, target=">= 0.7x", met=g / b >= 0.7,
                        details={"n": n, "baseline": base.summary(n), "gateway": s.summary(deltas)},
                    ))
    return results
