"""The linechat transport: binds the codec to TCP connections and to the kernel's seam.

The carrier and the security policy are the gateway's own (``transports.shared``):
:func:`serve_lines` checks the bind, limits connections per address, does the token
handshake, and hands over each connection as lines in and ordered writes out. What is
left here is the pump. Each connection gets its own session (``OpenSession``); a
writer task follows the session's events (``Follower``: gap-free across subscriber
lag) and writes them; the reader turns lines into commands for ``kernel.execute``.
Both write through the connection, whose lock keeps the codec's idea of where a line
starts in step with the bytes. At end of input the session's work may finish (within
``eof_grace_s``), then ``CloseSession`` ends what is left and, with it, the writer.
"""

import anyio

from kernel import Follower, Kernel, KernelError
from kernel import model as m
from transports.shared import LineConnection, LineServerConfig, LineTooLong, serve_lines

from .codec import Authenticate, Failure, Greeting, LinechatCodec, Output, presented_token


class LinechatConfig(LineServerConfig, kw_only=True, forbid_unknown_fields=True):
    """``[transports.linechat]``: the shared settings of a line server (``auth_timeout_s``
    on top of every network transport's), plus these."""

    port: int = 7070
    #: The agent (id or name) that new sessions talk to; None: the default agent.
    agent: str | None = None
    #: Who answers tool approvals and turn limits: "ask" the client (/approve, /deny),
    #: "approve", "reject", or a table (allow_tools, allow_categories, turn_limit, ...).
    tool_approval: m.ApprovalSetting = "ask"
    #: After a client closes its side, how long its running answer may still take.
    eof_grace_s: float = 30.0


class LinechatTransport:
    name = "linechat"
    description = "line-based TCP chat: a line is a prompt, /commands steer (nc 127.0.0.1 7070)"
    Config = LinechatConfig

    async def serve(self, kernel: Kernel, config: LinechatConfig, *, task_status: anyio.abc.TaskStatus[str | None] = anyio.TASK_STATUS_IGNORED) -> None:
        kernel.agent(config.agent)  # an unknown agent fails now, not on every connection
        await serve_lines(
            config, lambda conn: _Connection(kernel, config, conn).run(), task_status=task_status,
            token_of=presented_token, auth_hint="the first line must be /token TOKEN", refusal=lambda text: LinechatCodec().render(Failure(text)),
            send_timeout_s=kernel.settings.session.lag_grace_s,  # a client that stops reading is dropped
            keys=kernel, transport=self.name,  # the first line may present an API key: conn.caller is who it is
        )


class _Connection:
    def __init__(self, kernel: Kernel, config: LinechatConfig, conn: LineConnection) -> None:
        self.kernel, self.config, self.conn = kernel, config, conn

    async def run(self) -> None:
        session = (await self.kernel.execute(m.OpenSession(agent_id=self.config.agent), self.conn.caller)).session
        self.codec = LinechatCodec(session.session_id, m.approval_policy(self.config.tool_approval, reason="this linechat server does not allow it"))
        self.conn.farewell = lambda: self.codec.render(Failure("gateway shutting down", ends_response=False))
        # Following starts before any prompt can run, so no event is missed.
        async with await Follower.open(self.kernel, session.session_id, client="linechat", caller=self.conn.caller) as events, anyio.create_task_group() as tg:
            tg.start_soon(self.write_events, events)
            await self.send(Greeting(session.session_id, self.kernel.agent(session.agent_id).name, session.model))
            while (line := await self.conn.receive()) is not None:
                await self.handle(line)
            await self.drain(session.session_id)

    async def handle(self, line: bytes | LineTooLong) -> None:
        command = self.codec.decode(line) if isinstance(line, bytes) else self.codec.too_long(line.size, line.limit)
        if command is None or isinstance(command, Authenticate):
            return  # a blank line, or /token when already in
        if wait_s := self.conn.limiter.check():
            return await self.send(self.codec.failure(command, f"rate limit reached: wait {wait_s:.1f}s"))
        try:  # a line that makes no sense is answered by its own failure
            reply: Output = command if isinstance(command, Failure) else await self.kernel.execute(command, self.conn.caller)
        except KernelError as exc:
            reply = self.codec.failure(command, exc.message)
        await self.send(reply)

    async def write_events(self, follower: Follower) -> None:
        """The session's events, as many per write as are ready, until the session is closed."""
        while batch := await follower.next_batch():
            await self.send(*batch)

    async def send(self, *messages: Output) -> None:
        await self.conn.write(lambda: "".join(map(self.codec.render, messages)))

    async def drain(self, session_id: str) -> None:
        """The client closed its side: what it asked for may still finish (bounded). Then the
        session is closed, which interrupts what is left and ends the writer once it wrote the
        session's last events."""
        async with await Follower.open(self.kernel, session_id, caller=self.conn.caller) as events:  # before asking: no end is missed
            with anyio.move_on_after(self.config.eof_grace_s):
                while not self.conn.closed and await self.busy(session_id):
                    await events.next_batch()
        await self.kernel.execute(m.CloseSession(session_id=session_id), self.conn.caller)

    async def busy(self, session_id: str) -> bool:
        """Whether the session has a run going or waiting."""
        return (await self.kernel.execute(m.GetSession(session_id=session_id), self.conn.caller)).session.busy
