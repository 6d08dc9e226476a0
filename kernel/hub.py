"""Per-session event fan-out with bounded subscriber buffers.

Publishing never waits: a run must not stall because one watcher is slow. Each
subscriber has a bounded buffer. Adjacent text deltas of the same run merge while
they wait (they are mergeable by nature, and one bigger write beats many small
ones), up to ``MAX_MERGED_CHARS`` each. A subscriber whose buffer is full stops
receiving copies; once it drains its buffer it catches up from the session's
retained log. If it stays full past a grace period, or the events it missed are no
longer retained, it receives a final ``subscriber_lagged`` event and can subscribe
again with ``after_seq``. Memory per subscriber is therefore bounded by its buffer
size (events, merged deltas at most ``MAX_MERGED_CHARS`` long).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

import anyio
import msgspec

from .model import ErrorInfo, Event, SubscriberLagged, TextDelta

#: Merging stops at this size: unbounded merging would let a stalled subscriber hold the
#: whole run's text in one delta (copied again at every publish) and never count as full.
MAX_MERGED_CHARS = 4096


class EventHub:
    def __init__(self, session_id: str, *, retention: int, buffer_size: int, grace_s: float) -> None:
        self.session_id = session_id
        self.last_seq = 0
        self._log: deque[Event] = deque(maxlen=retention)
        self._subscribers: set[Subscription] = set()
        self._buffer_size = buffer_size
        self._grace_s = grace_s
        self._closed = False

    def publish(self, event: Event) -> Event:
        """Stamp the next ``seq`` on the event, retain it and offer it to every subscriber."""
        self.last_seq += 1
        stamped = msgspec.structs.replace(event, seq=self.last_seq)
        self._log.append(stamped)
        for subscriber in tuple(self._subscribers):
            subscriber._offer(stamped)
        return stamped

    def since(self, seq: int) -> list[Event] | None:
        """Retained events after ``seq``; None when some of them were already dropped."""
        if seq >= self.last_seq:
            return []
        if not self._log or self._log[0].seq > seq + 1:
            return None
        return [e for e in self._log if e.seq > seq]

    def subscribe(self, after_seq: int | None = None, *, buffer_size: int | None = None) -> Subscription:
        """Events from now on, or (with ``after_seq``) the retained ones after it first."""
        sub = Subscription(self, buffer_size or self._buffer_size, self._grace_s)
        if after_seq is not None:
            sub._delivered_seq = after_seq
            missed = self.since(after_seq)
            if missed is None:
                sub._cut_off("the events after seq %d are no longer retained" % after_seq)
            else:
                sub._buffer.extend(missed)
        else:
            sub._delivered_seq = self.last_seq
        if not self._closed:
            self._subscribers.add(sub)
        else:
            sub._closed = True
        return sub

    def close(self) -> None:
        self._closed = True
        for subscriber in tuple(self._subscribers):
            subscriber._finish()
        self._subscribers.clear()

    def _discard(self, sub: Subscription) -> None:
        self._subscribers.discard(sub)

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)


class Subscription:
    """An async iterator of a session's events; use as ``async with`` to unsubscribe."""

    def __init__(self, hub: EventHub, buffer_size: int, grace_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._hub = hub
        self._buffer: deque[Event] = deque()
        self._size = buffer_size
        self._grace_s = grace_s
        self._clock = clock
        self._wake = anyio.Event()
        self._overflow_since: float | None = None
        self._delivered_seq = 0
        self._closed = False

    @property
    def last_seq(self) -> int:
        """The seq of the last event handed out: resume from here."""
        return self._delivered_seq

    @property
    def pending(self) -> int:
        return len(self._buffer)

    def _offer(self, event: Event) -> None:
        if self._closed:
            return
        if self._overflow_since is None and self._buffer:
            last = self._buffer[-1]
            if (
                isinstance(event, TextDelta)
                and isinstance(last, TextDelta)
                and last.run_id == event.run_id
                and len(last.text) + len(event.text) <= MAX_MERGED_CHARS
            ):
                self._buffer[-1] = msgspec.structs.replace(last, text=last.text + event.text, seq=event.seq)
                return
        if self._overflow_since is None and len(self._buffer) < self._size:
            self._buffer.append(event)
            self._wake.set()
            return
        now = self._clock()
        if self._overflow_since is None:
            self._overflow_since = now
        elif now - self._overflow_since > self._grace_s:
            self._cut_off(f"subscriber fell behind for more than {self._grace_s:g}s")

    def _cut_off(self, reason: str) -> None:
        self._buffer.append(
            SubscriberLagged(
                session_id=self._hub.session_id,
                seq=self._hub.last_seq,
                last_seq=self._delivered_seq if not self._buffer else self._buffer[-1].seq,
                error=ErrorInfo(code="rate_limited", message=reason),
            )
        )
        self._closed = True
        self._hub._discard(self)
        self._wake.set()

    def _finish(self) -> None:
        self._closed = True
        self._wake.set()

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Event:
        while True:
            if self._buffer:
                event = self._buffer.popleft()
                if not isinstance(event, SubscriberLagged):
                    self._delivered_seq = event.seq
                return event
            if self._overflow_since is not None and not self._closed:
                missed = self._hub.since(self._delivered_seq)
                self._overflow_since = None
                if missed is None:
                    self._cut_off("the events this subscriber missed are no longer retained")
                else:
                    self._buffer.extend(missed)
                continue
            if self._closed:
                raise StopAsyncIteration
            self._wake = anyio.Event()
            await self._wake.wait()

    def receive_nowait(self) -> list[Event]:
        """Everything ready now without waiting (lets a writer batch one socket write)."""
        out: list[Event] = []
        while self._buffer:
            event = self._buffer.popleft()
            if not isinstance(event, SubscriberLagged):
                self._delivered_seq = event.seq
            out.append(event)
        return out

    def close(self) -> None:
        self._closed = True
        self._hub._discard(self)
        self._wake.set()

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
