"""Sans-IO codec of the Packet dialect (an in-process queue API for sync Python apps).

Packet type + body in -> a kernel command (or an error answer); kernel replies and
one run's events in -> the uniform answer ``{"success": true, "data": {...}}`` /
``{"success": false, "error": "..."}``. Pure: no threads, no event loop, no kernel
calls, so the whole dialect is testable on plain data. The shapes are in
:mod:`.wire`; packet types are matched by their *value*.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec

from kernel import decode_json
from kernel import model as m

from .wire import (
    KINDS,
    Answer,
    ExecuteToolBody,
    ProcessMessageBody,
    SaveHistoryBody,
    SetSettingsBody,
)

HISTORY_LIMIT = 500
TIMEOUT = "timeout"
SHUT_DOWN = "the backend is shut down"
LIMIT_KEYS = (
    "persona_query_max",
    "persona_update_max",
    "task_query_max",
    "task_update_max",
    "memory_query_max",
    "memory_update_max",
)
#: The model's API settings in ``api_config``; the kernel keeps them.
API_KEYS = ("api_key", "base_url", "model")
#: TrulyMEM's application settings, also in ``api_config``: kept in its JSON settings file
#: (``BackendServer(config_file=...)``); ``message_timeout`` is how long a request waits.
APP_KEYS = ("message_timeout", "enable_web", "enable_tui", "web_port")
MAX_MESSAGE_TIMEOUT_S = 86_400
ECHO_NOTICE = (
    "no API key configured: answering with the offline echo model (it repeats your message; "
    "no LLM is called). Set an API key with start(api_key=...) or set_settings."
)


def ok(data: dict[str, Any]) -> Answer:
    return Answer(success=True, data=data)


def fail(error: str) -> Answer:
    return Answer(success=False, error=error)


def packet_kind(packet_type: Any) -> str | None:
    """The type's value (``PacketType.GET_STATUS`` of any enum class, or a plain string)."""
    value = getattr(packet_type, "value", packet_type)
    return value if isinstance(value, str) and value in KINDS else None


# ---------------------------------------------------------------- requests


class Shutdown(msgspec.Struct, frozen=True):
    """Not a kernel command: the server (which owns the thread) handles it."""


class SettingsUpdate(msgspec.Struct, frozen=True):
    """``set_settings``: the kernel's part, and the application settings (:data:`APP_KEYS`),
    which only a settings file keeps."""

    command: m.UpdateSettings
    app: dict[str, Any] = {}


Request = m.Prompt | m.ExecuteTool | m.GetStatus | m.GetSettings | SettingsUpdate | m.GetHistory | m.SaveHistory | Shutdown


def decode(packet_type: Any, body: Any, *, session_id: str, request_id: str) -> Request | Answer:
    """A packet as a kernel command, or an error answer naming the problem. Never raises."""
    kind = packet_kind(packet_type)
    if kind is None:
        return fail(f"unknown packet type {getattr(packet_type, 'value', packet_type)!r}; expected one of: {', '.join(sorted(KINDS))}")
    if body is None:
        body = {}
    if not isinstance(body, dict):
        return fail(f"invalid {kind} body: expected an object, got {type(body).__name__}")
    ids: dict[str, Any] = {"session_id": session_id, "request_id": request_id}
    try:
        if kind == "process_message":
            text = msgspec.convert(body, ProcessMessageBody).user_input
            if not text.strip():
                return fail("invalid process_message body: 'user_input' must not be empty")
            return m.Prompt(text=text, **ids)
        if kind == "execute_tool":
            call = msgspec.convert(body, ExecuteToolBody)
            return m.ExecuteTool(name=call.tool_name, arguments=call.arguments or {}, **ids)
        if kind == "set_settings":
            update = settings_update(msgspec.convert(body, SetSettingsBody))
            if isinstance(update, Answer):
                return update
            return SettingsUpdate(command=msgspec.structs.replace(update.command, **ids), app=update.app)
        if kind == "save_history":
            entries = msgspec.convert(body, SaveHistoryBody).messages
            messages = tuple(m.Message(role=e.role, content=e.content) for e in entries)
            return m.SaveHistory(messages=messages, **ids)
    except msgspec.ValidationError as exc:
        return fail(f"invalid {kind} body: {exc}")
    if kind == "get_status":
        return m.GetStatus(**ids)
    if kind == "get_settings":
        return m.GetSettings(**ids)
    if kind == "get_history":
        return m.GetHistory(limit=HISTORY_LIMIT, **ids)
    return Shutdown()


def settings_update(body: SetSettingsBody) -> SettingsUpdate | Answer:
    """``api_config`` / ``tool_limits`` (both partial) as a kernel settings change plus
    the application settings; the first invalid field is the error."""
    changes: dict[str, Any] = {}
    openai: dict[str, Any] = {}
    app: dict[str, Any] = {}
    for key, value in (body.api_config or {}).items():
        if key in APP_KEYS:
            problem = app_setting_problem(key, value)
            if problem is not None:
                return fail(problem)
            app[key] = value
            continue
        if key not in API_KEYS:
            return fail(f"unknown api_config field {key!r}; expected {', '.join((*API_KEYS, *APP_KEYS))}")
        if value is not None and not isinstance(value, str):
            return fail(f"api_config.{key} must be a string")
        if key == "api_key" and value and "\u2026" in value:
            continue  # a masked key read back from get_settings: keep the real one
        if key == "model" and not value:
            return fail("api_config.model must not be empty")
        openai[key] = value or None
    if openai:
        changes["provider"] = {"openai": openai}
    limits: dict[str, int] = {}
    for key, value in (body.tool_limits or {}).items():
        if not (isinstance(key, str) and (key.endswith("_query_max") or key.endswith("_update_max"))):
            return fail(f"unknown tool limit {key!r}; expected <category>_query_max or <category>_update_max, e.g. {', '.join(LIMIT_KEYS)}")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return fail(f"tool_limits.{key} must be an integer >= 1 (got {value!r})")
        limits[key] = value
    if limits:
        changes["tools"] = {"limits": limits}
    return SettingsUpdate(command=m.UpdateSettings(changes=changes), app=app)


