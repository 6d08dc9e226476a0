"""Wire shapes of the OpenAI-compatible surface: the chat-completions request (the
fields the gateway honours), the answers (``chat.completion``, ``chat.completion.chunk``,
the model list) exactly as OpenAI sends them, and errors in OpenAI's shape."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

# ---------------------------------------------------------------- errors


class OpenAIError(msgspec.Struct, frozen=True, kw_only=True):
    """An error answer: its HTTP status (and headers) and OpenAI's error body."""

    status: int
    message: str
    type: str = "invalid_request_error"
    param: str | None = None
    code: str | None = None
    headers: dict[str, str] = {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


# ---------------------------------------------------------------- request


class FunctionDef(msgspec.Struct, kw_only=True):
    name: str
    description: str = ""
    parameters: dict[str, Any] | None = None


class ToolDef(msgspec.Struct, kw_only=True):
    type: str
    function: FunctionDef | None = None


class StreamOptions(msgspec.Struct, kw_only=True):
    include_usage: bool = False


class InFunctionCall(msgspec.Struct, kw_only=True):
    name: str
    arguments: str = ""


class InToolCall(msgspec.Struct, kw_only=True):
    id: str
    function: InFunctionCall
    type: str = "function"


class InMessage(msgspec.Struct, kw_only=True):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[InToolCall] | None = None
    tool_call_id: str | None = None


class ChatRequest(msgspec.Struct, kw_only=True):
    """The fields the gateway honours; other OpenAI fields are accepted and ignored."""

    messages: list[InMessage]
    model: str = ""
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float | None = None
    tools: list[ToolDef] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    #: ``{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}``,
    #: ``{"type": "json_object"}`` or ``{"type": "text"}``.
    response_format: dict[str, Any] | None = None
    n: int | None = None


# ---------------------------------------------------------------- answers


class OutUsage(msgspec.Struct, kw_only=True):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class OutFunction(msgspec.Struct, kw_only=True):
    name: str
    arguments: str


class OutToolCall(msgspec.Struct, kw_only=True):
    id: str
    type: str
    function: OutFunction


class OutToolCallDelta(msgspec.Struct, kw_only=True):
    index: int
    id: str
    type: str
    function: OutFunction


class OutMessage(msgspec.Struct, kw_only=True, omit_defaults=True):
    role: str
    content: str | None
    refusal: None
    tool_calls: list[OutToolCall] | None = None
    reasoning_content: str | None = None


class OutChoice(msgspec.Struct, kw_only=True):
    index: int
    message: OutMessage
    logprobs: None
    finish_reason: str


class ChatCompletion(msgspec.Struct, kw_only=True):
    id: str
    object: str
    created: int
    model: str
    choices: list[OutChoice]
    usage: OutUsage
    system_fingerprint: None = None


class OutDelta(msgspec.Struct, kw_only=True, omit_defaults=True):
    role: str | None = None
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[OutToolCallDelta] | None = None


class OutChunkChoice(msgspec.Struct, kw_only=True):
    index: int
    delta: OutDelta
    logprobs: None
    finish_reason: str | None


class Chunk(msgspec.Struct, kw_only=True):
    id: str
    object: str
    created: int
    model: str
    system_fingerprint: None
    choices: list[OutChunkChoice]


class UsageChunk(Chunk, kw_only=True):
    """With ``stream_options.include_usage`` every chunk carries ``usage`` (null but the last)."""

    usage: OutUsage | None


class ModelInfo(msgspec.Struct, kw_only=True):
    id: str
    object: str
    created: int
    owned_by: str


class ModelList(msgspec.Struct, kw_only=True):
    object: str
    data: list[ModelInfo]
