"""The hooks a gateway plugin implements. Each takes a ``register`` callback.

Hooks are synchronous and only register factories; all async work happens
outside pluggy. A third-party package exposes a module in the ``gateway``
entry-point group and implements any of these with ``@hookimpl``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from kernel import ClusterSettings, ObserverFactory, ProviderFactory, SlashCommand, Store, Tool
    from transports.base import Transport

PROJECT = "gateway"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

RegisterTransport = Callable[[str, "type[Transport]"], None]
RegisterProvider = Callable[[str, "ProviderFactory"], None]
RegisterTool = Callable[["Tool"], None]
RegisterCommand = Callable[["SlashCommand"], None]
#: ``register(scheme, factory)``: ``factory(url) -> Store`` for ``[store] path = "scheme://…"``.
RegisterStore = Callable[[str, Callable[[str], "Store"]], None]
#: ``register(scheme, factory)``: ``factory(url, settings) -> Cluster`` for ``[cluster] redis_url``.
RegisterCluster = Callable[[str, Callable[[str, "ClusterSettings"], Any]], None]
#: ``register(name, factory)``: ``factory(kernel) -> RunObserver | None`` (None: off).
RegisterObserver = Callable[[str, "ObserverFactory"], None]


@hookspec
def gateway_register_transports(register: RegisterTransport) -> None:
    """Call ``register(name, TransportClass)`` for each transport the plugin provides."""


@hookspec
def gateway_register_providers(register: RegisterProvider) -> None:
    """Call ``register(name, factory)``; ``factory(settings) -> Provider``."""


@hookspec
def gateway_register_tools(register: RegisterTool) -> None:
    """Call ``register(tool)`` with a :class:`kernel.Tool` for each tool."""


@hookspec
def gateway_register_commands(register: RegisterCommand) -> None:
    """Call ``register(command)`` with a :class:`kernel.SlashCommand`."""


@hookspec
def gateway_register_stores(register: RegisterStore) -> None:
    """Call ``register(scheme, factory)`` for each store the plugin provides (``postgresql``)."""


@hookspec
def gateway_register_clusters(register: RegisterCluster) -> None:
    """Call ``register(scheme, factory)`` for each cluster backend the plugin provides (``redis``)."""


@hookspec
def gateway_register_observers(register: RegisterObserver) -> None:
    """Call ``register(name, factory)`` for each telemetry observer (kernel/observe.py): the
    kernel calls ``factory(kernel)`` once and tells what it returns the facts of every run."""
