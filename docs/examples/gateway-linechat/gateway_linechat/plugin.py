"""The module the ``gateway`` entry point names: it registers the transport.

Importing it must stay cheap and side-effect free: the gateway imports every
installed plugin at start-up, even for ``gateway transports``.
"""

from collections.abc import Callable
from typing import Any

from plugins.hookspecs import hookimpl

from .server import LinechatTransport


@hookimpl
def gateway_register_transports(register: Callable[[str, Any], None]) -> None:
    register(LinechatTransport.name, LinechatTransport)
