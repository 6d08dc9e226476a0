"""The hooks a gateway plugin implements. Each takes a ``register`` callback.

Hooks are synchronous and only register factories; all async work happens
outside pluggy. A third-party package exposes a module in the ``gateway``
entry-point group and implements any of these with ``@hookimpl``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pluggy

PROJECT = "gateway"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def gateway_register_transports(register: Callable[[str, Any], None]) -> None:
    """Call ``register(name, TransportClass)`` for each transport the plugin provides."""


@hookspec
def gateway_register_providers(register: Callable[[str, Any], None]) -> None:
    """Call ``register(name, factory)``; ``factory(settings) -> Provider``."""


@hookspec
def gateway_register_tools(register: Callable[[Any], None]) -> None:
    """Call ``register(tool)`` with a :class:`kernel.tools.Tool` for each tool."""


@hookspec
def gateway_register_commands(register: Callable[[Any], None]) -> None:
    """Call ``register(command)`` with a :class:`kernel.commands.SlashCommand`."""
