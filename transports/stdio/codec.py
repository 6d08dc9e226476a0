"""Sans-IO codec of the native stdio dialect.

A line in is one kernel command as JSON (its ``type`` tag and fields exactly as
in :mod:`kernel.model`); a line out is one kernel event or reply as JSON. Bad
input becomes an ``error`` reply naming the problem, never an exception.
"""

from __future__ import annotations

from typing import Any

import msgspec

from kernel import model as m

_decode_command = msgspec.json.Decoder(m.Command).decode
_decode_any = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode
_COMMAND_TAGS = sorted(t.__struct_config__.tag for t in m.Command.__args__)  # type: ignore[attr-defined]


class StdioCodec:
    def __init__(self, default_session_id: str | None = None) -> None:
        self.default_session_id = default_session_id

    def decode(self, line: bytes) -> m.Command | m.ErrorReply:
        try:
            command = _decode_command(line)
        except msgspec.ValidationError as exc:
            return self._error(line, "invalid_request", self._explain(line, exc))
        except (msgspec.DecodeError, RecursionError) as exc:  # RecursionError: nested too deep
            return self._error(line, "parse_error", f"malformed JSON: {exc}")
        if command.session_id is None and self.default_session_id is not None:
            command = msgspec.structs.replace(command, session_id=self.default_session_id)
        return command

    def _explain(self, line: bytes, exc: msgspec.ValidationError) -> str:
        try:
            raw = _decode_any(line)
        except (msgspec.DecodeError, RecursionError):
            raw = None
        if not isinstance(raw, dict):
            return "a command must be a JSON object with a 'type' field"
        kind = raw.get("type")
        if kind is None:
            return "missing 'type' field; expected one of: " + ", ".join(_COMMAND_TAGS)
        if kind not in _COMMAND_TAGS:
            return f"unknown command type {kind!r}; expected one of: " + ", ".join(_COMMAND_TAGS)
        return f"invalid {kind!r} command: {exc}"

    def _error(self, line: bytes, code: m.ErrorCode, message: str) -> m.ErrorReply:
        return m.ErrorReply(request_id=_request_id(line), error=m.ErrorInfo(code=code, message=message))

    def too_long(self, size: int, limit: int) -> m.ErrorReply:
        return m.ErrorReply(
            error=m.ErrorInfo(code="too_large", message=f"line of {size} bytes is over the {limit}-byte limit; skipped")
        )

    def error(self, exc: m.KernelError, request_id: str | None) -> m.ErrorReply:
        return m.ErrorReply(request_id=request_id, error=exc.info())

    @staticmethod
    def encode(message: m.Event | m.Reply) -> bytes:
        return _encode(message)


def _request_id(line: bytes) -> str | None:
    try:
        raw: Any = _decode_any(line)
    except (msgspec.DecodeError, RecursionError):
        return None
    if isinstance(raw, dict) and isinstance(raw.get("request_id"), str):
        return raw["request_id"]
    return None
