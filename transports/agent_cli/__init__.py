"""Agent-CLI remote dialect: JSON requests and responses over a WebSocket.

The dialect template: ``wire.py`` (shapes), ``inputs.py`` and ``codec.py`` (the pure
codec), ``config.py`` (``[transports.agent_cli]``), ``server.py`` (the WebSocket
endpoint), ``plugin.py`` (registration). Names load on first use, so importing the
codec brings no server with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernel import lazy_exports

_EXPORTS = {"AgentCliCodec": ".codec", "AgentCliConfig": ".config", "AgentCliTransport": ".server"}

__getattr__, __all__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from .codec import AgentCliCodec
    from .config import AgentCliConfig
    from .server import AgentCliTransport
