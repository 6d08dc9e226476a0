"""Registers the http transport (a built-in, registered like any plugin)."""

from collections.abc import Callable
from typing import Any

from plugins.hookspecs import hookimpl

from .server import HttpTransport


@hookimpl
def gateway_register_transports(register: Callable[[str, Any], None]) -> None:
    register(HttpTransport.name, HttpTransport)
