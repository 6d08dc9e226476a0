"""OpenFang dialect: WebSocket ``/api/agents/{id}/ws``, REST ``/api/...`` and SSE.

Real OpenFang clients (dashboard, Python/JS SDKs, desktop apps) work against it
unchanged; see ``docs/openfang.md``. Names load on first use, so importing the codec
(``transports.openfang.codec``) brings no server with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernel import lazy_exports

_WHERE: dict[str, str] = {
    "Connection": ".codec",
    "DecodeContext": ".codec",
    "Outbound": ".codec",
    "TurnEncoder": ".codec",
    "decode_frame": ".codec",
    "OpenFangConfig": ".config",
    "OpenFangTransport": ".server",
    "build_app": ".server",
}

__getattr__, __all__ = lazy_exports(__name__, _WHERE)

if TYPE_CHECKING:
    from .codec import Connection, DecodeContext, Outbound, TurnEncoder, decode_frame
    from .config import OpenFangConfig
    from .server import OpenFangTransport, build_app
