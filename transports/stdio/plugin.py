"""Registers the stdio transport (a built-in, registered like any plugin)."""

from plugins.hookspecs import RegisterTransport, hookimpl

from .server import StdioTransport


@hookimpl
def gateway_register_transports(register: RegisterTransport) -> None:
    register(StdioTransport.name, StdioTransport)
