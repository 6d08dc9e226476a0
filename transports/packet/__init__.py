"""Packet dialect: the in-process queue API of the document's ``BackendServer``.

A synchronous Python program (a TUI, a Flask app) runs the gateway kernel in a
backend thread and talks to it with packets::

    from transports.packet import BackendServer, BackendClient

    server = BackendServer(db_path="graph_memory.db")
    server.start(api_key="sk-...")
    client = BackendClient(server)
    print(client.process_message("hello")["data"]["content"])
    server.shutdown()

Inside ``gateway serve --transport packet``, :func:`connect` gives such code a
handle on the running gateway's kernel instead. See ``docs/packet.md``.

Names load on first use, so importing the codec loads no event loop. The embedding
API (``BackendServer``, ``default_kernel_factory``) is a composition root and lives in
:mod:`gateway.embedded`; it is re-exported here, the one place a transport names the
gateway, because this is where the document's programs import it from.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernel import lazy_exports

_MODULES: dict[str, tuple[str, ...]] = {
    "transports.packet.client": ("BackendClient",),
    "transports.packet.config": ("PacketConfig",),
    "transports.packet.server": ("ConnectedServer", "PacketTransport", "connect"),
    "transports.packet.settingsfile": ("SettingsFileError",),
    "transports.packet.wire": ("Packet", "PacketResponse", "PacketType"),
    "gateway.embedded": ("BackendServer", "default_kernel_factory"),
}
_WHERE = {name: module for module, names in _MODULES.items() for name in names}

__getattr__, __all__ = lazy_exports(__name__, _WHERE)

if TYPE_CHECKING:
    from gateway.embedded import BackendServer, default_kernel_factory

    from .client import BackendClient
    from .config import PacketConfig
    from .server import ConnectedServer, PacketTransport, connect
    from .settingsfile import SettingsFileError
    from .wire import Packet, PacketResponse, PacketType
