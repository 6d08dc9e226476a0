"""MCP servers as kernel tool sources, with their lifecycle.

:class:`McpServers` starts some servers together (the gateway's configured ones, or the
ones an editor gave a session): every one at once, each failure reported by name while
the others are served, and stops them together. Each server is a
:class:`McpToolSource`: the kernel asks its ``tools()`` at every model call and gets the
list the server gave last (refreshed when it says the list changed); each tool's handler
calls the server.

A connection lives in a task of its own (the SDK's clients are context managers, and a
context must end in the task that began it). When a server dies — its process exits,
its endpoint goes away — the call in flight fails with a clear error, and the next call
starts the server again (its tools stay offered meanwhile). An interrupted call is
cancelled on the server too (the SDK sends ``notifications/cancelled``).
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Sequence
from typing import Any

import anyio
from anyio.abc import TaskGroup, TaskStatus
from mcp import Client, MCPError, types
from pydantic import ValidationError

from kernel import McpServerSettings, Tool, ToolContext, ToolFailure

from . import client as mcp
from .config import describe, namespace, needs_approval, offered, prefixes, tool_name
from .results import result_text

log = logging.getLogger("gateway.mcp")

#: The per-run limits (``tools.limits``) and approval policies know MCP tools by this category.
CATEGORY = "mcp"


class McpUnavailable(Exception):
    """The server could not be started or reached; the message says why."""


class _Link:
    """One connection to the server, held open by its own task until it ends or is closed."""

    def __init__(self, deadline: float) -> None:
        self.scope = anyio.CancelScope(deadline=deadline)
        self.client: Client | None = None
        self.alive = True
        self.ended = False  # by the server: its process exited, its endpoint closed the stream
        self.changed = anyio.Event()

    def close(self) -> None:
        self.alive = False
        self.scope.cancel()

    def end(self) -> None:
        self.ended = True
        self.close()

    def tools_changed(self) -> None:
        self.changed.set()


class McpToolSource:
    """One MCP server's tools for the kernel, named ``PREFIX__TOOL``."""

    def __init__(self, settings: McpServerSettings, group: TaskGroup, *, prefix: str | None = None, cwd: str | None = None) -> None:
        self.settings = settings
        self.name = settings.name
        self.prefix = prefix or namespace(settings.name)
        self.stopped = False
        self._group = group
        self._cwd = cwd
        self._tools: tuple[Tool, ...] = ()
        self._link: _Link | None = None
        self._connecting = anyio.Lock()

    def tools(self) -> Sequence[Tool]:
        return self._tools

    @property
    def connected(self) -> bool:
        """Whether a connection is open now; when not, the next call starts the server again."""
        return self._link is not None and self._link.alive

    async def start(self) -> None:
        """Connect and list the tools; McpUnavailable says why that failed."""
        await self._live()

    async def _live(self) -> _Link:
        """The open connection, or a new one when there is none (at start, after a death)."""
        async with self._connecting:
            link = self._link
            if link is not None and link.alive:
                return link
            if self.stopped:
                raise McpUnavailable("it was stopped")
            if link is not None:
                log.info("MCP server %s: starting it again (%s)", self.name, describe(self.settings))
            self._link = await self._group.start(self._hold)
            return self._link

    async def _hold(self, *, task_status: TaskStatus[_Link]) -> None:
        """Run one connection: handshake and tool list within ``connect_timeout_s``, then
        follow the server's tool-list changes until the connection ends or is closed."""
        timeout = self.settings.connect_timeout_s
        link = _Link(anyio.current_time() + timeout)
        started = False
        try:
            with link.scope:
                async with mcp.connect(self.settings, cwd=self._cwd, on_change=link.tools_changed, on_end=link.end) as client:
                    self._adopt(await mcp.list_tools(client))
                    link.client, link.scope.deadline, started = client, math.inf, True
                    task_status.started(link)
                    await self._follow(client, link)
        except Exception as exc:
            if not started and not link.ended:
                raise McpUnavailable(_reason(exc)) from None
            if link.alive:  # not one that was closed here, on purpose
                log.warning("MCP server %s: the connection ended: %s", self.name, _reason(exc))
        finally:
            link.alive = False
        if started:
            if link.ended:
                log.warning("MCP server %s closed the connection (a process that exited); it is started again at its next use", self.name)
        elif link.ended:
            raise McpUnavailable("it closed the connection before the handshake was done (a server process writes why on stderr)")
        else:
            raise McpUnavailable(f"no answer within {timeout:g}s" if link.scope.cancelled_caught else "the connection closed at once")

    async def _follow(self, client: Client, link: _Link) -> None:
        async with anyio.create_task_group() as tasks:
            if mcp.announces_changes(client):
                tasks.start_soon(mcp.follow_changes, client, self.name, link.tools_changed)
            while True:
                await link.changed.wait()
                link.changed = anyio.Event()
                with anyio.fail_after(self.settings.connect_timeout_s):
                    self._adopt(await mcp.list_tools(client))
                log.info("MCP server %s: its tools changed: %s", self.name, ", ".join(t.name for t in self._tools) or "none")

    def _adopt(self, listed: list[types.Tool]) -> None:
        """The server's tools as kernel tools (those the allow-list lets through)."""
        tools: list[Tool] = []
        for remote in listed:
            if not offered(self.settings, remote.name):
                continue
            annotations = remote.annotations
            schema = dict(remote.input_schema or {})
            schema.setdefault("type", "object")
            tools.append(
                Tool(
                    name=tool_name(self.prefix, remote.name, (t.name for t in tools)),
                    description=remote.description or remote.title or f"{remote.name} (a tool of the MCP server {self.name})",
                    parameters=schema,
                    handler=functools.partial(self._call, remote.name),
                    category=CATEGORY,
                    access="query" if annotations is not None and annotations.read_only_hint else "update",
                    requires_approval=needs_approval(self.settings, remote.name),
                )
            )
        self._tools = tuple(tools)

    async def _call(self, remote: str, arguments: dict[str, Any], ctx: ToolContext) -> str:
        try:
            link = await self._live()
        except McpUnavailable as exc:
            raise ToolFailure(f"the MCP server {self.name} is not running and could not be started again: {exc}") from None
        assert link.client is not None
        try:
            result = await mcp.call_tool(link.client, remote, arguments)
        except mcp.ConnectionLost as exc:
            link.close()
            if self.stopped:
                raise ToolFailure(f"the MCP server {self.name} was stopped while running {remote}") from None
            raise ToolFailure(f"the MCP server {self.name} stopped while running {remote} ({exc}); it is started again at its next use") from None
        except MCPError as exc:
            raise ToolFailure(f"the MCP server {self.name} refused {remote}: {exc.message}") from None
        except ValidationError as exc:
            raise ToolFailure(f"the MCP server {self.name} answered {remote} with a result that is not valid MCP: {exc.error_count()} problems") from None
        return result_text(result)


