"""The plugin manager: built-ins first, then the ``gateway`` entry-point group.

Each plugin's hooks are called one plugin at a time, so a plugin that fails to
import, raises while registering, or registers a name that is already taken is
reported by name with the reason while every other plugin still loads.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Iterable
from importlib.metadata import entry_points
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
import pluggy

from . import hookspecs

if TYPE_CHECKING:
    from kernel import Cluster, ClusterSettings, ObserverFactory, ProviderFactory, SlashCommand, Store, Tool
    from transports.base import Transport

V = TypeVar("V")

log = logging.getLogger("gateway.plugins")

ENTRY_POINT_GROUP = "gateway"
#: Every built-in plugin, the one list (``gateway`` loads these, then the entry points). The
#: transports are named, not imported: a plugin module imports nothing of the transports.
BUILTIN_PLUGINS = (
    "plugins.builtins",
    "plugins.memory_plugin",
    "plugins.telemetry.plugin",
    "transports.stdio.plugin",
    "transports.openfang.plugin",
    "transports.agent_cli.plugin",
    "transports.packet.plugin",
    "transports.http.plugin",
    "transports.acp.plugin",
    "transports.agui.plugin",
    "transports.a2a.plugin",
)


class PluginProblem(msgspec.Struct, frozen=True):
    plugin: str
    reason: str


class Registry:
    """What the plugins registered, by kind and name, and what went wrong."""

    def __init__(self) -> None:
        self.transports: dict[str, type[Transport]] = {}
        self.providers: dict[str, ProviderFactory] = {}
        self.tools: dict[str, Tool] = {}
        self.commands: dict[str, SlashCommand] = {}
        self.stores: dict[str, Callable[[str], Store]] = {}
        self.clusters: dict[str, Callable[[str, ClusterSettings], Cluster]] = {}
        self.observers: dict[str, ObserverFactory] = {}
        self.origins: dict[tuple[str, str], str] = {}
        self.problems: list[PluginProblem] = []
        self.plugins: list[str] = []

    def _add(self, kind: str, table: dict[str, V], name: object, value: V, plugin: str) -> None:
        if not isinstance(name, str) or not name:
            self.problems.append(PluginProblem(plugin, f"registered a {kind} without a name"))
            return
        if name in table:
            owner = self.origins[(kind, name)]
            self.problems.append(PluginProblem(plugin, f"{kind} {name!r} is already registered by {owner}; ignored"))
            return
        table[name] = value
        self.origins[(kind, name)] = plugin


def new_plugin_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    return pm


def load_plugins(
    builtin_modules: Iterable[str] = BUILTIN_PLUGINS,
    *,
    use_entry_points: bool = True,
    extra: Iterable[ModuleType | object] = (),
) -> Registry:
    """Register built-ins, entry-point plugins and ``extra`` objects; collect their registrations."""
    pm = new_plugin_manager()
    registry = Registry()
    for module_name in builtin_modules:
        _register(pm, registry, module_name, _importer(module_name))
    if use_entry_points:
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            _register(pm, registry, f"{ep.name} ({ep.value})", ep.load)
    for obj in extra:
        _register(pm, registry, getattr(obj, "__name__", repr(obj)), _given(obj))
    _collect(pm, registry)
    return registry


def _importer(name: str) -> Callable[[], object]:
    return lambda: importlib.import_module(name)


def _given(obj: object) -> Callable[[], object]:
    return lambda: obj


def _register(pm: pluggy.PluginManager, registry: Registry, label: str, load: Callable[[], Any]) -> None:
    try:
        plugin = load()
        pm.register(plugin, name=label)
    except Exception as exc:
        registry.problems.append(PluginProblem(label, f"failed to load: {type(exc).__name__}: {exc}"))
        return
    registry.plugins.append(label)


def _registrars(registry: Registry, plugin: str) -> dict[str, Callable[..., None]]:
    """The ``register`` callback each hook gets, bound to the plugin that calls it."""

    def transport(name: str, cls: type[Transport]) -> None:
        registry._add("transport", registry.transports, name, cls, plugin)

    def provider(name: str, factory: ProviderFactory) -> None:
        registry._add("provider", registry.providers, name, factory, plugin)

    def tool(value: Tool) -> None:
        registry._add("tool", registry.tools, getattr(value, "name", ""), value, plugin)

    def command(value: SlashCommand) -> None:
        registry._add("command", registry.commands, getattr(value, "name", ""), value, plugin)

    def store(scheme: str, factory: Callable[[str], Store]) -> None:
        registry._add("store", registry.stores, scheme, factory, plugin)

    def cluster(scheme: str, factory: Callable[[str, ClusterSettings], Cluster]) -> None:
        registry._add("cluster", registry.clusters, scheme, factory, plugin)

    def observer(name: str, factory: ObserverFactory) -> None:
        registry._add("observer", registry.observers, name, factory, plugin)

    return {
        "gateway_register_transports": transport,
        "gateway_register_providers": provider,
        "gateway_register_tools": tool,
        "gateway_register_commands": command,
        "gateway_register_stores": store,
        "gateway_register_clusters": cluster,
        "gateway_register_observers": observer,
    }


def _collect(pm: pluggy.PluginManager, registry: Registry) -> None:
    for hook_name in _registrars(registry, "").keys():
        caller = getattr(pm.hook, hook_name)
        # get_hookimpls lists plugins in registration order: built-ins claim names first.
        for impl in caller.get_hookimpls():
            try:
                impl.function(register=_registrars(registry, impl.plugin_name)[hook_name])
            except Exception as exc:
                registry.problems.append(PluginProblem(impl.plugin_name, f"{hook_name} raised {type(exc).__name__}: {exc}"))
