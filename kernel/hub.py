"""Per-session event fan-out: bounded subscriber buffers, and backpressure on the run.

Each subscriber has a buffer bounded in events and in bytes. Adjacent text deltas of
the same run merge while they wait (they are mergeable by nature, and one bigger write
beats many small ones), up to ``MAX_MERGED_CHARS`` each. :meth:`EventHub.publish` never
waits: a subscriber whose buffer is full stops receiving copies and is *behind*; once it
drains its buffer it catches up from the session's retained log.

The run does wait, through :meth:`EventHub.room`: while a subscriber is behind, the
session's next event is held back (and with it the provider's stream, whose socket
fills) until that subscriber catches up, or until it has been behind for its grace
period — then it is cut off with a final ``subscriber_lagged`` event and the run goes on
for everyone else. So a healthy reader, however fast the model, loses nothing; a reader
that stopped reading holds the run up for at most its grace, and can subscribe again
with ``after_seq`` to resume while the events are retained. Memory per subscriber is
bounded by its buffer; the retained log is bounded in events and in bytes.

A streamed run's first token is handed over (:meth:`EventHub.hand_over`): before the run parses its
next chunk, the readers it woke (with that event, or with an earlier one they have not taken
yet) take it and come back for more, their first write out. A writer whose socket write
yields to the scheduler (every write on trio) otherwise writes its first frame only after
the run has parsed whatever burst arrived meanwhile.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

import anyio
import anyio.lowlevel
import msgspec

from .model import ErrorInfo, Event, SubscriberLagged, TextDelta

#: Merging stops at this size: unbounded merging would let a stalled subscriber hold the
#: whole run's text in one delta (copied again at every publish) and never count as full.
MAX_MERGED_CHARS = 4096
#: What an event costs beyond its text, for the byte bounds (a struct and its fields).
EVENT_OVERHEAD_BYTES = 128
#: The longest a run waits for its readers to take its first token (:meth:`EventHub.hand_over`):
#: more than a first write takes on a busy server; a reader that does not come back (it does
#: something else between reads) holds the run up this long once, not more.
HAND_OVER_S = 0.01


def event_bytes(event: Event) -> int:
    text = getattr(event, "text", "")
    return EVENT_OVERHEAD_BYTES + (len(text) if isinstance(text, str) else 0)


class EventHub:
    def __init__(
        self,
        session_id: str,
        *,
        retention: int,
        buffer_size: int,
        grace_s: float,
        buffer_bytes: int = 1 << 20,
        retention_bytes: int = 1 << 20,
    ) -> None:
        self.session_id = session_id
        self.last_seq = 0
        self._log: deque[Event] = deque()
        self._log_sizes: deque[int] = deque()  # event_bytes of each retained event, computed once
        self._log_bytes = 0
        self._retention = retention
        self._retention_bytes = retention_bytes
        self._subscribers: set[Subscription] = set()
        self._behind: set[Subscription] = set()
        self._progress = anyio.Event()
        self._buffer_size = buffer_size
        self._buffer_bytes = buffer_bytes
        self._grace_s = grace_s
        self._closed = False
        #: Where every event is copied too (a cluster's shared stream), if anywhere.
        self.mirror: Callable[[Event], None] | None = None
        # During a hand-over: the woken readers not back yet, and what tells the run they are.
        self._handing: set[Subscription] = set()
        self._handed = anyio.Event()
        #: Told the ``client`` of each subscriber cut off for lagging (telemetry), if set.
        self.on_lag_cut: Callable[[str | None], None] | None = None

    def publish(self, event: Event) -> Event:
        """Stamp the next ``seq`` on the event, retain it and offer it to every subscriber —
        unless the session is closed: then there is nobody to tell (nor a stream to mirror to:
        a run that outlived its session's close was ended for its readers already)."""
        if self._closed:
            return event
        self.last_seq += 1
        stamped = msgspec.structs.replace(event, seq=self.last_seq)
        size = event_bytes(stamped)
        self._retain(stamped, size)
        if self.mirror is not None:
            self.mirror(stamped)
        for subscriber in tuple(self._subscribers):
            subscriber._offer(stamped, size)
        return stamped

    def _retain(self, event: Event, size: int) -> None:
        self._log.append(event)
        self._log_sizes.append(size)
        self._log_bytes += size
        while len(self._log) > self._retention or (self._log_bytes > self._retention_bytes and len(self._log) > 1):
            self._log.popleft()
            self._log_bytes -= self._log_sizes.popleft()

    async def hand_over(self) -> None:
        """Wait until the readers woken to take events (by the last publish, or by an earlier
        one they have not got to yet: a run's ``model_responding`` just before its first
        delta) have taken them and wait again (or went away), :data:`HAND_OVER_S` at most: a
        run's first token is written before the run goes on (see the module's docstring).
        A subscriber that was not waiting for events is not waited for."""
        self._handing = {sub for sub in self._subscribers if sub._woken}
        if not self._handing:
            return
        try:
            # Where a reader's write does not yield (asyncio's socket writes), one round is all
            # it takes: no timer then.
            await anyio.lowlevel.checkpoint()
            if self._handing:
                self._handed = anyio.Event()
                with anyio.move_on_after(HAND_OVER_S):
                    await self._handed.wait()
        finally:
            for late in self._handing:  # busy elsewhere: not waited for again until it waits
                late._woken = False
            self._handing.clear()

    def _back(self, sub: Subscription) -> None:
        """A reader waits again (or is gone): one fewer for a hand-over to wait for."""
        if sub in self._handing:
            self._handing.discard(sub)
            if not self._handing:
                self._handed.set()

    @property
    def backlogged(self) -> bool:
        """Some subscriber is behind: the next event should wait for :meth:`room`."""
        return bool(self._behind)

    async def room(self) -> None:
        """Wait until no subscriber is behind; one behind past its grace is cut off."""
        while self._behind:
            laggard = min(self._behind, key=Subscription._behind_since)
            left = laggard._behind_since() + laggard._grace_s - laggard._clock()
            if left <= 0:
                laggard._lagged()
                continue
            if self._progress.is_set():
                self._progress = anyio.Event()
            with anyio.move_on_after(left):
                await self._progress.wait()

    def _caught_up(self, sub: Subscription) -> None:
        if sub in self._behind:
            self._behind.discard(sub)
            self._progress.set()

    def since(self, seq: int) -> list[Event] | None:
        """Retained events after ``seq``; None when some of them were already dropped."""
        if seq >= self.last_seq:
            return []
        if not self._log or self._log[0].seq > seq + 1:
            return None
        return [e for e in self._log if e.seq > seq]

    def subscribe(self, after_seq: int | None = None, *, buffer_size: int | None = None, client: str | None = None) -> Subscription:
        """Events from now on, or (with ``after_seq``) the retained ones after it first.
        ``client`` names who subscribes (a transport), for the session's info."""
        sub = Subscription(self, buffer_size or self._buffer_size, self._buffer_bytes, self._grace_s)
        sub.client = client
        if after_seq is not None:
            sub._delivered_seq = after_seq
            missed = self.since(after_seq)
            if missed is None:
                sub._cut_off(f"the events after seq {after_seq} are no longer retained")
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
        self._behind.clear()
        self._progress.set()

    def _discard(self, sub: Subscription) -> None:
        self._subscribers.discard(sub)
        self._caught_up(sub)
        self._back(sub)

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)

    def clients(self) -> list[str]:
        """The named subscribers, one entry per subscription."""
        return [sub.client for sub in self._subscribers if sub.client is not None]


