"""Sans-IO codec of the native HTTP dialect: request bodies in, kernel commands out;
kernel events and replies in, JSON bodies and SSE event fields out.

The native dialect puts :mod:`kernel.model` on the wire as it is: every success body
is a kernel reply as msgspec encodes it (with its ``type`` tag), every SSE event is a
kernel event (``id:`` its seq, ``event:`` its type tag, ``data:`` its JSON). Errors are
``{"error": {"code", "message", "details"?}}`` with an HTTP status derived from the
kernel's stable error code. Nothing here raises on bad input: decoders return an
:class:`~.wire.ApiError` instead, so handlers stay a straight line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

import msgspec

from kernel import MAX_WIRE_INT, decode_json, parse_wire_int
from kernel import model as m
from kernel.errors import http_headers, http_status

from .wire import ApiError, CommandBody, PromptBody, RegenerateBody, RunResult, SessionCreate, SessionRemoved, ToolCallRecord

T = TypeVar("T")

#: The router's own codes that are no kernel error code (kernel.errors has the others).
ROUTER_STATUS: dict[str, int] = {"method_not_allowed": 405}

_CODE_BY_STATUS: dict[int, str] = {
    400: "invalid_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "busy",
    413: "too_large",
    429: "rate_limited",
    502: "provider_error",
    504: "timeout",
}

SESSION_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")


class HttpFailure(Protocol):
    """What the router hands its error shaper (``transports.shared.HttpError``),
    as far as this codec reads it."""

    @property
    def status(self) -> int: ...

    @property
    def code(self) -> str | None: ...

    @property
    def message(self) -> str: ...


def status_for(code: str) -> int:
    return ROUTER_STATUS.get(code) or http_status(code)


def kernel_error(exc: m.KernelError) -> ApiError:
    info = exc.info()
    return ApiError(status=status_for(exc.code), code=exc.code, message=exc.message, details=exc.details, headers=http_headers(info))


def run_failure(error: m.ErrorInfo) -> ApiError:
    """A failed run as an HTTP error, status and headers (``Retry-After``) from kernel.errors
    (the upstream refusing the gateway's key is ``upstream_unauthorized``: 502, not 401)."""
    return ApiError(status=status_for(error.code), code=error.code, message=error.message, details=error.details, headers=http_headers(error))


def run_timeout(run_id: str | None, timeout_s: float) -> ApiError:
    """A JSON answer that did not come within ``run_timeout_s`` (the run is interrupted)."""
    return ApiError(
        status=504, code="timeout", details={"run_id": run_id},
        message=f"The run did not end within {timeout_s:g}s; it was interrupted",
    )


def native_error_body(error: HttpFailure) -> Any:
    """Router error shaper: ``{"error": {"code", "message"}}``."""
    code = error.code or _CODE_BY_STATUS.get(error.status, "internal")
    return {"error": {"code": code, "message": error.message}}


# ---------------------------------------------------------------- requests in


def decode(raw: bytes, type: type[T], *, empty_ok: bool = False) -> T | ApiError:
    """Decode a JSON body into ``type``; an :class:`ApiError` (400) names the problem."""
    if not raw.strip():
        if not empty_ok:
            return ApiError(status=400, code="invalid_request", message="Request body is empty; expected JSON")
        raw = b"{}"
    try:
        return decode_json(raw, type)
    except msgspec.ValidationError as exc:
        return ApiError(status=400, code="invalid_request", message=f"Invalid request body: {exc}")
    except msgspec.DecodeError as exc:
        return ApiError(status=400, code="parse_error", message=f"Malformed JSON in request body: {exc}")


def check_session_id(session_id: str | None) -> ApiError | None:
    if session_id is not None and not SESSION_ID.match(session_id):
        return ApiError(
            status=400, code="invalid_request",
            message="session_id must be 1-128 characters of letters, digits and . _ : -",
        )
    return None


def open_session_command(body: SessionCreate) -> m.OpenSession | ApiError:
    problem = check_session_id(body.session_id)
    if problem is not None:
        return problem
    return m.OpenSession(session_id=body.session_id, agent_id=body.agent, label=body.label)


def prompt_command(session_id: str, body: PromptBody, request_id: str | None = None) -> m.Prompt | ApiError:
    """``request_id``: the ``X-Request-Id`` header, if any (the body's field wins)."""
    if (body.text is None or not body.text.strip()) and not body.parts:
        return ApiError(status=400, code="invalid_request", message="A prompt needs 'text' or 'parts'")
    return m.Prompt(
        session_id=session_id,
        request_id=body.request_id or request_id,
        text=body.text,
        parts=tuple(body.parts),
        options=body.options,
    )


def regenerate_command(session_id: str, body: RegenerateBody, request_id: str | None = None) -> m.Regenerate:
    return m.Regenerate(session_id=session_id, request_id=body.request_id or request_id, options=body.options)


def command_command(session_id: str, body: CommandBody) -> m.RunCommand | ApiError:
    if body.command is not None:
        if body.name is not None:
            return ApiError(status=400, code="invalid_request", message="Give either 'command' or 'name', not both")
        name, _, args = body.command.strip().lstrip("/").partition(" ")
        args = args.strip()
    else:
        name, args = (body.name or "").strip().lstrip("/"), body.args
    if not name:
        return ApiError(status=400, code="invalid_request", message="A command needs 'command' (e.g. \"/help\") or 'name'")
    return m.RunCommand(session_id=session_id, name=name, args=args)


def parse_int(value: str | None, what: str, *, minimum: int = 0) -> int | ApiError | None:
    if value is None or value == "":
        return None
    parsed = parse_wire_int(value, minimum=minimum)
    if parsed is None:
        return ApiError(status=400, code="invalid_request", message=f"{what} must be an integer from {minimum} to {MAX_WIRE_INT}")
    return parsed


def resume_after(last_event_id: str | None, after: str | None) -> int | ApiError | None:
    """Where an event stream resumes: ``Last-Event-ID`` (set by EventSource on
    reconnect) wins over ``?after=``; None means "from now on"."""
    if last_event_id is not None and last_event_id.strip():
        return parse_int(last_event_id, "Last-Event-ID")
    return parse_int(after, "after")


def _accepted_kinds(accept: str | None) -> list[str]:
    return [part.split(";")[0].strip().lower() for part in (accept or "").split(",")]


def wants_json(accept: str | None) -> bool:
    """``Accept: application/json`` (and not ``text/event-stream``) asks for one answer."""
    kinds = _accepted_kinds(accept)
    return "application/json" in kinds and "text/event-stream" not in kinds


def wants_stream(accept: str | None) -> bool:
    """``Accept: text/event-stream`` (what ``EventSource`` sends) asks a listing to stay live."""
    return "text/event-stream" in _accepted_kinds(accept)


# ---------------------------------------------------------------- events out


def event_tag(event: m.Event) -> str:
    """An event's type tag: the SSE ``event:`` field."""
    tag = type(event).__struct_config__.tag
    assert isinstance(tag, str)
    return tag


def event_data(event: m.Event) -> bytes:
    """The SSE ``data:`` field: the event's JSON exactly as :mod:`kernel.model` encodes it."""
    return msgspec.json.encode(event)


def event_id(event: m.Event) -> str | None:
    """The SSE ``id:`` field, where a client resumes (``Last-Event-ID``): the event's seq;
    for ``subscriber_lagged`` the last seq the client has. An end the kernel made up for
    a run whose own end cannot come (seq 0: it is in no log) has none, so the client's
    resume point stays at its last real event."""
    if isinstance(event, m.SubscriberLagged):
        return str(event.last_seq)
    return str(event.seq) if event.seq else None


#: One SSE event of the live session list: its ``event:`` name and its ``data:`` JSON.
ListingEvent = tuple[str, bytes]


def _listed(info: m.SessionInfo) -> m.SessionInfo:
    """What the live list compares: a session's info but its ``last_seq``, which moves with
    every streamed delta (the session's own event stream carries those)."""
    return msgspec.structs.replace(info, last_seq=0)


def _counted(status: m.StatusReport) -> m.StatusReport:
    """What the live list compares of the status: all but the uptime, which always moves."""
    return msgspec.structs.replace(status, uptime_s=0.0, request_id=None)


class SessionListWatch:
    """The live session list as changes (``GET /v1/sessions`` with ``Accept:
    text/event-stream``). Fed each poll of the sessions and the status, it answers the
    events to send: first the whole list (``sessions``) and the ``status``; then a
    ``session`` for each session that is new or changed, a ``session_removed`` for each one
    gone, and the ``status`` again when its counts change. A reconnecting client gets the
    whole list again, so the stream needs no ids."""

    def __init__(self) -> None:
        self._sessions: dict[str, m.SessionInfo] | None = None
        self._status: m.StatusReport | None = None

    def feed(self, sessions: Sequence[m.SessionInfo], status: m.StatusReport) -> list[ListingEvent]:
        seen = {info.session_id: _listed(info) for info in sessions}
        events: list[ListingEvent] = []
        if self._sessions is None:
            events.append(("sessions", msgspec.json.encode(m.SessionList(sessions=tuple(sessions)))))
        else:
            previous = self._sessions
            events += [
                ("session", msgspec.json.encode(m.SessionOpened(session=info)))
                for info in sessions
                if previous.get(info.session_id) != seen[info.session_id]
            ]
            events += [
                ("session_removed", msgspec.json.encode(SessionRemoved(session_id=gone)))
                for gone in previous
                if gone not in seen
            ]
        counted = _counted(status)
        if counted != self._status:
            events.append(("status", msgspec.json.encode(status)))
        self._sessions, self._status = seen, counted
        return events


class RunCollector:
    """Folds one run's events (as a run follower hands them out) into its
    :class:`~.wire.RunResult`, or the error of a failed run."""

    def __init__(self) -> None:
        self.calls: dict[str, ToolCallRecord] = {}
        self.reasoning: list[str] = []
        self.end: m.RunFinished | m.RunFailed | None = None

    def feed(self, event: m.Event) -> bool:
        """Take one event; True once the run ended."""
        if self.end is not None:
            return True
        if isinstance(event, m.ToolCallStarted):
            self.calls[event.call_id] = ToolCallRecord(call_id=event.call_id, name=event.name, arguments=event.arguments)
        elif isinstance(event, m.ToolResult):
            record = self.calls.setdefault(
                event.call_id, ToolCallRecord(call_id=event.call_id, name=event.name, arguments="")
            )
            record.result, record.is_error, record.rejected = event.result, event.is_error, event.rejected
        elif isinstance(event, m.ReasoningDelta):
            self.reasoning.append(event.text)
        elif isinstance(event, (m.RunFinished, m.RunFailed)):
            self.end = event
        return self.end is not None

    def outcome(self) -> RunResult | ApiError:
        end = self.end
        if end is None:
            return ApiError(status=404, code="not_found", message="The session was closed before the run ended")
        if isinstance(end, m.RunFailed):
            failure = run_failure(end.error)
            details = dict(failure.details or {})
            details.update(run_id=end.run_id, text=end.text)
            return msgspec.structs.replace(failure, details=details)
        return RunResult(
            session_id=end.session_id,
            run_id=end.run_id,
            request_id=end.request_id,
            text=end.text,
            reasoning="".join(self.reasoning),
            usage=end.usage,
            stop_reason=end.stop_reason,
            interrupted=end.interrupted,
            iterations=end.iterations,
            tool_calls=list(self.calls.values()),
            interrupt_cause=(end.interrupt_cause or "client") if end.interrupted else None,
        )
