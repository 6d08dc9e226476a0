"""``GET /metrics`` for every HTTP-serving transport, and the gateway's recent log lines.

The metrics are the kernel's (its observers hold them, kernel/observe.py); this module only
serves them: open on loopback when no token is configured, behind the token when one is
(Prometheus sends it as ``Authorization: Bearer``), in Prometheus text or OpenMetrics as the
scraper's ``Accept`` asks. Scrapes are exempt from the per-IP request rate: a scraper polls.

:class:`LogRing` is a logging handler keeping the last records (bounded), for the pages that
show them live (the console's Logs pane, OpenFang's ``/api/logs/stream``). Records arrive from
any thread, so readers poll it by sequence number (``since``) rather than wait on an event.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import anyio

from ._http import Request, Response
from ._router import Router
from ._sse import open_sse
from ._tracker import ConnectionObserver

__all__ = ["LOG_RING", "ConnectionObserver", "LogRing", "MetricsSource", "add_metrics_route", "iso_time", "stream_log_entries"]


class MetricsSource(Protocol):
    """What renders the metrics (the kernel's metrics observer)."""

    def exposition(self, accept: str | None) -> tuple[bytes, str]: ...


def add_metrics_route(router: Router, source: MetricsSource | None) -> None:
    """``GET /metrics`` on ``router`` (nothing when no metrics are installed)."""
    if source is None:
        return

    async def metrics(request: Request) -> Response:
        body, content_type = source.exposition(request.headers.get("accept"))
        return Response(200, body, content_type=content_type, headers={"cache-control": "no-store"})

    router.get("/metrics", limited=False)(metrics)


LogFields = Callable[[logging.LogRecord], dict[str, Any]]


def basic_fields(record: logging.LogRecord) -> dict[str, Any]:
    return {"ts": record.created, "level": record.levelname, "logger": record.name, "msg": record.getMessage()}


class LogRing(logging.Handler):
    """The last ``capacity`` log records as plain data, each with a sequence number (from 1).

    ``fields`` turns a record into its entry — the gateway gives the same function its JSON
    log lines use, so the pages show exactly what the logs say.
    """

    def __init__(self, capacity: int = 1000, fields: LogFields = basic_fields) -> None:
        super().__init__()
        self.fields = fields
        self._entries: deque[dict[str, Any]] = deque(maxlen=capacity)
        self._seq = 0
        self._guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            entry = self.fields(record)
        except Exception:
            self.handleError(record)
            return
        with self._guard:
            self._seq += 1
            entry["seq"] = self._seq
            self._entries.append(entry)

    @property
    def last_seq(self) -> int:
        return self._seq

    def since(self, seq: int, limit: int | None = None) -> list[dict[str, Any]]:
        """The entries after ``seq``, oldest first (the newest ``limit`` of them if given)."""
        with self._guard:
            entries = [entry for entry in self._entries if entry["seq"] > seq]
        return entries[-limit:] if limit is not None else entries


#: The process's ring: the gateway's logging setup installs it as a handler.
LOG_RING = LogRing()


async def stream_log_entries(
    request: Request,
    ring: LogRing,
    render: Callable[[dict[str, Any]], bytes],
    *,
    backlog: int = 200,
    poll_s: float = 0.5,
    keepalive_s: float = 15.0,
    keep: Callable[[dict[str, Any]], bool] = lambda entry: True,
) -> None:
    """An SSE response of ``ring``'s entries (each ``render`` ed to one event): the last
    ``backlog`` at once, then each new one as it is logged, until the client goes away."""
    async with open_sse(request, keepalive_interval_s=keepalive_s) as stream:
        seq = 0
        first = True
        while not stream.closed:
            entries = ring.since(seq, backlog if first else None)
            first = False
            if entries:
                seq = entries[-1]["seq"]
                frames = b"".join(render(entry) for entry in _kept(entries, keep))
                if frames and not await stream.send_raw(frames):
                    return
            await anyio.sleep(poll_s)


def _kept(entries: list[dict[str, Any]], keep: Callable[[dict[str, Any]], bool]) -> Iterator[dict[str, Any]]:
    return (entry for entry in entries if keep(entry))


def iso_time(ts: float) -> str:
    """``2026-12-01T22:13:27.123Z``: how log entries tell their time on the web pages."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts % 1 * 1000):03d}Z"
