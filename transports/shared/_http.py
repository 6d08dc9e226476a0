"""Plain-ASGI HTTP request and response helpers.

A thin layer, not a framework: handlers get a :class:`Request`, return a
:class:`Response` (or stream one themselves, e.g. SSE), and raise :class:`HttpError`
for any client error.  Error *bodies* are shaped by the transport (each dialect has its
own error format) through an :data:`ErrorShaper`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, MutableMapping
from typing import Any, TypeVar, overload
from urllib.parse import parse_qsl

import anyio
import msgspec

from kernel import decode_json
from kernel.model import Caller

from ._security import ANONYMOUS

__all__ = [
    "ASGIReceive",
    "ASGISend",
    "BodyIncomplete",
    "BodyReads",
    "ErrorShaper",
    "Headers",
    "HttpError",
    "Request",
    "Response",
    "default_error_body",
    "error_response",
    "json_response",
]

Scope = MutableMapping[str, Any]
ASGIReceive = Callable[[], Awaitable[dict[str, Any]]]
ASGISend = Callable[[dict[str, Any]], Awaitable[None]]
RawHeaders = list[tuple[bytes, bytes]]

T = TypeVar("T")

_json_encoder = msgspec.json.Encoder()


class HttpError(Exception):
    """A client-visible error: raise it from a handler or a WebSocket pre-accept check.

    ``code`` is an optional stable machine code (``"not_found"``, ``"rate_limited"``...)
    that error shapers may expose; ``headers`` are added to the response (e.g. ``Allow``).
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.headers = dict(headers or {})


#: Turns an error into the JSON value sent as the body (dialects differ here).
ErrorShaper = Callable[[HttpError], Any]


def default_error_body(error: HttpError) -> Any:
    """``{"error": message}`` — OpenFang's shape and a sensible default."""
    return {"error": error.message}


