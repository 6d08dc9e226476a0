"""Text-delta coalescing, sans-IO: a pure piece of a codec; the caller passes the clock in.

OpenFang buffers streamed text and sends one ``text_delta`` after 100 ms or once 200
characters are buffered, and always before any other event, so a fast model produces
a few frames per second rather than one per token.  Fewer socket writes is the main
throughput lever (see the architecture notes), and clients see the same text.  Any
dialect whose wire allows any split of streamed text may do the same (OpenFang's
``text_delta`` and SSE ``chunk``, Agent-CLI's ``Stream``): pure, stdlib only.

The object never sleeps: the I/O layer asks for :attr:`DeltaCoalescer.deadline`, waits
for the next kernel event at most until then, and calls :meth:`DeltaCoalescer.due`
when the wait timed out.  Tests drive it with any numbers they like.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import TypeVar

T = TypeVar("T")


class DeltaCoalescer:
    """Buffers text; hands it back when the window or the size limit is reached.

    ``window_s <= 0`` or ``max_chars <= 0`` disables coalescing: every piece of text is
    returned at once.
    """

    def __init__(self, window_s: float = 0.1, max_chars: int = 200) -> None:
        self.window_s = window_s
        self.max_chars = max_chars
        self._parts: list[str] = []
        self._size = 0
        self._deadline = math.inf

    @property
    def enabled(self) -> bool:
        return self.window_s > 0 and self.max_chars > 0

    @property
    def deadline(self) -> float | None:
        """When the buffered text must go out; None when nothing is buffered."""
        return None if not self._parts else self._deadline

    def push(self, text: str, now: float) -> str | None:
        """Add streamed text; returns text to send now, or None while it may wait."""
        if not text:
            return None
        if not self.enabled:
            return text
        if not self._parts:
            self._deadline = now + self.window_s
        self._parts.append(text)
        self._size += len(text)
        if self._size >= self.max_chars:
            return self.flush()
        return None

    def merge(self, items: Iterable[T], now: float, text: Callable[[T], str | None], wrap: Callable[[str], T]) -> list[T]:
        """``items`` in their order with the streamed text coalesced.

        ``text(item)`` is an item's streamed text, None for any other item: buffered text
        goes out before such an item. ``wrap`` turns merged text back into an item. One
        helper for every stream of the dialect (WebSocket frames, SSE events).
        """
        out: list[T] = []
        for item in items:
            piece = text(item)
            ready = self.flush() if piece is None else self.push(piece, now)
            if ready is not None:
                out.append(wrap(ready))
            if piece is None:
                out.append(item)
        return out

    def due(self, now: float) -> str | None:
        """The buffered text if its deadline has passed, else None."""
        if self._parts and now >= self._deadline:
            return self.flush()
        return None

    def flush(self) -> str | None:
        """Everything buffered (before another event, or at the end); None when empty."""
        if not self._parts:
            return None
        text = "".join(self._parts)
        self._parts.clear()
        self._size = 0
        self._deadline = math.inf
        return text
