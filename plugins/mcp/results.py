"""An MCP tool result as the kernel sees a tool's: the text the model reads, or a failure.

The kernel's tool outcomes are data: a result the server marks ``isError`` raises
:class:`kernel.ToolFailure` (outcome ``error``, its text the reason), every other one
is text. Text blocks are the text. Structured content is the text when the server sent
no text block (a server that sends both puts the same JSON in the text, as the MCP
specification asks). Images, audio and binary resources cannot be put in a tool
message of the model APIs, so the model is told what came and how big it was;
embedded text resources are given with their URI, resource links as a line naming them.
"""

from __future__ import annotations

from typing import Any

import msgspec
from mcp import types

from kernel import ToolFailure

NO_OUTPUT = "(no output)"


def result_text(result: types.CallToolResult) -> str:
    """What the model reads for a successful call; raises ToolFailure for an ``isError`` one."""
    pieces = [_block_text(block) for block in result.content]
    if result.structured_content is not None and not any(isinstance(block, types.TextContent) for block in result.content):
        pieces.insert(0, _json(result.structured_content))
    text = "\n".join(piece for piece in pieces if piece)
    if result.is_error:
        raise ToolFailure(text or "the tool reported an error without saying why")
    return text or NO_OUTPUT


def _block_text(block: types.ContentBlock) -> str:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent | types.AudioContent):
        return f"[{block.type} {block.mime_type}, {_decoded_size(block.data)} bytes, not shown to the model]"
    if isinstance(block, types.ResourceLink):
        label = f" {block.name}" if block.name else ""
        return f"[resource link{label}: {block.uri}]"
    resource = block.resource
    if isinstance(resource, types.TextResourceContents):
        return f"[resource {resource.uri}]\n{resource.text}"
    kind = f" {resource.mime_type}" if resource.mime_type else ""
    return f"[resource {resource.uri}{kind}, {_decoded_size(resource.blob)} bytes, not shown to the model]"


def _decoded_size(data: str) -> int:
    """The size of base64 ``data`` once decoded, without decoding it."""
    return len(data) * 3 // 4 - len(data) + len(data.rstrip("="))


def _json(value: Any) -> str:
    try:
        return msgspec.json.encode(value).decode()
    except (TypeError, msgspec.EncodeError):
        return str(value)