def app_setting_problem(key: str, value: Any) -> str | None:
    """Why ``value`` is not a valid application setting ``key``, or None."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if key == "message_timeout":
        if not (number and math.isfinite(value) and 0 < value <= MAX_MESSAGE_TIMEOUT_S):
            return f"api_config.message_timeout must be a number of seconds > 0 and <= {MAX_MESSAGE_TIMEOUT_S} (got {value!r})"
    elif key == "web_port":
        if not (number and isinstance(value, int) and 1 <= value <= 65_535):
            return f"api_config.web_port must be a port number from 1 to 65535 (got {value!r})"
    elif not isinstance(value, bool):
        return f"api_config.{key} must be true or false (got {value!r})"
    return None


# ---------------------------------------------------------------- answers


def error_answer(exc: m.KernelError) -> Answer:
    return fail(exc.message)


def reply_answer(kind: str, reply: m.Reply, app: dict[str, Any] | None = None) -> Answer:
    """The answer to a non-run, non-status request of type ``kind``; ``app``: the
    application settings ``get_settings`` shows in its ``api_config``."""
    if isinstance(reply, m.ErrorReply):
        return fail(reply.error.message)
    if isinstance(reply, m.ToolOutput):
        return fail(reply.result) if reply.is_error else ok({"success": True, "result": reply.result})
    if kind == "set_settings" and isinstance(reply, m.SettingsView):
        return ok({"status": "settings_updated"})
    if isinstance(reply, m.SettingsView):
        return ok(settings_data(reply.settings, app or {}))
    if isinstance(reply, m.HistoryView):
        return ok({"history": history_data(reply.messages)})
    if kind == "save_history" and isinstance(reply, (m.Done, m.Accepted)):
        # Accepted: queued behind the running message, applied when it ends (before the next).
        return ok({"status": "history_saved"})
    return fail(f"unexpected kernel reply {type(reply).__name__}")


def settings_data(view: dict[str, Any], app: dict[str, Any]) -> dict[str, Any]:
    """The document's settings shape from the kernel's (already masked) settings view and
    the application settings (none without a settings file)."""
    openai = view.get("provider", {}).get("openai", {})
    return {
        "api_config": {"api_key": openai.get("api_key"), "base_url": openai.get("base_url"), "model": openai.get("model"), **app},
        "tool_limits": dict(view.get("tools", {}).get("limits", {})),
    }


def history_data(messages: tuple[m.Message, ...] | list[m.Message]) -> list[dict[str, str]]:
    """Chat records for display: user/assistant/system text, oldest first (no tool plumbing)."""
    out = []
    for message in messages[-HISTORY_LIMIT:]:
        if message.role == "tool":
            continue
        content = message.content or m.parts_text(message.parts)
        if content:
            out.append({"role": message.role, "content": content})
    return out


def status_data(report: m.StatusReport, view: dict[str, Any], facts: dict[str, Any]) -> dict[str, Any]:
    openai = view.get("provider", {}).get("openai", {})
    echo = report.provider == "echo"
    config = {
        "provider": report.provider,
        "model": report.model,
        "base_url": openai.get("base_url"),
        "api_key": openai.get("api_key"),
        "version": report.version,
        "uptime_s": report.uptime_s,
        "active_runs": report.active_runs,
        "tool_limits": dict(view.get("tools", {}).get("limits", {})),
        **facts,
    }
    if echo:
        config["notice"] = ECHO_NOTICE
    return {"running": True, "config": config, "graph_initialized": True, "client_initialized": not echo}


class RunCollector:
    """Folds one run's events into the process_message answer.

    It is fed what :class:`kernel.RunFollower` hands out (that run's events only, in
    order, ending with its ``run_finished``/``run_failed``), so it does no filtering.
    """

    def __init__(self) -> None:
        self._calls: dict[str, dict[str, Any]] = {}

    def feed(self, event: m.Event) -> Answer | None:
        """The final answer once the run ended, else None."""
        if isinstance(event, m.ToolCallStarted):
            self._calls[event.call_id] = {"name": event.name, "arguments": _arguments(event.arguments), "result": None}
        elif isinstance(event, m.ToolResult):
            call = self._calls.get(event.call_id)
            if event.outcome in m.REFUSED_OUTCOMES:  # listed in the run's rejected_tools instead
                self._calls.pop(event.call_id, None)
            elif call is not None:
                call["result"] = event.result
        elif isinstance(event, m.RunFinished):
            failed = m.run_end_error(event)  # any interrupt: the message names its cause
            if failed is not None:
                return fail(failed.message)
            return ok(
                {
                    "success": True,
                    "content": event.text,
                    "tool_calls": list(self._calls.values()),
                    "rejected_tools": [[name, reason] for name, reason in event.rejected_tools],
                }
            )
        elif isinstance(event, m.RunFailed):
            return fail(event.error.message)
        return None


def _arguments(text: str) -> Any:
    """The model's JSON arguments as a dict; text that is not a JSON object stays text."""
    try:
        value = decode_json(text or "{}")
    except msgspec.DecodeError:
        return text
    return value if isinstance(value, dict) else text
