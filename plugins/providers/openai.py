"""The ``openai`` provider: any OpenAI-compatible chat-completions API.

Works against OpenAI, DeepSeek, vLLM, llama.cpp, Ollama and friends, configured as an
``openai.AsyncOpenAI`` (its own httpx2/httpcore2 stack, which runs on asyncio and trio).

* The SDK does what it is good at: client configuration, auth, base URL, timeouts,
  the retry policy, ``models.list``, typed HTTP errors. A completion itself goes out
  through :class:`upstream_http.ChatHop` — the SDK client's own httpcore2 pool, its
  headers built once, the body msgspec encoded once per request — and the answer comes
  back raw: the SDK's request path cost 1 ms per request over the pool's (issue 27),
  and its own stream builds a pydantic model per chunk, which cost most of the gateway's
  CPU per token (issue 17).
* Streams, with ``stream_options.include_usage`` so the last chunk carries token
  counts — unless nobody needs the answer piece by piece (``ProviderRequest.stream``
  false: a non-stream OpenAI client request), when one JSON completion is asked for.
  Each server-sent event is decoded with msgspec into Structs holding only what the
  kernel uses (``openai_wire``); a JSON completion is read the same way, also when an
  upstream sends one to a streamed request (some ignore ``stream``).
* What the client demands of the model goes through as the upstream spells it:
  ``response_format`` (structured output, on every call of the run), ``tool_choice``
  (the run's first call), ``parallel_tool_calls`` (with tools only), ``top_p`` and
  ``stop``. An upstream that
  refuses one answers 400, an ``invalid_request`` — never retried without it.
* The response is closed in a shielded ``finally``: when the consumer is cancelled (an
  interrupt) or closes the generator, the upstream HTTP response is closed at once
  instead of generating until garbage collection. After ``[DONE]`` the rest of the body
  is drained (briefly) so that the connection goes back to the pool.
* A streamed answer begins with ``ResponseStarted`` once the upstream's status and
  headers are in (the run's ``model_responding``: a dialect can send its own headers while
  the model works). Chunks are translated to the kernel's provider chunks: ``TextChunk``,
  ``ReasoningChunk`` (``reasoning_content`` / ``reasoning`` deltas, as DeepSeek and vLLM
  send them), ``ToolCallChunk`` fragments keyed by index, ``UsageChunk`` (the last usage
  the upstream reported) and a final ``FinishChunk``.
* Failures become :class:`kernel.provider.ProviderError` with a stable code
  (``rate_limited`` with ``retry_after_s``, ``upstream_unauthorized`` for a refused or
  missing key of the gateway's (401/403: not the client's credentials), ``not_found``,
  ``invalid_request``, ``timeout``, ``provider_error``). A stream that ends without a
  finish reason, sends a malformed or too deeply nested chunk, or reports an error
  inside the stream is a ``provider_error``, never a silent success. The API key never
  appears in an error message.
"""

from __future__ import annotations

import base64
import email.utils
import math
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

import anyio
import anyio.lowlevel
import msgspec
import openai

from kernel import (
    Chunk,
    FinishChunk,
    OpenAISettings,
    ProviderError,
    ProviderRequest,
    ResponseStarted,
    Settings,
    ToolSpec,
    file_text,
    mask_secret,
)
from kernel.model import FilePart, ImagePart, Message, OutputFormat, TextPart, ToolChoice

from .openai_wire import MAX_EVENT_BYTES, SSEData, StreamReader, UpstreamError, answer_chunks, decode_completion
from .upstream_http import BROKEN, FAILED, TIMED_OUT, ChatHop

__all__ = [
    "OpenAIProvider",
    "provider_factory",
    "to_openai_messages",
    "to_openai_response_format",
    "to_openai_tool_choice",
    "to_openai_tools",
]

# Placeholder key for local OpenAI-compatible servers (llama.cpp, Ollama, vLLM) that need none.
_NO_KEY = "sk-no-key-required"
_MAX_DETAIL_CHARS = 500
#: After ``[DONE]``, the rest of the body is read for at most this long (connection reuse).
_DRAIN_S = 0.1
#: Reading a buffered burst yields to the event loop at least this often.
_TURN_S = 0.00025
_encode = msgspec.json.Encoder().encode


# ---------------------------------------------------------------- request conversion


def _part_block(part: TextPart | ImagePart | FilePart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, ImagePart):
        url = f"data:{part.mime_type};base64,{base64.b64encode(part.data).decode('ascii')}"
        return {"type": "image_url", "image_url": {"url": url}}
    return {"type": "text", "text": file_text(part)}


