"""Following a session's events without loss across subscriber lag.

The kernel cuts off a subscriber that stays behind too long (a slow HTTP client) with a
final ``subscriber_lagged`` event; it can resume from ``last_seq`` while the events are
retained. :class:`EventFollower` does that resubscription itself, so a slow SSE client
only sees a gap-free stream; only when the missed events are gone does the lagged
event reach the client (and its stream ends).
"""

from __future__ import annotations

from typing import Self

from kernel import Kernel, KernelError, Subscription
from kernel import model as m


class EventFollower:
    def __init__(self, kernel: Kernel, session_id: str, subscription: Subscription) -> None:
        self.kernel = kernel
        self.session_id = session_id
        self._sub: Subscription | None = subscription

    @classmethod
    async def open(cls, kernel: Kernel, session_id: str, after_seq: int | None = None) -> EventFollower:
        return cls(kernel, session_id, await kernel.subscribe(session_id, after_seq))

    async def next_batch(self) -> list[m.Event]:
        """The events ready now (at least one, waiting if needed); ``[]`` once the stream
        ended (session closed or deleted, or events lost, reported by a final
        ``subscriber_lagged``)."""
        while self._sub is not None:
            try:
                first = await self._sub.__anext__()
            except StopAsyncIteration:
                self.close()
                return []
            batch = [first, *self._sub.receive_nowait()]
            if isinstance(batch[-1], m.SubscriberLagged):
                lagged = batch.pop()
                assert isinstance(lagged, m.SubscriberLagged)
                resumed = await self._resubscribe(lagged.last_seq)
                if resumed is None:
                    batch.append(lagged)
                    self.close()
                    return batch
                batch.extend(resumed)
            if batch:
                return batch
        return []

    async def _resubscribe(self, after_seq: int) -> list[m.Event] | None:
        """Subscribe again after ``after_seq``; None when those events are no longer retained."""
        self.close()
        try:
            sub = await self.kernel.subscribe(self.session_id, after_seq)
        except KernelError:
            return None
        ready = sub.receive_nowait()
        if ready and isinstance(ready[0], m.SubscriberLagged):
            sub.close()
            return None
        self._sub = sub
        return ready

    def close(self) -> None:
        if self._sub is not None:
            self._sub.close()
            self._sub = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
