"""Test helpers for the kernel and for transport authors (public, documented).

``ScriptedProvider`` plays back scripted model turns, so a test can make the
model call tools, stream slowly, or fail, without a network.
``running_kernel`` starts a kernel on a temporary SQLite file.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Sequence
from pathlib import Path

import anyio

from .commands import SlashCommand
from .kernel import Kernel
from .model import ToolSource, Usage
from .observe import ObserverFactory
from .provider import Chunk, FinishChunk, Provider, ProviderError, ProviderErrorCode, ProviderRequest, TextChunk, ToolCallChunk, UsageChunk
from .settings import AgentSettings, Settings
from .store import SQLiteStore, Store
from .tools import Tool


def text_turn(*pieces: str, usage: tuple[int, int] = (3, 5)) -> list[Chunk]:
    """A model turn that streams ``pieces`` and stops."""
    return [*(TextChunk(p) for p in pieces), UsageChunk(Usage(input_tokens=usage[0], output_tokens=usage[1])), FinishChunk("stop")]


def tool_turn(name: str, arguments: str = "{}", *, call_id: str = "call_1", text: str = "") -> list[Chunk]:
    """A model turn that asks for one tool, its arguments split over two fragments."""
    half = len(arguments) // 2
    chunks: list[Chunk] = [TextChunk(text)] if text else []
    chunks += [
        ToolCallChunk(index=0, id=call_id, name=name, arguments=arguments[:half]),
        ToolCallChunk(index=0, arguments=arguments[half:]),
        UsageChunk(Usage(input_tokens=4, output_tokens=2)),
        FinishChunk("tool_calls"),
    ]
    return chunks


class ScriptedProvider:
    """Plays back one scripted turn per model call; the last one repeats.

    ``delay_s`` sleeps before each chunk (to test interrupts and slow streams);
    an exception in a script is raised at that point of the stream.
    """

    name = "scripted"

    def __init__(self, turns: Sequence[Sequence[Chunk | BaseException]] | None = None, *, delay_s: float = 0.0, model: str = "scripted-1") -> None:
        self.turns = [list(t) for t in (turns or [text_turn("Hello", " world")])]
        self.delay_s = delay_s
        self._model = model
        self.requests: list[ProviderRequest] = []
        self.closed_streams = 0

    @property
    def model(self) -> str:
        return self._model

    async def stream(self, request: ProviderRequest) -> AsyncGenerator[Chunk, None]:
        self.requests.append(request)
        turn = self.turns[min(len(self.requests) - 1, len(self.turns) - 1)]
        try:
            for item in turn:
                if self.delay_s:
                    await anyio.sleep(self.delay_s)
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            self.closed_streams += 1

    async def aclose(self) -> None:
        return None


def failing_turn(message: str = "upstream exploded", *, code: ProviderErrorCode = "provider_error", status: int = 500) -> list[Chunk | BaseException]:
    return [ProviderError(message, code=code, status=status)]


@contextlib.asynccontextmanager
async def running_kernel(
    provider: Provider | None = None,
    *,
    settings: Settings | None = None,
    tools: Iterable[Tool] = (),
    commands: Iterable[SlashCommand] = (),
    db_path: str | Path | None = None,
    agent: AgentSettings | None = None,
    store: Store | None = None,
    tool_sources: Iterable[ToolSource] = (),
    observers: Iterable[ObserverFactory] = (),
) -> AsyncIterator[Kernel]:
    """A kernel on ``store`` — by default a SQLite file (``db_path``, or a temporary one) —
    whose provider is ``provider`` (scripted by default), with the tools of ``tool_sources``
    (MCP servers) offered to every session."""
    chosen: Provider = provider or ScriptedProvider()
    settings = settings or Settings()
    if agent is not None:
        settings.agents = [agent]
    settings.provider.default = "scripted"
    with tempfile.TemporaryDirectory() as tmp:
        path = db_path or Path(tmp) / "gateway.db"
        kernel = Kernel(
            settings,
            providers={"scripted": lambda _s: chosen},
            tools=tools,
            commands=commands,
            store=store if store is not None else SQLiteStore(path),
            tool_sources=tool_sources,
            observers=observers,
        )
        async with kernel:
            yield kernel
