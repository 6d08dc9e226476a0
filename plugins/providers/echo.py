"""The offline echo model: the default when no API key is configured.

Deterministic and honest about what it is: it streams the last user message back,
word by word, prefixed with ``echo: ``, with token counts. To exercise tool calls
offline, a prompt of the form ``/tool NAME {json args}`` makes it call that tool
once and then echo the tool's result.

It honours what a client may demand of a real model, so that offline programs work:
a forced tool (``tool_choice``: the named tool, or the first one when any is required)
is called with a minimal instance of its parameters schema; a requested output format
gets a JSON answer — a minimal instance of the schema (``json_schema``), or
``{"echo": <the prompt>}`` (``json_object``).
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator

import anyio
import msgspec

from kernel import Chunk, FinishChunk, ProviderError, ProviderRequest, Settings, TextChunk, ToolCallChunk, UsageChunk
from kernel.model import ImagePart, Message, Usage, parts_text

from .schema_instance import SchemaError, instance

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
        forced = _forced_call(request)
        if forced is None and last.role != "tool":
            wanted = _TOOL_REQUEST.match(_text_of(last))
            if wanted and wanted.group(1) in {t.name for t in request.tools}:
                forced = (wanted.group(1), wanted.group(2) or "{}")
        if forced is not None:
            yield ToolCallChunk(index=0, id="call_echo_0", name=forced[0], arguments=forced[1])
            yield UsageChunk(Usage(input_tokens=prompt_tokens, output_tokens=1))
            yield FinishChunk("tool_calls")
            return
        if last.role == "tool":
            reply = f"echo: tool {last.name} returned: {last.content}"
        else:
            reply = f"echo: {_text_of(last)}"
        if request.output_format is not None:
            reply = _formatted(request, reply)
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


def _forced_call(request: ProviderRequest) -> tuple[str, str] | None:
    """The call a forced ``tool_choice`` demands: (tool name, arguments), or None."""
    choice = request.tool_choice
    if choice is None or choice.mode not in ("tool", "required") or not request.tools:
        return None
    tool = next((t for t in request.tools if t.name == choice.name), None) if choice.mode == "tool" else request.tools[0]
    if tool is None:
        return None
    return tool.name, _json(_instance_of(tool.parameters, f"the parameters of the tool {tool.name!r}"))


def _formatted(request: ProviderRequest, reply: str) -> str:
    """The answer in the requested format: a schema's minimal instance, or the echo as JSON."""
    fmt = request.output_format
    assert fmt is not None
    if fmt.type == "json_object":
        return _json({"echo": reply.removeprefix("echo: ")})
    return _json(_instance_of(fmt.schema, f"the output schema {fmt.name!r}"))


def _instance_of(schema: dict[str, object], what: str) -> object:
    try:
        return instance(schema)
    except SchemaError as exc:
        raise ProviderError(f"the echo model cannot answer {what}: {exc}", code="invalid_request", status=400) from exc


def _json(value: object) -> str:
    return msgspec.json.encode(value).decode()


def provider_factory(settings: Settings) -> EchoProvider:
    return EchoProvider(delay_s=settings.provider.echo.delay_s)
