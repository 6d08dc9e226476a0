"""Helpers for the http transport tests: a real server on 127.0.0.1, an SSE line parser."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx

from kernel import Kernel
from kernel.tools import Tool, ToolContext
from transports.http import HttpConfig, HttpTransport


@asynccontextmanager
async def http_server(kernel: Kernel, **overrides: Any) -> AsyncIterator[str]:
    """The http transport on an ephemeral loopback port; yields its base URL."""
    overrides.setdefault("sse_keepalive_s", 0.0)
    config = HttpConfig(port=0, **overrides)
    async with anyio.create_task_group() as tg:
        url = await tg.start(HttpTransport().serve, kernel, config)
        try:
            yield url
        finally:
            tg.cancel_scope.cancel()


def http_scope(path: str) -> dict[str, Any]:
    """The ASGI scope of a JSON POST to ``path`` (the ASGI app called in process)."""
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
        "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"), (b"anthropic-version", b"2023-06-01")],
        "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000), "state": {},
    }


def client(url: str, token: str | None = None, **kw: Any) -> httpx.AsyncClient:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(base_url=url, headers=headers, timeout=20.0, **kw)


@dataclass
class SSE:
    event: str
    data: str
    id: str | None

    def json(self) -> Any:
        return json.loads(self.data)


@dataclass
class SSEParser:
    """A line parser following the WHATWG event-stream rules (fields, comments, blank-line dispatch)."""

    comments: list[str] = field(default_factory=list)
    last_id: str | None = None
    _data: list[str] = field(default_factory=list)
    _event: str | None = None

    def feed(self, line: str) -> SSE | None:
        if line == "":
            if not self._data:
                self._event = None
                return None
            event = SSE(self._event or "message", "\n".join(self._data), self.last_id)
            self._data, self._event = [], None
            return event
        if line.startswith(":"):
            self.comments.append(line[1:].strip())
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self.last_id = value
        return None


async def sse_events(response: httpx.Response, parser: SSEParser | None = None) -> AsyncIterator[SSE]:
    parser = parser or SSEParser()
    async for line in response.aiter_lines():
        event = parser.feed(line)
        if event is not None:
            yield event


async def _add(arguments: dict[str, Any], context: ToolContext) -> str:
    return str(int(arguments.get("a", 0)) + int(arguments.get("b", 0)))


ADD_TOOL = Tool(
    name="add",
    description="Add two integers",
    parameters={"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
    handler=_add,
)

DANGER_TOOL = Tool(
    name="danger",
    description="Needs the user's approval",
    parameters={"type": "object", "properties": {}},
    handler=lambda arguments, context: _done(),
    requires_approval=True,
)


async def _done() -> str:
    return "done"
