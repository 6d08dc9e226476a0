"""Sans-IO codec of the native stdio dialect.

A line in is one kernel command as JSON; a line out is one kernel event or reply as
JSON (:mod:`.wire`). Bad input becomes an ``error`` reply naming the problem, never
an exception. Commands without a session go to the connection's own session, and
runs carry the transport's approval policy unless the command chooses its own
(``options.approval``).
"""

from __future__ import annotations

import msgspec

from kernel import model as m

from . import wire


class StdioCodec:
    def __init__(self, default_session_id: str | None = None, *, approval: m.ApprovalPolicy | None = None) -> None:
        self.default_session_id = default_session_id
        #: The policy of runs whose command sets none (``tool_approval``); None: the kernel's default.
        self.approval = approval

    def decode(self, line: bytes) -> m.Command | m.ErrorReply:
        try:
            command = wire.decode_command(line)
        except msgspec.ValidationError as exc:
            return self._error(line, "invalid_request", self._explain(line, exc))
        except msgspec.DecodeError as exc:
            return self._error(line, "parse_error", f"malformed JSON: {exc}")
        if command.session_id is None and self.default_session_id is not None:
            command = msgspec.structs.replace(command, session_id=self.default_session_id)
        if isinstance(command, (m.Prompt, m.Regenerate, m.Continue)) and command.options.approval is None and self.approval is not None:
            command = msgspec.structs.replace(command, options=msgspec.structs.replace(command.options, approval=self.approval))
        return command

    def _explain(self, line: bytes, exc: msgspec.ValidationError) -> str:
        try:
            raw = wire.decode_any(line)
        except msgspec.DecodeError:
            raw = None
        if not isinstance(raw, dict):
            return "a command must be a JSON object with a 'type' field"
        kind = raw.get("type")
        if kind is None:
            return "missing 'type' field; expected one of: " + ", ".join(wire.COMMAND_TAGS)
        if kind not in wire.COMMAND_TAGS:
            return f"unknown command type {kind!r}; expected one of: " + ", ".join(wire.COMMAND_TAGS)
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
    def encode(message: wire.Outgoing) -> bytes:
        return wire.encode(message)


def _request_id(line: bytes) -> str | None:
    try:
        raw = wire.decode_any(line)
    except msgspec.DecodeError:
        return None
    rid = raw.get("request_id") if isinstance(raw, dict) else None
    return rid if isinstance(rid, str) else None
