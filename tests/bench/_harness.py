"""Shared plumbing of the benchmarks: child servers, clients, results, statistics.

The benchmark process itself is a plain asyncio program (the ``websockets`` and
``openai`` clients run here); every server under test runs in a child process
(:mod:`tests.bench._servers` or the real ``python -m gateway``) on the backend being
measured. Baseline and gateway are measured by the same client code, in the same run.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import re
import resource
import statistics
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = ("asyncio", "trio")
#: asyncio on uvloop, measured as a backend of its own (``--loop uvloop|both``).
UVLOOP = "asyncio+uvloop"
LOOPS = ("asyncio", "uvloop", "both")


def with_loop(backends: Sequence[str], loop: str) -> tuple[str, ...]:
    """The backends to measure for ``--loop``: asyncio's plain loop, uvloop instead, or both."""
    out: list[str] = []
    for backend in backends:
        if backend == "asyncio" and loop in ("asyncio", "both"):
            out.append("asyncio")
        if backend == "asyncio" and loop in ("uvloop", "both"):
            out.append(UVLOOP)
        if backend != "asyncio":
            out.append(backend)
    return tuple(out)


def backend_args(backend: str) -> list[str]:
    """``--backend``/``--loop`` for a server child (``gateway serve`` or ``tests.bench._servers``):
    the loop is always named, since ``gateway serve`` takes uvloop by itself when installed."""
    if backend == UVLOOP:
        return ["--backend", "asyncio", "--loop", "uvloop"]
    if backend == "asyncio":
        return ["--backend", "asyncio", "--loop", "asyncio"]
    return ["--backend", backend]


def run_options(backend: str) -> dict[str, Any]:
    """``anyio.run`` keyword arguments for a backend name (in-process benchmarks)."""
    if backend == UVLOOP:
        return {"backend": "asyncio", "backend_options": {"use_uvloop": True}}
    return {"backend": backend}


@dataclass
class Settings:
    """How big and how long; ``quick`` shrinks everything for a ~1 minute smoke run."""

    quick: bool = False
    backends: tuple[str, ...] = BACKENDS
    #: Other proxies to measure side by side where a benchmark can (``--peer litellm``).
    peers: tuple[str, ...] = ()

    def pick(self, full: Any, quick: Any) -> Any:
        return quick if self.quick else full


@dataclass
class Result:
    """One row of the results table: a gateway figure against its raw baseline."""

    bench: str
    variant: str
    backend: str
    metric: str
    baseline: float
    gateway: float
    #: ``gateway / baseline`` for throughputs; ``gateway - baseline`` (ms) for added latency.
    ratio: float | None
    target: str = ""
    met: bool | None = None
    #: What the ratio column shows instead of the ratio (e.g. an added latency).
    shown: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def row(self) -> list[str]:
        met = "" if self.met is None else ("yes" if self.met else "NO")
        ratio = self.shown or ("" if self.ratio is None else f"{self.ratio:.2f}")
        return [self.bench, self.variant, self.backend, self.metric, fmt(self.baseline), fmt(self.gateway), ratio, self.target, met]


def fmt(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def table(results: Sequence[Result]) -> str:
    head = ["benchmark", "variant", "backend", "metric", "baseline", "gateway", "ratio", "target", "met"]
    rows = [head] + [r.row() for r in results]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown(results: Sequence[Result]) -> str:
    """The results as a Markdown table (for docs/performance.md)."""
    head = ["benchmark", "variant", "backend", "metric", "baseline", "gateway", "ratio", "target", "met"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        cells = r.row()
        cells[-1] = {"yes": "yes", "NO": "**no**", "": "—"}[cells[-1]]
        lines.append("| " + " | ".join(c.replace("|", "\\|") or "—" for c in cells) + " |")
    return "\n".join(lines)


def speed_probe_ms() -> float:
    """A fixed piece of pure-Python work (a million loop rounds with a dict update each), best
    of three, in milliseconds: how fast this machine runs the interpreter right now. On this
    kind of VM it moved by 2-3x over one day with nothing else running (the host's load), and
    every figure moves with it: a run's figures are read against its probe, and paired or
    same-run ratios against each other."""
    def work() -> float:
        started = time.perf_counter()
        counts: dict[int, int] = {}
        for i in range(1_000_000):
            counts[i & 255] = counts.get(i & 255, 0) + i
        return (time.perf_counter() - started) * 1000
    return round(min(work() for _ in range(3)), 1)


def machine() -> dict[str, Any]:
    from importlib.metadata import version

    import anyio
    import hypercorn  # noqa: F401
    import msgspec
    import trio
    import websockets

    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "nproc": os.cpu_count(),
        "cpu": model,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "anyio": anyio.__version__ if hasattr(anyio, "__version__") else version("anyio"),
        "trio": trio.__version__,
        "hypercorn": version("hypercorn"),
        "wsproto": version("wsproto"),
        "websockets": websockets.__version__,
        "msgspec": msgspec.__version__,
        "openai": version("openai"),
    }


# ------------------------------------------------------------------ statistics


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values (q in 0..100)."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), round(q / 100 * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]


class Stopwatch:
    def __init__(self) -> None:
        self.start = time.perf_counter()

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start


# ------------------------------------------------------------------ processes


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "GATEWAY_TOKEN", "GATEWAY_ECHO_DELAY_S")}
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra)
    return env


