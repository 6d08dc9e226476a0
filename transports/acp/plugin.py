"""Registers the ACP transport (a built-in, registered like any plugin)."""

from plugins.hookspecs import RegisterTransport, hookimpl

from .server import AcpTransport


@hookimpl
def gateway_register_transports(register: RegisterTransport) -> None:
    register(AcpTransport.name, AcpTransport)
