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
from typing import Any

import msgspec
import pluggy

from . import hookspecs

log = logging.getLogger("gateway.plugins")

ENTRY_POINT_GROUP = "gateway"
BUILTIN_PLUGINS = ("plugins.builtins", "plugins.memory_plugin")


class PluginProblem(msgspec.Struct, frozen=True):
    plugin: str
    reason: str


class Registry:
    """What the plugins registered, by kind and name, and what went wrong."""

    def __init__(self) -> None:
        self.transports: dict[str, Any] = {}
        self.providers: dict[str, Callable[..., Any]] = {}
        self.tools: dict[str, Any] = {}
        self.commands: dict[str, Any] = {}
        self.origins: dict[tuple[str, str], str] = {}
        self.problems: list[PluginProblem] = []
        self.plugins: list[str] = []

    def _add(self, kind: str, table: dict[str, Any], name: str, value: Any, plugin: str) -> None:
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
        _register(pm, registry, module_name, lambda name=module_name: importlib.import_module(name))
    if use_entry_points:
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            _register(pm, registry, f"{ep.name} ({ep.value})", ep.load)
    for obj in extra:
        _register(pm, registry, getattr(obj, "__name__", repr(obj)), lambda obj=obj: obj)
    _collect(pm, registry)
    return registry


def _register(pm: pluggy.PluginManager, registry: Registry, label: str, load: Callable[[], Any]) -> None:
    try:
        plugin = load()
        pm.register(plugin, name=label)
    except Exception as exc:
        registry.problems.append(PluginProblem(label, f"failed to load: {type(exc).__name__}: {exc}"))
        return
    registry.plugins.append(label)


def _collect(pm: pluggy.PluginManager, registry: Registry) -> None:
    hooks: list[tuple[str, str, dict[str, Any], Callable[..., Callable[..., None]]]] = [
        ("gateway_register_transports", "transport", registry.transports, lambda t, p: lambda name, cls: registry._add("transport", t, name, cls, p)),
        ("gateway_register_providers", "provider", registry.providers, lambda t, p: lambda name, factory: registry._add("provider", t, name, factory, p)),
        ("gateway_register_tools", "tool", registry.tools, lambda t, p: lambda tool: registry._add("tool", t, getattr(tool, "name", ""), tool, p)),
        ("gateway_register_commands", "command", registry.commands, lambda t, p: lambda cmd: registry._add("command", t, getattr(cmd, "name", ""), cmd, p)),
    ]
    for hook_name, kind, table, make_register in hooks:
        caller = getattr(pm.hook, hook_name)
        # get_hookimpls lists plugins in registration order: built-ins claim names first.
        for impl in caller.get_hookimpls():
            try:
                impl.function(register=make_register(table, impl.plugin_name))
            except Exception as exc:
                registry.problems.append(PluginProblem(impl.plugin_name, f"{hook_name} raised {type(exc).__name__}: {exc}"))
