"""The ``openai`` provider: any OpenAI-compatible chat-completions API.

Works against OpenAI, DeepSeek, vLLM, llama.cpp, Ollama and friends through
``openai.AsyncOpenAI`` (its own httpx2 stack, which runs on asyncio and trio).

* Always streams, with ``stream_options.include_usage`` so the last chunk
  carries token counts.
* The SDK stream is consumed inside ``async with``: when the consumer is
  cancelled (an interrupt) or closes the generator, the upstream HTTP response
  is closed at once instead of generating until garbage collection.
* Chunks are translated to the kernel's provider chunks: ``TextChunk``,
  ``ReasoningChunk`` (``reasoning_content`` / ``reasoning`` deltas, as DeepSeek
  and vLLM send them), ``ToolCallChunk`` fragments keyed by index,
  ``UsageChunk`` and a final ``FinishChunk``.
* SDK failures become :class:`kernel.provider.ProviderError` with a stable code
  (``rate_limited`` with ``retry_after_s``, ``unauthorized``, ``not_found``,
  ``invalid_request``, ``timeout``, ``provider_error``). A stream that ends
  without a finish reason or sends a malformed chunk is a ``provider_error``,
  never a silent success. The API key never appears in an error message.
"""

from __future__ import annotations

import base64
import email.utils
import math
import os
import time
from collections.abc import AsyncGenerator, Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

import anyio
import openai

from kernel import (
    Chunk,
    FinishChunk,
    FinishReason,
    OpenAISettings,
    ProviderError,
    ProviderRequest,
    ReasoningChunk,
    Settings,
    TextChunk,
    ToolCallChunk,
    ToolSpec,
    UsageChunk,
    mask_secret,
)
from kernel.model import FilePart, ImagePart, Message, TextPart, Usage

__all__ = ["OpenAIProvider", "provider_factory", "to_openai_messages", "to_openai_tools"]

# Placeholder key for local OpenAI-compatible servers (llama.cpp, Ollama, vLLM) that need none.
_NO_KEY = "sk-no-key-required"
_FINISH_REASONS: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
}
_MAX_DETAIL_CHARS = 500


# ---------------------------------------------------------------- request conversion


def _file_text(part: FilePart) -> str:
    return f"File: {part.name} ({part.content_type})\n{part.data.decode('utf-8', errors='replace')}"


def _part_block(part: TextPart | ImagePart | FilePart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, ImagePart):
        url = f"data:{part.mime_type};base64,{base64.b64encode(part.data).decode('ascii')}"
        return {"type": "image_url", "image_url": {"url": url}}
    return {"type": "text", "text": _file_text(part)}


def _plain_text(message: Message) -> str:
    """Text-only view, for roles whose content must be a string."""
    bits = [message.content] if message.content else []
    for part in message.parts:
        if isinstance(part, TextPart):
            bits.append(part.text)
        elif isinstance(part, FilePart):
            bits.append(_file_text(part))
        else:
            bits.append(f"[image {part.mime_type}]")
    return "\n\n".join(bits)


def to_openai_message(message: Message) -> dict[str, Any]:
    """One kernel message in chat-completions shape."""
    role = message.role
    if role == "user":
        if not message.parts:
            return {"role": "user", "content": message.content}
        blocks = [{"type": "text", "text": message.content}] if message.content else []
        blocks.extend(_part_block(p) for p in message.parts)
        return {"role": "user", "content": blocks}
    if role == "assistant":
        out: dict[str, Any] = {"role": "assistant"}
        text = _plain_text(message)
        if message.tool_calls:
            out["content"] = text or None
            out["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments or "{}"}}
                for c in message.tool_calls
            ]
        else:
            out["content"] = text
        return out
    if role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id or "", "content": _plain_text(message)}
    return {"role": "system", "content": _plain_text(message)}


def to_openai_messages(messages: Iterable[Message]) -> list[dict[str, Any]]:
    return [to_openai_message(m) for m in messages]


