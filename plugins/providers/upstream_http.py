"""The ``openai`` provider's upstream hop: one chat-completions request on httpcore2's pool.

Why: on this machine kind the first content byte of a streamed answer from a local upstream
takes 0.79 ms through httpcore's connection pool and 2.7-3.2 ms through the ``openai`` SDK
(issue 27): the SDK's per-request work (pydantic options copied per attempt, its request
builder, httpx's client layers) is the largest cost the gateway's second hop had left. A
whole request against the fake upstream in one process: 1.44 ms here against the SDK's 2.44.

One HTTP stack in the process: the SDK 3.5x runs on ``httpx2``, itself on ``httpcore2``.
The request goes to the very ``httpcore2`` pool the SDK's own ``httpx2`` client holds, so
everything the SDK configures holds unchanged, from one place:

* which pool: the one the SDK's client picks for the URL, so proxies from the environment
  (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, ``NO_PROXY``) follow httpx2's own rules,
  except that a loopback upstream is never proxied; TLS is httpx2's context (``SSL_CERT_FILE``
  / ``SSL_CERT_DIR``, else the system's CAs), its limits and HTTP/1.1 keep-alive. The pool is
  shared with ``models.list`` and closed with the client.
* the URL and headers (auth, organisation/project, default headers, the SDK's platform and
  ``x-stainless-*`` headers): built by the SDK's own request builder once per client and kept
  as encoded pairs; a client whose key is a callable builds them per request (the key
  refreshes). Per attempt only ``x-stainless-retry-count``, ``traceparent`` and the length
  are added.
* timeouts: the client's, per phase (connect, read, write, pool).
* one write per request: a request's head waits for its body (``one_write.py``), where
  httpcore2 would write them apart with a turn of the event loop between.
* retries before the answer starts, by the SDK's own policy (``_should_retry``,
  ``_calculate_retry_timeout``): connection errors and timeouts, 408/409/429/5xx honouring
  ``Retry-After``, ``x-should-retry``, ``max_retries``.
* an error answer becomes the SDK's typed exception (``_make_status_error_from_response``),
  so the provider maps it exactly as before.

The body is handed over raw, as pieces arrive (decoded by httpx2's own decoders only when the
upstream compressed it); reading it and closing it are the provider's.
"""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import anyio
import httpcore2
import httpx2
import openai
from httpx2._decoders import MultiDecoder
from openai._base_client import get_platform
from openai._models import FinalRequestOptions
from openai._utils import asyncify

from .one_write import OneWriteBackend

__all__ = ["BROKEN", "FAILED", "TIMED_OUT", "ChatHop", "UpstreamAnswer"]

#: What a request or a body read raises when the connection times out.
TIMED_OUT = httpcore2.TimeoutException
#: What it raises when the connection fails or the peer breaks HTTP (a timeout aside).
BROKEN: tuple[type[Exception], ...] = (
    httpcore2.NetworkError,
    httpcore2.ProtocolError,
    httpcore2.ProxyError,
    httpcore2.UnsupportedProtocol,
    httpx2.DecodingError,
)
#: Either.
FAILED: tuple[type[Exception], ...] = (TIMED_OUT, *BROKEN)
#: An error answer's body is read up to this much (the detail goes into one error message).
_MAX_ERROR_BYTES = 1024 * 1024
#: Headers added per attempt, so never taken from the SDK's template.
_PER_ATTEMPT = frozenset({b"content-length", b"x-stainless-retry-count", b"traceparent"})


class UpstreamAnswer:
    """A successful response whose body has not been read: its pieces, and closing it."""

    __slots__ = ("_raw", "_response", "content_type", "pieces")

    def __init__(self, response: httpcore2.Response) -> None:
        self._response = response
        self.content_type = _header(response, b"content-type")
        encoding = _header(response, b"content-encoding").lower()
        stream: Any = response.stream
        self._raw: AsyncGenerator[bytes, None] = stream.__aiter__()
        self.pieces: AsyncIterator[bytes] = self._raw
        if encoding not in ("", "identity"):
            self.pieces = _Decoded(self._raw, MultiDecoder([e.strip() for e in encoding.split(",")]))

    async def aclose(self) -> None:
        """Close the body (the connection goes back to the pool only if it was read to its end)."""
        await self._raw.aclose()
        await self._response.aclose()


class _Decoded:
    """A compressed body's pieces, decoded as they arrive."""

    __slots__ = ("_decoder", "_done", "_ready", "_source")

    def __init__(self, source: AsyncIterator[bytes], decoder: MultiDecoder) -> None:
        self._source = source
        self._decoder = decoder
        self._ready: list[bytes] = []
        self._done = False

    def __aiter__(self) -> _Decoded:
        return self

    async def __anext__(self) -> bytes:
        while not self._ready:
            if self._done:
                raise StopAsyncIteration
            try:
                piece = await self._source.__anext__()
            except StopAsyncIteration:
                self._done = True
                self._ready.extend(p for p in self._decoder.flush() if p)
                continue
            self._ready.extend(p for p in self._decoder.decode(piece) if p)
        return self._ready.pop(0)


