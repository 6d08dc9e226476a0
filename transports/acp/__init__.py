"""Agent Client Protocol dialect: the gateway as an editor's agent (JSON-RPC 2.0 over stdio).

Names load on first use, so importing the pure modules (``wire``, ``codec``) brings no
server with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {
    "AcpConfig": ".config",
    "AcpTransport": ".server",
    "EditorFiles": ".files",
    "JsonRpcCodec": ".wire",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'transports.acp' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from .config import AcpConfig
    from .files import EditorFiles
    from .server import AcpTransport
    from .wire import JsonRpcCodec
