"""The built-in non-transport plugins, registered like any third-party plugin."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .commands.builtin import BUILTIN_COMMANDS
from .hookspecs import RegisterCluster, RegisterCommand, RegisterProvider, RegisterStore, RegisterTool, hookimpl
from .tools.builtin import BUILTIN_TOOLS

if TYPE_CHECKING:
    from kernel import Cluster, ClusterSettings, Provider, Settings, Store


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


def _redis_cluster(url: str, settings: ClusterSettings) -> Cluster:
    """coredis is imported only when a gateway is configured with a Redis URL."""
    from .cluster.redis import RedisCluster

    return RedisCluster(
        url,
        instance_id=settings.instance_id,
        key_prefix=settings.key_prefix,
        lease_s=settings.lease_s,
        forward_timeout_s=settings.forward_timeout_s,
        stream_retention=settings.stream_retention,
    )


@hookimpl
def gateway_register_clusters(register: RegisterCluster) -> None:
    register("redis", _redis_cluster)
    register("rediss", _redis_cluster)
