"""Agent Client Protocol dialect: the gateway as an editor's agent (JSON-RPC 2.0 over stdio)."""

from .codec import JsonRpcCodec
from .files import EditorFiles
from .server import AcpTransport
from .state import AcpConfig

__all__ = ["AcpConfig", "AcpTransport", "EditorFiles", "JsonRpcCodec"]
