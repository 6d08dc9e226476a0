"""Errors of the HTTP layer itself in the port's own error shape.

A request hypercorn cannot parse (a bad chunk size, a duplicate or negative
``Content-Length``, oversized headers, a NUL in a header) never reaches the ASGI app:
h11 raises, and hypercorn answers the status h11 suggests (400, 431) with an *empty*
body. A client of a JSON dialect then has nothing to show. This module gives that answer
the body of the port's dialect — the same shaper the port's router uses for its own
errors — by wrapping hypercorn's one method that writes it. Nothing else of hypercorn's
behaviour changes: the answer still closes the connection.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from ._http import ErrorShaper, HttpError

__all__ = ["install", "shaped_config"]

_MESSAGES = {
    400: "Malformed HTTP request: the request line, a header or the body framing is invalid",
    413: "The request is too large",
    431: "The request's headers are too large",
}
_ATTRIBUTE = "gateway_error_body"
_encoder = msgspec.json.Encoder()
_installed = False


def _body(shaper: ErrorShaper, status: int) -> bytes:
    code = "too_large" if status in (413, 431) else "invalid_request"
    return _encoder.encode(shaper(HttpError(status, _MESSAGES.get(status, "Malformed HTTP request"), code=code)))


def install() -> None:
    """Wrap ``H11Protocol._send_error_response`` once per process (idempotent)."""
    global _installed
    if _installed:
        return
    import h11
    from hypercorn.events import RawData
    from hypercorn.protocol.h11 import H11Protocol

    plain: Callable[[Any, int], Awaitable[None]] = H11Protocol._send_error_response

    async def shaped(self: Any, status_code: int) -> None:
        shaper: ErrorShaper | None = self.config.__dict__.get(_ATTRIBUTE)
        if shaper is None:
            await plain(self, status_code)
            return
        body = _body(shaper, status_code)
        headers = [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), (b"connection", b"close"),
            *self.config.response_headers("h11"),
        ]
        try:  # one write, as hypercorn's own answer is: the app may be sending on this stream
            data = b"".join(self.connection.send(event) for event in (h11.Response(status_code=status_code, headers=headers), h11.Data(data=body), h11.EndOfMessage()))
        except h11.LocalProtocolError:
            return  # the connection is past answering (as hypercorn's own method gives up)
        await self.send(RawData(data=data))

    H11Protocol._send_error_response = shaped  # type: ignore[method-assign]
    _installed = True


def shaped_config(hconfig: Any, shaper: ErrorShaper | None) -> None:
    """Have the server of ``hconfig`` answer protocol errors with ``shaper``'s body."""
    if shaper is not None:
        install()
        hconfig.__dict__[_ATTRIBUTE] = shaper
