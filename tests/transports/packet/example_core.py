"""Stands in for the document's ``from core import ...`` line in the example tests.

The real ``BackendServer`` with the gateway's own plugins (plus the memory tools,
in case the plugin list does not carry them yet), whose model is either the
offline echo model (``UPSTREAM = None``) or the fake OpenAI server at ``UPSTREAM``,
which stands in for ``https://api.deepseek.com`` the way a DNS override would.
"""

from __future__ import annotations

from typing import Any

import msgspec

from kernel import Kernel
from kernel.settings import Settings
from plugins.tools.memory import MEMORY_TOOLS
from transports import packet
from transports.packet import BackendClient, Packet, PacketResponse, PacketType

__all__ = ["BackendClient", "BackendServer", "Packet", "PacketResponse", "PacketType"]

UPSTREAM: str | None = None
EVENT_LOOP = "asyncio"
servers: list[packet.BackendServer] = []


def _redirect(factory: Any, base_url: str) -> Any:
    def make(settings: Settings) -> Any:
        redirected = msgspec.convert(msgspec.to_builtins(settings), Settings)
        redirected.provider.openai.base_url = base_url
        return factory(redirected)

    return make


def _kernel(settings: Settings) -> Kernel:
    if UPSTREAM is None:
        settings.provider.default = "echo"
    kernel = packet.default_kernel_factory(settings)
    assert {t.name for t in MEMORY_TOOLS} <= set(kernel.tools), "memory tools are a built-in plugin"
    if UPSTREAM is not None:
        kernel.provider_factories["openai"] = _redirect(kernel.provider_factories["openai"], UPSTREAM)
    return kernel


class BackendServer(packet.BackendServer):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, backend=EVENT_LOOP, kernel_factory=_kernel, **kwargs)
        servers.append(self)
