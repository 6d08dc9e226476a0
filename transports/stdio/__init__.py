"""Native stdio dialect: kernel commands and events as JSON lines on stdin/stdout.

The dialect template: ``wire.py`` (the kernel's model as the wire), ``codec.py`` (the
pure codec), ``config.py`` (``[transports.stdio]``), ``server.py`` (stdin/stdout),
``plugin.py`` (registration). Names load on first use, so importing the codec brings
no server with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernel import lazy_exports

_EXPORTS = {"StdioCodec": ".codec", "StdioConfig": ".config", "StdioTransport": ".server"}

__getattr__, __all__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from .codec import StdioCodec
    from .config import StdioConfig
    from .server import StdioTransport
