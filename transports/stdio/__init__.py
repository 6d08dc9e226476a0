"""Native stdio dialect: kernel commands and events as JSON lines on stdin/stdout."""

from .codec import StdioCodec
from .server import StdioConfig, StdioTransport

__all__ = ["StdioCodec", "StdioConfig", "StdioTransport"]
