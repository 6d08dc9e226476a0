"""Wire shapes of Anthropic's Messages API: the request (the fields the gateway reads;
unknown fields are accepted and ignored, as new client versions add them every month),
the answer, the stream's events, the model list and errors, as Anthropic sends them.

Content blocks come in as plain JSON objects (``dict``), not typed Structs: a client
replays blocks the gateway must keep opaque (``thinking``, ``redacted_thinking``, blocks
of types newer than this module) and the codec reads only the keys it needs.
"""

from __future__ import annotations

from typing import Any

import msgspec

# ---------------------------------------------------------------- errors


class AnthropicError(msgspec.Struct, frozen=True, kw_only=True):
    """An error answer: its HTTP status, headers and Anthropic's error body."""

    status: int
    type: str
    message: str
    headers: dict[str, str] = {}

    def body(self, request_id: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"type": "error", "error": {"type": self.type, "message": self.message}}
        if request_id is not None:
            body["request_id"] = request_id
        return body


# ---------------------------------------------------------------- request


class ToolDef(msgspec.Struct, kw_only=True):
    """A tool of the request: a client tool (``input_schema``) or a server tool (``type``
    such as ``web_search_20250305``), which the gateway cannot run."""

    name: str
    description: str = ""
    input_schema: dict[str, Any] | None = None
    type: str | None = None


class InMessage(msgspec.Struct, kw_only=True):
    role: str
    content: str | list[dict[str, Any]]


class MessagesRequest(msgspec.Struct, kw_only=True):
    model: str
    messages: list[InMessage]
    #: Required by the API; None here so that its absence gets the API's own message.
    max_tokens: int | None = None
    system: str | list[dict[str, Any]] | None = None
    stream: bool | None = None
    tools: list[ToolDef] | None = None
    tool_choice: dict[str, Any] | None = None
    stop_sequences: list[str] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    thinking: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    #: ``{"effort", "format"}``: ``format`` is structured output (``{"type": "json_schema", "schema"}``).
    output_config: dict[str, Any] | None = None
    #: The same format as the structured-outputs beta sent it, before ``output_config``.
    output_format: dict[str, Any] | None = None


class CountTokensRequest(msgspec.Struct, kw_only=True):
    model: str
    messages: list[InMessage]
    system: str | list[dict[str, Any]] | None = None
    tools: list[ToolDef] | None = None


class TokenCount(msgspec.Struct, kw_only=True):
    input_tokens: int


# ---------------------------------------------------------------- answer


class TextBlock(msgspec.Struct, kw_only=True, tag="text", tag_field="type"):
    text: str


class ThinkingBlock(msgspec.Struct, kw_only=True, tag="thinking", tag_field="type"):
    thinking: str
    signature: str


class ToolUseBlock(msgspec.Struct, kw_only=True, tag="tool_use", tag_field="type"):
    id: str
    name: str
    input: Any


Block = TextBlock | ThinkingBlock | ToolUseBlock


class Usage(msgspec.Struct, kw_only=True):
    input_tokens: int
    output_tokens: int


class Message(msgspec.Struct, kw_only=True, tag="message", tag_field="type"):
    id: str
    role: str
    model: str
    content: list[Block]
    stop_reason: str | None
    stop_sequence: str | None
    usage: Usage


# ---------------------------------------------------------------- stream


class TextDelta(msgspec.Struct, kw_only=True, tag="text_delta", tag_field="type"):
    text: str


class ThinkingDelta(msgspec.Struct, kw_only=True, tag="thinking_delta", tag_field="type"):
    thinking: str


class SignatureDelta(msgspec.Struct, kw_only=True, tag="signature_delta", tag_field="type"):
    signature: str


class InputJsonDelta(msgspec.Struct, kw_only=True, tag="input_json_delta", tag_field="type"):
    partial_json: str


class MessageStart(msgspec.Struct, kw_only=True, tag="message_start", tag_field="type"):
    message: Message


class ContentBlockStart(msgspec.Struct, kw_only=True, tag="content_block_start", tag_field="type"):
    index: int
    content_block: Block


class ContentBlockDelta(msgspec.Struct, kw_only=True, tag="content_block_delta", tag_field="type"):
    index: int
    delta: TextDelta | ThinkingDelta | SignatureDelta | InputJsonDelta


class ContentBlockStop(msgspec.Struct, kw_only=True, tag="content_block_stop", tag_field="type"):
    index: int


class StopDelta(msgspec.Struct, kw_only=True):
    stop_reason: str | None
    stop_sequence: str | None


class MessageDelta(msgspec.Struct, kw_only=True, tag="message_delta", tag_field="type"):
    delta: StopDelta
    #: Cumulative: the run's whole usage (input and output tokens).
    usage: Usage


class MessageStop(msgspec.Struct, kw_only=True, tag="message_stop", tag_field="type"):
    pass


class Ping(msgspec.Struct, kw_only=True, tag="ping", tag_field="type"):
    pass


StreamEvent = MessageStart | ContentBlockStart | ContentBlockDelta | ContentBlockStop | MessageDelta | MessageStop | Ping


# ---------------------------------------------------------------- models


class ModelInfo(msgspec.Struct, kw_only=True, tag="model", tag_field="type"):
    id: str
    display_name: str
    #: RFC 3339.
    created_at: str


class ModelPage(msgspec.Struct, kw_only=True):
    data: list[ModelInfo]
    has_more: bool
    first_id: str | None
    last_id: str | None
