"""A WebSocket session over an ASGI ``websocket`` scope, with the security policy built in.

Life of a session: the router creates it; the transport calls :meth:`WebSocket.accept`
with its own checks (the built-in ones — shutdown 503, auth 401, Origin 403, per-IP
limit 429 — run first), which either rejects the upgrade with a real HTTP status and
a JSON body or accepts it; then :meth:`WebSocket.receive` reports what the client
did.  Policy violations (too large, rate limited, not UTF-8, idle) are *reported*, not
acted upon, because dialects differ: OpenFang answers with an error frame and keeps
the socket open.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal

import anyio
import msgspec

from kernel.model import Caller

from ._config import ServerConfig
from ._http import (
    ASGIReceive,
    ASGISend,
    ErrorShaper,
    Headers,
    HttpError,
    client_host,
    default_error_body,
    parse_query,
)
from ._security import ANONYMOUS, KeyResolver, SlidingWindowLimiter, origin_allowed, resolve_caller
from ._stall import SendTimer
from ._tracker import tracker_for

__all__ = [
    "CLOSE_GOING_AWAY",
    "CLOSE_HANDSHAKE_TIMEOUT_S",
    "CLOSE_INTERNAL_ERROR",
    "CLOSE_NORMAL",
    "CLOSE_POLICY_VIOLATION",
    "CLOSE_TOO_BIG",
    "WebSocket",
    "WebSocketCheck",
    "WsClosed",
    "WsEvent",
    "WsIdle",
    "WsInvalidFrame",
    "WsRateLimited",
    "WsText",
    "WsTooLarge",
]

log = logging.getLogger(__name__)

CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001  # server shutdown
CLOSE_POLICY_VIOLATION = 1008
CLOSE_TOO_BIG = 1009
CLOSE_INTERNAL_ERROR = 1011

#: How long a closing connection is kept for the peer's close reply. The close frame may
#: wait behind data a reader has not taken yet (one cut off for reading too slowly): one
#: that reads again within this time gets that data and then the close frame with its code
#: and reason, instead of a dropped connection (1006). A server that stops waits less.
CLOSE_HANDSHAKE_TIMEOUT_S = 5.0
#: The close of a stopping server: its clients get this long for the close handshake.
_SHUTDOWN_CLOSE_S = 1.0

_encoder = msgspec.json.Encoder()


class WsText(msgspec.Struct, frozen=True):
    """A message from the client (binary frames holding UTF-8 arrive decoded here too)."""

    text: str


class WsTooLarge(msgspec.Struct, frozen=True):
    """A message over ``max_message_bytes`` was dropped; the socket is still open."""

    size_bytes: int
    limit_bytes: int


class WsRateLimited(msgspec.Struct, frozen=True):
    """A message over the per-connection rate was dropped; the socket is still open."""

    limit_per_minute: int
    retry_after_s: float


class WsInvalidFrame(msgspec.Struct, frozen=True):
    """A binary frame that is not UTF-8 was dropped; the socket is still open."""

    reason: str


class WsIdle(msgspec.Struct, frozen=True):
    """No traffic either way for ``idle_s``; the transport usually says so and closes."""

    idle_s: float


class WsClosed(msgspec.Struct, frozen=True):
    """The connection is over (peer closed, or we closed it); nothing more will come."""

    code: int
    reason: str = ""


WsEvent = WsText | WsTooLarge | WsRateLimited | WsInvalidFrame | WsIdle | WsClosed

#: A transport check run before accepting; raise :class:`HttpError` to reject.
WebSocketCheck = Callable[["WebSocket"], Awaitable[None] | None]

_State = Literal["handshake", "connected", "closed"]


class WebSocket:
    """One WebSocket connection.  Sends are serialised by one lock, so any task of its handler
    may send (the watch of sends cancels the handler when one stalls)."""

    def __init__(
        self,
        scope: dict[str, Any],
        receive: ASGIReceive,
        send: ASGISend,
        *,
        config: ServerConfig | None = None,
        token: str | None = None,
        require_auth: bool = True,
        path_params: Mapping[str, str] | None = None,
        error_body: ErrorShaper = default_error_body,
        keys: KeyResolver | None = None,
        transport: str | None = None,
    ) -> None:
        self.scope = scope
        self._receive = receive
        self._send = send
        self.config = config if config is not None else ServerConfig()
        self._token = token if require_auth else None
        self._require_auth = require_auth
        self._keys = keys
        self._transport = transport
        #: Who opened the connection, resolved from the upgrade request's credentials and
        #: ``traceparent`` at :meth:`accept`: pass it with every command and subscription.
        self.caller: Caller = ANONYMOUS
        self.error_body = error_body
        self.path: str = scope["path"]
        self.path_params: dict[str, str] = dict(path_params or {})
        self.query: dict[str, str] = parse_query(scope.get("query_string", b""))
        self.headers = Headers(scope.get("headers", ()))
        self.client_host = client_host(scope)
        #: Free slot for the transport (agent, session...) so checks can pass data on.
        self.state: dict[str, Any] = {}
        self._tracker = tracker_for(scope)
        self._state: _State = "handshake"
        self._connect_seen = False
        self._holds_ip_slot = False
        self._closing = False
        self._close_code: int | None = None
        self._close_reason = ""
        self._closed_event = anyio.Event()
        self._close_wait_s = _SHUTDOWN_CLOSE_S
        # One reader of the ASGI receive channel at a time: the handler's, or close()'s
        # wait for the peer's reply to the close frame.
        self._recv_lock = anyio.Lock()
        # fast_acquire: no scheduling round per frame when nobody else is sending.
        self._send_lock = anyio.Lock(fast_acquire=True)
        self._recv_scope: anyio.CancelScope | None = None
        self._limiter = SlidingWindowLimiter(self.config.rate_limit_per_minute, 60.0)
        self._last_activity = anyio.current_time()
        # The send timeout and the send under way, for the watch of sends.
        self._sends = SendTimer()
        # The watch of sends (:meth:`watch_sends`) runs: a send makes no deadline of its own.
        self._sends_watched = False
        # The watch's wait for its next look, moved when the send timeout is set.
        self._looking: anyio.CancelScope | None = None
        # Why a send that outlived the send timeout closes the connection (1008), once one did.
        self._stalled: str | None = None

    @property
    def send_timeout_s(self) -> float | None:
        """A frame the client does not take within this many seconds means it stopped reading:
        the socket is closed with 1008 instead of waiting for it forever. None waits as long
        as it takes. Streaming transports set it (the kernel's ``session.lag_grace_s``: the
        same "fell behind too long" rule)."""
        return self._sends.limit

    @send_timeout_s.setter
    def send_timeout_s(self, limit: float | None) -> None:
        self._sends.limit = limit
        if self._looking is not None:
            self._looking.deadline = self._sends.next_look(anyio.current_time())

    # ------------------------------------------------------------------ state
    @property
    def accepted(self) -> bool:
        return self._state != "handshake"

    @property
    def closed(self) -> bool:
        """True once the peer is gone or we closed: producers should stop sending."""
        return self._state == "closed" or self._closing

    @property
    def close_code(self) -> int | None:
        return self._close_code

    async def wait_closed(self) -> None:
        await self._closed_event.wait()

    # -------------------------------------------------------------- handshake
    async def _await_connect(self) -> None:
        if not self._connect_seen:
            message = await self._receive()
            self._connect_seen = True
            if message["type"] != "websocket.connect":  # pragma: no cover - ASGI guarantees it
                raise RuntimeError(f"expected websocket.connect, got {message['type']}")

    def _builtin_checks(self) -> None:
        if self._tracker.shutting_down:
            raise HttpError(503, "Server is shutting down", code="unavailable")
        if not origin_allowed(self.headers.get("origin"), self.config.allowed_origins):
            raise HttpError(403, "Origin not allowed", code="forbidden")
        if not self._tracker.try_acquire_ip(self.client_host, self.config.max_connections_per_ip):
            raise HttpError(429, "Too many connections from this address", code="rate_limited")
        self._holds_ip_slot = True

    async def _authenticate(self) -> None:
        """The upgrade request's credentials -> :attr:`caller` (the shared resolver); 401 if refused."""
        if not self._require_auth:
            return
        caller = await resolve_caller(self.headers, self.query, token=self._token, keys=self._keys, transport=self._transport)
        if caller is None:
            raise HttpError(401, "Missing or invalid token", code="unauthorized", headers={"www-authenticate": "Bearer"})
        self.caller = caller

    async def accept(
        self,
        checks: Sequence[WebSocketCheck] = (),
        *,
        subprotocol: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> bool:
        """Run the check pipeline, then accept.  Returns False if the upgrade was rejected.

        Built-in checks first (503 shutting down, 401 auth, 403 Origin, 429 per-IP), then
        ``checks`` in order; the first :class:`HttpError` becomes the HTTP answer.
        """
        await self._await_connect()
        try:
            await self._authenticate()
            self._builtin_checks()
            for check in checks:
                result = check(self)
                if result is not None:
                    await result
        except HttpError as error:
            await self.reject(error)
            return False
        message: dict[str, Any] = {"type": "websocket.accept", "subprotocol": subprotocol}
        if headers:
            message["headers"] = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
        await self._send(message)
        self._state = "connected"
        self._last_activity = anyio.current_time()
        self._tracker.register(self)
        return True

    async def reject(self, error: HttpError) -> None:
        """Refuse the upgrade with ``error.status`` and a JSON body in the transport's shape."""
        if self._state != "handshake":
            raise RuntimeError("cannot reject a WebSocket that was already accepted")
        await self._await_connect()
        self._release_slot()
        self._state = "closed"
        self._close_code = error.status
        self._closed_event.set()
        if "websocket.http.response" not in self.scope.get("extensions", {}):
            # Server without the extension: a close before accept becomes a bare 403.
            await self._send({"type": "websocket.close", "code": CLOSE_POLICY_VIOLATION})
            return
        body = _encoder.encode(self.error_body(error))
        raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in error.headers.items()]
        raw += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await self._send({"type": "websocket.http.response.start", "status": error.status, "headers": raw})
        await self._send({"type": "websocket.http.response.body", "body": body, "more_body": False})

    # ---------------------------------------------------------------- receive
    def _classify(self, message: dict[str, Any]) -> WsEvent:
        text: str | None = message.get("text")
        if text is None:
            data: bytes = message.get("bytes") or b""
            size = len(data)
        else:
            data = b""
            size = len(text) if len(text) * 4 <= self.config.max_message_bytes else len(text.encode("utf-8"))
        retry = self._limiter.check()
        if retry:
            return WsRateLimited(self.config.rate_limit_per_minute, round(retry, 3))
        if size > self.config.max_message_bytes:
            return WsTooLarge(size, self.config.max_message_bytes)
        if text is None:
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                return WsInvalidFrame("Binary frame is not valid UTF-8")
        return WsText(text)

    async def receive(self) -> WsEvent:
        """The next thing that happened on the connection (see the ``Ws*`` result types)."""
        if self._state == "handshake":
            raise RuntimeError("accept() the WebSocket before receiving")
        idle_s = self.config.idle_timeout_s
        while not self.closed:
            deadline = self._last_activity + idle_s if idle_s > 0 else math.inf
            if anyio.current_time() >= deadline:
                self._last_activity = anyio.current_time()  # report once per idle period
                return WsIdle(idle_s)
            with anyio.CancelScope(deadline=deadline) as scope:
                self._recv_scope = scope
                try:
                    async with self._recv_lock:
                        message = await self._receive()
                finally:
                    self._recv_scope = None
            if scope.cancelled_caught:
                continue  # idle deadline (maybe pushed back by sends) or local close
            if message["type"] == "websocket.disconnect":
                self._mark_closed(int(message.get("code", 1005)), message.get("reason") or "")
                break
            if message["type"] == "websocket.receive":
                self._last_activity = anyio.current_time()
                return self._classify(message)
        await self._wait_local_close()
        return WsClosed(self._close_code or 1006, self._close_reason)

    async def _wait_local_close(self) -> None:
        # close() from another task may still be sending its close frame or waiting for the
        # peer's reply; if the handler returned first, hypercorn would end the connection
        # (1011, or a dropped socket) before the peer had our code.
        if self._closing and not self._closed_event.is_set():
            with anyio.move_on_after(self._close_wait_s + 0.5, shield=True):
                await self._closed_event.wait()

    async def __aiter__(self) -> AsyncIterator[WsEvent]:
        """Every event until the connection closes (the final :class:`WsClosed` is not yielded)."""
        while True:
            event = await self.receive()
            if isinstance(event, WsClosed):
                return
            yield event

    # ------------------------------------------------------------------- send
    async def send_text(self, text: str) -> bool:
        """Send one text frame.  Returns False (and sends nothing) once the socket is closed."""
        return await self.send_texts((text,))

    async def send_texts(self, texts: Sequence[str]) -> bool:
        """Send several frames that are ready together: one lock, one look at the clock.

        Per-frame overhead, not parsing, dominates streaming; a writer with a batch of
        events sends it here. False once the socket is closed (the rest is dropped).
        A send the client does not take within the send timeout is ended by the watch of
        sends (:meth:`watch_sends`), not by a deadline of its own: a cancel scope with a
        deadline per send cost 5-8 µs on asyncio and trio (a send carries one frame or a batch).
        """
        if self._state != "connected" or self._closing:
            return False
        limit = self.send_timeout_s
        async with self._send_lock:
            if self._state != "connected" or self._closing:
                return False
            started = self._sends.since = anyio.current_time()
            try:
                if limit is None or self._sends_watched:
                    for text in texts:
                        await self._send({"type": "websocket.send", "text": text})
                else:
                    with anyio.move_on_after(limit):
                        for text in texts:
                            await self._send({"type": "websocket.send", "text": text})
            except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._mark_closed(1006, "connection lost")
                return False
            finally:
                self._sends.since = None
            now = anyio.current_time()
            # Measured, not only cancelled: hypercorn's trio worker shields its socket
            # writes, so there a stalled write is noticed when it finally completes.
            stalled = limit is not None and now - started >= limit
        if stalled:
            assert limit is not None
            await self.close(CLOSE_POLICY_VIOLATION, self._too_slow(limit))
            return False
        self._last_activity = now
        return True

    def _too_slow(self, limit: float) -> str:
        """A send outlived ``limit``: logged; the reason the socket is closed with."""
        log.warning("websocket from %s did not take a message for %gs; closing it", self.client_host, limit)
        return f"client too slow: a message was not read within {limit:g}s"

    async def watch_sends(self, handler: anyio.CancelScope) -> None:
        """Run beside the connection's handler (the router does): a send the client does not
        take within :attr:`send_timeout_s` cancels ``handler`` — the stalled send with it, where
        the server lets a send be cancelled — and the connection then closes with 1008
        (:meth:`__aexit__`). One task per connection instead of a deadline per send."""
        self._sends_watched = True
        try:
            while not (self.closed and self._sends.since is None):
                with anyio.CancelScope(deadline=self._sends.next_look(anyio.current_time())) as self._looking:
                    await anyio.sleep_forever()
                self._looking = None
                if self._sends.stalled(anyio.current_time()):
                    assert self._sends.limit is not None
                    self._stalled = self._too_slow(self._sends.limit)
                    handler.cancel()
                    return
        finally:
            self._sends_watched = False

    async def send_json(self, obj: Any) -> bool:
        """Encode ``obj`` with msgspec and send it as one text frame."""
        return await self.send_text(_encoder.encode(obj).decode("utf-8"))

    async def close(self, code: int = CLOSE_NORMAL, reason: str = "", *, timeout_s: float = CLOSE_HANDSHAKE_TIMEOUT_S) -> None:
        """Close with ``code``; idempotent, bounded in time and safe to call while cancelled.

        The close handshake is waited for, up to ``timeout_s``: the close frame is sent
        (behind whatever data is still queued for the peer), then the peer's reply is read.
        Until then the connection stays open, so a peer that was slow to read still gets
        the data sent before and then the code and reason.
        """
        if self._state == "handshake":
            await self.reject(HttpError(403, reason or "WebSocket closed before accept"))
            return
        if self.closed:
            return
        self._closing = True
        self._close_wait_s = timeout_s
        if self._recv_scope is not None:
            self._recv_scope.cancel()
        with anyio.move_on_after(timeout_s, shield=True):
            async with self._send_lock:
                try:
                    await self._send({"type": "websocket.close", "code": code, "reason": reason})
                except Exception:  # the transport is already gone; nothing to tell the peer
                    log.debug("websocket close failed", exc_info=True)
                else:
                    await self._await_peer_close()
        self._mark_closed(code, reason)

    async def _await_peer_close(self) -> None:
        """Read (and drop: the connection is closing) what the peer sends until its side is
        closed too — its reply to our close frame, or the end of the connection."""
        async with self._recv_lock:
            while self._state != "closed":
                message = await self._receive()
                if message["type"] == "websocket.disconnect":
                    return

    async def shutdown(self) -> None:
        """Server is stopping: close with 1001 (called by the connection tracker)."""
        await self.close(CLOSE_GOING_AWAY, "Server shutting down", timeout_s=_SHUTDOWN_CLOSE_S)

    def _mark_closed(self, code: int, reason: str) -> None:
        if self._state != "closed":
            self._state = "closed"
            self._close_code = code
            self._close_reason = reason
            self._closed_event.set()
        self._tracker.unregister(self)
        self._release_slot()

    def _release_slot(self) -> None:
        if self._holds_ip_slot:
            self._holds_ip_slot = False
            self._tracker.release_ip(self.client_host)

    # ------------------------------------------------------- context manager
    async def __aenter__(self) -> WebSocket:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Always leave the connection finished: closed (1000, or 1011 on error) or rejected."""
        await self._wait_local_close()
        if self._state == "handshake":
            with anyio.move_on_after(1.0, shield=True):
                status = 500 if exc is not None else 403
                await self.reject(HttpError(status, "WebSocket not accepted"))
        elif self._stalled is not None:
            await self.close(CLOSE_POLICY_VIOLATION, self._stalled)
        elif isinstance(exc, anyio.get_cancelled_exc_class()):
            await self.close(CLOSE_GOING_AWAY, "Server shutting down", timeout_s=_SHUTDOWN_CLOSE_S)
        elif exc is not None:
            await self.close(CLOSE_INTERNAL_ERROR, "Internal error")
        else:
            await self.close(CLOSE_NORMAL)
        self._mark_closed(self._close_code or CLOSE_NORMAL, self._close_reason)

    def __repr__(self) -> str:
        return f"<WebSocket {self.path} {self._state} from {self.client_host}>"
