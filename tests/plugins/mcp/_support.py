"""Real MCP servers for the tests: the stdio one as a child process, the HTTP one served by
hypercorn on 127.0.0.1 in the test's own event loop (asyncio or trio).

Both run :func:`tests.plugins.mcp.mcp_server.build`; what their tools saw is written to
the ``state`` directory (``slow-started``, ``slow-cancelled``, ``crashed``).
"""

from __future__ import annotations

import logging
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import sniffio
from hypercorn.config import Config

from kernel import McpServerSettings

from .mcp_server import build

SERVER_SCRIPT = Path(__file__).resolve().parent / "mcp_server.py"


def stdio_args(state: Path, *, legacy: bool = False) -> list[str]:
    return [str(SERVER_SCRIPT), "--state", str(state), *(["--legacy"] if legacy else [])]


def stdio_server(name: str, state: Path, *, legacy: bool = False, **settings: Any) -> McpServerSettings:
    """The test server as a ``[[tools.mcp]]`` child process (``legacy``: the pre-2026 handshake)."""
    return McpServerSettings(name=name, command=sys.executable, args=stdio_args(state, legacy=legacy), **settings)


def http_server(name: str, url: str, **settings: Any) -> McpServerSettings:
    return McpServerSettings(name=name, url=url, **settings)


def stdio_toml(name: str, state: Path, *, legacy: bool = False, extra: str = "") -> str:
    args = ", ".join(f'"{a}"' for a in stdio_args(state, legacy=legacy))
    return f'[[tools.mcp]]\nname = "{name}"\ncommand = "{sys.executable}"\nargs = [{args}]\n{extra}\n'


@asynccontextmanager
async def serving_http(state: Path, port: int = 0) -> AsyncIterator[str]:
    """The test server over streamable HTTP (``/mcp``) on 127.0.0.1; yields its URL.

    ``port`` reuses a port (to start a server again where one was stopped).
    """
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(64)
    bound = sock.getsockname()[1]
    config = Config()
    config.bind = [f"fd://{sock.detach()}"]
    config.accesslog = None
    config.errorlog = logging.getLogger("tests.mcp.hypercorn")
    config.graceful_timeout = 0.5
    if sniffio.current_async_library() == "trio":
        from hypercorn.trio import serve
    else:
        from hypercorn.asyncio import serve  # type: ignore[assignment]
    app = build(state, name="httpserver").streamable_http_app()
    stop, stopped = anyio.Event(), anyio.Event()

    async def run() -> None:
        try:
            await serve(app, config, shutdown_trigger=stop.wait)  # type: ignore[arg-type]
        finally:
            stopped.set()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(run)
        try:
            yield f"http://127.0.0.1:{bound}/mcp"
        finally:
            stop.set()
            with anyio.move_on_after(3, shield=True):
                await stopped.wait()
            tasks.cancel_scope.cancel()
