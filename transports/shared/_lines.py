"""The stdio carrier: newline-delimited messages over file descriptors.

Shared by the native stdio dialect and ACP (one reader/writer, two codecs).
The descriptors are put in non-blocking mode and awaited with anyio's
``wait_readable``/``wait_writable``, so reading stdin never blocks the event
loop on either backend and one ``os.write`` can carry many lines at once.
"""

from __future__ import annotations

import errno
import os
from collections.abc import AsyncIterator, Callable

import anyio
import msgspec


class LineTooLong(msgspec.Struct, frozen=True):
    """An input line over the limit; it was skipped up to its newline."""

    size: int
    limit: int


class LineReader:
    """Yields complete lines (without the newline) or :class:`LineTooLong`."""

    def __init__(self, fd: int, *, max_line_bytes: int = 1_048_576, chunk_bytes: int = 65_536) -> None:
        self.fd = fd
        self.max_line_bytes = max_line_bytes
        self.chunk_bytes = chunk_bytes
        self._restore = _set_nonblocking(fd)

    async def _read(self) -> bytes:
        while True:
            try:
                return os.read(self.fd, self.chunk_bytes)
            except BlockingIOError:
                await anyio.wait_readable(self.fd)
            except OSError as exc:
                if exc.errno in (errno.EBADF, errno.EPIPE, errno.ECONNRESET):
                    return b""
                raise

    async def __aiter__(self) -> AsyncIterator[bytes | LineTooLong]:
        buffer = bytearray()
        skipping = 0
        try:
            while True:
                data = await self._read()
                if not data:
                    if skipping:
                        yield LineTooLong(skipping, self.max_line_bytes)
                    elif buffer.strip():
                        yield bytes(buffer)
                    return
                start = 0
                while True:
                    newline = data.find(b"\n", start)
                    piece = data[start:] if newline < 0 else data[start:newline]
                    if skipping:
                        skipping += len(piece)
                    elif len(buffer) + len(piece) > self.max_line_bytes:
                        skipping = len(buffer) + len(piece)
                        buffer.clear()
                    else:
                        buffer += piece
                    if newline < 0:
                        break
                    if skipping:
                        yield LineTooLong(skipping, self.max_line_bytes)
                        skipping = 0
                    else:
                        line = bytes(buffer).rstrip(b"\r")
                        buffer.clear()
                        if line.strip():
                            yield line
                    start = newline + 1
        finally:
            self._restore()


class LineWriter:
    """Writes whole lines; concurrent writers never interleave within a line."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._lock = anyio.Lock(fast_acquire=True)
        self._restore = _set_nonblocking(fd)
        self.closed = False

    async def write_lines(self, lines: list[bytes]) -> None:
        """Write several lines with as few system calls as the pipe allows."""
        if not lines:
            return
        payload = memoryview(b"\n".join(lines) + b"\n")
        async with self._lock:
            while payload:
                if self.closed:
                    raise BrokenPipeError("the output was closed")
                try:
                    written = os.write(self.fd, payload)
                    payload = payload[written:]
                except BlockingIOError:
                    await anyio.wait_writable(self.fd)
                except (BrokenPipeError, ConnectionResetError):
                    self.closed = True
                    raise

    async def flush(self) -> None:
        """Wait until a write in progress (from any task) has completed."""
        async with self._lock:
            pass

    async def write_line(self, line: bytes) -> None:
        await self.write_lines([line])

    def close(self) -> None:
        self._restore()


def _set_nonblocking(fd: int) -> Callable[[], None]:
    """Switch ``fd`` to non-blocking and return a function that restores it."""
    try:
        was_blocking = os.get_blocking(fd)
        os.set_blocking(fd, False)
    except OSError:
        return lambda: None

    def restore() -> None:
        try:
            os.set_blocking(fd, was_blocking)
        except OSError:
            pass

    return restore
