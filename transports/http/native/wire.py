"""Wire shapes of the native HTTP dialect that are not kernel types.

Success bodies are kernel replies and SSE data are kernel events, as msgspec encodes
them (docs/http.md); what is here is the rest: the request bodies (unknown fields are
a 400, so a typo is never silently ignored), the one JSON answer of a run, and errors.
"""

from __future__ import annotations

from typing import Any

import msgspec

from kernel import model as m

# ---------------------------------------------------------------- request bodies


class SessionCreate(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    agent: str | None = None
    label: str | None = None
    session_id: str | None = None


class PromptBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    text: str | None = None
    parts: list[m.ContentPart] = []
    options: m.PromptOptions = m.PromptOptions()
    request_id: str | None = None


class RegenerateBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    options: m.PromptOptions = m.PromptOptions()
    request_id: str | None = None


class ApprovalBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    approved: bool
    call_id: str | None = None
    reason: str | None = None
    remember: bool = False


class TurnLimitBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    confirmed: bool
    reason: str | None = None


class CommandBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Either ``{"command": "/model gpt-4o"}`` or ``{"name": "model", "args": "gpt-4o"}``."""

    command: str | None = None
    name: str | None = None
    args: str = ""


class ToolBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    arguments: dict[str, Any] = {}
    session_id: str | None = None


# ---------------------------------------------------------------- answers


class ToolCallRecord(msgspec.Struct, kw_only=True):
    call_id: str
    name: str
    arguments: str
    result: str | None = None
    is_error: bool = False
    rejected: bool = False


class RunResult(msgspec.Struct, kw_only=True, tag="run_result", tag_field="type"):
    """The one JSON answer of a prompt sent with ``Accept: application/json``."""

    session_id: str
    run_id: str
    request_id: str | None
    text: str
    reasoning: str
    usage: m.Usage
    stop_reason: str
    interrupted: bool
    iterations: int
    tool_calls: list[ToolCallRecord]
    # With ``interrupted``: why (client, drain, shutdown, timeout) — the answer is not whole.
    interrupt_cause: str | None = None


class SessionRemoved(msgspec.Struct, frozen=True, kw_only=True, tag="session_removed", tag_field="type"):
    """On the live session list (``GET /v1/sessions`` as SSE): a session is gone (deleted)."""

    session_id: str


class ApiError(msgspec.Struct, frozen=True, kw_only=True):
    """A native error: the HTTP status (and headers) and the body's code, message and details."""

    status: int
    code: str
    message: str
    details: dict[str, Any] | None = None
    headers: dict[str, str] = {}

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            error["details"] = self.details
        return {"error": error}
