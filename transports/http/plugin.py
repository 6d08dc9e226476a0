"""Registers the http transport (a built-in, registered like any plugin)."""

from plugins.hookspecs import RegisterTransport, hookimpl

from .server import HttpTransport


@hookimpl
def gateway_register_transports(register: RegisterTransport) -> None:
    register(HttpTransport.name, HttpTransport)
