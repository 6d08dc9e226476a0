"""TCP line connections: the carrier of line-based dialects, with the gateway's policy.

:func:`serve_lines` is to a line dialect what :func:`serve_http` is to an HTTP one: it
checks the bind (loopback unless a token is set), listens, reports ``tcp://host:port``,
and hands each connection that passes the policy — at most ``max_connections_per_ip``
at once from one address, and when a token is set a first line presenting it (compared
in constant time, within ``auth_timeout_s``) — to the dialect as a
:class:`LineConnection`. That object cuts the input into lines (:class:`LineSplitter`:
never more than ``max_message_bytes`` held), carries the connection's rate limiter, and
writes in one order, never raising for a client that went away and dropping one that
stops taking output. The dialect supplies only what is its own: how a first line
presents the token, how a refusal reads, and what it says when the server stops.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Awaitable, Callable

import anyio
from anyio.abc import ByteStream, SocketAttribute, SocketStream, TaskStatus

from kernel.model import ADMIN, Caller

from ._config import ServerConfig, resolve_token, validate_bind
from ._lines import LineTooLong
from ._security import ANONYMOUS, KeyResolver, SlidingWindowLimiter, resolve_principal
from ._tracker import ConnectionTracker

__all__ = ["LineConnection", "LineServerConfig", "LineSplitter", "serve_lines"]

log = logging.getLogger("gateway.lines")

#: Whatever a stream raises once the peer is gone: the connection has ended, nothing failed.
_GONE = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError)


class LineServerConfig(ServerConfig, kw_only=True):
    """:class:`ServerConfig` plus what :func:`serve_lines` needs (a line dialect's ``Config`` base)."""

    #: Seconds a client has to present the token on its first line, when one is required.
    auth_timeout_s: float = 10.0


class LineSplitter:
    """Cuts a byte stream into lines, never holding more than ``max_line_bytes``.

    Sans-IO: bytes in arbitrary pieces go in, lines come out without their ``\\n`` (and a
    ``\\r`` before it), blank ones included. A line over the limit is dropped as it
    arrives and comes out as :class:`LineTooLong` once its newline does, so a client that
    never sends a newline cannot grow a buffer.
    """

    def __init__(self, max_line_bytes: int) -> None:
        self.max_line_bytes = max_line_bytes
        self._buffer = bytearray()
        self._dropped = 0  # bytes dropped so far of an over-long line

    def feed(self, data: bytes) -> list[bytes | LineTooLong]:
        lines: list[bytes | LineTooLong] = []
        start = 0
        while True:
            newline = data.find(b"\n", start)
            piece = data[start:] if newline < 0 else data[start:newline]
            if self._dropped:
                self._dropped += len(piece)
            elif len(self._buffer) + len(piece) > self.max_line_bytes:
                self._dropped = len(self._buffer) + len(piece)
                self._buffer.clear()
            else:
                self._buffer += piece
            if newline < 0:
                return lines
            lines.append(self._take())
            start = newline + 1

    def end(self) -> list[bytes | LineTooLong]:
        """At end of input: the last line, if it had no newline."""
        return [self._take()] if self._buffer or self._dropped else []

    def _take(self) -> bytes | LineTooLong:
        if self._dropped:
            line: bytes | LineTooLong = LineTooLong(self._dropped, self.max_line_bytes)
            self._dropped = 0
        else:
            line = bytes(self._buffer).rstrip(b"\r")
            self._buffer.clear()
        return line


class LineConnection:
    """One client of :func:`serve_lines`, past the security checks.

    Input: :meth:`receive` gives one line at a time. Output: :meth:`write` from any
    number of tasks, in one order. ``limiter`` is the connection's rate limit
    (``rate_limit_per_minute``): the dialect decides which lines count.
    """

    def __init__(
        self, stream: ByteStream, *, peer: str = "", max_line_bytes: int = 65536, rate_limit_per_minute: int = 0, send_timeout_s: float | None = None
    ) -> None:
        self.peer = peer  # the client's address, for logs
        self.limiter = SlidingWindowLimiter(rate_limit_per_minute)
        self.send_timeout_s = send_timeout_s
        #: What to say when the server stops while this connection is open (run under the
        #: write lock, like :meth:`write`); set by the dialect, None says nothing.
        self.farewell: Callable[[], str | bytes] | None = None
        #: Who is on the other end, from the first line's token or API key (``token_of``):
        #: pass it with every command and follower. Set by :func:`serve_lines`.
        self.caller: Caller = ANONYMOUS
        self.eof = False  # the client closed its side (or the socket broke)
        self.closed = False  # the client stopped taking output: nothing more is written
        self._stream = stream
        self._splitter = LineSplitter(max_line_bytes)
        self._ready: deque[bytes | LineTooLong] = deque()
        self._lock = anyio.Lock()
        self._reading = anyio.CancelScope()

    async def receive(self) -> bytes | LineTooLong | None:
        """The next input line; None once the client closed its side, or was dropped."""
        while not self._ready:
            if self.eof or self.closed:
                return None
            with anyio.CancelScope() as self._reading:
                try:
                    data = await self._stream.receive()
                except _GONE:
                    self.eof = True
                    self._ready.extend(self._splitter.end())
                else:
                    self._ready.extend(self._splitter.feed(data))
        return self._ready.popleft()

    async def write(self, render: Callable[[], str | bytes]) -> None:
        """Write what ``render()`` returns. It runs under the write lock, so output state (a
        codec's idea of where a line starts) follows the order of the bytes; it runs even
        once nobody reads, so that state stays right. A client that does not take a write
        within ``send_timeout_s`` is dropped: ``closed`` is set and :meth:`receive` ends."""
        async with self._lock:
            data = render()
            if not data or self.closed:
                return
            with anyio.move_on_after(self.send_timeout_s) as scope:
                try:
                    await self._stream.send(data.encode() if isinstance(data, str) else data)
                    return
                except _GONE:
                    pass
            if scope.cancelled_caught:
                log.info("dropping %s: it took no output for %.0fs", self.peer, self.send_timeout_s)
            self.closed = True
            self._reading.cancel()

    async def send(self, data: str | bytes) -> None:
        """:meth:`write` of a fixed text."""
        await self.write(lambda: data)


async def serve_lines(
    config: LineServerConfig,
    handler: Callable[[LineConnection], Awaitable[None]],
    *,
    token_of: Callable[[bytes], str | None],
    refusal: Callable[[str], str | bytes],
    auth_hint: str = "the first line must present the access token",
    send_timeout_s: float | None = None,
    keys: KeyResolver | None = None,
    transport: str | None = None,
    task_status: TaskStatus[str] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve a line dialect on TCP until cancelled; ``handler`` runs once per admitted connection.

    ``keys`` (the kernel): the first line may present an API key instead of the admin token,
    and once keys exist a first line is needed even without a token; the connection's
    :attr:`LineConnection.caller` is who it resolved to (``transport`` names the dialect).

    ``token_of(first_line)`` is the token a first line presents (None: not a token line);
    ``refusal(message)`` is the text that tells a client why it is turned away (too many
    connections from its address; ``unauthorized: {auth_hint}``) before its socket closes.
    ``send_timeout_s``: a client that takes no output for that long is dropped (the kernel's
    ``session.lag_grace_s``, as for WebSockets: its events are cut off after the same time).
    Raises :class:`ConfigError` before binding anything when the bind is unsafe.
    """
    token = resolve_token(config)  # config.token, else $GATEWAY_TOKEN
    validate_bind(config, token)
    tracker = ConnectionTracker()

    async def admit(stream: SocketStream) -> None:
        peer = str(stream.extra(SocketAttribute.remote_address, ("?",))[0])
        async with stream:
            if not tracker.try_acquire_ip(peer, config.max_connections_per_ip):
                with anyio.move_on_after(1):
                    await LineConnection(stream, peer=peer).send(refusal("too many connections from your address"))
                return
            conn = LineConnection(
                stream, peer=peer, max_line_bytes=config.max_message_bytes, rate_limit_per_minute=config.rate_limit_per_minute, send_timeout_s=send_timeout_s
            )
            try:
                caller = await _authenticate(conn, token, keys, token_of, config.auth_timeout_s, transport)
                if caller is not None:
                    conn.caller = caller
                    await _run(conn, handler)
                else:
                    await conn.send(refusal(f"unauthorized: {auth_hint}"))
            except Exception:  # one connection's bug must not stop the listener
                log.exception("the connection from %s failed", peer)
            finally:
                tracker.release_ip(peer)

    listener = await anyio.create_tcp_listener(local_host=config.host, local_port=config.port)
    async with listener:
        port = listener.extra(SocketAttribute.local_port)
        host = f"[{config.host}]" if ":" in config.host else config.host
        task_status.started(f"tcp://{host}:{port}")
        await listener.serve(admit)


async def _authenticate(
    conn: LineConnection, token: str | None, keys: KeyResolver | None, token_of: Callable[[bytes], str | None], timeout_s: float,
    transport: str | None,
) -> Caller | None:
    """The handshake: without a token or keys, the admin at once; else the first line (in
    time) presents the token or a key, resolved as every transport resolves credentials."""
    if token is None and (keys is None or not await keys.keys_required()):
        return Caller(principal=ADMIN, transport=transport)
    line = None
    with anyio.move_on_after(timeout_s):
        line = await conn.receive()
    presented = token_of(line) if isinstance(line, bytes) else None
    principal = await resolve_principal(presented, token, keys) if presented is not None else None
    return Caller(principal=principal, transport=transport) if principal is not None else None


async def _run(conn: LineConnection, handler: Callable[[LineConnection], Awaitable[None]]) -> None:
    """The dialect's handler; cancelled by the server stopping, it says its farewell first."""
    try:
        await handler(conn)
    finally:
        # -inf: this task is being cancelled (the server stops), whatever the exception looks like.
        if conn.farewell is not None and anyio.current_effective_deadline() == -math.inf:
            with anyio.CancelScope(shield=True), anyio.move_on_after(1):
                await conn.write(conn.farewell)
