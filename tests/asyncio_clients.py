"""Running asyncio-only clients (``websockets``, the ACP SDK) from tests on either backend."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import anyio.to_thread
import sniffio

T = TypeVar("T")


async def in_asyncio(fn: Callable[[], Awaitable[T]]) -> T:
    """Run an asyncio-only client coroutine: inline on asyncio, in a worker thread on trio."""
    if sniffio.current_async_library() == "asyncio":
        return await fn()
    return await anyio.to_thread.run_sync(lambda: asyncio.run(fn()))  # type: ignore[arg-type]
