"""The offline echo model: the default when no API key is configured.

Deterministic and honest about what it is: it streams the last user message back,
word by word, prefixed with ``echo: ``, with token counts. To exercise tool calls
offline, a prompt of the form ``/tool NAME {json args}`` makes it call that tool
once and then echo the tool's result.
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator

import anyio

from kernel import Chunk, FinishChunk, ProviderRequest, Settings, TextChunk, ToolCallChunk, UsageChunk
from kernel.model import ImagePart, Message, Usage, parts_text

_TOOL_REQUEST = re.compile(r"^/tool\s+(\S+)\s*(\{.*\})?\s*$", re.S)


def _tokens(text: str) -> int:
    return max(1, len(text.split())) if text else 0


def _text_of(message: Message) -> str:
    """The message as the echo repeats it; an image shows its size, proof that its bytes arrived."""
    if message.content:
        return message.content
    return " ".join(
        f"[image {p.mime_type}, {len(p.data)} bytes]" if isinstance(p, ImagePart) else parts_text((p,)) for p in message.parts
    )


class EchoProvider:
    name = "echo"

    def __init__(self, *, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s

    @property
    def model(self) -> str:
        return "echo"

    async def stream(self, request: ProviderRequest) -> AsyncGenerator[Chunk, None]:
        messages = request.messages
        prompt_tokens = sum(_tokens(_text_of(m)) for m in messages)
        last = messages[-1] if messages else Message(role="user", content="")
        if last.role == "tool":
            reply = f"echo: tool {last.name} returned: {last.content}"
        else:
            text = _text_of(last)
            wanted = _TOOL_REQUEST.match(text)
            tool_names = {t.name for t in request.tools}
            if wanted and wanted.group(1) in tool_names:
                yield ToolCallChunk(index=0, id="call_echo_0", name=wanted.group(1), arguments=wanted.group(2) or "{}")
                yield UsageChunk(Usage(input_tokens=prompt_tokens, output_tokens=1))
                yield FinishChunk("tool_calls")
                return
            reply = f"echo: {text}"
        words = re.findall(r"\S+\s*|\s+", reply)
        limit = request.max_tokens
        for i, word in enumerate(words):
            if limit is not None and i >= limit:
                yield UsageChunk(Usage(input_tokens=prompt_tokens, output_tokens=limit))
                yield FinishChunk("length")
                return
            if self.delay_s:
                await anyio.sleep(self.delay_s)
            yield TextChunk(word)
        yield UsageChunk(Usage(input_tokens=prompt_tokens, output_tokens=_tokens(reply)))
        yield FinishChunk("stop")

    async def list_models(self) -> list[str]:
        return ["echo"]

    async def aclose(self) -> None:
        return None


def provider_factory(settings: Settings) -> EchoProvider:
    return EchoProvider(delay_s=settings.provider.echo.delay_s)
