"""The stdio transport: binds the codec to stdin/stdout through the line carrier.

Commands run concurrently (a prompt never blocks an interrupt behind it); events of
every session this client touched are forwarded, batched into one write when several
are ready. At EOF the transport lets the runs this client started finish (up to
``eof_grace_s``), interrupts what is left, writes their last events and returns, so
the process exits 0.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import anyio
from anyio.abc import TaskGroup, TaskStatus

from kernel import Follower, Kernel, KernelError, RunWatch
from kernel import model as m
from transports.base import BannerLine
from transports.shared import LineReader, LineTooLong, LineWriter, local_caller

from .codec import StdioCodec
from .config import StdioConfig

log = logging.getLogger("gateway.stdio")

#: After the interrupts at EOF: how long the runs may take to record their end.
INTERRUPTED_GRACE_S = 5.0
#: At the very end: how long the last writes may take (a reader that stopped reading
#: stdout must not keep the process alive).
LAST_WRITE_S = 5.0


class StdioTransport:
    name = "stdio"
    description = "JSON lines on stdin/stdout: native kernel commands in, events out"
    Config = StdioConfig

    def __init__(self, stdin_fd: int = 0, stdout_fd: int = 1) -> None:
        self.stdin_fd = stdin_fd
        self.stdout_fd = stdout_fd

    async def serve(self, kernel: Kernel, config: StdioConfig, *, task_status: TaskStatus[str | None] = anyio.TASK_STATUS_IGNORED) -> None:
        caller = await local_caller(kernel, config.api_key, self.name)  # the admin, unless a key is configured
        writer = LineWriter(self.stdout_fd)
        try:
            opened = await kernel.execute(m.OpenSession(session_id=config.session_id, agent_id=config.agent), caller)
            codec = StdioCodec(opened.session.session_id, approval=config.approval())
            await _Connection(kernel, config, self.stdin_fd, writer, codec, caller).run(opened.session, task_status)
        finally:
            writer.close()

    def banner(self, kernel: Kernel, config: StdioConfig, address: str | None, command: str) -> list[BannerLine]:
        """Where this process listens, and the command a script or an editor starts it with."""
        return [BannerLine("stdio", f"JSON lines on this process's stdin/stdout; start it as: {command}")]


class _OwnRuns:
    """The runs this client started, until their ends are written (what EOF waits for).

    A run is registered from its ``accepted`` reply, before anything else runs: the
    kernel replies with no checkpoint after queueing the run, so the session's task has
    emitted none of its events yet. Events are fed once written: a run taken off
    here has its end on stdout.
    """

    def __init__(self) -> None:
        self._open: dict[str, tuple[str, RunWatch]] = {}  # run id -> (session id, its watch)
        self._changed = anyio.Event()

    def started(self, accepted: m.Accepted, request_id: str | None) -> None:
        if accepted.run_id is not None:
            self._open[accepted.run_id] = (accepted.session_id, RunWatch(request_id or "", accepted.run_id))

    def feed(self, events: list[m.Event]) -> None:
        for event in events:
            if not isinstance(event, m.RunEvent):
                continue
            entry = self._open.get(event.run_id)
            if entry is not None and entry[1].feed(event) and entry[1].end is not None:
                self.drop(event.run_id)

    def drop(self, run_id: str) -> None:
        """No end will come for this run (it is over, or its session is gone)."""
        if self._open.pop(run_id, None) is not None:
            self._changed.set()

    def drop_session(self, session_id: str) -> None:
        for run_id in [run_id for run_id, (owner, _) in self._open.items() if owner == session_id]:
            self.drop(run_id)

    def running(self) -> list[tuple[str, str]]:
        """(session id, run id) of every run whose end has not been written yet."""
        return [(session_id, run_id) for run_id, (session_id, _) in self._open.items()]

    async def ended(self, deadline: float) -> bool:
        """Wait until every run has ended, or ``deadline``: whether they all did."""
        with anyio.move_on_at(deadline):
            while self._open:
                self._changed = anyio.Event()
                await self._changed.wait()
        return not self._open


class _Connection:
    def __init__(
        self, kernel: Kernel, config: StdioConfig, stdin_fd: int, writer: LineWriter, codec: StdioCodec, caller: m.Caller = m.LOCAL_CALLER
    ) -> None:
        self.kernel = kernel
        # Who the process acts as: every command and follower of this client is theirs.
        self.caller = caller
        self.stdin_fd = stdin_fd
        self.config = config
        self.writer = writer
        self.codec = codec
        self.followers: dict[str, Follower] = {}
        self.runs = _OwnRuns()
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
            for follower in list(self.followers.values()):
                follower.close()  # its forwarder ends after the write under way
            forwarders.cancel_scope.deadline = anyio.current_time() + LAST_WRITE_S

    async def handle(self, command: m.Command, forwarders: TaskGroup) -> None:
        reply: m.Reply
        try:
            reply = await self.execute(command, forwarders)
        except KernelError as exc:
            reply = self.codec.error(exc, command.request_id)
        except Exception as exc:
            log.exception("stdio: command failed")
            reply = m.ErrorReply(request_id=command.request_id, error=m.ErrorInfo(code="internal", message=str(exc)))
        finally:
            self.limiter.release()
        await self.send(reply)

    async def execute(self, command: m.Command, forwarders: TaskGroup) -> m.Reply:
        """Run a command, following the session it names first (so nothing it starts is
        missed): a prompt opens that session, other commands follow it if it exists."""
        session_id = command.session_id
        if session_id is not None and session_id not in self.followers and not isinstance(command, (m.OpenSession, m.DeleteSession)):
            if isinstance(command, m.Prompt):
                await self.kernel.execute(m.OpenSession(session_id=session_id, agent_id=command.agent_id), self.caller)
            await self.follow(session_id, forwarders)
        reply = await self.kernel.execute(command, self.caller)
        if isinstance(reply, m.Accepted):
            self.runs.started(reply, command.request_id)
        elif isinstance(reply, m.SessionOpened) and isinstance(command, m.OpenSession):
            await self.follow(reply.session.session_id, forwarders, after_seq=reply.session.last_seq)
        return reply

    async def follow(self, session_id: str, forwarders: TaskGroup, after_seq: int | None = None) -> None:
        """Forward the session's events from now (or after ``after_seq``); an unknown session is not followed."""
        if session_id in self.followers:
            return
        try:
            follower = await Follower.open(self.kernel, session_id, after_seq, client="stdio", caller=self.caller)
        except KernelError:
            return  # the command itself says what is wrong
        if session_id in self.followers:  # another command followed it meanwhile
            follower.close()
            return
        self.followers[session_id] = follower
        forwarders.start_soon(self.forward, follower)

    async def forward(self, follower: Follower) -> None:
        """Forward a session's events until it closes (deleted, closed, or EOF).

        A reader that fell behind gets the missed events while they are retained; when
        they are gone, the ``subscriber_lagged`` event is written (its ``last_seq`` says
        where the gap starts) and forwarding goes on from now. Once it ends, a later
        command to the session follows it anew.
        """
        async with follower:
            while batch := await follower.next_batch():
                await self.send_many(batch)
                self.runs.feed(batch)
        if self.followers.get(follower.session_id) is follower:
            del self.followers[follower.session_id]
            self.runs.drop_session(follower.session_id)

    async def send(self, message: m.Event | m.Reply) -> None:
        await self.send_many([message])

    async def send_many(self, messages: Sequence[m.Event | m.Reply]) -> None:
        try:
            await self.writer.write_lines([self.codec.encode(msg) for msg in messages])
        except (BrokenPipeError, ConnectionResetError):
            log.info("stdout closed by the reader")

    async def drain_at_eof(self) -> None:
        """Let this client's runs finish (bounded), interrupt the rest, until their ends are written.

        A run whose end this client missed (events lost while it fell behind) is found
        out at the deadline: its ``interrupt`` answers that it is not running.
        """
        if await self.runs.ended(anyio.current_time() + self.config.eof_grace_s):
            return
        log.info("stdin closed: interrupting runs still going after %.0fs", self.config.eof_grace_s)
        for session_id, run_id in self.runs.running():
            try:
                await self.kernel.execute(m.Interrupt(session_id=session_id, run_id=run_id), self.caller)
            except KernelError:
                self.runs.drop(run_id)  # over already, or its session is gone
        await self.runs.ended(anyio.current_time() + INTERRUPTED_GRACE_S)
