"""Helpers for the Packet tests: kernel factories with test providers, a slow echo."""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator
from typing import Any

import anyio

from kernel import Kernel, SQLiteStore
from kernel.model import Usage
from kernel.provider import (
    Chunk,
    FinishChunk,
    ProviderRequest,
    TextChunk,
    ToolCallChunk,
    UsageChunk,
)
from kernel.settings import Settings
from plugins.commands.builtin import BUILTIN_COMMANDS
from plugins.providers.echo import EchoProvider
from plugins.providers.openai import provider_factory as openai_factory
from plugins.tools.builtin import BUILTIN_TOOLS
from plugins.tools.memory import MEMORY_TOOLS

ALL_TOOLS = (*BUILTIN_TOOLS, *MEMORY_TOOLS)


class SlowEcho:
    """Echoes the last user message; a message starting with ``slow`` streams one word
    per ``slow_s`` seconds (long enough to time out or be shut down mid-stream)."""

    name = "slow-echo"
    model = "slow-echo"

    def __init__(self, slow_s: float = 0.5) -> None:
        self.slow_s = slow_s

    async def stream(self, request: ProviderRequest) -> AsyncGenerator[Chunk, None]:
        text = request.messages[-1].content
        for word in re.findall(r"\S+\s*", f"echo: {text}"):
            if text.startswith("slow"):
                await anyio.sleep(self.slow_s)
            yield TextChunk(word)
        yield UsageChunk(Usage(input_tokens=1, output_tokens=1))
        yield FinishChunk("stop")

    async def aclose(self) -> None:
        return None


def calls_turn(*calls: tuple[str, str]) -> list[Chunk]:
    """One model turn asking for several tools at once: ``(name, json arguments)``."""
    chunks: list[Chunk] = [ToolCallChunk(index=i, id=f"call_{i}", name=n, arguments=a) for i, (n, a) in enumerate(calls)]
    return [*chunks, FinishChunk("tool_calls")]


def kernel_factory(provider: Any = None, tools: Any = ALL_TOOLS) -> Any:
    """A factory for BackendServer: our tools, and ``provider`` as the model (None: the
    gateway's usual choice, the offline echo model without an API key)."""

    def make(settings: Settings) -> Kernel:
        settings.provider.default = "test" if provider is not None else "auto"
        return Kernel(
            settings,
            providers={"test": lambda _s: provider, "echo": lambda _s: EchoProvider(), "openai": openai_factory},
            tools=tools,
            commands=BUILTIN_COMMANDS,
            store=SQLiteStore(settings.store.path),
        )

    return make
