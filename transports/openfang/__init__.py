"""OpenFang dialect: WebSocket ``/api/agents/{id}/ws``, REST ``/api/...`` and SSE.

Real OpenFang clients (dashboard, Python/JS SDKs, desktop apps) work against it
unchanged; see ``docs/openfang.md``.
"""

from .coalesce import DeltaCoalescer
from .codec import DecodeContext, Outbound, TurnEncoder, decode_frame
from .config import OpenFangConfig
from .server import OpenFangTransport, build_app

__all__ = [
    "DecodeContext",
    "DeltaCoalescer",
    "OpenFangConfig",
    "OpenFangTransport",
    "Outbound",
    "TurnEncoder",
    "build_app",
    "decode_frame",
]
