"""The built-in non-transport plugins, registered like any third-party plugin."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .commands.builtin import BUILTIN_COMMANDS
from .hookspecs import RegisterCommand, RegisterProvider, RegisterStore, RegisterTool, hookimpl
from .tools.builtin import BUILTIN_TOOLS

if TYPE_CHECKING:
    from kernel import Provider, Settings, Store


def _openai_factory(settings: Settings) -> Provider:
    """The openai package is imported only when a kernel uses this provider."""
    from .providers.openai import provider_factory

    return provider_factory(settings)


@hookimpl
def gateway_register_providers(register: RegisterProvider) -> None:
    from .providers.echo import provider_factory as echo_factory

    register("echo", echo_factory)
    register("openai", _openai_factory)


@hookimpl
def gateway_register_tools(register: RegisterTool) -> None:
    for tool in BUILTIN_TOOLS:
        register(tool)


@hookimpl
def gateway_register_commands(register: RegisterCommand) -> None:
    for command in BUILTIN_COMMANDS:
        register(command)


def _postgres_store(url: str) -> Store:
    """psycopg is imported only when a gateway is configured with a PostgreSQL URL."""
    from .stores.postgres import PostgresStore

    return PostgresStore(url)


@hookimpl
def gateway_register_stores(register: RegisterStore) -> None:
    register("postgresql", _postgres_store)
    register("postgres", _postgres_store)
