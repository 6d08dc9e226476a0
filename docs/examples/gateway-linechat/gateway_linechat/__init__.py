"""linechat: a line-based TCP chat transport for the gateway (the plugin tutorial's example).

Names load on first use (PEP 562), so importing the codec, which is pure, does not
load the server and its I/O libraries with it.
"""

from typing import TYPE_CHECKING

from kernel import lazy_exports

_WHERE = {"LinechatCodec": ".codec", "LinechatConfig": ".server", "LinechatTransport": ".server"}

__getattr__, __all__ = lazy_exports(__name__, _WHERE)

if TYPE_CHECKING:
    from .codec import LinechatCodec
    from .server import LinechatConfig, LinechatTransport
