"""A request's head and its body in one write, on the upstream hop's connections.

Why: httpcore2 writes an HTTP/1.1 request as two writes, the head and then the body, and
every write is a checkpoint of the event loop (anyio's ``send`` yields before it writes; trio's
``send_all`` after). In the gateway the route and the session have work ready at that moment,
so the body left up to 1 ms after the head on this machine kind (issue 27, ninth pass), while the
upstream had already parsed the head and waited for the body. Held until its body follows, the
head leaves with it: the upstream starts on the whole request at once.

:class:`HeadHold` is the rule, without I/O; :class:`OneWriteBackend` puts it in front of every
connection a pool opens (plain TCP, Unix sockets, and the TLS stream a connection upgrades to).
Only a head that announces a body by ``Content-Length`` (at most :data:`HOLD_LIMIT` bytes) is
held; everything else (a GET, a chunked body, the body bytes themselves) is written at once.
A request that fails between its head and its body closes its connection (httpcore2 does), so
a held head never outlives its request.
"""

# ruff: noqa: ASYNC109  (the ``timeout`` parameters are httpcore2's network interface, passed on)

from __future__ import annotations

import re
import ssl
from collections.abc import Iterable
from typing import Any

from httpcore2 import AsyncNetworkBackend, AsyncNetworkStream

#: The largest body a head waits for: past it, joining the two costs more than the extra write.
HOLD_LIMIT = 1 << 20

#: A request line, a head's end, and its Content-Length (h11 writes one ``Content-Length``).
_REQUEST_LINE = re.compile(rb"[A-Z]+ [^ \r\n]+ HTTP/1\.1\r\n")
_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*(\d+)[ \t]*\r\n", re.IGNORECASE)


class HeadHold:
    """Which bytes to write now, for one connection's writes in order.

    ``feed(data)`` returns the bytes to write (``None``: hold them). A request head announcing
    ``n`` body bytes is held until ``n`` bytes followed; then head and body come back joined.
    """

    __slots__ = ("_held", "_missing")

    def __init__(self) -> None:
        self._held: list[bytes] = []
        self._missing = 0

    def feed(self, data: bytes) -> bytes | None:
        if self._held:
            self._held.append(data)
            self._missing -= len(data)
            if self._missing > 0:
                return None
            joined = b"".join(self._held)
            self._held.clear()
            self._missing = 0
            return joined
        announced = _announced_body(data)
        if 0 < announced <= HOLD_LIMIT:
            self._held.append(data)
            self._missing = announced
            return None
        return data


def _announced_body(data: bytes) -> int:
    """The body length a request head announces (0: not a head, or no body announced)."""
    if not data.endswith(b"\r\n\r\n") or _REQUEST_LINE.match(data) is None:
        return 0
    found = _CONTENT_LENGTH.search(data)
    return int(found.group(1)) if found is not None else 0


class OneWriteStream(AsyncNetworkStream):
    """A connection whose request heads wait for their bodies (see :class:`HeadHold`)."""

    def __init__(self, stream: AsyncNetworkStream) -> None:
        self._stream = stream
        self._hold = HeadHold()

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        ready = self._hold.feed(buffer) if buffer else buffer
        if ready is not None:
            await self._stream.write(ready, timeout)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._stream.read(max_bytes, timeout)

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None) -> AsyncNetworkStream:
        return OneWriteStream(await self._stream.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class OneWriteBackend(AsyncNetworkBackend):
    """A pool's network backend whose connections write a request's head with its body."""

    def __init__(self, backend: AsyncNetworkBackend) -> None:
        self.backend = backend

    async def connect_tcp(
        self, host: str, port: int, timeout: float | None = None, local_address: str | None = None, socket_options: Iterable[Any] | None = None
    ) -> AsyncNetworkStream:
        return OneWriteStream(await self.backend.connect_tcp(host, port, timeout, local_address, socket_options))

    async def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None) -> AsyncNetworkStream:
        return OneWriteStream(await self.backend.connect_unix_socket(path, timeout, socket_options))

    async def sleep(self, seconds: float) -> None:
        await self.backend.sleep(seconds)
