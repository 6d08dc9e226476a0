"""Registers the OpenFang transport (a built-in, registered like any plugin)."""

from plugins.hookspecs import RegisterTransport, hookimpl

from .server import OpenFangTransport


@hookimpl
def gateway_register_transports(register: RegisterTransport) -> None:
    register(OpenFangTransport.name, OpenFangTransport)