def _plain_text(message: Message) -> str:
    """Text-only view, for roles whose content must be a string."""
    bits = [message.content] if message.content else []
    for part in message.parts:
        if isinstance(part, TextPart):
            bits.append(part.text)
        elif isinstance(part, FilePart):
            bits.append(file_text(part))
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


def to_openai_tool_choice(choice: ToolChoice) -> str | dict[str, Any]:
    """``tool_choice`` as chat completions spell it (a forced tool by its function name)."""
    if choice.mode == "tool":
        return {"type": "function", "function": {"name": choice.name or ""}}
    return choice.mode


def to_openai_response_format(fmt: OutputFormat) -> dict[str, Any]:
    """``response_format`` for a requested output format; the upstream enforces it (or
    refuses it with a 400, which reaches the client as its dialect's 400)."""
    if fmt.type == "json_object":
        return {"type": "json_object"}
    spec: dict[str, Any] = {"name": fmt.name, "schema": fmt.schema}
    if fmt.strict is not None:
        spec["strict"] = fmt.strict
    return {"type": "json_schema", "json_schema": spec}


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


def _first_words(exc: BaseException) -> str:
    """The first non-empty message down an exception's causes: on trio a failed TLS handshake
    is an empty ``ConnectError`` whose cause holds ``CERTIFICATE_VERIFY_FAILED``."""
    seen: BaseException | None = exc
    for _ in range(6):
        if seen is None:
            break
        if str(seen):
            return str(seen)
        seen = seen.__cause__ or seen.__context__
    return ""


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
                    code="upstream_unauthorized",
                )
            client = openai.AsyncOpenAI(
                api_key=api_key,
                base_url=self.settings.base_url,
                timeout=self.settings.timeout_s,
                max_retries=self.settings.max_retries,
            )
        self._client = client
        self._where = _safe_url(str(client.base_url))
        try:
            self._hop = ChatHop(client, "chat/completions")
        except ValueError as exc:
            raise ProviderError(str(exc), code="provider_error") from exc

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

    def request_body(self, request: ProviderRequest) -> dict[str, Any]:
        """The chat-completions request body (also handy for tests)."""
        body: dict[str, Any] = {"model": request.model or self._model, "messages": to_openai_messages(request.messages)}
        if request.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        if request.tools:
            body["tools"] = to_openai_tools(request.tools)
            if request.tool_choice is not None:
                body["tool_choice"] = to_openai_tool_choice(request.tool_choice)
            if request.parallel_tool_calls is not None:
                body["parallel_tool_calls"] = request.parallel_tool_calls
        if request.output_format is not None:
            body["response_format"] = to_openai_response_format(request.output_format)
        if request.max_tokens is not None:
            body["max_tokens"] = request.max_tokens
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.top_p is not None:
            body["top_p"] = request.top_p
        if request.stop:
            body["stop"] = list(request.stop)
        return body

    async def stream(self, request: ProviderRequest) -> AsyncGenerator[Chunk, None]:
        try:
            # The run's trace goes on upstream (W3C trace context), when there is one.
            answer = await self._hop.post(_encode(self.request_body(request)), traceparent=request.traceparent)
        except openai.OpenAIError as exc:
            raise self._error(exc) from exc
        pieces = answer.pieces
        reads = self._read(pieces)
        try:
            if answer.content_type.startswith("application/json"):
                for chunk in self._answer(await self._whole(reads)):
                    yield chunk
                return
            yield ResponseStarted()
            events = SSEData()
            reader = StreamReader()
            turn_ends = time.monotonic() + _TURN_S
            async for piece in reads:
                for data in self._split(events, piece):
                    for chunk in self._take(reader, data):
                        yield chunk
                    if reader.done:
                        break
                if time.monotonic() >= turn_ends:
                    # A burst the upstream sent faster than we read is already buffered, and
                    # reading it never waits: let the writers (the first token's, other
                    # streams') have the loop now and then, instead of once per burst.
                    await anyio.lowlevel.checkpoint()
                    turn_ends = time.monotonic() + _TURN_S
                if reader.done:
                    await self._drain(pieces)
                    break
            if reader.finish is None:
                raise self._unfinished(reader, answer.content_type)
            for chunk in reader.closing():
                yield chunk
            yield FinishChunk(reader.finish)
        finally:
            # Close the response even when cancelled: a cancelled await here could
            # otherwise leave the socket open until GC.
            with anyio.CancelScope(shield=True):
                await reads.aclose()
                await answer.aclose()

    async def _read(self, pieces: AsyncIterator[bytes]) -> AsyncGenerator[bytes, None]:
        """The body's pieces as they arrive, transport failures as provider errors."""
        while True:
            try:
                piece = await pieces.__anext__()
            except StopAsyncIteration:
                return
            except TIMED_OUT as exc:
                raise self._timed_out() from exc
            except BROKEN as exc:
                raise self._connection_failed(exc, streaming=True) from exc
            yield piece

    async def _whole(self, reads: AsyncGenerator[bytes, None]) -> bytes:
        """A JSON answer's body, bounded like one server-sent event."""
        body = bytearray()
        async for piece in reads:
            body += piece
            if len(body) > MAX_EVENT_BYTES:
                raise ProviderError(f"the answer from {self._where} is larger than {MAX_EVENT_BYTES} bytes", code="provider_error")
        return bytes(body)

    async def _drain(self, pieces: AsyncIterator[bytes]) -> None:
        """Read what follows ``[DONE]`` (the body's end), so the connection can be reused."""
        with anyio.move_on_after(_DRAIN_S):
            try:
                async for _ in pieces:
                    pass
            except FAILED:
                pass  # the answer is complete; a connection that breaks now is simply not reused

    def _unfinished(self, reader: StreamReader, content_type: str) -> ProviderError:
        if not reader.events:
            what = f"no server-sent events (content type {content_type[:80]!r}): is {self._where} an OpenAI-compatible API?"
            return ProviderError(f"the answer from {self._where} held {what}", code="provider_error")
        return ProviderError(f"the stream from {self._where} ended before a finish reason (connection cut?)", code="provider_error")

    def _split(self, events: SSEData, piece: bytes) -> list[bytes]:
        try:
            return events.feed(piece)
        except ValueError as exc:
            raise self._malformed(exc) from exc

    def _take(self, reader: StreamReader, data: bytes) -> list[Chunk]:
        try:
            return reader.take(data)
        except msgspec.DecodeError as exc:  # a msgspec.ValidationError is a DecodeError
            raise self._malformed(exc) from exc
        except UpstreamError as exc:
            raise self._in_stream(exc) from exc

    def _answer(self, body: bytes) -> list[Chunk]:
        """An upstream that answered with one JSON completion: the same chunks a stream gives."""
        try:
            chunks, finish = answer_chunks(decode_completion(body))
        except msgspec.DecodeError as exc:
            raise self._malformed(exc) from exc
        except UpstreamError as exc:
            raise self._in_stream(exc) from exc
        if finish is None:
            raise ProviderError(f"the answer from {self._where} has no finish reason", code="provider_error")
        return [*chunks, FinishChunk(finish)]

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

    def _in_stream(self, exc: UpstreamError) -> ProviderError:
        return ProviderError(self._redact(f"error in the stream from {self._where}: {exc}"[:_MAX_DETAIL_CHARS]), code="provider_error")

    def _timed_out(self) -> ProviderError:
        return ProviderError(f"request to {self._where} timed out (timeout {self.settings.timeout_s:g} s)", code="timeout")

    def _connection_failed(self, cause: BaseException | None, *, streaming: bool) -> ProviderError:
        reason = f": {type(cause).__name__}: {_first_words(cause)}" if cause else ""
        what = f"the stream from {self._where} broke off" if streaming else f"connection to {self._where} failed"
        return ProviderError(self._redact(f"{what}{reason}"), code="provider_error")

    def _error(self, exc: openai.OpenAIError) -> ProviderError:
        where = self._where
        if isinstance(exc, openai.APITimeoutError):
            return self._timed_out()
        if isinstance(exc, openai.APIConnectionError):
            return self._connection_failed(exc.__cause__ or exc.__context__, streaming=False)
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
                    f"{where} rejected the API key (HTTP {status}){suffix}", code="upstream_unauthorized", status=status
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
        return ProviderError(self._redact(f"openai client error: {exc}"), code="provider_error")


def provider_factory(settings: Settings | OpenAISettings) -> OpenAIProvider:
    """Factory for ``gateway_register_providers``: ``register("openai", provider_factory)``."""
    if isinstance(settings, OpenAISettings):
        return OpenAIProvider(settings)
    return OpenAIProvider.from_settings(settings)

