"""A real MCP server for the tests, written with the ``mcp`` SDK's server API (``MCPServer``).

Run as a script it serves stdio (``python mcp_server.py --state DIR [--legacy]``); the
tests also serve :func:`build` over streamable HTTP on 127.0.0.1 (``_support.py``).
``--legacy`` refuses the 2026 ``server/discover`` probe, so the client falls back to the
older ``initialize`` handshake and its ``notifications/tools/list_changed``: both
protocol eras get tested. What a tool saw is written to files in the state directory,
so a test can tell what happened on the server's side (a call started, was cancelled).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import anyio
from mcp import stdio_server, types
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.message import SessionMessage
from mcp.types import CallToolResult, ImageContent, TextContent, ToolAnnotations

#: A 1x1 PNG, base64 (68 bytes once decoded).
PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAAC0lEQVR4nGNgAAIAAAUAAXpeqz8AAAAASUVORK5CYII="


def build(state: Path, *, name: str = "testserver") -> MCPServer:
    server = MCPServer(name, log_level="WARNING")

    def note(what: str, text: str = "") -> None:
        (state / what).write_text(text)

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def add(a: int, b: int) -> int:
        """Add two whole numbers."""
        return a + b

    @server.tool()
    def picture() -> list[TextContent | ImageContent]:
        """A red pixel and its caption."""
        return [TextContent(type="text", text="a red pixel"), ImageContent(type="image", data=PIXEL, mime_type="image/png")]

    @server.tool()
    def weather(city: str) -> CallToolResult:
        """Structured weather, with no text block."""
        return CallToolResult(content=[], structured_content={"city": city, "celsius": 21})

    @server.tool()
    def fail(why: str = "it broke") -> str:
        """Always fails, saying why."""
        raise ToolError(why)

    @server.tool()
    def whoami() -> str:
        """The server's process id, working directory and greeting variable."""
        return f"pid={os.getpid()} cwd={os.getcwd()} greeting={os.environ.get('MCP_TEST_GREETING', '')}"

    @server.tool()
    def crash() -> str:
        """The process exits at once, without answering."""
        note("crashed", str(os.getpid()))
        os._exit(3)

    @server.tool()
    async def slow(seconds: float = 60.0) -> str:
        """Waits, noting when it starts and when it is cancelled."""
        note("slow-started")
        try:
            await anyio.sleep(seconds)
        except anyio.get_cancelled_exc_class():
            note("slow-cancelled")
            raise
        return "done waiting"

    @server.tool()
    async def grow(ctx: Context) -> str:
        """Adds the tool ``fresh`` and says the tool list changed (in both protocol eras)."""
        server.add_tool(lambda: "fresh and new", name="fresh", description="A tool that appeared later.")
        await ctx.notify_tools_changed()
        await ctx.session.send_tool_list_changed()
        return "grown"

    return server


async def serve_stdio(server: MCPServer, *, legacy: bool) -> None:
    """Serve stdio; ``legacy``: answer ``server/discover`` as a server of before 2026 does
    (no such method), so the client falls back to the ``initialize`` handshake."""
    if not legacy:
        await server.run_stdio_async()
        return
    lowlevel = server._lowlevel_server
    async with stdio_server() as (incoming, outgoing):
        relay_in, relayed = anyio.create_memory_object_stream[SessionMessage | Exception](0)

        async def relay() -> None:
            async with relay_in:
                async for item in incoming:
                    message = item.message if isinstance(item, SessionMessage) else None
                    if isinstance(message, types.JSONRPCRequest) and message.method == "server/discover":
                        error = types.ErrorData(code=types.METHOD_NOT_FOUND, message="Method not found")
                        await outgoing.send(SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=message.id, error=error)))
                    else:
                        await relay_in.send(item)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(relay)
            await lowlevel.run(relayed, outgoing, lowlevel.create_initialization_options())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--state", type=Path, required=True)
    parser.add_argument("--legacy", action="store_true")
    args = parser.parse_args()
    print(f"test MCP server {os.getpid()} up", file=sys.stderr)
    anyio.run(lambda: serve_stdio(build(args.state), legacy=args.legacy))


if __name__ == "__main__":
    main()
