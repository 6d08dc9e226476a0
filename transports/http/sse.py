"""Batched SSE writes and run helpers shared by the native and OpenAI routes."""

from __future__ import annotations

from kernel import Kernel, KernelError
from transports.shared import Request, SSEStream


async def write_frames(stream: SSEStream, frames: list[bytes]) -> bool:
    """Several ready frames in one socket write (writes, not parsing, dominate the cost).
    False once the client is gone."""
    return await stream.send_raw(b"".join(frames))


async def wait_disconnect(request: Request) -> None:
    """Return when the client goes away (call only after the body was read)."""
    while not request.disconnected:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            request.disconnected = True


def interrupt_run(kernel: Kernel, session_id: str, run_id: str) -> bool:
    """Interrupt ``run_id`` if it is the session's active run (never somebody else's)."""
    session = kernel.sessions.get(session_id)
    try:
        return session is not None and session.interrupt(run_id=run_id)
    except KernelError:  # that run is not the one running
        return False
