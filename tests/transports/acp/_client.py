"""Test harness: the gateway as a subprocess, driven by the official ACP SDK or raw lines.

The SDK client is asyncio-only, so tests run it with ``asyncio.run`` while the
gateway under test runs on the backend the test names (``--backend``), in its
own process, exactly as an editor would start it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import acp
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    CreateTerminalResponse,
    DeniedOutcome,
    FileSystemCapabilities,
    KillTerminalResponse,
    ReadTextFileResponse,
    ReleaseTerminalResponse,
    RequestPermissionResponse,
    TerminalExitStatus,
    TerminalOutputResponse,
    WaitForTerminalExitResponse,
    WriteTextFileResponse,
)

REPO = Path(__file__).resolve().parents[3]
BACKENDS = ("asyncio", "trio")


def gateway_env(db: Path, **extra: str) -> dict[str, str]:
    """Only what the gateway needs: no API key (so the offline echo model answers)."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR", "SYSTEMROOT")}
    env.update(PYTHONPATH=str(REPO), GATEWAY_DB=str(db), PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def gateway_args(backend: str, *more: str) -> list[str]:
    return ["-m", "gateway", "serve", "--transport", "acp", "--backend", backend, *more]


class Terminal:
    """A command the editor runs for the agent: a real subprocess, its output kept (tail-first cut)."""

    def __init__(self, process: asyncio.subprocess.Process, limit: int | None) -> None:
        self.process = process
        self.limit = limit
        self.output = bytearray()
        self.truncated = False
        self.reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        assert self.process.stdout is not None
        while chunk := await self.process.stdout.read(4096):
            self.output += chunk
            if self.limit is not None and len(self.output) > self.limit:
                del self.output[: len(self.output) - self.limit]
                self.truncated = True

    def status(self) -> TerminalExitStatus | None:
        code = self.process.returncode
        if code is None:
            return None
        return TerminalExitStatus(exit_code=None, signal=signal.Signals(-code).name) if code < 0 else TerminalExitStatus(exit_code=code)


class RecordingClient:
    """An editor stand-in: records updates, answers permission, file and terminal requests as told."""

    def __init__(self, *, permission: str | None = "allow_once", files: dict[str, str] | None = None) -> None:
        self.updates: list[Any] = []
        self.permission_requests: list[Any] = []
        self.permission = permission
        self.files = dict(files or {})
        self.reads: list[tuple[str, int | None, int | None]] = []
        self.writes: list[tuple[str, str]] = []
        self.on_update: Any = None
        self.terminals: dict[str, Terminal] = {}
        self.terminal_calls: list[tuple[str, str]] = []  # (method, terminal id), in order
        self.created: list[dict[str, Any]] = []  # terminal/create params

    async def request_permission(self, options: list[Any], session_id: str, tool_call: Any, **kwargs: Any) -> RequestPermissionResponse:
        self.permission_requests.append((tool_call, options))
        if self.permission is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=self.permission))

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)
        if self.on_update is not None:
            self.on_update(update)

    async def read_text_file(self, path: str, session_id: str, line: int | None = None, limit: int | None = None, **kwargs: Any) -> ReadTextFileResponse:
        self.reads.append((path, line, limit))
        return ReadTextFileResponse(content=self.files[path])

    async def write_text_file(self, content: str, path: str, session_id: str, **kwargs: Any) -> WriteTextFileResponse:
        self.writes.append((path, content))
        self.files[path] = content
        return WriteTextFileResponse()

    async def create_terminal(
        self, session_id: str, command: str, args: list[str] | None = None, env: Any = None, cwd: str | None = None, output_byte_limit: int | None = None, **kwargs: Any
    ) -> CreateTerminalResponse:
        process = await asyncio.create_subprocess_exec(command, *(args or []), cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        terminal_id = f"term-{len(self.created)}"
        self.created.append({"command": command, "args": args, "cwd": cwd, "output_byte_limit": output_byte_limit})
        self.terminals[terminal_id] = Terminal(process, output_byte_limit)
        self.terminal_calls.append(("create", terminal_id))
        return CreateTerminalResponse(terminal_id=terminal_id)

    async def terminal_output(self, session_id: str, terminal_id: str, **kwargs: Any) -> TerminalOutputResponse:
        self.terminal_calls.append(("output", terminal_id))
        terminal = self.terminals[terminal_id]
        return TerminalOutputResponse(output=terminal.output.decode(errors="replace"), truncated=terminal.truncated, exit_status=terminal.status())

    async def wait_for_terminal_exit(self, session_id: str, terminal_id: str, **kwargs: Any) -> WaitForTerminalExitResponse:
        self.terminal_calls.append(("wait_for_exit", terminal_id))
        terminal = self.terminals[terminal_id]
        await terminal.process.wait()
        await terminal.reader
        status = terminal.status()
        assert status is not None
        return WaitForTerminalExitResponse(exit_code=status.exit_code, signal=status.signal)

    async def kill_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> KillTerminalResponse:
        self.terminal_calls.append(("kill", terminal_id))
        process = self.terminals[terminal_id].process
        if process.returncode is None:
            process.kill()
            await process.wait()
        return KillTerminalResponse()

    async def release_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> ReleaseTerminalResponse:
        self.terminal_calls.append(("release", terminal_id))
        process = self.terminals[terminal_id].process
        if process.returncode is None:
            process.kill()
            await process.wait()
        return ReleaseTerminalResponse()

    # ------------------------------------------------------------ views

    def kinds(self) -> list[str]:
        return [u.session_update for u in self.updates]

    def text(self, kind: str = "agent_message_chunk") -> str:
        return "".join(u.content.text for u in self.updates if u.session_update == kind and getattr(u.content, "type", "") == "text")

    def of(self, kind: str) -> list[Any]:
        return [u for u in self.updates if u.session_update == kind]


def capabilities(read: bool = False, write: bool = False, terminal: bool = False) -> ClientCapabilities:
    return ClientCapabilities(fs=FileSystemCapabilities(read_text_file=read, write_text_file=write), terminal=terminal)


@contextlib.asynccontextmanager
async def spawn(client: RecordingClient, backend: str, cwd: Path, db: Path, *args: str, **env: str) -> AsyncIterator[tuple[Any, Any]]:
    """The gateway as an agent subprocess; stderr goes to ``cwd/gateway.log``; exit code checked by callers."""
    with await asyncio.to_thread(open, cwd / "gateway.log", "ab") as log:
        async with acp.spawn_agent_process(
            client,
            sys.executable,
            *gateway_args(backend, *args),
            env=gateway_env(db, **env),
            cwd=cwd,
            transport_kwargs={"stderr": log, "limit": 16 * 1024 * 1024, "shutdown_timeout": 15.0},
        ) as (conn, proc):
            yield conn, proc


def run(coro: Any, timeout_s: float = 30.0) -> Any:
    """Run an SDK coroutine on asyncio with a hard time limit."""

    async def bounded() -> Any:
        return await asyncio.wait_for(coro, timeout_s)

    return asyncio.run(bounded())


# ---------------------------------------------------------------- raw lines


class RawGateway:
    """A plain subprocess for what an SDK will not send: garbage, unknown methods, odd ids."""

    def __init__(self, backend: str, cwd: Path, db: Path, *args: str, **env: str) -> None:
        self.log = open(cwd / "gateway.log", "ab")
        self.proc = subprocess.Popen(
            [sys.executable, *gateway_args(backend, *args)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            env=gateway_env(db, **env),
            cwd=cwd,
        )
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(b"")

    def send(self, message: Any) -> None:
        line = message if isinstance(message, bytes) else json.dumps(message).encode()
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def receive(self, timeout_s: float = 15.0) -> dict[str, Any]:
        line = self.lines.get(timeout=timeout_s)
        assert line, "the gateway closed stdout"
        return json.loads(line)

    def until_response(self, rid: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Read until the response to ``rid``; returns it and everything before it."""
        before = []
        while True:
            message = self.receive()
            if "method" not in message and message.get("id") == rid:
                return message, before
            before.append(message)

    def call(self, rid: Any, method: str, params: Any = None) -> dict[str, Any]:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return self.until_response(rid)[0]

    def close(self, timeout_s: float = 20.0) -> tuple[int, list[dict[str, Any]]]:
        """EOF on stdin; returns the exit code and the messages still written after it."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            code = self.proc.wait(timeout_s)
            self.reader.join(5.0)
            rest = []
            while (line := self.lines.get_nowait()):
                rest.append(json.loads(line))
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.log.close()
        return code, rest


@contextlib.contextmanager
def raw_gateway(backend: str, cwd: Path, db: Path, *args: str, **env: str) -> Iterator[RawGateway]:
    gateway = RawGateway(backend, cwd, db, *args, **env)
    try:
        yield gateway
    finally:
        if gateway.proc.poll() is None:
            gateway.proc.kill()
            gateway.proc.wait()
        if not gateway.log.closed:
            gateway.log.close()


def stdio_session(backend: str, cwd: Path, db: Path, text: str) -> str:
    """A conversation held through another dialect (stdio) in the same store; its session id."""
    with open(cwd / "gateway.log", "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve", "--transport", "stdio", "--backend", backend],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            env=gateway_env(db),
            cwd=cwd,
        )
        deadline = threading.Timer(20.0, proc.kill)  # a hung gateway ends the read below
        deadline.start()
        try:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(json.dumps({"type": "prompt", "text": text, "request_id": "1"}).encode() + b"\n")
            proc.stdin.flush()
            finished = next(m for m in map(json.loads, proc.stdout) if m.get("type") == "run_finished")
            proc.stdin.close()
            assert proc.wait(20) == 0
        finally:
            deadline.cancel()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return str(finished["session_id"])
