"""The stdio transport: binds the codec to stdin/stdout through the line carrier.

Commands run concurrently (a prompt never blocks an interrupt behind it);
events of every session this client touched are forwarded, batched into one
write when several are ready. At EOF the transport lets running work finish
(up to ``eof_grace_s``), interrupts what is left, writes the last events and
returns, so the process exits 0.
"""

from __future__ import annotations

import logging

import anyio
import msgspec
from anyio.abc import TaskGroup, TaskStatus

from kernel import Follower, Kernel, KernelError
from kernel import model as m
from transports.shared import LineReader, LineTooLong, LineWriter

from .codec import StdioCodec

log = logging.getLogger("gateway.stdio")


class StdioConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    session_id: str | None = None
    agent: str | None = None
    max_line_bytes: int = 1_048_576
    eof_grace_s: float = 30.0
    max_concurrent_commands: int = 32


class StdioTransport:
    name = "stdio"
    description = "JSON lines on stdin/stdout: native kernel commands in, events out"
    Config = StdioConfig

    def __init__(self, stdin_fd: int = 0, stdout_fd: int = 1) -> None:
        self.stdin_fd = stdin_fd
        self.stdout_fd = stdout_fd

    async def serve(self, kernel: Kernel, config: StdioConfig, *, task_status: TaskStatus[str | None] = anyio.TASK_STATUS_IGNORED) -> None:
        writer = LineWriter(self.stdout_fd)
        try:
            session = await kernel.session(config.session_id, config.agent)
            connection = _Connection(kernel, config, self.stdin_fd, writer, StdioCodec(session.id))
            await connection.run(session.info(), task_status)
        finally:
            writer.close()


class _Connection:
    def __init__(self, kernel: Kernel, config: StdioConfig, stdin_fd: int, writer: LineWriter, codec: StdioCodec) -> None:
        self.kernel = kernel
        self.stdin_fd = stdin_fd
        self.config = config
        self.writer = writer
        self.codec = codec
        self.followers: dict[str, Follower] = {}
        self.limiter = anyio.Semaphore(config.max_concurrent_commands)

    async def run(self, info: m.SessionInfo, task_status: TaskStatus[str | None]) -> None:
        async with anyio.create_task_group() as forwarders:
            await self.follow(info.session_id, forwarders)
            await self.send(m.SessionOpened(session=info))
            task_status.started(None)
            async with anyio.create_task_group() as commands:
                async for line in LineReader(self.stdin_fd, max_line_bytes=self.config.max_line_bytes):
                    if isinstance(line, LineTooLong):
                        await self.send(self.codec.too_long(line.size, line.limit))
                        continue
                    decoded = self.codec.decode(line)
                    if isinstance(decoded, m.ErrorReply):
                        await self.send(decoded)
                        continue
                    await self.limiter.acquire()
                    commands.start_soon(self.handle, decoded, forwarders)
            await self.drain_at_eof()
            forwarders.cancel_scope.cancel()

    async def handle(self, command: m.Command, forwarders: TaskGroup) -> None:
        try:
            if command.session_id is not None and command.session_id not in self.followers and not isinstance(command, m.DeleteSession):
                if isinstance(command, (m.Prompt, m.OpenSession)):
                    agent = command.agent_id
                    await self.kernel.session(command.session_id, agent)
                    await self.follow(command.session_id, forwarders)
                elif command.session_id in self.kernel.sessions:
                    await self.follow(command.session_id, forwarders)
            reply = await self.kernel.execute(command)
        except KernelError as exc:
            reply = self.codec.error(exc, command.request_id)
        except Exception as exc:
            log.exception("stdio: command failed")
            reply = m.ErrorReply(request_id=command.request_id, error=m.ErrorInfo(code="internal", message=str(exc)))
        finally:
            self.limiter.release()
        await self.send(reply)

    async def follow(self, session_id: str, forwarders: TaskGroup) -> None:
        if session_id in self.followers:
            return
        follower = await Follower.open(self.kernel, session_id)
        self.followers[session_id] = follower
        forwarders.start_soon(self.forward, follower)

    async def forward(self, follower: Follower) -> None:
        """Forward a session's events until it closes (deleted, or shutdown).

        A reader that fell behind gets the missed events while they are retained; when
        they are gone, the ``subscriber_lagged`` event is written (its ``last_seq`` says
        where the gap starts) and forwarding goes on from now. Once it ends, a later
        command to the session follows it anew.
        """
        async with follower:
            while batch := await follower.next_batch():
                await self.send_many(batch)
        if self.followers.get(follower.session_id) is follower:
            del self.followers[follower.session_id]

    async def send(self, message: m.Event | m.Reply) -> None:
        await self.send_many([message])

    async def send_many(self, messages: list[m.Event | m.Reply]) -> None:
        try:
            await self.writer.write_lines([self.codec.encode(msg) for msg in messages])
        except (BrokenPipeError, ConnectionResetError):
            log.info("stdout closed by the reader")

    async def drain_at_eof(self) -> None:
        """Let runs finish (bounded), interrupt the rest, and flush their final events."""
        sessions = [self.kernel.sessions[s] for s in self.followers if s in self.kernel.sessions]
        if any(s.busy for s in sessions) and not await self.kernel.wait_idle(self.config.eof_grace_s):
            log.info("stdin closed: interrupting runs still going after %.0fs", self.config.eof_grace_s)
            for session in sessions:
                session.interrupt()
            await self.kernel.wait_idle(5.0)
        with anyio.move_on_after(5.0):
            while any(f.pending for f in self.followers.values()):
                await anyio.sleep(0.01)
        await self.writer.flush()
