"""Native stdio dialect: kernel commands and events as JSON lines on stdin/stdout.

The dialect template: ``wire.py`` (the kernel's model as the wire), ``codec.py`` (the
pure codec), ``config.py`` (``[transports.stdio]``), ``server.py`` (stdin/stdout),
``plugin.py`` (registration). Names load on first use, so importing the codec brings
no server with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {"StdioCodec": ".codec", "StdioConfig": ".config", "StdioTransport": ".server"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from .codec import StdioCodec
    from .config import StdioConfig
    from .server import StdioTransport
