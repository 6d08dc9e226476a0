"""Small helpers for kernel tests: collect a run's events; a store that stalls."""

from __future__ import annotations

from collections.abc import Sequence

import anyio

from kernel import Kernel, SQLiteStore, Subscription
from kernel import model as m


async def run_events(sub: Subscription, run_id: str | None = None, timeout_s: float = 5.0) -> list[m.Event]:
    """Events up to and including the end of ``run_id`` (or of the first run)."""
    out: list[m.Event] = []
    with anyio.fail_after(timeout_s):
        async for event in sub:
            out.append(event)
            if isinstance(event, m.RUN_END_EVENTS) and (run_id is None or event.run_id == run_id):
                return out
    raise AssertionError(f"stream ended before the run finished: {out}")


async def next_of(sub: Subscription, kind: type, timeout_s: float = 5.0) -> m.Event:
    with anyio.fail_after(timeout_s):
        async for event in sub:
            if isinstance(event, kind):
                return event
    raise AssertionError(f"no {kind.__name__}")


async def prompt(kernel: Kernel, session_id: str, text: str, **kw: object) -> m.Accepted:
    reply = await kernel.execute(m.Prompt(session_id=session_id, text=text, **kw))  # type: ignore[arg-type]
    assert isinstance(reply, m.Accepted)
    return reply


def kinds(events: list[m.Event]) -> list[str]:
    return [e.__struct_config__.tag for e in events]  # type: ignore[attr-defined]


class StallingStore(SQLiteStore):
    """A real SQLite store whose write of a run's answer waits until ``release`` is set."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.stalled = anyio.Event()
        self.release = anyio.Event()

    async def append_messages(self, session_id: str, messages: Sequence[m.Message], cap: int, fence: int | None = None) -> None:
        if any(message.role == "assistant" for message in messages):
            self.stalled.set()
            await self.release.wait()
        await super().append_messages(session_id, messages, cap, fence)
