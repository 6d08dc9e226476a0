"""Registers the A2A transport (a built-in, registered like any plugin)."""

from plugins.hookspecs import RegisterTransport, hookimpl

from .server import A2ATransport


@hookimpl
def gateway_register_transports(register: RegisterTransport) -> None:
    register(A2ATransport.name, A2ATransport)