class Headers(Mapping[str, str]):
    """Case-insensitive, read-only view of ASGI headers.

    Repeated headers are joined with ``", "`` for ``[]``/``get`` (RFC 9110 list
    semantics); :meth:`getlist` returns them separately.
    """

    __slots__ = ("_items", "_joined")

    def __init__(self, raw: Iterable[tuple[bytes, bytes]] = ()) -> None:
        self._items: list[tuple[str, str]] = [
            (k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in raw
        ]
        joined: dict[str, str] = {}
        for k, v in self._items:
            joined[k] = f"{joined[k]}, {v}" if k in joined else v
        self._joined = joined

    @staticmethod
    def read_one(raw: Iterable[tuple[bytes, bytes]], name: bytes) -> str | None:
        """``Headers(raw).get(name)`` (``name`` in lower case) without decoding every header:
        for a check made before the request's own ``Headers`` are built."""
        values = [v.decode("latin-1") for k, v in raw if k.lower() == name]
        return ", ".join(values) if values else None

    def __getitem__(self, key: str) -> str:
        return self._joined[key.lower()]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key.lower() in self._joined

    def __iter__(self) -> Iterator[str]:
        return iter(self._joined)

    def __len__(self) -> int:
        return len(self._joined)

    def getlist(self, key: str) -> list[str]:
        key = key.lower()
        return [v for k, v in self._items if k == key]

    def __repr__(self) -> str:
        return f"Headers({self._items!r})"


def parse_query(query_string: bytes) -> dict[str, str]:
    """Query parameters; for a repeated name the first value wins."""
    out: dict[str, str] = {}
    for k, v in parse_qsl(query_string.decode("latin-1"), keep_blank_values=True):
        out.setdefault(k, v)
    return out


def client_host(scope: Mapping[str, Any]) -> str:
    """The peer's IP (``"unknown"`` for servers that do not report it)."""
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


#: An upload over the body limit is still read (and dropped) up to this size and for this
#: long before its 413 is sent: a client that sends its whole body before it reads the answer
#: (urllib, httpx, the openai SDK) otherwise sees a broken pipe, not the 413.
DISCARD_LIMIT_BYTES = 64 * 1024 * 1024
DISCARD_TIMEOUT_S = 10.0


class BodyReads:
    """How many request bodies each client IP is sending at once, with a cap.

    A body that trickles in holds a task and a buffer; without a cap one address could
    open hundreds of half-sent bodies (each within ``body_timeout_s`` of silence) and hold
    them all. Shared by the routers of one port.
    """

    __slots__ = ("_open", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: dict[str, int] = {}

    def enter(self, host: str) -> bool:
        count = self._open.get(host, 0)
        if self.limit and count >= self.limit:
            return False
        self._open[host] = count + 1
        return True

    def leave(self, host: str) -> None:
        count = self._open.get(host, 0) - 1
        if count > 0:
            self._open[host] = count
        else:
            self._open.pop(host, None)


class BodyIncomplete(HttpError):
    """The client went away (or half-closed) before its body arrived whole: the request is
    never decoded, run or applied. Nobody may be reading the answer."""

    def __init__(self) -> None:
        super().__init__(400, "The request body did not arrive whole (the client closed the connection first)", code="invalid_request")


class Request:
    """One HTTP request.  Create through the router; the body is read at most once."""

    def __init__(
        self,
        scope: Scope,
        receive: ASGIReceive,
        send: ASGISend,
        *,
        path_params: Mapping[str, str] | None = None,
        max_body_bytes: int = 1_048_576,
        body_timeout_s: float = 10.0,
        body_reads: BodyReads | None = None,
    ) -> None:
        self.scope = scope
        self.receive = receive
        self.send = send
        self.method: str = scope.get("method", "GET")
        self.path: str = scope["path"]
        self.path_params: dict[str, str] = dict(path_params or {})
        self.query: dict[str, str] = parse_query(scope.get("query_string", b""))
        self.headers = Headers(scope.get("headers", ()))
        client = scope.get("client")
        self.client: tuple[str, int] | None = (client[0], client[1]) if client else None
        #: Who sends it, resolved once by the router from its credentials (``Authorization``,
        #: ``x-api-key``, ``?token=``, the login cookie) and ``traceparent``: pass it with
        #: every command and subscription. A route without auth gets a caller with no scopes.
        self.caller: Caller = ANONYMOUS
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s
        self._body_reads = body_reads
        self._body: bytes | None = None
        self.body_consumed = False
        self._body_complete = False
        self._received = 0
        self._oversize = False
        #: Set once the client disconnected (seen while reading or streaming).
        self.disconnected = False

    @property
    def client_host(self) -> str:
        return client_host(self.scope)

    def _too_large(self) -> HttpError:
        self._oversize = True
        return HttpError(413, f"Request body too large (max {self.max_body_bytes} bytes)", code="too_large")

    async def body(self) -> bytes:
        """The whole body; 413 ``HttpError`` beyond ``max_body_bytes``.

        Content-Length is checked first, so an oversize upload is refused before it is
        read (the rest is then dropped by :meth:`finish_body` before the 413 goes out).
        """
        if self._body is not None:
            return self._body
        if self.body_consumed:
            raise RuntimeError("request body was already consumed by a stream")
        limit = self.max_body_bytes
        declared = self.headers.get("content-length")
        if declared is not None and declared.strip().isdigit() and int(declared) > limit:
            raise self._too_large()
        reads, host = self._body_reads, self.client_host
        if reads is not None and not reads.enter(host):
            self.body_consumed = True  # not read, and not worth draining: the answer closes the connection
            raise HttpError(
                429, f"Too many request bodies in progress from this address (max {reads.limit})",
                code="rate_limited", headers={"retry-after": "1"},
            )
        try:
            self._body = await self._read_body(limit)
        finally:
            if reads is not None:
                reads.leave(host)
        return self._body

    async def _read_body(self, limit: int) -> bytes:
        """Every chunk until the last; a disconnect before it is :class:`BodyIncomplete`
        (never a shorter body), a silence of ``body_timeout_s`` is 408."""
        chunks: list[bytes] = []
        self.body_consumed = True
        while True:
            message: dict[str, Any] | None = None
            with anyio.move_on_after(self.body_timeout_s):
                message = await self.receive()
            if message is None:
                raise HttpError(408, f"The request body stalled: nothing arrived for {self.body_timeout_s:g}s", code="timeout")
            if message["type"] == "http.disconnect":
                self.disconnected = True
                raise BodyIncomplete()
            chunk = message.get("body", b"")
            self._received += len(chunk)
            if self._received > limit:
                if not message.get("more_body", False):
                    self._body_complete = True
                raise self._too_large()
            chunks.append(chunk)
            if not message.get("more_body", False):
                self._body_complete = True
                return b"".join(chunks)

    async def finish_body(self) -> bool:
        """Read and drop what is left of the body, so that the client can read the answer
        and the connection can serve the next request; False when that is not possible
        (taken by a stream, or an upload beyond ``DISCARD_LIMIT_BYTES`` or
        ``DISCARD_TIMEOUT_S``): then the response must close the connection.

        A server answering before the body arrived cannot reuse the connection: hypercorn
        then closes it after the response, without saying so, and a client sending its
        next request on it gets "server disconnected" — or, still sending a large body,
        a broken pipe instead of the answer.
        """
        if self._body_complete or self.disconnected:
            return True
        if self.body_consumed and not self._oversize:
            return False
        declared = self.headers.get("content-length")
        if declared is None and "transfer-encoding" not in self.headers:
            return True  # no body
        if declared is not None and declared.strip().isdigit() and int(declared) > DISCARD_LIMIT_BYTES:
            return False
        self.body_consumed = True
        with anyio.move_on_after(DISCARD_TIMEOUT_S):
            while self._received <= DISCARD_LIMIT_BYTES:
                message: dict[str, Any] | None = None
                with anyio.move_on_after(self.body_timeout_s):
                    message = await self.receive()
                if message is None:
                    return False  # the rest stalled: close rather than wait
                if message["type"] == "http.disconnect":
                    self.disconnected = True
                    return True
                self._received += len(message.get("body", b""))
                if not message.get("more_body", False):
                    self._body_complete = True
                    return True
        return False

    @overload
    async def json(self) -> Any: ...
    @overload
    async def json(self, as_type: type[T]) -> T: ...
    async def json(self, as_type: Any = Any) -> Any:
        """Decode the body as JSON into ``as_type`` with msgspec; 400 names the problem.

        msgspec's messages include the JSON path (``... - at `$.count```), which is
        exactly what a client needs to fix its request.
        """
        raw = await self.body()
        if not raw.strip():
            raise HttpError(400, "Request body is empty; expected JSON", code="invalid_request")
        try:
            return decode_json(raw, as_type)
        except msgspec.ValidationError as exc:
            raise HttpError(400, f"Invalid request body: {exc}", code="invalid_request") from None
        except msgspec.DecodeError as exc:
            raise HttpError(400, f"Malformed JSON in request body: {exc}", code="parse_error") from None

    def __repr__(self) -> str:
        return f"<Request {self.method} {self.path}>"


class Response:
    """A complete (non-streaming) response."""

    __slots__ = ("body", "headers", "status")

    def __init__(
        self,
        status: int = 200,
        body: bytes = b"",
        *,
        content_type: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.status = status
        self.body = body
        self.headers: dict[str, str] = {}
        if content_type is not None:
            self.headers["content-type"] = content_type
        for k, v in (headers or {}).items():
            self.headers[k.lower()] = v

    def raw_headers(self) -> RawHeaders:
        out = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in self.headers.items()]
        out.append((b"content-length", str(len(self.body)).encode()))
        return out

    async def send_to(self, send: ASGISend, *, head_only: bool = False) -> None:
        """Write the response in one ``http.response.body`` message (one socket write)."""
        await send({"type": "http.response.start", "status": self.status, "headers": self.raw_headers()})
        await send({"type": "http.response.body", "body": b"" if head_only else self.body})


def json_response(status: int, obj: Any, *, headers: Mapping[str, str] | None = None) -> Response:
    """``obj`` (Structs, dicts, lists...) encoded with msgspec as ``application/json``."""
    return Response(
        status, _json_encoder.encode(obj), content_type="application/json", headers=headers
    )


def error_response(error: HttpError, shaper: ErrorShaper = default_error_body) -> Response:
    """The JSON error response for ``error`` in the transport's dialect."""
    return json_response(error.status, shaper(error), headers=error.headers)
