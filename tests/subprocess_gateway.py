"""Run ``python -m gateway`` as a child process, the way editors and scripts do."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import msgspec
from anyio.abc import Process

ROOT = Path(__file__).resolve().parent.parent


def gateway_env(db: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "GATEWAY_TOKEN")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["GATEWAY_DB"] = str(db)
    env.update(extra)
    return env


class LineClient:
    """Writes JSON lines to the child's stdin and reads JSON lines from its stdout."""

    def __init__(self, process: Process) -> None:
        self.process = process
        self._buffer = b""

    async def send(self, obj: Any) -> None:
        data = obj if isinstance(obj, bytes) else msgspec.json.encode(obj)
        assert self.process.stdin is not None
        await self.process.stdin.send(data + b"\n")

    async def receive(self, timeout_s: float = 10.0) -> dict[str, Any]:
        assert self.process.stdout is not None
        with anyio.fail_after(timeout_s):
            while b"\n" not in self._buffer:
                self._buffer += await self.process.stdout.receive()
        line, _, self._buffer = self._buffer.partition(b"\n")
        return msgspec.json.decode(line)

    async def until(self, predicate: Any, timeout_s: float = 10.0) -> list[dict[str, Any]]:
        seen = []
        while True:
            message = await self.receive(timeout_s)
            seen.append(message)
            if predicate(message):
                return seen

    async def close_stdin(self) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.aclose()

    async def rest(self, timeout_s: float = 10.0) -> list[dict[str, Any]]:
        """Every remaining line until the child closes stdout."""
        out = []
        assert self.process.stdout is not None
        with anyio.fail_after(timeout_s):
            try:
                while True:
                    self._buffer += await self.process.stdout.receive()
            except anyio.EndOfStream:
                pass
        for line in self._buffer.splitlines():
            if line.strip():
                out.append(msgspec.json.decode(line))
        self._buffer = b""
        return out


async def read_banner(gateway: LineClient, timeout_s: float = 30.0) -> dict[str, list[str]]:
    """The start-up banner's ``label  text`` lines from the child's stderr, by label (the
    log lines around it skipped); the rest of stderr is left unread."""
    stderr = gateway.process.stderr
    assert stderr is not None
    seen = b""
    with anyio.fail_after(timeout_s):
        while b"\n  store " not in seen or b"\n" not in seen.split(b"\n  store ", 1)[1]:
            seen += await stderr.receive()
    body = seen.decode().split("is ready (Ctrl+C stops it):\n", 1)[1]
    lines: dict[str, list[str]] = {}
    for line in body.splitlines():
        if not line.startswith("  "):
            break
        label, _, rest = line.strip().partition(" ")
        lines.setdefault(label, []).append(rest.strip())
    return lines


@asynccontextmanager
async def gateway_process(args: list[str], env: dict[str, str], cwd: Path | None = None) -> AsyncIterator[LineClient]:
    process = await anyio.open_process([sys.executable, "-m", "gateway", *args], env=env, cwd=cwd)
    try:
        yield LineClient(process)
    finally:
        if process.returncode is None:
            process.kill()
        with anyio.move_on_after(5):
            await process.wait()
        await process.aclose()
