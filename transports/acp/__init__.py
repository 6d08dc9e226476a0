"""Agent Client Protocol dialect: the gateway as an editor's agent (JSON-RPC 2.0 over stdio).

Names load on first use, so importing the pure modules (``wire``, ``codec``) brings no
server with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernel import lazy_exports

_EXPORTS: dict[str, str] = {
    "AcpConfig": ".config",
    "AcpTransport": ".server",
    "EditorFiles": ".files",
    "EditorTerminal": ".terminal",
    "JsonRpcCodec": ".jsonrpc",
}

__getattr__, __all__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from .config import AcpConfig
    from .files import EditorFiles
    from .jsonrpc import JsonRpcCodec
    from .server import AcpTransport
    from .terminal import EditorTerminal
