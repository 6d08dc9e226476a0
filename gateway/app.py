"""Build a kernel from settings and plugins; serve transports over it until stopped.

Shutdown order matters for clients: SIGTERM drains first (new runs refused, runs in
flight go on for up to ``drain_s``, then are interrupted), SIGINT interrupts at once (so
every client sees its run end as interrupted, in its dialect's failure form), then the
transports are cancelled (they close their connections, 1001 for WebSockets), then the
kernel flushes and closes the store, and last the configured MCP servers are stopped.
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import AsyncIterator, Iterable
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
import msgspec
from anyio.abc import TaskGroup

from kernel import LOG_RING, Cluster, Kernel, Settings, SQLiteStore, Store, Tool
from kernel import model as m
from kernel.model import ToolSource
from plugins.manager import BUILTIN_PLUGINS, Registry, load_plugins
from plugins.telemetry.logs import JsonFormatter
from transports.base import HostsConsole, config_type, load_config
from transports.http.console import hosted_console

from .banner import Launch, Started, banner_text

if TYPE_CHECKING:
    from plugins.a2a.source import A2AAgents
    from plugins.mcp.source import McpServers

log = logging.getLogger("gateway")

class StartupError(Exception):
    """A problem the user must fix before the gateway can start."""


def load_registry(*, use_entry_points: bool = True) -> Registry:
    return load_plugins(BUILTIN_PLUGINS, use_entry_points=use_entry_points)


def section_name(transport_name: str) -> str:
    """``agent-cli`` is configured under ``[transports.agent_cli]``."""
    return transport_name.replace("-", "_")


def build_store(path: str, registry: Registry) -> Store:
    """``[store] path``: a URL whose scheme a store plugin registered (``postgresql://…``),
    or a file path for the default SQLite store."""
    scheme, sep, _ = path.partition("://")
    if not sep:
        return SQLiteStore(path)
    factory = registry.stores.get(scheme.lower())
    if factory is None:
        known = ", ".join(sorted(registry.stores)) or "none"
        raise StartupError(f"no store for {scheme}:// URLs is installed (installed: {known}); a plain path uses SQLite")
    return factory(path)


def build_cluster(settings: Settings, registry: Registry) -> Cluster | None:
    """``[cluster] redis_url`` (or ``GATEWAY_REDIS_URL``): the backend its scheme names."""
    url = settings.cluster.redis_url
    if not url:
        return None
    scheme = url.partition("://")[0].lower()
    factory = registry.clusters.get(scheme)
    if factory is None:
        known = ", ".join(sorted(registry.clusters)) or "none"
        raise StartupError(f"no cluster backend for {scheme}:// URLs is installed (installed: {known})")
    return factory(url, settings.cluster)


def build_kernel(settings: Settings, registry: Registry, **kwargs: Any) -> Kernel:
    return Kernel(
        settings,
        providers=registry.providers,
        tools=registry.tools.values(),
        commands=registry.commands.values(),
        store=build_store(settings.store.path, registry),
        cluster=build_cluster(settings, registry),
        observers=registry.observers.values(),
        **kwargs,
    )


def transport_configs(settings: Settings, registry: Registry, names: Iterable[str], overrides: dict[str, Any]) -> dict[str, Any]:
    configs: dict[str, Any] = {}
    for name in names:
        cls = registry.transports.get(name)
        if cls is None:
            known = ", ".join(sorted(registry.transports)) or "none"
            raise StartupError(f"unknown transport {name!r} (installed: {known})")
        data = dict(settings.transports.get(section_name(name), {}))
        fields = {f.name for f in msgspec.structs.fields(config_type(cls))}
        data.update({k: v for k, v in overrides.items() if k in fields})
        try:
            configs[name] = load_config(cls, data)
        except ValueError as exc:
            raise StartupError(str(exc)) from None
    return configs


def describe_provider(kernel: Kernel) -> str:
    name = kernel.provider_name()
    if name == "echo":
        return (
            "model: the offline echo model (it repeats your prompt; no LLM is called). "
            "Set OPENAI_API_KEY (and OPENAI_BASE_URL for another OpenAI-compatible server) "
            "or [provider.openai] in the config file to use a real model."
        )
    info = kernel.agent_info(kernel.agent(None))
    return f"model: {info.model} via provider {name}"


async def start_mcp_servers(group: TaskGroup, settings: Settings) -> McpServers | None:
    """Start the configured MCP servers (``[[tools.mcp]]``) in ``group``: every one at once,
    each that fails logged by name while the others are served (docs/mcp.md). The MCP
    SDK is loaded only when servers are configured."""
    if not settings.tools.mcp:
        return None
    from plugins.mcp.source import McpServers

    servers = McpServers(settings.tools.mcp)
    await group.start(servers.run)
    return servers


async def start_a2a_agents(group: TaskGroup, settings: Settings) -> A2AAgents | None:
    """Read the cards of the configured remote A2A agents (``[[tools.a2a]]``) in ``group``;
    an agent whose card cannot be read is still offered (read again at use). The a2a SDK is
    loaded only when agents are configured."""
    if not settings.tools.a2a:
        return None
    from plugins.a2a.source import A2AAgents

    agents = A2AAgents(settings.tools.a2a)
    await group.start(agents.run)
    return agents


async def serve(settings: Settings, registry: Registry, configs: dict[str, Any], *, launch: Launch | None = None) -> None:
    """Serve the transports (name -> config, see :func:`transport_configs`) until stopped;
    with ``launch``, print the start-up banner on stderr once they are all ready."""
    async with anyio.create_task_group() as services:
        servers = await start_mcp_servers(services, settings)
        sources: tuple[ToolSource, ...] = servers.sources if servers is not None else ()
        agents = await start_a2a_agents(services, settings)
        sources += agents.sources if agents is not None else ()
        kernel = build_kernel(settings, registry, tool_sources=sources)
        async with kernel:
            log.info(describe_provider(kernel))
            async with anyio.create_task_group() as outer:
                transports_scope = anyio.CancelScope()
                outer.start_soon(_watch_signals, kernel, transports_scope)
                with transports_scope:
                    async with anyio.create_task_group() as tg:
                        started: list[Started] = []
                        for name, config in configs.items():
                            transport = registry.transports[name]()
                            address = await _start(tg, name, transport, kernel, config)
                            log.info("transport %s ready%s", name, f" on {address}" if address else "")
                            started.append(Started(name, transport, config, address))
                        if launch is not None:
                            print(banner_text(kernel, started, launch), file=sys.stderr, flush=True)
                outer.cancel_scope.cancel()
            log.info("shutting down: flushing the store")
        services.cancel_scope.cancel()


async def installed_tools(settings: Settings, registry: Registry) -> tuple[list[tuple[str, Tool]], dict[str, str]]:
    """Every tool a session can be offered, with where it comes from (the plugin that
    registered it, or ``mcp NAME``), and the configured MCP servers that did not start."""
    found = [(registry.origins.get(("tool", name), "plugin"), tool) for name, tool in sorted(registry.tools.items())]
    failures: dict[str, str] = {}
    async with anyio.create_task_group() as services:
        servers = await start_mcp_servers(services, settings)
        if servers is not None:
            found += [(f"mcp {source.name}", tool) for source in servers.sources for tool in source.tools()]
            failures = dict(servers.failures)
        agents = await start_a2a_agents(services, settings)
        if agents is not None:  # offered even when the card could not be read (it is read again at use)
            for agent in agents.sources:
                origin = f"a2a {agent.name}" + (f" (card not read: {agent.failure})" if agent.failure else "")
                found += [(origin, tool) for tool in agent.tools()]
        services.cancel_scope.cancel()
    return found, failures


async def _start(tg: Any, name: str, transport: Any, kernel: Kernel, config: Any) -> Any:
    """Start one transport (one that hosts the console gets it); a failure before it is
    ready names the transport."""
    serve = partial(transport.serve, console=hosted_console) if isinstance(transport, HostsConsole) and transport.hosts_console else transport.serve
    try:
        return await tg.start(serve, kernel, config)
    except Exception as exc:
        leaves = exc.exceptions if isinstance(exc, BaseExceptionGroup) else [exc]
        reason = "; ".join(f"{type(e).__name__}: {e}" for e in leaves)
        raise StartupError(f"transport {name} failed to start: {reason}") from None


async def _watch_signals(kernel: Kernel, transports_scope: anyio.CancelScope) -> None:
    """SIGTERM drains (what an orchestrator sends before it stops a process): readiness goes
    off at once, listeners stay open, new runs are refused (``draining``), runs in flight go
    on for up to ``drain_s`` and are then interrupted (cause ``drain``). SIGINT (Ctrl+C), or
    a second signal while draining, stops at once (cause ``shutdown``). Either way the
    transports are cancelled last: they close their connections (1001) and the process
    exits 0."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            if signum == signal.SIGTERM:
                await _drain(kernel, signals)
            else:
                log.info("received %s: interrupting runs and closing connections", signal.Signals(signum).name)
                await _stop_now(kernel)
            kernel.stopping.set()
            await anyio.sleep(0.05)  # let transports write the final events
            transports_scope.cancel()
            return


async def _drain(kernel: Kernel, signals: AsyncIterator[int]) -> None:
    drain_s = kernel.settings.drain_s
    log.info("received SIGTERM: draining — runs in flight go on for up to %gs (SIGTERM or SIGINT again stops at once)", drain_s)
    async with anyio.create_task_group() as draining:

        async def drain() -> None:
            await kernel.drain(drain_s)
            draining.cancel_scope.cancel()

        async def stop_now() -> None:
            async for again in signals:
                log.info("received %s while draining: stopping now", signal.Signals(again).name)
                await _stop_now(kernel)
                draining.cancel_scope.cancel()

        draining.start_soon(drain)
        draining.start_soon(stop_now)


async def _stop_now(kernel: Kernel) -> None:
    kernel.start_draining()
    if kernel.interrupt_all("shutdown"):
        await kernel.wait_idle(5.0)
    await kernel.end_followed_runs(m.ErrorInfo(code="draining", message="This gateway instance shut down before the run's end reached it: retry"))


def setup_logging(level: str, log_format: str = "text") -> None:
    """Logs go to stderr only: in stdio mode stdout carries protocol alone. ``json``: one
    JSON object per line (docs/operations.md "Logs"). The same records go to the kernel's
    ring of recent ones, which the console and OpenFang's logs page show."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler, LOG_RING]
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
    # openai 3.x brings its own HTTP stack under other names (httpx2, httpcore2).
    for noisy in ("hypercorn.access", "httpx", "httpcore", "httpx2", "httpcore2", "openai"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