class Subscription:
    """An async iterator of a session's events; use as ``async with`` to unsubscribe."""

    def __init__(
        self, hub: EventHub, buffer_size: int, buffer_bytes: int, grace_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._hub = hub
        self._buffer: deque[Event] = deque()
        self._bytes = 0
        self._size = buffer_size
        self._max_bytes = buffer_bytes
        self._grace_s = grace_s
        self._clock = clock
        self._wake = anyio.Event()
        self._waiting = False
        # Woken to take events and not waiting again yet (what a hand-over waits for).
        self._woken = False
        self._overflow_since: float | None = None
        self._delivered_seq = 0
        self._closed = False
        self.client: str | None = None

    @property
    def last_seq(self) -> int:
        """The seq of the last event handed out: resume from here."""
        return self._delivered_seq

    @property
    def pending(self) -> int:
        return len(self._buffer)

    @property
    def newest_seq(self) -> int:
        """The newest event published to the session (grows as events arrive, taken or not)."""
        return self._hub.last_seq

    def _behind_since(self) -> float:
        return self._overflow_since if self._overflow_since is not None else self._clock()

    def _offer(self, event: Event, size: int) -> None:
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
                self._bytes += len(event.text)
                return
        if self._overflow_since is None and (
            not self._buffer or (len(self._buffer) < self._size and self._bytes + size <= self._max_bytes)
        ):
            self._buffer.append(event)
            self._bytes += size
            if self._waiting:
                self._waiting = False
                self._woken = True
                self._wake.set()
            return
        now = self._clock()
        if self._overflow_since is None:
            self._overflow_since = now
            self._hub._behind.add(self)
        elif now - self._overflow_since > self._grace_s:
            self._lagged()

    def _lagged(self) -> None:
        self._cut_off(f"subscriber fell behind for more than {self._grace_s:g}s")
        if self._hub.on_lag_cut is not None:
            self._hub.on_lag_cut(self.client)

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
        self._hub._back(self)

    def _take(self) -> Event:
        event = self._buffer.popleft()
        if isinstance(event, SubscriberLagged):
            return event
        self._bytes -= event_bytes(event)
        self._delivered_seq = event.seq
        return event

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Event:
        while True:
            if self._buffer:
                return self._take()
            if self._overflow_since is not None and not self._closed:
                missed = self._hub.since(self._delivered_seq)
                self._overflow_since = None
                if missed is None:
                    self._cut_off("the events this subscriber missed are no longer retained")
                else:
                    self._buffer.extend(missed)
                    self._bytes += sum(event_bytes(e) for e in missed)
                    self._hub._caught_up(self)
                continue
            if self._closed:
                raise StopAsyncIteration
            if self._wake.is_set():  # one event per wait that found nothing, not per event
                self._wake = anyio.Event()
            if self._woken:  # only a woken reader can be handed to: no set lookup per wait
                self._woken = False
                self._hub._back(self)
            self._waiting = True
            try:
                await self._wake.wait()
            finally:
                self._waiting = False

    def receive_nowait(self) -> list[Event]:
        """Everything ready now without waiting (lets a writer batch one socket write)."""
        out: list[Event] = []
        while self._buffer:
            out.append(self._take())
        return out

    def close(self) -> None:
        self._closed = True
        self._hub._discard(self)
        self._wake.set()

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
