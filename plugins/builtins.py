"""The built-in non-transport plugins, registered like any third-party plugin."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .commands.builtin import BUILTIN_COMMANDS
from .hookspecs import hookimpl
from .tools.builtin import BUILTIN_TOOLS


def _openai_factory(settings: Any) -> Any:
    from .providers.openai import provider_factory

    return provider_factory(settings)


@hookimpl
def gateway_register_providers(register: Callable[[str, Any], None]) -> None:
    from .providers.echo import provider_factory as echo_factory

    register("echo", echo_factory)
    register("openai", _openai_factory)


@hookimpl
def gateway_register_tools(register: Callable[[Any], None]) -> None:
    for tool in BUILTIN_TOOLS:
        register(tool)


@hookimpl
def gateway_register_commands(register: Callable[[Any], None]) -> None:
    for command in BUILTIN_COMMANDS:
        register(command)
