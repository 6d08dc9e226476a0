"""Sans-IO shapes of the OpenFang REST API and its SSE stream (a pure piece of the codec).

Request bodies, and pure functions from kernel data to the JSON OpenFang clients read
(the handlers in ``rest.py`` do the I/O): the dashboard
compares history roles with ``"User"`` exactly, wants an ``active`` flag on sessions
and ``cmd``/``desc`` on commands (newer builds read ``name``/``description``: both are
sent); the SDKs read only the ``data:`` lines of the stream.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

import msgspec

from kernel import model as m
from kernel.errors import http_headers, http_status
from transports.shared.coalesce import DeltaCoalescer

from .codec import INPUT_PREVIEW, RESULT_PREVIEW, WEB_COMMANDS
from .sessionids import public_session_id

SseEvent = tuple[str, dict[str, Any]]
_encode: Callable[[Any], bytes] = msgspec.json.Encoder().encode

SURFACES = ("web", "cli", "channel", "all")


class MessageBody(msgspec.Struct, kw_only=True):
    """``POST /api/agents/{id}/message`` and ``.../message/stream``."""

    message: str = ""
    attachments: list[dict[str, Any]] = []
    session_id: str | None = None


class NewSessionBody(msgspec.Struct, kw_only=True):
    """``POST /api/agents/{id}/sessions`` (the body is optional)."""

    label: str | None = None


def iso_time(timestamp: float) -> str:
    """RFC 3339 in UTC, as OpenFang serialises its ``DateTime<Utc>`` fields."""
    return _dt.datetime.fromtimestamp(timestamp, _dt.UTC).isoformat().replace("+00:00", "Z")


def agent_json(info: m.AgentInfo) -> dict[str, Any]:
    """``GET /api/agents`` item: OpenFang's keys, plus what the kernel knows."""
    return {
        "id": info.id,
        "name": info.name,
        "description": info.description,
        "state": "Running",
        "model_provider": info.provider,
        "model_name": info.model,
        "tools": list(info.tools),
        "ready": True,
    }


def _tool_cards(message: m.Message, results: dict[str, m.Message]) -> list[dict[str, Any]]:
    cards = []
    for call in message.tool_calls:
        result = results.get(call.id)
        cards.append(
            {
                "id": call.id,
                "name": call.name,
                "input": call.arguments[: INPUT_PREVIEW["full"]],
                "result": (result.content if result else "")[: RESULT_PREVIEW["full"]],
                "is_error": result is not None and result.outcome not in (None, "ok"),
            }
        )
    return cards


def history_json(session_id: str, agent_id: str, messages: Sequence[m.Message]) -> dict[str, Any]:
    """``GET /api/agents/{id}/session`` (kernel session id in, public id out): user/assistant
    turns with ``User``/``Assistant`` roles."""
    results = {msg.tool_call_id: msg for msg in messages if msg.role == "tool" and msg.tool_call_id}
    out: list[dict[str, Any]] = []
    for msg in messages:
        if msg.role not in ("user", "assistant"):
            continue
        content = msg.content or m.parts_text(msg.parts)
        entry: dict[str, Any] = {"role": "User" if msg.role == "user" else "Assistant", "content": content}
        if msg.tool_calls:
            entry["tools"] = _tool_cards(msg, results)
        elif not content:
            continue
        if msg.created_at:
            entry["timestamp"] = iso_time(msg.created_at)
        out.append(entry)
    return {"session_id": public_session_id(session_id), "agent_id": agent_id, "message_count": len(out), "messages": out}


#: A REST answer: status, JSON body, headers.
RestReply = tuple[int, dict[str, Any], dict[str, str]]


def error_reply(error: m.ErrorInfo) -> RestReply:
    """A kernel error as OpenFang's REST API answers it: ``{"error": message}``, the status and
    headers (``Retry-After``) of kernel.errors."""
    return http_status(error.code), {"error": error.message}, http_headers(error)


def message_reply(end: m.RunFinished | m.RunFailed, session_id: str) -> RestReply:
    """``POST /message``: the status, body and headers for the end of its run."""
    failed = m.forced_end_error(end)
    if failed is not None:
        return error_reply(failed)
    assert isinstance(end, m.RunFinished)
    body: dict[str, Any] = {
        "response": end.text, "input_tokens": end.usage.input_tokens, "output_tokens": end.usage.output_tokens,
        "iterations": end.iterations, "cost_usd": None, "session_id": public_session_id(session_id),
    }
    if end.interrupted:
        body["interrupted"] = True
    return 200, body, {}


def session_json(info: m.SessionInfo, active: Collection[str]) -> dict[str, Any]:
    """A session as OpenFang lists it, under its public (UUID) id; ``active``: kernel ids."""
    return {
        "session_id": public_session_id(info.session_id),
        "agent_id": info.agent_id,
        "message_count": info.message_count,
        "created_at": iso_time(info.created_at),
        "label": info.label,
        "active": info.session_id in active,
    }