def to_openai_tools(tools: Iterable[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
        for t in tools
    ]


# ---------------------------------------------------------------- errors


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` / ``Retry-After`` (seconds or HTTP date)."""
    if headers is None:
        return None
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) / divisor
        except ValueError:
            continue
        if math.isfinite(seconds) and seconds >= 0:
            return seconds
    value = headers.get("retry-after")
    if value:
        try:
            parsed = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        return max(0.0, parsed.timestamp() - time.time())
    return None


def _upstream_detail(exc: openai.APIStatusError) -> str:
    body = exc.body
    message: Any = None
    if isinstance(body, Mapping):
        error = body.get("error", body)
        message = error.get("message") if isinstance(error, Mapping) else error
    if not message:
        try:
            message = exc.response.text
        except Exception:  # the body may not have been read (streamed response)
            message = None
    text = str(message or exc.message or "").strip()
    if len(text) > _MAX_DETAIL_CHARS:
        text = text[:_MAX_DETAIL_CHARS] + "…"
    return text


def _safe_url(url: str) -> str:
    """scheme://host[:port]/path: no credentials, no query string."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        return f"{parts.scheme}://{host}{parts.path}".rstrip("/")
    except ValueError:
        return "the configured base URL"


# ---------------------------------------------------------------- the provider


class OpenAIProvider:
    """A :class:`kernel.provider.Provider` over ``openai.AsyncOpenAI``."""

    name = "openai"

    def __init__(self, settings: OpenAISettings | None = None, *, client: openai.AsyncOpenAI | None = None) -> None:
        self.settings = settings or OpenAISettings()
        self._model = self.settings.model
        api_key = self.settings.api_key or os.environ.get("OPENAI_API_KEY") or None
        if api_key is None and self.settings.base_url:
            api_key = _NO_KEY  # local servers accept anything
        self._secret = api_key if api_key and api_key != _NO_KEY else None
        if client is None:
            if api_key is None:
                raise ProviderError(
                    "no API key configured for the openai provider (set OPENAI_API_KEY or provider.openai.api_key)",
                    code="unauthorized",
                )
            client = openai.AsyncOpenAI(
                api_key=api_key,
                base_url=self.settings.base_url,
                timeout=self.settings.timeout_s,
                max_retries=self.settings.max_retries,
            )
        self._client = client
        self._where = _safe_url(str(client.base_url))

    @classmethod
    def from_settings(cls, settings: Settings) -> OpenAIProvider:
        return cls(settings.provider.openai)

    @property
    def model(self) -> str:
        return self._model

    @property
    def client(self) -> openai.AsyncOpenAI:
        return self._client

    def __repr__(self) -> str:
        return f"OpenAIProvider(model={self._model!r}, base_url={self._where!r}, api_key={mask_secret(self._secret)!r})"

    def build_request(self, request: ProviderRequest) -> dict[str, Any]:
        """The keyword arguments for ``chat.completions.create`` (also handy for tests)."""
        kwargs: dict[str, Any] = {
            "model": request.model or self._model,
            "messages": to_openai_messages(request.messages),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            kwargs["tools"] = to_openai_tools(request.tools)
        if request.max_tokens is not None:
            kwargs["max_tokens"] = request.max_tokens
        if request.temperature is not None:
            kwargs["temperature"] = request.temperature
        return kwargs

    async def stream(self, request: ProviderRequest) -> AsyncGenerator[Chunk, None]:
        kwargs = self.build_request(request)
        try:
            upstream = await self._client.chat.completions.create(**kwargs)
        except openai.OpenAIError as exc:
            raise self._error(exc) from exc
        finish: FinishReason | None = None
        async with upstream:
            try:
                iterator = upstream.__aiter__()
                while True:
                    try:
                        chunk = await iterator.__anext__()
                    except StopAsyncIteration:
                        break
                    except openai.OpenAIError as exc:
                        raise self._error(exc, streaming=True) from exc
                    except (ValueError, TypeError) as exc:  # json.JSONDecodeError is a ValueError
                        raise self._malformed(exc) from exc
                    try:
                        out, reason = _translate(chunk)
                    except (AttributeError, TypeError, ValueError) as exc:
                        raise self._malformed(exc) from exc
                    if reason is not None:
                        finish = reason
                    for item in out:
                        yield item
            finally:
                # Close the response even when cancelled: a cancelled await inside
                # ``__aexit__`` could otherwise leave the socket open until GC.
                with anyio.CancelScope(shield=True):
                    await upstream.close()
        if finish is None:
            raise ProviderError(
                f"the stream from {self._where} ended before a finish reason (connection cut?)",
                code="provider_error",
            )
        yield FinishChunk(finish)

    async def list_models(self) -> list[str]:
        """The upstream's models (``GET /models``); an upstream without that route offers none."""
        try:
            page = await self._client.models.list()
        except openai.OpenAIError as exc:
            raise self._error(exc) from exc
        return [model.id async for model in page]

    async def aclose(self) -> None:
        await self._client.close()

    # ------------------------------------------------------------ errors

    def _redact(self, text: str) -> str:
        if self._secret and self._secret in text:
            text = text.replace(self._secret, mask_secret(self._secret) or "…")
        return text

    def _malformed(self, exc: BaseException) -> ProviderError:
        return ProviderError(
            self._redact(f"malformed stream chunk from {self._where}: {type(exc).__name__}: {exc}"[:_MAX_DETAIL_CHARS]),
            code="provider_error",
        )

    def _error(self, exc: openai.OpenAIError, *, streaming: bool = False) -> ProviderError:
        where = self._where
        if isinstance(exc, openai.APITimeoutError):
            return ProviderError(
                f"request to {where} timed out (timeout {self.settings.timeout_s:g} s)", code="timeout"
            )
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__ or exc.__context__
            reason = f": {type(cause).__name__}: {cause}" if cause else ""
            what = f"the stream from {where} broke off" if streaming else f"connection to {where} failed"
            return ProviderError(self._redact(f"{what}{reason}"), code="provider_error")
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            detail = self._redact(_upstream_detail(exc))
            suffix = f": {detail}" if detail else ""
            if isinstance(exc, openai.RateLimitError):
                retry = parse_retry_after(exc.response.headers)
                hint = f" (retry after {retry:g} s)" if retry is not None else ""
                return ProviderError(
                    f"rate limited by {where} (HTTP {status}){hint}{suffix}",
                    code="rate_limited",
                    status=status,
                    retry_after_s=retry,
                )
            if isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError)):
                return ProviderError(
                    f"{where} rejected the API key (HTTP {status}){suffix}", code="unauthorized", status=status
                )
            if isinstance(exc, openai.NotFoundError):
                return ProviderError(
                    f"not found at {where} (HTTP {status}; model {self._model!r}?){suffix}", code="not_found", status=status
                )
            if isinstance(exc, (openai.BadRequestError, openai.UnprocessableEntityError)) or status in (400, 413, 422):
                return ProviderError(
                    f"{where} rejected the request (HTTP {status}){suffix}", code="invalid_request", status=status
                )
            return ProviderError(f"upstream error from {where} (HTTP {status}){suffix}", code="provider_error", status=status)
        if isinstance(exc, openai.APIError):  # an error event inside the stream
            return ProviderError(self._redact(f"error in the stream from {where}: {exc.message}"), code="provider_error")
        return ProviderError(self._redact(f"openai client error: {exc}"), code="provider_error")


def _translate(chunk: Any) -> tuple[list[Chunk], FinishReason | None]:
    """One SDK ``ChatCompletionChunk`` → kernel chunks (finish reason returned apart)."""
    out: list[Chunk] = []
    finish: FinishReason | None = None
    for choice in chunk.choices or ():
        if (choice.index or 0) != 0:
            continue  # n > 1 is never requested
        delta = choice.delta
        if delta is not None:
            extra = delta.model_extra or {}
            reasoning = extra.get("reasoning_content") or extra.get("reasoning")
            if reasoning:
                if not isinstance(reasoning, str):
                    raise TypeError(f"reasoning delta is {type(reasoning).__name__}, not str")
                out.append(ReasoningChunk(reasoning))
            if delta.content:
                if not isinstance(delta.content, str):
                    raise TypeError(f"content delta is {type(delta.content).__name__}, not str")
                out.append(TextChunk(delta.content))
            for position, call in enumerate(delta.tool_calls or ()):
                function = call.function
                out.append(
                    ToolCallChunk(
                        index=call.index if call.index is not None else position,
                        id=call.id or None,
                        name=(function.name or None) if function is not None else None,
                        arguments=(function.arguments or "") if function is not None else "",
                    )
                )
        if choice.finish_reason:
            finish = _FINISH_REASONS.get(choice.finish_reason, "stop")
    usage = chunk.usage
    if usage is not None:
        out.append(
            UsageChunk(Usage(input_tokens=int(usage.prompt_tokens or 0), output_tokens=int(usage.completion_tokens or 0)))
        )
    return out, finish


def provider_factory(settings: Settings | OpenAISettings) -> OpenAIProvider:
    """Factory for ``gateway_register_providers``: ``register("openai", provider_factory)``."""
    if isinstance(settings, OpenAISettings):
        return OpenAIProvider(settings)
    return OpenAIProvider.from_settings(settings)

