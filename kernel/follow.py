"""Following a session's events across subscriber lag: one piece for every transport.

The hub cuts off a subscriber that stays behind too long (a slow client) with a final
``subscriber_lagged`` event; it can resume after ``last_seq`` while the events are
retained. A :class:`Follower` does that resubscription itself, so its reader sees a
gap-free stream. Only when the missed events are gone does the ``subscriber_lagged``
event reach the reader, last in its batch, saying where the gap starts; following
then goes on from now, or ends with ``stop_on_loss`` (a stream that must not have a
hole, such as an SSE stream resumable by ``Last-Event-ID``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Self

import anyio

from .hub import Subscription
from .model import Event, KernelError, SubscriberLagged

if TYPE_CHECKING:
    from .kernel import Kernel


class Follower:
    def __init__(self, kernel: Kernel, session_id: str, subscription: Subscription, *, stop_on_loss: bool = False) -> None:
        self.kernel = kernel
        self.session_id = session_id
        self.stop_on_loss = stop_on_loss
        self.closed = False
        self._sub = subscription

    @classmethod
    async def open(cls, kernel: Kernel, session_id: str, after_seq: int | None = None, *, stop_on_loss: bool = False) -> Follower:
        """Follow ``session_id`` from now, or after ``after_seq`` (KernelError when unknown)."""
        return cls(kernel, session_id, await kernel.subscribe(session_id, after_seq), stop_on_loss=stop_on_loss)

    @property
    def pending(self) -> int:
        """Events waiting to be taken (a writer drains them before it stops)."""
        return 0 if self.closed else self._sub.pending

    async def next_batch(self, deadline: float | None = None) -> list[Event]:
        """Every event ready now, waiting for the first until ``deadline`` at most.

        ``[]`` on the deadline, or once following ended (then :attr:`closed` is set:
        the session was closed or deleted, or events were lost with ``stop_on_loss``).
        """
        while not self.closed:
            # Ready events are taken without a cancel scope: its cost per event showed in
            # the benchmarks; only an empty feed waits.
            batch = self._sub.receive_nowait()
            if not batch:
                first: Event | None = None
                with anyio.move_on_at(math.inf if deadline is None else deadline):
                    try:
                        first = await self._sub.__anext__()
                    except StopAsyncIteration:
                        self.close()
                        return []
                if first is None:
                    return []
                batch = [first, *self._sub.receive_nowait()]
            last = batch[-1]
            if isinstance(last, SubscriberLagged):
                batch[-1:] = await self._resume(last)
            if batch:
                return batch
        return []

    async def _resume(self, lagged: SubscriberLagged) -> list[Event]:
        """The retained events after the last one delivered, or ``[lagged]`` when they are gone."""
        self._sub.close()
        try:
            self._sub = await self.kernel.subscribe(self.session_id, after_seq=lagged.last_seq)
            ready = self._sub.receive_nowait()
            if not (ready and isinstance(ready[0], SubscriberLagged)):
                return ready
            self._sub.close()
            if self.stop_on_loss:
                self.closed = True
            else:
                self._sub = await self.kernel.subscribe(self.session_id)
            return [ready[0]]
        except KernelError:  # the session is gone
            self.closed = True
            return []

    def close(self) -> None:
        self.closed = True
        self._sub.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