def sessions_json(infos: Iterable[m.SessionInfo], active: Collection[str]) -> dict[str, Any]:
    """``GET /api/agents/{id}/sessions`` and ``GET /api/sessions``: newest first."""
    ordered = sorted(infos, key=lambda info: info.created_at, reverse=True)
    return {"sessions": [session_json(info, active) for info in ordered]}


def ok(message: str, **extra: Any) -> dict[str, Any]:
    """OpenFang's answer to an action: ``{"status": "ok", "message": ...}`` (extras after)."""
    return {"status": "ok", "message": message, **extra}


def commands_json(surface: str, kernel_commands: Collection[m.CommandInfo]) -> dict[str, Any]:
    """``GET /api/commands?surface=``; raises ValueError for an unknown surface (→ 400)."""
    if surface not in SURFACES:
        raise ValueError(f"Unknown surface '{surface}' (expected one of: {', '.join(SURFACES)})")
    rows: dict[str, dict[str, Any]] = {}
    for name, description, category in WEB_COMMANDS:
        rows[name] = _command_row(name, description, category, "builtin")
    for info in kernel_commands:
        if info.name not in rows:
            row = _command_row(info.name, info.description, "gateway", "gateway")
            row["usage"] = info.usage
            rows[info.name] = row
    return {"surface": surface, "commands": list(rows.values()), "total": len(rows)}


def _command_row(name: str, description: str, category: str, source: str) -> dict[str, Any]:
    return {
        "name": name,
        "aliases": [],
        "description": description,
        "category": category,
        "requires_agent": name != "help",
        "usage": "",
        "cmd": f"/{name}",
        "desc": description,
        "source": source,
    }


class SseEncoder:
    """Kernel events of one run → OpenFang SSE events as ``(event name, JSON bytes)``.

    ``chunk`` carries text (coalesced like the socket's ``text_delta``), ``tool_use`` /
    ``tool_result`` the tool calls, ``phase`` the phases, and ``done`` (always last)
    the usage.  A failed run sends ``error`` then ``done``.  The clock is passed in.
    """

    def __init__(self, coalescer: DeltaCoalescer) -> None:
        self.finished = False
        self._coalescer = coalescer
        self._inputs: dict[str, str] = {}

    @property
    def deadline(self) -> float | None:
        """When buffered text must go out (wait for the run's events until then)."""
        return self._coalescer.deadline

    def feed(self, events: Iterable[m.Event], now: float) -> list[tuple[str, bytes]]:
        items = (item for event in events for item in self._event(event))
        return [(name, _encode(data)) for name, data in self._coalescer.merge(items, now, _chunk_text, _chunk)]

    def tick(self, now: float) -> list[tuple[str, bytes]]:
        text = self._coalescer.due(now)
        return [] if text is None else [("chunk", _encode(_chunk(text)[1]))]

    def _event(self, event: m.Event) -> list[SseEvent]:
        match event:
            case m.RunStarted():
                return [("phase", {"phase": "streaming", "detail": None})]
            case m.TurnStarted(iteration=iteration) if iteration > 0:
                return [("phase", {"phase": "thinking", "detail": None})]
            case m.TextDelta(text=text):
                return [_chunk(text)]
            case m.ToolCallStarted(call_id=call_id, name=name, arguments=arguments):
                self._inputs[call_id] = arguments[: INPUT_PREVIEW["full"]]
                return [
                    ("tool_use", {"tool": name, "id": call_id}),
                    ("phase", {"phase": "tool_use", "detail": name}),
                ]
            case m.ToolResult(call_id=call_id, name=name, result=result, outcome=outcome):
                input_ = self._inputs.pop(call_id, "")
                return [("tool_result", {"tool": name, "id": call_id, "input": input_, "result": result[: RESULT_PREVIEW["full"]], "is_error": outcome != "ok"})]
            case m.RunFinished(usage=usage, interrupted=interrupted) if m.forced_end_error(event) is None:
                self.finished = True
                done: dict[str, Any] = {"done": True, "usage": _usage(usage)}
                if interrupted:
                    done["interrupted"] = True
                return [("phase", {"phase": "done", "detail": None}), ("done", done)]
            case m.RunFinished(usage=usage) | m.RunFailed(usage=usage):
                self.finished = True
                failed = m.forced_end_error(event)
                assert failed is not None
                return [("error", {"error": failed.message}), ("done", {"done": True, "usage": _usage(usage)})]
        return []


def _chunk(text: str) -> SseEvent:
    return ("chunk", {"content": text, "done": False})


def _chunk_text(item: SseEvent) -> str | None:
    name, data = item
    return str(data["content"]) if name == "chunk" else None


def _usage(usage: m.Usage) -> dict[str, int]:
    return {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens}
