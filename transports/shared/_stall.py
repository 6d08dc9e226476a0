"""A send under way and the send timeout: when a watcher must look, and whether the client stalled.

Sans-IO (times are anyio's clock, given by the caller). The SSE stream's client watch and the
WebSocket's watch of sends both keep a writer's send timeout from beside it, instead of a cancel
scope with a deadline on every send (5-8 µs a send on asyncio and trio); this is their one rule.
"""

from __future__ import annotations

import math


class SendTimer:
    """The send timeout (``limit``, None: none) and the start of the send under way (``since``)."""

    __slots__ = ("limit", "since")

    def __init__(self) -> None:
        self.limit: float | None = None
        self.since: float | None = None

    def next_look(self, now: float, idle_due: float = math.inf) -> float:
        """When to look next: when the send under way outlives the limit; while none is under
        way, within one limit too (a send that starts meanwhile is then seen in time), or at
        ``idle_due`` (the caller's own business while idle) if that comes first."""
        if self.limit is None:
            return idle_due
        if self.since is not None:
            return self.since + self.limit
        return min(idle_due, now + self.limit)

    def stalled(self, now: float) -> bool:
        """Whether the send under way has outlived the limit: the client stopped reading."""
        return self.limit is not None and self.since is not None and now - self.since >= self.limit
