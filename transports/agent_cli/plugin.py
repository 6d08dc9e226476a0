"""Registers the Agent-CLI transport (a built-in, registered like any plugin)."""

from plugins.hookspecs import RegisterTransport, hookimpl

from .server import AgentCliTransport


@hookimpl
def gateway_register_transports(register: RegisterTransport) -> None:
    register(AgentCliTransport.name, AgentCliTransport)
