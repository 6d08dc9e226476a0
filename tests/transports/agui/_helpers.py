"""Helpers for the AG-UI tests: the transport on a real loopback server, the official
``@ag-ui/client`` under Node (installed from the npm registry into a cache folder), and
ag-ui-protocol's models to check every event the gateway sends."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from kernel import Kernel
from tests.node_clients import npm_install
from transports.agui import AguiApp, AguiConfig
from transports.shared import serve_http

#: The client the tests speak with (pinned: its verifier is what the streams must pass).
AGUI_CLIENT = "@ag-ui/client@1.0.0"
CLIENT_SCRIPT = Path(__file__).with_name("agui_client.cjs")


@asynccontextmanager
async def agui_server(kernel: Kernel, *, on_reconnect: anyio.Event | None = None, **overrides: Any) -> AsyncIterator[str]:
    """The AG-UI transport on an ephemeral loopback port; yields the endpoint's URL.

    ``on_reconnect`` is set when a client GETs a thread's events (so that a test can hold
    a run in its middle until the client is back)."""
    overrides.setdefault("sse_keepalive_s", 0.0)
    config = AguiConfig(port=0, **overrides)
    app = AguiApp(kernel, config)

    async def watched(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if on_reconnect is not None and scope["type"] == "http" and scope["method"] == "GET" and scope["path"].endswith("/events"):
            on_reconnect.set()
        await app.router(scope, receive, send)

    async with anyio.create_task_group() as tg:
        base = await tg.start(partial(serve_http, lag_grace_s=kernel.settings.session.lag_grace_s), watched, config)
        try:
            yield f"{base}{config.path}"
        finally:
            tg.cancel_scope.cancel()


def client_modules() -> tuple[str, Path]:
    """Node and the node_modules folder holding ``@ag-ui/client`` (npm-installed once)."""
    return npm_install("agui-node", [AGUI_CLIENT])


async def run_client(modules: tuple[str, Path], url: str, thread_id: str, steps: Sequence[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """Run the steps with HttpAgent (see agui_client.cjs) and return what it saw."""
    node, path = modules
    plan = json.dumps({"url": url, "threadId": thread_id, "steps": list(steps), **extra})
    env = {**os.environ, "NODE_PATH": str(path), "NODE_ENV": "production"}
    with anyio.fail_after(90):
        done = await anyio.run_process([node, str(CLIENT_SCRIPT), plan], env=env, check=False)
    out = done.stdout.decode()
    if done.returncode != 0 or not out:
        pytest.fail(f"the AG-UI client failed ({done.returncode}): {out}\n{done.stderr.decode()}", pytrace=False)
    result: dict[str, Any] = json.loads(out)
    for run in result["runs"]:
        assert "thrown" not in run, run["thrown"]  # the client's verifier accepted the stream
    assert [w for w in result["warnings"] if "[ag-ui]" in w] == []  # nothing stripped or translated
    return result


def types(run: dict[str, Any]) -> list[str]:
    return [event["type"] for event in run["events"]]


def text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else ""


# ---------------------------------------------------------------- ag-ui-protocol


def protocol_events(frames: Sequence[bytes]) -> list[Any]:
    """Each frame parsed by ag-ui-protocol's models, which must know every field."""
    from ag_ui.core import Event
    from pydantic import TypeAdapter

    adapter: TypeAdapter[Any] = TypeAdapter(Event)
    parsed = []
    for frame in frames:
        event = adapter.validate_json(frame)
        assert not event.model_extra, f"fields the protocol does not define: {event.model_extra}"
        parsed.append(event)
    return parsed


# ---------------------------------------------------------------- plain HTTP clients


def run_input(thread_id: str, run_id: str, messages: Sequence[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """A RunAgentInput as a JSON-ready dict (what HttpAgent POSTs)."""
    return {"threadId": thread_id, "runId": run_id, "state": {}, "messages": list(messages), "tools": [], "context": [], "forwardedProps": {}, **extra}


def user(text: str, message_id: str = "u1") -> dict[str, Any]:
    return {"id": message_id, "role": "user", "content": text}


class Stream:
    """An SSE response read whole: its status, its events (checked by ag-ui-protocol), their ids."""

    def __init__(self, status: int, frames: list[tuple[bytes, str | None]], body: bytes = b"") -> None:
        self.status = status
        self.ids = [event_id for _, event_id in frames]
        self.events: list[dict[str, Any]] = [json.loads(data) for data, _ in frames]
        self.body = body
        protocol_events([data for data, _ in frames])

    @property
    def types(self) -> list[str]:
        return [event["type"] for event in self.events]

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [event for event in self.events if event["type"] == kind]

    def text(self) -> str:
        return "".join(event["delta"] for event in self.of("TEXT_MESSAGE_CONTENT"))


class StreamReader:
    """Reads an httpx streaming response in parts (up to an event type, then on)."""

    def __init__(self, response: Any) -> None:
        self.response = response
        self._lines = response.aiter_lines()

    async def read(self, *, until: str | None = None) -> Stream:
        """The events up to the first ``until`` event, or to the end of the response."""
        if not self.response.headers.get("content-type", "").startswith("text/event-stream"):
            return Stream(self.response.status_code, [], await self.response.aread())
        frames: list[tuple[bytes, str | None]] = []
        data: list[str] = []
        event_id: str | None = None
        async for line in self._lines:
            if line.startswith("data: "):
                data.append(line[6:])
            elif line.startswith("id: "):
                event_id = line[4:]
            elif line == "" and data:
                frames.append(("\n".join(data).encode(), event_id))
                data, event_id = [], None
                if until is not None and json.loads(frames[-1][0])["type"] == until:
                    break
        return Stream(self.response.status_code, frames)


async def read_stream(response: Any) -> Stream:
    return await StreamReader(response).read()
