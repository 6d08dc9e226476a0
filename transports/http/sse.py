"""Batched SSE writes and run helpers shared by the native and OpenAI routes."""

from __future__ import annotations

from kernel import Kernel
from transports.shared import Request, SSEStream


async def write_frames(stream: SSEStream, frames: list[bytes]) -> bool:
    """Several ready frames in one socket write (writes, not parsing, dominate the cost).

    ``SSEStream`` has only a one-event ``send``; its internal ``_write`` takes raw
    bytes with the same locking and close detection (a public ``send_raw`` is
    requested from the shared plumbing). False once the client is gone.
    """
    if not frames:
        return not stream.closed
    return await stream._write(b"".join(frames))


async def wait_disconnect(request: Request) -> None:
    """Return when the client goes away (call only after the body was read)."""
    while not request.disconnected:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            request.disconnected = True


def interrupt_run(kernel: Kernel, session_id: str, run_id: str) -> bool:
    """Interrupt ``run_id`` if it is the session's active run (never somebody else's)."""
    session = kernel.sessions.get(session_id)
    if session is None or session.active is None or session.active.job.run_id != run_id:
        return False
    return session.interrupt()
