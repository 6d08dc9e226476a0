"""Talking to one MCP server with the ``mcp`` SDK: connect, list tools, follow changes.

Both transports of the SDK, on asyncio and trio (it is anyio-based): a child process
spoken to over its stdin/stdout (``command``; the child inherits the SDK's short list
of safe variables — ``PATH``, ``HOME``, … — plus the server's ``env``, never the
gateway's secrets; its stderr is the gateway's), or a streamable HTTP endpoint
(``url`` with ``headers``). The protocol era is negotiated by the SDK: a 2026-era server
reports tool-list changes on a ``subscriptions/listen`` stream (:func:`follow_changes`
holds one open), an older one sends ``notifications/tools/list_changed`` (seen by the
message handler given to :func:`connect`).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio
import httpx2
from mcp import Client, MCPError, StdioServerParameters, stdio_client, types
from mcp.client.session import IncomingMessage
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost
from mcp.shared.message import SessionMessage

from kernel import McpServerSettings, gateway_version

log = logging.getLogger("gateway.mcp")

#: Pages of ``tools/list`` read at most: a server whose cursor never ends cannot hang us.
MAX_PAGES = 100
#: Time limits of an HTTP server's requests (reads stay open long: results may stream).
HTTP_TIMEOUT = httpx2.Timeout(30.0, read=300.0)


class ConnectionLost(Exception):
    """The server's connection ended: the process exited, the HTTP endpoint went away."""


def connection_closed(exc: MCPError) -> bool:
    """The SDK's answer to a request whose connection closed under it (its documented
    ``CONNECTION_CLOSED`` "Connection closed"), as opposed to the server's own error."""
    return exc.code == types.CONNECTION_CLOSED and exc.message == "Connection closed"


Streams = tuple[Any, Any]


@asynccontextmanager
async def watched(transport: AbstractAsyncContextManager[Streams], on_end: Callable[[], None]) -> AsyncIterator[Streams]:
    """The transport's streams; ``on_end`` is called when the server's side ends (a child
    process that exited), so a connection that died while idle is known dead before the
    next call is sent on it, and that call can start the server again instead of failing."""
    async with transport as (incoming, outgoing):
        relay_in, relayed = anyio.create_memory_object_stream[SessionMessage | Exception](0)

        async def relay() -> None:
            async with relay_in:
                async for item in incoming:
                    await relay_in.send(item)
            on_end()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(relay)
            yield relayed, outgoing
            tasks.cancel_scope.cancel()


@asynccontextmanager
async def connect(settings: McpServerSettings, *, cwd: str | None, on_change: Callable[[], None], on_end: Callable[[], None]) -> AsyncIterator[Client]:
    """A client connected to the server (the handshake done), for as long as the block runs.

    ``on_change`` is called when an older server says its tool list changed, ``on_end``
    when the server's side of the connection ended.
    """

    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            on_change()
        elif isinstance(message, Exception):
            log.warning("MCP server %s: %s: %s", settings.name, type(message).__name__, message)

    info = types.Implementation(name="gateway", version=gateway_version())
    if settings.url is not None:
        async with httpx2.AsyncClient(headers=settings.headers, timeout=HTTP_TIMEOUT) as http:
            transport = watched(streamable_http_client(settings.url, http_client=http), on_end)
            async with Client(transport, message_handler=on_message, client_info=info, cache=None) as client:
                yield client
        return
    assert settings.command is not None
    params = StdioServerParameters(command=settings.command, args=settings.args, env=settings.env or None, cwd=settings.cwd or cwd)
    async with Client(watched(stdio_client(params, errlog=sys.stderr), on_end), message_handler=on_message, client_info=info, cache=None) as client:
        yield client


async def list_tools(client: Client) -> list[types.Tool]:
    """Every tool the server offers, page after page."""
    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


def announces_changes(client: Client) -> bool:
    """Whether a 2026-era server offers a stream of tool-list changes to listen to."""
    tools = client.server_capabilities.tools
    return bool(tools and tools.list_changed)


async def follow_changes(client: Client, name: str, on_change: Callable[[], None]) -> None:
    """Listen for tool-list changes until the stream ends; raises ConnectionLost when it
    was cut (the connection is gone), returns when the server does not offer one."""
    try:
        async with client.listen(tools_list_changed=True) as changes:
            async for _ in changes:
                on_change()
    except SubscriptionLost as exc:
        raise ConnectionLost(str(exc)) from None
    except (ListenNotSupportedError, MCPError) as exc:
        log.info("MCP server %s: no tool-list changes to follow (%s)", name, exc)


async def call_tool(client: Client, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
    """One ``tools/call``; raises ConnectionLost when the connection ended under it, and
    MCPError for the server's own refusal (an unknown tool, invalid arguments)."""
    try:
        return await client.call_tool(name, arguments)
    except MCPError as exc:
        if connection_closed(exc):
            raise ConnectionLost(exc.message) from None
        raise
    except (OSError, httpx2.TransportError) as exc:
        raise ConnectionLost(f"{type(exc).__name__}: {exc}") from None
