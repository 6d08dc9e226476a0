"""linechat: a line-based TCP chat transport for the gateway (the plugin tutorial's example)."""

from .codec import LinechatCodec, LineSplitter
from .server import LinechatConfig, LinechatTransport

__all__ = ["LineSplitter", "LinechatCodec", "LinechatConfig", "LinechatTransport"]
