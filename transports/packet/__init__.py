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
"""

from .client import BackendClient
from .codec import Packet, PacketResponse, PacketType
from .server import (
    BackendServer,
    ConnectedServer,
    PacketConfig,
    PacketTransport,
    connect,
    default_kernel_factory,
)

__all__ = [
    "BackendClient",
    "BackendServer",
    "ConnectedServer",
    "Packet",
    "PacketConfig",
    "PacketResponse",
    "PacketTransport",
    "PacketType",
    "connect",
    "default_kernel_factory",
]
