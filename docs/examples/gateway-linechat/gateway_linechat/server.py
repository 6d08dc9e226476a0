"""The linechat transport: a TCP listener that binds the codec to sockets.

Each connection gets its own kernel session. Two tasks share a socket: the
reader turns lines into commands and runs them, the forwarder writes the
session's events. One lock orders their writes, and with them the codec's idea
of where a line starts. The security policy is the gateway's own, from
``transports.shared``: loopback unless a token is set, a constant-time token
check, per-address and per-minute limits.
"""

from __future__ import annotations

import logging
from collections import deque

import anyio
from anyio.abc import SocketAttribute, SocketStream, TaskStatus

from kernel import Kernel, KernelError, Subscription
from kernel import model as m
from kernel.session import Session
from transports.shared import ServerConfig, SlidingWindowLimiter, resolve_token, token_matches, validate_bind

from .codec import Authenticate, Failure, Greeting, Invalid, LinechatCodec, LineSplitter, Output, TooLong

log = logging.getLogger("gateway.linechat")


class LinechatConfig(ServerConfig, kw_only=True, forbid_unknown_fields=True):
    """``[transports.linechat]``: the shared server settings, plus these."""

    port: int = 7070
    #: The agent (id or name) that new sessions talk to; None: the default agent.
    agent: str | None = None
    #: Seconds a client has to send ``/token`` when a token is required.
    auth_timeout_s: float = 10.0
    #: After a client closes its side, how long its running answer may still take.
    eof_grace_s: float = 30.0


class LinechatTransport:
    name = "linechat"
    description = "line-based TCP chat: a line is a prompt, /commands steer (nc 127.0.0.1 7070)"
    Config = LinechatConfig

    def __init__(self) -> None:
        self._per_ip: dict[str, int] = {}

    async def serve(
        self, kernel: Kernel, config: LinechatConfig, *, task_status: TaskStatus[str | None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        token = resolve_token(config)  # config.token, else $GATEWAY_TOKEN
        validate_bind(config, token)  # refuses a non-loopback host without a token
        kernel.agent(config.agent)  # an unknown agent fails now, not on every connection
        listener = await anyio.create_tcp_listener(local_host=config.host, local_port=config.port)
        async with listener:
            port = listener.extra(SocketAttribute.local_port)
            host = f"[{config.host}]" if ":" in config.host else config.host
            task_status.started(f"tcp://{host}:{port}")

            async def handle(stream: SocketStream) -> None:
                await self._accept(kernel, config, token, stream)

            await listener.serve(handle)

    async def _accept(self, kernel: Kernel, config: LinechatConfig, token: str | None, stream: SocketStream) -> None:
        """One connection, start to end. Nothing may escape: it would stop the listener."""
        ip = str(stream.extra(SocketAttribute.remote_address)[0])
        counted = False
        async with stream:
            try:
                if config.max_connections_per_ip and self._per_ip.get(ip, 0) >= config.max_connections_per_ip:
                    await stream.send(b"! too many connections from your address\n\n")
                    return
                self._per_ip[ip] = self._per_ip.get(ip, 0) + 1
                counted = True
                await _Connection(kernel, config, token, stream).run()
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                log.debug("linechat: %s went away", ip)
            except Exception:
                log.exception("linechat: the connection from %s failed", ip)
            finally:
                if counted:
                    self._per_ip[ip] -= 1
                    if not self._per_ip[ip]:
                        del self._per_ip[ip]


class _Connection:
    def __init__(self, kernel: Kernel, config: LinechatConfig, token: str | None, stream: SocketStream) -> None:
        self.kernel = kernel
        self.config = config
        self.token = token
        self.stream = stream
        self.codec = LinechatCodec()
        self.splitter = LineSplitter(config.max_message_bytes)
        self.ready: deque[bytes | TooLong] = deque()
        self.limiter = SlidingWindowLimiter(config.rate_limit_per_minute)
        self.lock = anyio.Lock()
        self.eof = False  # the client closed its side (or the socket broke)
        self.closed = False  # writing failed: nobody is listening any more
        self.unwritten = False  # the forwarder holds events it has not written yet
        self.events: Subscription  # the session's events, from run() on

    async def run(self) -> None:
        if self.token is not None and not await self.authenticate():
            return
        session = await self.kernel.session(None, self.config.agent)
        self.codec.session_id = session.id
        info = self.kernel.agent_info(session.agent)
        log.info("linechat: new session %s", session.id)
        self.events = await self.kernel.subscribe(session.id)
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.forward, session.id)
            try:
                await self.send([Greeting(session.id, info.name, info.model)])
                while (line := await self.next_line()) is not None:
                    await self.handle(line)
                await self.drain(session)
            except anyio.get_cancelled_exc_class():
                # The gateway is stopping: say so before the socket closes.
                with anyio.CancelScope(shield=True), anyio.move_on_after(1):
                    await self.send([Failure("gateway shutting down", ends_response=False)])
                raise
            tg.cancel_scope.cancel()

    async def authenticate(self) -> bool:
        line = None
        with anyio.move_on_after(self.config.auth_timeout_s):
            line = await self.next_line()
        given = self.codec.decode(line) if line is not None else None
        if isinstance(given, Authenticate) and token_matches(given.token, self.token):
            return True
        await self.send([self.codec.failure(None, "unauthorized: the first line must be /token TOKEN")])
        return False

    async def next_line(self) -> bytes | TooLong | None:
        """The next input line; None once the client has closed its side."""
        while not self.ready:
            if self.eof or self.closed:
                return None
            try:
                data = await self.stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                self.eof = True
                self.ready.extend(self.splitter.end())
            else:
                self.ready.extend(self.splitter.feed(data))
        return self.ready.popleft()

    async def handle(self, line: bytes | TooLong) -> None:
        command = self.codec.decode(line)
        if command is None or isinstance(command, Authenticate):
            return  # a blank line, or /token when already in
        if isinstance(command, Invalid):
            await self.send([self.codec.failure(command, command.message)])
            return
        wait_s = self.limiter.check()
        if wait_s:
            await self.send([self.codec.failure(command, f"rate limit reached: wait {wait_s:.1f}s")])
            return
        try:
            reply: Output = await self.kernel.execute(command)
        except KernelError as exc:
            reply = self.codec.failure(command, exc.message)
        await self.send([reply])

    async def forward(self, session_id: str) -> None:
        """Write the session's events, as many per write as are ready."""
        while True:
            lagged: int | None = None
            async with self.events:
                async for event in self.events:
                    self.unwritten = True
                    batch = [event, *self.events.receive_nowait()]
                    if isinstance(batch[-1], m.SubscriberLagged):
                        lagged = batch.pop().last_seq
                    await self.send(batch)
                    self.unwritten = False
            if lagged is None:
                return
            # This client read too slowly and was cut off: resume where it stopped.
            self.events = await self.kernel.subscribe(session_id, after_seq=lagged)

    async def send(self, messages: list[Output]) -> None:
        async with self.lock:
            text = "".join(self.codec.render(message) for message in messages)
            if not text or self.closed:
                return
            try:
                await self.stream.send(text.encode())
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self.closed = True

    async def drain(self, session: Session) -> None:
        """The client closed its side: let its answer finish (bounded), then flush it."""
        with anyio.move_on_after(self.config.eof_grace_s):
            while session.busy and not self.closed:
                await anyio.sleep(0.05)
        with anyio.move_on_after(5):
            while session.busy:  # queued prompts too: nobody will read them
                session.interrupt()
                await anyio.sleep(0.05)
        with anyio.move_on_after(5):
            while self.events.pending or self.unwritten:
                await anyio.sleep(0.01)
