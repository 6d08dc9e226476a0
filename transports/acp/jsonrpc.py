"""JSON-RPC 2.0 framing for the ACP connection, sans-IO.

One line in is one JSON-RPC message from the editor: a request (``method`` and
``id``), a notification (``method`` without ``id``) or a response to one of the
gateway's own requests (no ``method``). :class:`JsonRpcCodec` classifies it, answers
what is malformed with the JSON-RPC error the spec asks for, and correlates responses
with the requests it numbered. Each direction has its own id counter and both start
at 0, so ids are compared with ``is None`` / dictionary look-ups, never by
truthiness. Nothing here does I/O and :meth:`JsonRpcCodec.decode` never raises.
The ACP shapes carried inside the messages are in :mod:`.wire`.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from msgspec import UNSET, UnsetType

from kernel import JsonDecoder

JSONRPC = "2.0"

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
RESOURCE_NOT_FOUND = -32002
REQUEST_CANCELLED = -32800

RpcId = int | str

T = TypeVar("T")


class RpcError(msgspec.Struct, frozen=True, omit_defaults=True):
    """A JSON-RPC error object, as sent or as received from the editor."""

    code: int
    message: str
    data: Any = None


class RpcFailure(Exception):
    """Raised by a method handler to answer its request with a JSON-RPC error."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.error = RpcError(code=code, message=message, data=data)


class EditorError(Exception):
    """The editor answered one of the gateway's requests with an error (or never will)."""

    def __init__(self, error: RpcError) -> None:
        super().__init__(error.message)
        self.error = error


# ---------------------------------------------------------------- incoming


class Request(msgspec.Struct, frozen=True):
    id: RpcId | None
    method: str
    params: Any = None


class Notification(msgspec.Struct, frozen=True):
    method: str
    params: Any = None


class Response(msgspec.Struct, frozen=True):
    """The editor's answer to a request the gateway sent (``method`` is ours, recalled)."""

    id: int
    method: str
    result: Any = None
    error: RpcError | None = None


class Reject(msgspec.Struct, frozen=True):
    """A malformed message; ``reply`` is the error line to write back."""

    reply: bytes


class Ignored(msgspec.Struct, frozen=True):
    """Nothing to answer (a stray response); ``reason`` is worth a log line."""

    reason: str


Incoming = Request | Notification | Response | Reject | Ignored


class _Envelope(msgspec.Struct):
    jsonrpc: str | UnsetType = UNSET
    id: int | str | UnsetType | None = UNSET
    method: str | UnsetType = UNSET
    params: Any = UNSET
    result: Any = UNSET
    error: Any = UNSET


# ---------------------------------------------------------------- outgoing


class _OutRequest(msgspec.Struct):
    jsonrpc: str
    id: int
    method: str
    params: Any


class _OutNotification(msgspec.Struct):
    jsonrpc: str
    method: str
    params: Any


class _OutResult(msgspec.Struct):
    jsonrpc: str
    id: RpcId | None
    result: Any


class _OutError(msgspec.Struct):
    jsonrpc: str
    id: RpcId | None
    error: RpcError


_decode_any = JsonDecoder[Any]().decode
_encode = msgspec.json.Encoder().encode


class JsonRpcCodec:
    """Frames and classifies messages for one connection; numbers the gateway's requests."""

    def __init__(self) -> None:
        self._next_id = 0
        self._pending: dict[int, str] = {}

    # -------------------------------------------------------------- in

    def decode(self, line: bytes) -> Incoming:
        try:
            raw = _decode_any(line)
        except msgspec.DecodeError as exc:
            return Reject(self.error(None, PARSE_ERROR, f"Parse error: {exc}"))
        if isinstance(raw, list):
            return Reject(self.error(None, INVALID_REQUEST, "Invalid request: batches are not supported"))
        if not isinstance(raw, dict):
            return Reject(self.error(None, INVALID_REQUEST, "Invalid request: a message must be a JSON object"))
        try:
            env = msgspec.convert(raw, _Envelope)
        except msgspec.ValidationError as exc:
            return Reject(self.error(_plain_id(raw), INVALID_REQUEST, f"Invalid request: {exc}"))
        rid = None if isinstance(env.id, UnsetType) else env.id
        if env.jsonrpc != JSONRPC:
            return Reject(self.error(rid, INVALID_REQUEST, 'Invalid request: "jsonrpc" must be "2.0"'))
        params = None if isinstance(env.params, UnsetType) else env.params
        if not isinstance(env.method, UnsetType):
            if isinstance(env.id, UnsetType):
                return Notification(env.method, params)
            return Request(rid, env.method, params)
        if isinstance(env.result, UnsetType) and isinstance(env.error, UnsetType):
            return Reject(self.error(rid, INVALID_REQUEST, 'Invalid request: no "method", "result" or "error"'))
        if rid is None:
            return Ignored(f"the editor reported an error about an unidentified message: {raw.get('error')!r}")
        if not isinstance(rid, int) or (method := self._pending.pop(rid, None)) is None:
            return Ignored(f"response to an unknown request id {rid!r}")
        if not isinstance(env.error, UnsetType):
            return Response(rid, method, error=_rpc_error(env.error))
        return Response(rid, method, result=env.result)

    # -------------------------------------------------------------- out

    def request(self, method: str, params: Any) -> tuple[int, bytes]:
        """Number a request to the editor and remember it until its response (or :meth:`forget`)."""
        rid = self._next_id
        self._next_id += 1
        self._pending[rid] = method
        return rid, _encode(_OutRequest(JSONRPC, rid, method, params))

    def forget(self, rid: int) -> None:
        """Stop waiting for a response (timed out): a late one is then ignored."""
        self._pending.pop(rid, None)

    @staticmethod
    def result(rid: RpcId | None, result: Any) -> bytes:
        return _encode(_OutResult(JSONRPC, rid, result))

    @staticmethod
    def error(rid: RpcId | None, code: int, message: str, data: Any = None) -> bytes:
        return _encode(_OutError(JSONRPC, rid, RpcError(code=code, message=message, data=data)))

    @staticmethod
    def failure(rid: RpcId | None, failure: RpcFailure) -> bytes:
        return _encode(_OutError(JSONRPC, rid, failure.error))

    @staticmethod
    def notification(method: str, params: Any) -> bytes:
        return _encode(_OutNotification(JSONRPC, method, params))


def decode_params(params: Any, kind: type[T]) -> T:
    """Validate a method's params into its wire Struct; bad params answer ``-32602``."""
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise RpcFailure(INVALID_PARAMS, "Invalid params: expected a JSON object")
    try:
        return msgspec.convert(params, kind)
    except msgspec.ValidationError as exc:
        raise RpcFailure(INVALID_PARAMS, f"Invalid params: {exc}") from None


def _plain_id(raw: dict[str, Any]) -> RpcId | None:
    rid = raw.get("id")
    return rid if isinstance(rid, (int, str)) and not isinstance(rid, bool) else None


def _rpc_error(value: Any) -> RpcError:
    try:
        return msgspec.convert(value, RpcError)
    except msgspec.ValidationError:
        return RpcError(code=INTERNAL_ERROR, message=f"malformed error from the editor: {value!r}")
