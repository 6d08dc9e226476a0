"""The Agent Client Protocol on the wire: JSON-RPC 2.0 framing and every ACP shape.

One line in is one JSON-RPC message from the editor: a request (``method`` and
``id``), a notification (``method`` without ``id``) or a response to one of the
gateway's own requests (no ``method``). :class:`JsonRpcCodec` classifies it, answers
what is malformed with the JSON-RPC error the spec asks for, and correlates responses
with the requests it numbered. Each direction has its own id counter and both start
at 0, so ids are compared with ``is None`` / dictionary look-ups, never by
truthiness. Nothing here does I/O and :meth:`JsonRpcCodec.decode` never raises.

The rest are msgspec Structs: the params of the editor's methods, the answers the
gateway reads from the editor, and the ``session/update`` payloads it sends
(camelCase on the wire, tagged by ``type`` or ``sessionUpdate``, empty optional
fields left out).
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from msgspec import UNSET, UnsetType

from transports.shared.jsonwire import JsonDecoder

JSONRPC = "2.0"
PROTOCOL_VERSION = 1

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
RESOURCE_NOT_FOUND = -32002

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


# ---------------------------------------------------------------- method params (editor -> gateway)


class FsCapabilities(msgspec.Struct, rename="camel"):
    read_text_file: bool = False
    write_text_file: bool = False


class ClientCapabilities(msgspec.Struct, rename="camel"):
    fs: FsCapabilities = msgspec.field(default_factory=FsCapabilities)
    terminal: bool = False


class InitializeParams(msgspec.Struct, rename="camel"):
    # Some editors send a date string ("2025-06-18"); it is accepted and answered with ours.
    protocol_version: int | str = PROTOCOL_VERSION
    client_capabilities: ClientCapabilities = msgspec.field(default_factory=ClientCapabilities)
    client_info: dict[str, Any] | None = None


class NewSessionParams(msgspec.Struct, rename="camel"):
    cwd: str
    mcp_servers: list[Any] = []


class LoadSessionParams(msgspec.Struct, rename="camel"):
    session_id: str
    cwd: str
    mcp_servers: list[Any] = []


class TextBlock(msgspec.Struct, tag="text", tag_field="type"):
    text: str


class ImageBlock(msgspec.Struct, tag="image", tag_field="type", rename="camel"):
    data: bytes
    mime_type: str = "image/png"
    uri: str | None = None


class AudioBlock(msgspec.Struct, tag="audio", tag_field="type", rename="camel"):
    data: str
    mime_type: str = ""


class EmbeddedResource(msgspec.Struct, rename="camel"):
    """Text or blob contents of a resource the editor embedded (an open buffer, a file)."""

    uri: str
    text: str | None = None
    blob: bytes | None = None
    mime_type: str | None = None


class ResourceBlock(msgspec.Struct, tag="resource", tag_field="type"):
    resource: EmbeddedResource


class ResourceLinkBlock(msgspec.Struct, tag="resource_link", tag_field="type", rename="camel"):
    uri: str
    name: str = ""
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None
    size: int | None = None


ContentBlock = TextBlock | ImageBlock | AudioBlock | ResourceBlock | ResourceLinkBlock


class PromptParams(msgspec.Struct, rename="camel"):
    session_id: str
    prompt: list[ContentBlock]


class SessionParams(msgspec.Struct, rename="camel"):
    """``session/cancel`` and anything else that only names a session."""

    session_id: str


class SetModeParams(msgspec.Struct, rename="camel"):
    session_id: str
    mode_id: str


class SetModelParams(msgspec.Struct, rename="camel"):
    session_id: str
    model_id: str


# ---------------------------------------------------------------- the gateway's requests to the editor, and its answers


class ReadTextFileParams(msgspec.Struct, kw_only=True, rename="camel", omit_defaults=True):
    session_id: str
    path: str
    line: int | None = None
    limit: int | None = None


class WriteTextFileParams(msgspec.Struct, kw_only=True, rename="camel"):
    session_id: str
    path: str
    content: str


class PermissionSelected(msgspec.Struct, tag="selected", tag_field="outcome", rename="camel"):
    option_id: str


class PermissionCancelled(msgspec.Struct, tag="cancelled", tag_field="outcome"):
    pass


class PermissionResult(msgspec.Struct):
    """The result of ``session/request_permission``."""

    outcome: PermissionSelected | PermissionCancelled


class ReadTextFileResult(msgspec.Struct):
    """The result of ``fs/read_text_file``."""

    content: str


# ---------------------------------------------------------------- session/update (gateway -> editor)


class Text(msgspec.Struct, frozen=True, tag="text", tag_field="type"):
    text: str


class Image(msgspec.Struct, frozen=True, tag="image", tag_field="type", rename="camel"):
    data: bytes
    mime_type: str


class TextResource(msgspec.Struct, frozen=True, rename="camel", omit_defaults=True):
    uri: str
    text: str
    mime_type: str | None = None


class Resource(msgspec.Struct, frozen=True, tag="resource", tag_field="type"):
    resource: TextResource


Content = Text | Image | Resource


class ToolContent(msgspec.Struct, frozen=True, tag="content", tag_field="type"):
    content: Content


class Diff(msgspec.Struct, frozen=True, tag="diff", tag_field="type", rename="camel", omit_defaults=True):
    path: str
    new_text: str
    old_text: str | None = None


class Location(msgspec.Struct, frozen=True, omit_defaults=True):
    path: str
    line: int | None = None


class _Update(msgspec.Struct, frozen=True, kw_only=True, tag_field="sessionUpdate", rename="camel", omit_defaults=True):
    pass


class UserMessageChunk(_Update, frozen=True, tag="user_message_chunk"):
    content: Content


class AgentMessageChunk(_Update, frozen=True, tag="agent_message_chunk"):
    content: Content


class AgentThoughtChunk(_Update, frozen=True, tag="agent_thought_chunk"):
    content: Content


class ToolCallStart(_Update, frozen=True, tag="tool_call"):
    tool_call_id: str
    title: str
    kind: str
    status: str
    raw_input: Any = None
    content: tuple[ToolContent | Diff, ...] = ()
    locations: tuple[Location, ...] = ()


class ToolCallProgress(_Update, frozen=True, tag="tool_call_update"):
    tool_call_id: str
    status: str
    content: tuple[ToolContent | Diff, ...] = ()


class CommandInput(msgspec.Struct, frozen=True):
    hint: str


class AvailableCommand(msgspec.Struct, frozen=True, omit_defaults=True):
    name: str
    description: str
    input: CommandInput | None = None


class AvailableCommandsUpdate(_Update, frozen=True, tag="available_commands_update"):
    available_commands: tuple[AvailableCommand, ...]


class CurrentModeUpdate(_Update, frozen=True, tag="current_mode_update"):
    current_mode_id: str


class UsageUpdate(_Update, frozen=True, tag="usage_update"):
    used: int
    size: int


Update = (
    UserMessageChunk
    | AgentMessageChunk
    | AgentThoughtChunk
    | ToolCallStart
    | ToolCallProgress
    | AvailableCommandsUpdate
    | CurrentModeUpdate
    | UsageUpdate
)


class SessionNotification(msgspec.Struct, frozen=True, rename="camel"):
    session_id: str
    update: Update
