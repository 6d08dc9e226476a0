"""Book-keeping of the long-lived connections one server holds.

hypercorn gives open WebSockets no signal at shutdown (it waits ``graceful_timeout``
and then drops them with 1011) and SSE responses never end by themselves, so the
server keeps a registry and closes them itself (WebSockets with 1001) *before*
telling hypercorn to stop.  The same registry counts WebSockets per client IP.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any, Protocol

import anyio

__all__ = ["SCOPE_KEY", "ConnectionObserver", "ConnectionTracker", "tracker_for"]

#: Scope key under which :func:`serve_asgi` exposes its tracker to the app.
SCOPE_KEY = "gateway.connections"


class ConnectionObserver(Protocol):
    """Told each long-lived connection (WebSocket, event stream) a server opens and closes."""

    def connection_opened(self, transport: str) -> None: ...

    def connection_closed(self, transport: str) -> None: ...


class _Closable(Protocol):
    async def shutdown(self) -> None:
        """End the connection because the server is going away; must not raise."""


class ConnectionTracker:
    """Open WebSockets / SSE streams of one server, and per-IP WebSocket counts."""

    def __init__(self, observer: ConnectionObserver | None = None, transport: str = "") -> None:
        self._open: set[_Closable] = set()
        # Telemetry: told each connection opened and closed, under the transport's name.
        self._observer = observer
        self._transport = transport
        self._emptied = anyio.Event()
        self._per_ip: Counter[str] = Counter()
        #: Set once shutdown started: new upgrades are refused with 503.
        self.shutting_down = False

    def __len__(self) -> int:
        return len(self._open)

    def try_acquire_ip(self, ip: str, limit: int) -> bool:
        """Reserve one connection slot for ``ip``; ``limit`` <= 0 means unlimited."""
        if limit > 0 and self._per_ip[ip] >= limit:
            return False
        self._per_ip[ip] += 1
        return True

    def release_ip(self, ip: str) -> None:
        self._per_ip[ip] -= 1
        if self._per_ip[ip] <= 0:
            del self._per_ip[ip]

    def register(self, conn: _Closable) -> None:
        if conn not in self._open and self._observer is not None:
            self._observer.connection_opened(self._transport)
        self._open.add(conn)

    def unregister(self, conn: _Closable) -> None:
        if conn in self._open and self._observer is not None:
            self._observer.connection_closed(self._transport)
        self._open.discard(conn)
        if not self._open:
            self._emptied.set()

    async def close_all(self, timeout_s: float = 1.0) -> None:
        """Ask every open connection to end, then wait (bounded) until they are gone."""
        self.shutting_down = True
        with anyio.move_on_after(timeout_s):
            async with anyio.create_task_group() as tg:
                for conn in list(self._open):
                    tg.start_soon(conn.shutdown)
            if self._open:
                self._emptied = anyio.Event()
                await self._emptied.wait()


_default_tracker = ConnectionTracker()


def tracker_for(scope: Mapping[str, Any]) -> ConnectionTracker:
    """The tracker of the server that delivered ``scope``.

    Apps served by something other than :func:`serve_asgi` share one process-wide
    tracker, so per-IP limits still hold there (only shutdown handling is lost).
    """
    tracker = scope.get(SCOPE_KEY)
    return tracker if isinstance(tracker, ConnectionTracker) else _default_tracker
