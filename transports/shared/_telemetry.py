"""``GET /metrics`` for every HTTP-serving transport, and the gateway's recent log lines.

The metrics are the kernel's (its observers hold them, kernel/observe.py); this module only
serves them: open on loopback when no token is configured, behind the token when one is
(Prometheus sends it as ``Authorization: Bearer``), in Prometheus text or OpenMetrics as the
scraper's ``Accept`` asks. Scrapes are exempt from the per-IP request rate: a scraper polls.

:func:`stream_log_entries` serves the kernel's ring of recent log records as SSE, live, for the
pages that show them (the console's Logs pane, OpenFang's ``/api/logs/stream``). Records arrive
from any thread, so it polls the ring by sequence number rather than wait on an event.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import anyio

from ._http import HttpError, Request, Response
from ._router import Router
from ._sse import open_sse
from ._tracker import ConnectionObserver

__all__ = ["ConnectionObserver", "LogSource", "MetricsSource", "add_metrics_route", "stream_log_entries"]


class MetricsSource(Protocol):
    """What renders the metrics (the kernel's metrics observer)."""

    def exposition(self, accept: str | None) -> tuple[bytes, str]: ...


def add_metrics_route(router: Router, source: MetricsSource | None) -> None:
    """``GET /metrics`` on ``router`` (nothing when no metrics are installed)."""
    if source is None:
        return

    async def metrics(request: Request) -> Response:
        if not request.caller.principal.can("admin"):  # the gateway's own figures (docs/security.md)
            raise HttpError(403, "metrics need the 'admin' scope", code="forbidden")
        body, content_type = source.exposition(request.headers.get("accept"))
        return Response(200, body, content_type=content_type, headers={"cache-control": "no-store"})

    router.get("/metrics", limited=False)(metrics)


class LogSource(Protocol):
    """Recent log entries by sequence number (the kernel's ``LOG_RING``)."""

    def since(self, seq: int, limit: int | None = None) -> list[dict[str, Any]]: ...


async def stream_log_entries(
    request: Request,
    ring: LogSource,
    render: Callable[[dict[str, Any]], bytes],
    *,
    backlog: int = 200,
    poll_s: float = 0.5,
    keepalive_s: float = 15.0,
) -> None:
    """An SSE response of ``ring``'s entries (each ``render`` ed to its event, or to nothing
    to leave it out): the last ``backlog`` at once, then each new one as it is logged, until
    the client goes away."""
    async with open_sse(request, keepalive_interval_s=keepalive_s) as stream:
        seq = 0
        first = True
        while not stream.closed:
            entries = ring.since(seq, backlog if first else None)
            first = False
            if entries:
                seq = entries[-1]["seq"]
                frames = b"".join(render(entry) for entry in entries)
                if frames and not await stream.send_raw(frames):
                    return
            await anyio.sleep(poll_s)

