"""Registers the packet transport (a built-in, registered like any plugin)."""

from plugins.hookspecs import RegisterTransport, hookimpl

from .server import PacketTransport


@hookimpl
def gateway_register_transports(register: RegisterTransport) -> None:
    register(PacketTransport.name, PacketTransport)