class McpServers:
    """Some MCP servers, started together and stopped together.

    ``await task_group.start(servers.run)`` starts every one at once: one that cannot be
    started (no such command, no answer in time, a refused handshake) is logged by name
    and kept in ``failures`` while the others are served as ``sources``. They run until
    :meth:`close` (or until the task group is cancelled), then they are all stopped: child
    processes are ended, HTTP sessions closed.
    """

    def __init__(self, servers: Sequence[McpServerSettings], *, cwd: str | None = None) -> None:
        self.settings = list(servers)
        self.cwd = cwd
        self.sources: tuple[McpToolSource, ...] = ()
        self.failures: dict[str, str] = {}
        self._closing = anyio.Event()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        every: list[McpToolSource] = []
        try:
            async with anyio.create_task_group() as group:
                names = prefixes(s.name for s in self.settings)
                every = [McpToolSource(s, group, prefix=p, cwd=self.cwd) for s, p in zip(self.settings, names, strict=True)]
                failed: list[McpToolSource] = []
                async with anyio.create_task_group() as starting:
                    for source in every:
                        starting.start_soon(self._start, source, failed)
                self.sources = tuple(s for s in every if s not in failed)
                task_status.started()
                await self._closing.wait()
                group.cancel_scope.cancel()
        finally:
            for source in every:
                source.stopped = True

    async def _start(self, source: McpToolSource, failed: list[McpToolSource]) -> None:
        try:
            await source.start()
        except McpUnavailable as exc:
            failed.append(source)
            self.failures[source.name] = str(exc)
            log.warning("MCP server %s (%s) did not start: %s; its tools are not offered", source.name, describe(source.settings), exc)
            return
        log.info("MCP server %s (%s): %d tools", source.name, describe(source.settings), len(source.tools()))

    def close(self) -> None:
        """Stop the servers (``run`` returns once they are stopped)."""
        self._closing.set()


def _reason(exc: BaseException) -> str:
    """One line for an error, the leaves of an exception group joined."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_reason(e) for e in exc.exceptions)
    if isinstance(exc, MCPError):
        return exc.message
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
