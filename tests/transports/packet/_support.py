"""Helpers for the Packet tests: kernel factories with test providers, a slow echo, programs."""

from __future__ import annotations

import re
import threading
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
#: A program's ``from core import`` line, pointed at the stand-in for the reference package.
CORE_IMPORT = "from tests.transports.packet.example_core import"


def run_program(code: str, **names: Any) -> dict[str, Any]:
    """Execute a program written for the reference ``core`` package (its import line
    redirected to :mod:`.example_core`); ``names`` are globals it finds defined."""
    namespace: dict[str, Any] = {"__name__": "example", **names}
    exec(compile(code.replace("from core import", CORE_IMPORT), "example", "exec"), namespace)
    return namespace


class SlowEcho:
    """Echoes the last user message. A message starting with ``slow`` is held: its turn
    runs (it can time out, be interrupted or shut down) and streams only once
    ``release`` is set. ``log`` records, in order, each held turn's ``start`` and how
    it ended: ``done`` (streamed) or ``stopped`` (cancelled while held)."""

    name = "slow-echo"
    model = "slow-echo"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.held = threading.Event()  # set once a held turn runs
        self.log: list[tuple[str, str]] = []

    async def stream(self, request: ProviderRequest) -> AsyncGenerator[Chunk, None]:
        text = request.messages[-1].content
        if text.startswith("slow"):
            self.log.append(("start", text))
            self.held.set()
            try:
                while not self.release.is_set():
                    await anyio.sleep(0.01)
            except anyio.get_cancelled_exc_class():
                self.log.append(("stopped", text))
                raise
            self.log.append(("done", text))
        for word in re.findall(r"\S+\s*", f"echo: {text}"):
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
