"""Shared pieces of the A2A tests: the transport on an ephemeral port, the a2a-sdk client."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
from a2a.client import ClientConfig, create_client
from a2a.client.client import Client
from a2a.types import Message, Part, Role, SendMessageRequest, StreamResponse

from kernel import Kernel
from transports.a2a.config import A2AConfig
from transports.a2a.server import A2ATransport


@asynccontextmanager
async def a2a_server(kernel: Kernel, **overrides: Any) -> AsyncIterator[str]:
    """The A2A transport on an ephemeral loopback port (its whole ``serve``); yields its base URL."""
    overrides.setdefault("sse_keepalive_s", 0.0)
    config = A2AConfig(port=0, **overrides)
    async with anyio.create_task_group() as tg:
        base = await tg.start(A2ATransport().serve, kernel, config)
        try:
            yield base
        finally:
            tg.cancel_scope.cancel()


@asynccontextmanager
async def sdk_client(url: str, *, binding: str = "JSONRPC", streaming: bool = True, headers: dict[str, str] | None = None) -> AsyncIterator[Client]:
    """The a2a-sdk client for the agent at ``url`` (its card read from there), on one binding."""
    async with httpx.AsyncClient(timeout=httpx.Timeout(30.0), headers=headers) as http:
        config = ClientConfig(streaming=streaming, supported_protocol_bindings=[binding], httpx_client=http)
        client = await create_client(url, client_config=config)
        try:
            yield client
        finally:
            await client.close()


def user_message(*parts: Part, context_id: str = "", task_id: str = "") -> SendMessageRequest:
    message = Message(role=Role.ROLE_USER, message_id=uuid.uuid4().hex, parts=list(parts), context_id=context_id, task_id=task_id)
    return SendMessageRequest(message=message)


def text(value: str, **ids: str) -> SendMessageRequest:
    return user_message(Part(text=value), **ids)


async def collect(stream: AsyncIterator[StreamResponse]) -> list[StreamResponse]:
    return [event async for event in stream]


def kinds(events: list[StreamResponse]) -> list[str]:
    return [str(event.WhichOneof("payload")) for event in events]


def streamed_text(events: list[StreamResponse]) -> str:
    return "".join(part.text for e in events if e.HasField("artifact_update") for part in e.artifact_update.artifact.parts)
