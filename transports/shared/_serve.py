"""Run an ASGI app on a real hypercorn server, on asyncio or trio, with clean shutdown.

Why not just ``hypercorn.<backend>.serve``: only the trio worker reports the bound
address, neither closes open WebSockets at shutdown, and both default to logging and
keep-alive settings we do not want.  So we bind the socket ourselves (port 0 works and
the real port is known before serving), hand it over as ``fd://N``, always pass a
``shutdown_trigger``, and close our own long-lived connections (1001) before hypercorn
starts its graceful stop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import weakref
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
import sniffio
from anyio.abc import TaskStatus

if TYPE_CHECKING:
    from hypercorn.config import Config as HypercornConfig

from ._config import TOKEN_ENV_VAR, HttpServerConfig, ServerConfig, validate_bind
from ._http import ASGIReceive, ASGISend, ErrorShaper
from ._protocol_errors import shaped_config
from ._tracker import SCOPE_KEY, ConnectionObserver, ConnectionTracker
from ._websocket import CLOSE_HANDSHAKE_TIMEOUT_S

__all__ = ["ASGIApp", "build_hypercorn_config", "serve_asgi"]

log = logging.getLogger(__name__)

ASGIApp = Any  # Callable[[scope, receive, send], Awaitable[None]]

#: Listen backlog; hypercorn's default (100) is fine for a local gateway, made explicit.
BACKLOG = 128
#: hypercorn closes a socket (1009) above this; below it we only *report* oversize
#: messages (see ``max_message_bytes``) so a dialect can answer and keep the socket.
HARD_MESSAGE_FACTOR = 4  # bounded: a frame is buffered whole before it is reported
MIN_HARD_MESSAGE_BYTES = 1_048_576
#: A peer that takes no data for this long is dropped by the OS (see ``serve_asgi``).
DEFAULT_PEER_TIMEOUT_S = 30.0


def build_hypercorn_config(config: HttpServerConfig, bind: str, *, graceful_timeout_s: float = 1.0) -> HypercornConfig:
    """A hypercorn config with every default that matters set explicitly."""
    # Imported here: importing the package (e.g. for stdio's line carrier) should not
    # pay for hypercorn.
    from hypercorn.config import Config as HypercornConfig

    h = HypercornConfig()
    h.bind = [bind]
    h.accesslog = None  # no access log: stdout must stay clean (stdio transports share it)
    h.errorlog = logging.getLogger("hypercorn.error")  # stderr via the app's logging setup
    ws = config if isinstance(config, ServerConfig) else ServerConfig()  # no WebSockets: the defaults
    h.websocket_ping_interval = ws.ping_interval_s if ws.ping_interval_s > 0 else None
    h.websocket_max_message_size = max(ws.max_message_bytes * HARD_MESSAGE_FACTOR, MIN_HARD_MESSAGE_BYTES)
    h.backlog = BACKLOG
    h.graceful_timeout = graceful_timeout_s
    h.include_server_header = False
    return h


def _bind_socket(host: str, port: int, peer_timeout_s: float | None = None) -> socket.socket:
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, type_, proto, _, addr = infos[0]
    sock = socket.socket(family, type_, proto)
    try:
        if os.name != "nt":
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if peer_timeout_s and hasattr(socket, "TCP_USER_TIMEOUT"):
            # Inherited by every accepted connection (Linux): a peer that takes no data
            # (zero window, or nothing acknowledged) for this long is dropped by the OS.
            # The last resort for writes the server cannot interrupt: hypercorn's trio
            # worker shields them, so one client that stops reading would otherwise
            # hold its connection, and the server's shutdown, forever.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, max(1, int(peer_timeout_s * 1000)))
        # Inherited by every accepted connection: each small write (an SSE event, a frame)
        # leaves at once instead of waiting for the last one's ACK. asyncio sets it itself only
        # when the socket's proto says TCP (which getaddrinfo gives here); uvloop and trio always.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind(addr)
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


# hypercorn's WebSocket ping task outlives its socket until the next ping is due, so
# at shutdown the asyncio worker cancels those connection tasks after
# ``graceful_timeout``, and Python 3.11's asyncio.streams then logs a CancelledError
# traceback for each.  Harmless; silence exactly that record while we serve.
_quiet_loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[Any]] = weakref.WeakKeyDictionary()


def _is_cancelled_connection_callback(context: dict[str, Any]) -> bool:
    return isinstance(context.get("exception"), asyncio.CancelledError) and (
        "StreamReaderProtocol.connection_made" in str(context.get("message", ""))
    )


@contextmanager
def _quiet_cancelled_connections() -> Iterator[None]:
    if sniffio.current_async_library() != "asyncio":
        yield
        return
    loop = asyncio.get_running_loop()
    entry = _quiet_loops.get(loop)
    if entry is None:
        previous = loop.get_exception_handler()

        def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
            if _is_cancelled_connection_callback(context):
                return
            if previous is None:
                loop.default_exception_handler(context)
            else:
                previous(loop, context)

        loop.set_exception_handler(handler)
        entry = _quiet_loops[loop] = [0, previous]
    entry[0] += 1
    try:
        yield
    finally:
        entry[0] -= 1
        if entry[0] == 0:
            loop.set_exception_handler(entry[1])
            del _quiet_loops[loop]


def _with_tracker(app: ASGIApp, tracker: ConnectionTracker) -> ASGIApp:
    async def wrapped(scope: dict[str, Any], receive: ASGIReceive, send: ASGISend) -> None:
        scope[SCOPE_KEY] = tracker
        await app(scope, receive, send)

    return wrapped


async def serve_asgi(
    app: ASGIApp,
    config: HttpServerConfig,
    *,
    shutdown: anyio.Event | None = None,
    graceful_timeout_s: float = 1.0,
    peer_timeout_s: float | None = DEFAULT_PEER_TIMEOUT_S,
    error_body: ErrorShaper | None = None,
    connections: tuple[ConnectionObserver, str] | None = None,
    task_status: TaskStatus[tuple[str, int]] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` until ``shutdown`` is set (or this task is cancelled).

    Use ``host, port = await tg.start(serve_asgi, app, config)``: the bound address is
    reported once the socket is listening.  Raises :class:`ConfigError` for an unsafe
    bind.  On shutdown (event or cancellation) open WebSockets are closed with 1001 and
    SSE streams end, then hypercorn stops within ``graceful_timeout_s``.
    ``peer_timeout_s``: a client that takes no data for this long is disconnected by the
    OS (TCP_USER_TIMEOUT, where available; None leaves the OS default of many minutes).
    ``error_body``: the port's error shaper, for the requests hypercorn itself refuses
    (malformed framing or headers) — otherwise those are answered with an empty body.
    ``connections``: ``(observer, transport name)`` told each WebSocket and event stream opened
    and closed (the kernel's observers count them as ``gateway_connections``).
    """
    validate_bind(config, os.environ.get(TOKEN_ENV_VAR))
    sock = _bind_socket(config.host, config.port, peer_timeout_s)
    host, port = sock.getsockname()[:2]
    fd = sock.detach()  # hypercorn takes ownership of the descriptor
    hconfig = build_hypercorn_config(config, f"fd://{fd}", graceful_timeout_s=graceful_timeout_s)
    shaped_config(hconfig, error_body)
    tracker = ConnectionTracker(*connections) if connections is not None else ConnectionTracker()
    stop = anyio.Event()

    async def trigger() -> None:
        await stop.wait()
        await tracker.close_all(timeout_s=1.0)

    serve: Callable[..., Awaitable[None]]
    if sniffio.current_async_library() == "trio":
        from hypercorn.trio import serve as serve_trio

        serve = serve_trio
    else:
        from hypercorn.asyncio import serve as serve_asyncio

        serve = serve_asyncio

    hyper_scope = anyio.CancelScope(shield=True)  # hypercorn stops via trigger, not cancellation
    done = anyio.Event()

    async def run() -> None:
        try:
            with hyper_scope:
                await serve(_with_tracker(app, tracker), hconfig, shutdown_trigger=trigger, mode="asgi")
        finally:
            done.set()

    async def watch_event() -> None:
        if shutdown is not None:
            await shutdown.wait()
            stop.set()

    with _quiet_cancelled_connections():
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            tg.start_soon(watch_event)
            log.info("serving on http://%s:%d", host if ":" not in host else f"[{host}]", port)
            task_status.started((host, port))
            try:
                await done.wait()
            finally:
                stop.set()
                with anyio.move_on_after(graceful_timeout_s + 3.0, shield=True):
                    await done.wait()
                    await anyio.sleep(0.01)  # let cancelled-connection callbacks run while quiet
                if not done.is_set():
                    hyper_scope.cancel()
                tg.cancel_scope.cancel()


