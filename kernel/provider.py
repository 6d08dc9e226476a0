"""The provider seam: what the run loop needs from an LLM, and nothing more.

A provider turns a :class:`ProviderRequest` into an async stream of small chunks.
Tool calls arrive as fragments keyed by index (as OpenAI-compatible APIs send
them); the run loop assembles them. Providers are plugins (``plugins/``).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any, Literal, Protocol, runtime_checkable

import msgspec

from .model import Message, OutputFormat, ToolChoice, Usage


class ToolSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A tool as the model sees it (OpenAI function-calling shape)."""

    name: str
    description: str
    parameters: dict[str, Any]


class ProviderRequest(msgspec.Struct, frozen=True, kw_only=True):
    model: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int | None = None
    temperature: float | None = None
    #: Nucleus sampling (None: the upstream's default).
    top_p: float | None = None
    #: Sequences at which the model stops (not part of the answer).
    stop: tuple[str, ...] = ()
    #: False: nobody needs the answer piece by piece; a provider may fetch it whole.
    stream: bool = True
    #: The answer's required shape, on every call of a run (an answer with tool calls is free).
    output_format: OutputFormat | None = None
    #: Set on the run's first call only (None: the model decides); ``tools`` holds the named tool.
    tool_choice: ToolChoice | None = None
    #: False: at most one tool call per answer (None: the upstream's default).
    parallel_tool_calls: bool | None = None
    #: The W3C trace context the upstream request carries on (``traceparent`` header), if any.
    traceparent: str | None = None


class TextChunk(msgspec.Struct, frozen=True):
    text: str


class ReasoningChunk(msgspec.Struct, frozen=True):
    text: str


class ToolCallChunk(msgspec.Struct, frozen=True, kw_only=True):
    """A fragment of a tool call; id and name usually come only in the first one."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


class UsageChunk(msgspec.Struct, frozen=True):
    usage: Usage


FinishReason = Literal["stop", "length", "tool_calls", "content_filter"]


class FinishChunk(msgspec.Struct, frozen=True):
    reason: FinishReason


class ResponseStarted(msgspec.Struct, frozen=True):
    """The upstream accepted the request and its answer is on the way (its status and headers
    arrived, nothing of the content yet). Optional: a provider that streams over HTTP yields it
    first, so that a dialect holding its response until the first output can send its headers
    now (the run's ``model_responding`` event)."""


Chunk = TextChunk | ReasoningChunk | ToolCallChunk | UsageChunk | FinishChunk | ResponseStarted


# ``upstream_unauthorized``: the upstream refused the gateway's own key (or none is set) — the
# operator's to fix, never answered like a client's refused token (kernel/errors.py).
ProviderErrorCode = Literal["provider_error", "rate_limited", "timeout", "upstream_unauthorized", "invalid_request", "not_found"]


class ProviderError(Exception):
    """A failure talking to the model; ``code`` is one of the kernel's error codes."""

    def __init__(
        self,
        message: str,
        *,
        code: ProviderErrorCode = "provider_error",
        status: int | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.retry_after_s = retry_after_s


@runtime_checkable
class Provider(Protocol):
    """An LLM backend. ``stream`` is an async generator function.

    The run loop consumes it inside ``contextlib.aclosing`` so that an interrupt
    (a cancelled scope) closes the upstream response at once.
    """

    name: str

    @property
    def model(self) -> str: ...

    def stream(self, request: ProviderRequest) -> AsyncGenerator[Chunk, None]: ...

    async def aclose(self) -> None: ...

    # Optional: ``async def list_models(self) -> list[str]``, the models the backend offers
    # (``ListModels``); a provider without it offers its configured model only.
