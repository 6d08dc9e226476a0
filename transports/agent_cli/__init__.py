"""Agent-CLI remote dialect: JSON requests and responses over a WebSocket.

The dialect template: ``wire.py`` (shapes), ``inputs.py`` and ``codec.py`` (the pure
codec), ``config.py`` (``[transports.agent_cli]``), ``server.py`` (the WebSocket
endpoint), ``plugin.py`` (registration). Names load on first use, so importing the
codec brings no server with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {"AgentCliCodec": ".codec", "AgentCliConfig": ".config", "AgentCliTransport": ".server"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from .codec import AgentCliCodec
    from .config import AgentCliConfig
    from .server import AgentCliTransport