def base_url(host: str, port: int, scheme: str = "http") -> str:
    """``http://127.0.0.1:8000``, ``http://[::1]:8000``: how a transport announces itself."""
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}:{port}"


def stalled_peer_timeout_s(lag_grace_s: float) -> float:
    """When the OS drops a client that takes no data: a little after the kernel would cut
    it off for lagging and the close handshake that follows had its time (the backstop for
    socket writes that cannot be interrupted; before it, a reader that reads again still
    learns why it was cut off)."""
    return lag_grace_s + CLOSE_HANDSHAKE_TIMEOUT_S + 1.0


async def serve_http(
    app: ASGIApp,
    config: HttpServerConfig,
    *,
    lag_grace_s: float | None = None,
    error_body: ErrorShaper | None = None,
    connections: tuple[ConnectionObserver, str] | None = None,
    task_status: TaskStatus[str | None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """:func:`serve_asgi` as a transport's ``serve`` wants it: reports the base URL, and
    drops stalled clients relative to the kernel's ``session.lag_grace_s`` when given.
    ``error_body`` shapes the errors of the HTTP layer itself (see :func:`serve_asgi`)."""
    peer = stalled_peer_timeout_s(lag_grace_s) if lag_grace_s is not None else DEFAULT_PEER_TIMEOUT_S
    async with anyio.create_task_group() as tg:
        host, port = await tg.start(partial(serve_asgi, app, config, peer_timeout_s=peer, error_body=error_body, connections=connections))
        task_status.started(base_url(host, port))
