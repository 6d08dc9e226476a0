"""What a log line says, as data — for the JSON log format and the live log views alike.

:func:`log_fields` turns a record into ``ts`` (ISO 8601, UTC), ``level``, ``logger``, ``msg``
and, where known, ``transport``, ``session_id``, ``run_id``, ``agent`` and ``trace_id`` — from
the run whose task logged (:func:`~kernel.observe.current_run`) or the record's ``extra`` —
and ``exc`` (a traceback). :class:`LogRing` keeps the last records as those fields, so what the
console's Logs pane and OpenFang's logs page show is exactly what the log lines say.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Any

from .observe import current_run

#: ``extra={...}`` keys a record may carry itself (a transport's own log lines).
CONTEXT_KEYS = ("transport", "session_id", "run_id", "agent", "trace_id")


def iso_ts(created: float) -> str:
    """``2026-12-01T22:13:27.123Z``."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{int(created % 1 * 1000):03d}Z"


def log_fields(record: logging.LogRecord) -> dict[str, Any]:
    fields: dict[str, Any] = {"ts": iso_ts(record.created), "level": record.levelname, "logger": record.name, "msg": record.getMessage()}
    run = current_run()
    if run is not None:
        fields.update(transport=run.transport, session_id=run.session_id, run_id=run.run_id, agent=run.agent)
        if run.trace_id is not None:
            fields["trace_id"] = run.trace_id
    for key in CONTEXT_KEYS:
        value = record.__dict__.get(key)
        if isinstance(value, str) and value:
            fields[key] = value
    if record.exc_info:
        fields["exc"] = logging.Formatter().formatException(record.exc_info)
    return fields


class LogRing(logging.Handler):
    """The last ``capacity`` records as :func:`log_fields`, each with a ``seq`` (from 1).

    Records arrive from any thread (the store's writer logs too), so readers poll by
    sequence number (:meth:`since`) instead of waiting on an event of one event loop.
    """

    def __init__(self, capacity: int = 1000) -> None:
        super().__init__()
        self._entries: deque[dict[str, Any]] = deque(maxlen=capacity)
        self._seq = 0
        self._guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            entry = log_fields(record)
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


#: The process's ring, installed as a logging handler by the gateway's logging setup.
LOG_RING = LogRing()
