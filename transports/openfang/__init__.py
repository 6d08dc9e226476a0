"""OpenFang dialect: WebSocket ``/api/agents/{id}/ws``, REST ``/api/...`` and SSE.

Real OpenFang clients (dashboard, Python/JS SDKs, desktop apps) work against it
unchanged; see ``docs/openfang.md``. Names load on first use, so importing the codec
(``transports.openfang.codec``) brings no server with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_WHERE: dict[str, str] = {
    "Connection": ".codec",
    "DecodeContext": ".codec",
    "Outbound": ".codec",
    "TurnEncoder": ".codec",
    "decode_frame": ".codec",
    "DeltaCoalescer": ".coalesce",
    "OpenFangConfig": ".config",
    "OpenFangTransport": ".server",
    "build_app": ".server",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'transports.openfang' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from .coalesce import DeltaCoalescer
    from .codec import Connection, DecodeContext, Outbound, TurnEncoder, decode_frame
    from .config import OpenFangConfig
    from .server import OpenFangTransport, build_app