def _header(response: httpcore2.Response, name: bytes) -> str:
    for key, value in response.headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return ""


def _is_loopback(host: str) -> bool:
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class ChatHop:
    """POST one request body to the client's ``path`` on the SDK client's own pool."""

    def __init__(self, client: openai.AsyncOpenAI, path: str) -> None:
        if getattr(client, "_provider_runtime", None) is not None or getattr(client, "_workload_identity_auth", None) is not None:
            raise ValueError("the openai provider sends its requests itself: a client with a provider runtime or workload identity is not supported")
        self._client = client
        self._path = path
        self._options = FinalRequestOptions(method="post", url=path)
        url = client._prepare_url(path)
        http = client._client
        # A loopback upstream is never proxied (a proxy in the environment is for the outside).
        transport = http._transport if _is_loopback(url.host) else http._transport_for_url(url)
        pool = getattr(transport, "_pool", None)
        if not isinstance(pool, httpcore2.AsyncConnectionPool):
            raise ValueError("the openai provider needs the SDK's client on httpx2's own transport (its httpcore2 pool)")
        # A request's head leaves with its body, on every connection the pool opens from now on.
        if not isinstance(pool._network_backend, OneWriteBackend):
            pool._network_backend = OneWriteBackend(pool._network_backend)
        self._pool = pool
        self._timeouts = httpx2.Timeout(client.timeout).as_dict()
        self._dynamic = getattr(client, "_api_key_provider", None) is not None
        self._template: tuple[httpx2.Request, httpcore2.URL, list[tuple[bytes, bytes]]] | None = None

    async def _built(self) -> tuple[httpx2.Request, httpcore2.URL, list[tuple[bytes, bytes]]]:
        """The SDK's request for ``path``, kept as the target URL and the encoded headers."""
        if self._template is not None and not self._dynamic:
            return self._template
        client = self._client
        if client._platform is None:
            client._platform = await asyncify(get_platform)()  # as the SDK does: may read files
        options = await client._prepare_options(FinalRequestOptions(method="post", url=self._path))
        request = client._build_request(options)
        url = request.url
        target = httpcore2.URL(scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path)
        head = [(k, v) for k, v in request.headers.raw if k.lower() not in _PER_ATTEMPT]
        self._template = (request, target, head)
        return self._template

    async def post(self, body: bytes, *, traceparent: str | None = None) -> UpstreamAnswer:
        """Send ``body``; the answer once its headers arrived with a status below 400.

        Raises the SDK's exceptions: ``APITimeoutError``, ``APIConnectionError`` or the
        typed ``APIStatusError`` of an error answer, after the SDK's retries.
        """
        client = self._client
        retries = self._options.get_max_retries(client.max_retries)
        length = (b"content-length", str(len(body)).encode("ascii"))
        trace = [(b"traceparent", traceparent.encode("latin-1"))] if traceparent else []
        for taken in range(retries + 1):
            remaining = retries - taken
            sdk_request, target, head = await self._built()
            headers = [*head, (b"x-stainless-retry-count", str(taken).encode("ascii")), *trace, length]
            request = httpcore2.Request(b"POST", target, headers=headers, content=body, extensions={"timeout": self._timeouts})
            try:
                response = await self._pool.handle_async_request(request)
            except TIMED_OUT as exc:
                if remaining > 0:
                    await self._pause(remaining, None)
                    continue
                raise openai.APITimeoutError(request=sdk_request) from exc
            except BROKEN as exc:
                if remaining > 0:
                    await self._pause(remaining, None)
                    continue
                raise openai.APIConnectionError(request=sdk_request) from exc
            if response.status < 400:
                return UpstreamAnswer(response)
            failed = await self._error_answer(response, sdk_request)
            if remaining > 0 and client._should_retry(failed):
                await self._pause(remaining, failed.headers)
                continue
            raise client._make_status_error_from_response(failed)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _error_answer(self, response: httpcore2.Response, request: httpx2.Request) -> httpx2.Response:
        """An error answer, read (bounded) and closed, as the httpx2 response the SDK reads."""
        body = bytearray()
        try:
            answer = UpstreamAnswer(response)
            async for piece in answer.pieces:
                body += piece
                if len(body) >= _MAX_ERROR_BYTES:
                    break
        except FAILED:
            pass  # the status says what happened; the detail is what arrived
        finally:
            with anyio.CancelScope(shield=True):
                await response.aclose()
        headers = [(k, v) for k, v in response.headers if k.lower() != b"content-encoding"]
        return httpx2.Response(response.status, headers=headers, content=bytes(body), request=request)

    async def _pause(self, remaining: int, headers: httpx2.Headers | None) -> None:
        await anyio.sleep(self._client._calculate_retry_timeout(remaining, self._options, headers))
