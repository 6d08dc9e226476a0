"""Registers the AG-UI transport (a built-in, registered like any plugin)."""

from plugins.hookspecs import RegisterTransport, hookimpl

from .server import AguiTransport


@hookimpl
def gateway_register_transports(register: RegisterTransport) -> None:
    register(AguiTransport.name, AguiTransport)
