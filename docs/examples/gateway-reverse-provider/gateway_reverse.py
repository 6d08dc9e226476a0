"""reverse: a toy model that answers with the user's last message reversed.

It shows the whole provider seam (the chunk types ``kernel`` exports): ``stream`` is an async
generator of chunks — text pieces, then the token usage, then why it stopped.
The run loop consumes it inside ``aclosing``, so an interrupt closes the
generator at its next ``await`` and nothing keeps running behind the user's back.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from typing import Any

import anyio

from kernel import Chunk, FinishChunk, ProviderRequest, Settings, TextChunk, UsageChunk
from kernel.model import Message, TextPart, Usage
from plugins.hookspecs import hookimpl


def _text(message: Message) -> str:
    return message.content or " ".join(p.text for p in message.parts if isinstance(p, TextPart))


class ReverseProvider:
    """Streams the reversed prompt ``chunk_chars`` characters at a time; one chunk = one token."""

    name = "reverse"

    def __init__(self, *, chunk_chars: int = 4, delay_s: float = 0.0) -> None:
        self.chunk_chars = chunk_chars
        self.delay_s = delay_s

    @property
    def model(self) -> str:
        return "reverse-1"

    async def stream(self, request: ProviderRequest) -> AsyncGenerator[Chunk, None]:
        answer = _text(request.messages[-1])[::-1] if request.messages else ""
        pieces = [answer[i : i + self.chunk_chars] for i in range(0, len(answer), self.chunk_chars)]
        prompt_tokens = sum(len(_text(m)) // self.chunk_chars + 1 for m in request.messages)
        for sent, piece in enumerate(pieces):
            if request.max_tokens is not None and sent >= request.max_tokens:
                yield UsageChunk(Usage(input_tokens=prompt_tokens, output_tokens=sent))
                yield FinishChunk("length")
                return
            if self.delay_s:
                await anyio.sleep(self.delay_s)  # an interrupt lands here
            yield TextChunk(piece)
        yield UsageChunk(Usage(input_tokens=prompt_tokens, output_tokens=len(pieces)))
        yield FinishChunk("stop")

    async def aclose(self) -> None:
        """Called when the kernel stops or the settings change: nothing to release here."""


def provider_factory(settings: Settings) -> ReverseProvider:
    """Called by the kernel on the first prompt that needs this provider (and again
    after a settings change); ``settings`` is the gateway's whole configuration."""
    return ReverseProvider()


@hookimpl
def gateway_register_providers(register: Callable[[str, Any], None]) -> None:
    register("reverse", provider_factory)
