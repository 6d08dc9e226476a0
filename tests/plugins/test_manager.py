"""The plugin manager: built-ins, entry points, duplicates and broken plugins."""

from __future__ import annotations

import sys
import types
from importlib.metadata import EntryPoint

import pytest

import plugins.manager as manager
from kernel import Tool
from plugins.hookspecs import hookimpl


async def _noop(args: dict, ctx: object) -> str:
    return ""


def _plugin(name: str, **hooks: object) -> types.SimpleNamespace:
    return types.SimpleNamespace(__name__=name, **hooks)


def test_builtins_register_providers_tools_and_commands() -> None:
    registry = manager.load_plugins(use_entry_points=False)
    assert {"echo", "openai"} <= set(registry.providers)
    assert {"current_time", "read_file", "write_file", "list_directory"} <= set(registry.tools)
    assert {"help", "clear", "history", "tools", "model", "config"} <= set(registry.commands)
    assert registry.problems == []


def test_duplicate_names_are_reported_and_the_first_wins() -> None:
    @hookimpl
    def gateway_register_providers(register):  # type: ignore[no-untyped-def]
        register("echo", lambda settings: None)
        register("mine", lambda settings: None)

    registry = manager.load_plugins(use_entry_points=False, extra=[_plugin("dupe", gateway_register_providers=gateway_register_providers)])
    assert registry.origins[("provider", "echo")] == "plugins.builtins"
    assert "mine" in registry.providers
    assert [p.plugin for p in registry.problems] == ["dupe"]
    assert "already registered by plugins.builtins" in registry.problems[0].reason


def test_a_broken_plugin_is_isolated() -> None:
    @hookimpl
    def gateway_register_tools(register):  # type: ignore[no-untyped-def]
        raise RuntimeError("kaboom")

    good = Tool(name="fine", description="", parameters={}, handler=_noop)

    @hookimpl
    def good_tools(register):  # type: ignore[no-untyped-def]
        register(good)

    registry = manager.load_plugins(
        ("plugins.builtins", "no.such.module"),
        use_entry_points=False,
        extra=[_plugin("broken", gateway_register_tools=gateway_register_tools), _plugin("good", gateway_register_tools=good_tools)],
    )
    reasons = {p.plugin: p.reason for p in registry.problems}
    assert "failed to load: ModuleNotFoundError" in reasons["no.such.module"]
    assert "kaboom" in reasons["broken"]
    assert "fine" in registry.tools and "current_time" in registry.tools


def test_entry_points_are_discovered(monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType("thirdparty_gateway_plugin")

    @hookimpl
    def gateway_register_tools(register):  # type: ignore[no-untyped-def]
        register(Tool(name="third", description="", parameters={}, handler=_noop))

    module.gateway_register_tools = gateway_register_tools  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "thirdparty_gateway_plugin", module)
    eps = [
        EntryPoint(name="third", value="thirdparty_gateway_plugin", group="gateway"),
        EntryPoint(name="missing", value="not_installed_anywhere", group="gateway"),
    ]
    monkeypatch.setattr(manager, "entry_points", lambda group: eps if group == "gateway" else [])
    registry = manager.load_plugins()
    assert "third" in registry.tools and registry.origins[("tool", "third")].startswith("third")
    assert any(p.plugin.startswith("missing") for p in registry.problems)
