"""linechat: a line-based TCP chat transport for the gateway (the plugin tutorial's example).

Names load on first use (PEP 562), so importing the codec, which is pure, does not
load the server and its I/O libraries with it.
"""

import importlib
from typing import TYPE_CHECKING, Any

_WHERE = {"LinechatCodec": ".codec", "LinechatConfig": ".server", "LinechatTransport": ".server"}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'gateway_linechat' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name], __name__), name)


if TYPE_CHECKING:
    from .codec import LinechatCodec
    from .server import LinechatConfig, LinechatTransport