_scratch: list[str] = []


def scratch_dir() -> Path:
    """A temporary directory for the run (child stores, line files), removed at exit."""
    if not _scratch:
        import atexit
        import shutil
        import tempfile

        _scratch.append(tempfile.mkdtemp(prefix="gateway-bench-"))
        atexit.register(shutil.rmtree, _scratch[0], True)
    return Path(_scratch[0])


def raise_nofile(wanted: int = 8192) -> int:
    """Raise the open-files limit (inherited by children) so 1,000+ sockets fit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = min(max(soft, wanted), hard) if hard != resource.RLIM_INFINITY else max(soft, wanted)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def rss_kib(pid: int) -> int:
    """Resident set size of a process, from /proc/PID/status (kiB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def cpu_s(pid: int) -> float:
    """CPU time a process has used, all its threads, from /proc (ns resolution)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


class Child:
    """A server process that prints ``READY <value>`` and stops when its stdin closes."""

    def __init__(self, process: asyncio.subprocess.Process, ready: str, stderr_path: Path) -> None:
        self.process = process
        self.ready = ready
        self.stderr_path = stderr_path

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def port(self) -> int:
        return self.ports[0]

    @property
    def ports(self) -> list[int]:
        """A gateway serving several transports reports one port each (``READY 8001,8002``)."""
        return [int(port) for port in self.ready.split(",")]

    def rss_kib(self) -> int:
        return rss_kib(self.pid)

    def cpu_s(self) -> float:
        return cpu_s(self.pid)

    def stderr_tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.stderr_path.read_text(errors="replace").splitlines()[-lines:])
        return ""


@contextlib.asynccontextmanager
async def child(*args: str, env: dict[str, str] | None = None, timeout_s: float = 20.0) -> AsyncIterator[Child]:
    """Run ``python -m tests.bench._servers ARGS`` until the block ends."""
    if args and args[0] == "gateway":
        import uuid

        args = (*args, "--db", str(scratch_dir() / f"{uuid.uuid4().hex}.db"))
    stderr_file = open_stderr_file()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.bench._servers", *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=stderr_file,
        env=env or child_env(), cwd=str(ROOT),
    )
    stderr_file.close()
    handle: Child | None = None
    try:
        assert process.stdout is not None
        while True:
            line = await asyncio.wait_for(process.stdout.readline(), timeout_s)
            if not line:
                raise RuntimeError(f"server {args} exited before it was ready:\n{Path(stderr_file.name).read_text()[-3000:]}")
            if line.startswith(b"READY "):
                handle = Child(process, line[6:].decode().strip(), Path(stderr_file.name))
                break
        yield handle
    finally:
        await stop_process(process)
        with contextlib.suppress(OSError):
            os.unlink(stderr_file.name)


@contextlib.asynccontextmanager
async def gateway_cli(
    args: Sequence[str], env: dict[str, str], ready: str, timeout_s: float = 30.0, *, tree: Path = ROOT
) -> AsyncIterator[tuple[asyncio.subprocess.Process, re.Match[str]]]:
    """Run ``python -m gateway ARGS`` until the block ends; ready once its log matches ``ready``.
    ``tree``: the checkout it runs from (its modules come first on the path)."""
    stderr_file = open_stderr_file()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL, stderr=stderr_file, env=env, cwd=str(tree),
    )
    stderr_file.close()
    log = Path(stderr_file.name)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            found = re.search(ready, log.read_text(errors="replace"))
            if found:
                break
            if process.returncode is not None or time.monotonic() > deadline:
                raise RuntimeError(f"gateway {' '.join(args)} did not start:\n{log.read_text(errors='replace')[-3000:]}")
            await asyncio.sleep(0.05)
        yield process, found
    finally:
        if process.returncode is None:
            process.terminate()  # SIGTERM: the gateway's own clean shutdown
        await stop_process(process)
        with contextlib.suppress(OSError):
            log.unlink()


@contextlib.asynccontextmanager
async def children(*specs: Sequence[str]) -> AsyncIterator[list[Child]]:
    """Several :func:`child` servers, started at the same time (start-up is mostly imports)."""
    async with contextlib.AsyncExitStack() as stack:
        yield list(await asyncio.gather(*(stack.enter_async_context(child(*spec)) for spec in specs)))


def open_stderr_file() -> Any:
    import tempfile

    return tempfile.NamedTemporaryFile(prefix="bench-stderr-", suffix=".log", delete=False)


async def stop_process(process: asyncio.subprocess.Process, timeout_s: float = 0.5) -> None:
    """Close its stdin (the servers' signal to stop), then kill it if it lingers.

    Nothing a benchmark server holds needs a graceful end (its store lives in
    :func:`scratch_dir`), and waiting for hypercorn's graceful shutdown would add
    seconds per server to the suite.
    """
    if process.returncode is None and process.stdin is not None:
        with contextlib.suppress(Exception):
            process.stdin.close()
    try:
        await asyncio.wait_for(process.wait(), timeout_s)
    except TimeoutError:
        process.kill()
        await process.wait()


def result_dict(result: Result) -> dict[str, Any]:
    return asdict(result)
