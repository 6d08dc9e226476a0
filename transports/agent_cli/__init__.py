"""Agent-CLI remote dialect: JSON requests and responses over a WebSocket."""

from .codec import AgentCliCodec
from .server import AgentCliConfig, AgentCliTransport

__all__ = ["AgentCliCodec", "AgentCliConfig", "AgentCliTransport"]
