"""Sans-IO translation between ACP shapes and the kernel model.

Prompt content blocks become kernel content parts; kernel events become
``session/update`` payloads; stored history becomes the updates that replay it
(``session/load``); the editor's permission answer becomes a tool-approval
decision; a run's end becomes the prompt's answer. Pure functions and one small
per-session object (:class:`SessionStream`), unit-tested on transcripts.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable
from typing import Any

import msgspec

from kernel import model as m
from transports.shared.jsonwire import JsonDecoder

from .wire import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    PROTOCOL_VERSION,
    RESOURCE_NOT_FOUND,
    AgentMessageChunk,
    AgentThoughtChunk,
    AudioBlock,
    AvailableCommand,
    AvailableCommandsUpdate,
    CommandInput,
    Content,
    ContentBlock,
    Diff,
    Image,
    ImageBlock,
    Location,
    PermissionCancelled,
    PermissionResult,
    Resource,
    ResourceBlock,
    ResourceLinkBlock,
    RpcFailure,
    Text,
    TextBlock,
    TextResource,
    ToolCallProgress,
    ToolCallStart,
    ToolContent,
    Update,
    UsageUpdate,
    UserMessageChunk,
)

_decode_json = JsonDecoder[Any]().decode

# ---------------------------------------------------------------- initialize and modes

MODES: dict[str, tuple[str, str]] = {
    "default": ("Default", "Ask before tools that require approval (file writes)"),
    "ask": ("Ask every time", "Ask before every tool call"),
}

#: The editor answers every tool approval (``session/request_permission``). ACP has no
#: turn-limit question: a run at the limit stops, and its prompt ends ``max_turn_requests``.
APPROVAL = m.ApprovalPolicy(mode="ask", turn_limit="stop")


def negotiate_version(client: int | str) -> int:
    """The lower of the client's version and ours; a date string or a pre-1 number gets ours."""
    if isinstance(client, int) and client >= 1:
        return min(client, PROTOCOL_VERSION)
    return PROTOCOL_VERSION


def initialize_result(version: int, agent_version: str) -> dict[str, Any]:
    return {
        "protocolVersion": version,
        "agentCapabilities": {
            "loadSession": True,
            "promptCapabilities": {"image": True, "audio": False, "embeddedContext": True},
        },
        "authMethods": [],
        "agentInfo": {"name": "gateway", "title": "Gateway", "version": agent_version},
    }


def mode_state(current: str) -> dict[str, Any]:
    modes = [{"id": key, "name": name, "description": text} for key, (name, text) in MODES.items()]
    return {"currentModeId": current, "availableModes": modes}


def prompt_options(mode: str) -> m.PromptOptions:
    """``ask`` asks before every tool; ``default`` leaves it to the agent (approval tools always ask)."""
    return m.PromptOptions(ask_before_tool_execution=True if mode == "ask" else None, approval=APPROVAL)


def check_mode(mode_id: str) -> str:
    if mode_id not in MODES:
        raise RpcFailure(INVALID_PARAMS, f"Unknown mode {mode_id!r}; available modes: {', '.join(MODES)}")
    return mode_id


# ---------------------------------------------------------------- prompt content -> kernel


def prompt_parts(blocks: Iterable[ContentBlock]) -> tuple[m.ContentPart, ...]:
    """The kernel parts of a prompt; unsupported or empty content answers ``-32602``."""
    parts: list[m.ContentPart] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            parts.append(m.TextPart(block.text))
        elif isinstance(block, ImageBlock):
            parts.append(m.ImagePart(block.data, block.mime_type))
        elif isinstance(block, ResourceBlock):
            parts.append(_resource_part(block))
        elif isinstance(block, ResourceLinkBlock):
            label = block.title or block.name or block.uri
            parts.append(m.TextPart(f"[linked resource: {label} <{block.uri}>]"))
        elif isinstance(block, AudioBlock):
            raise RpcFailure(INVALID_PARAMS, "Invalid params: audio prompts are not supported (promptCapabilities.audio is false)")
    if not any(not isinstance(p, m.TextPart) or p.text.strip() for p in parts):
        raise RpcFailure(INVALID_PARAMS, "Invalid params: the prompt is empty")
    return tuple(parts)


def _resource_part(block: ResourceBlock) -> m.ContentPart:
    res = block.resource
    if res.text is not None:
        return m.FilePart(res.uri, res.text.encode("utf-8"), res.mime_type or "text/plain")
    if res.blob is not None:
        mime = res.mime_type or "application/octet-stream"
        if mime.startswith("image/"):
            return m.ImagePart(res.blob, mime)
        return m.FilePart(res.uri, res.blob, mime)
    raise RpcFailure(INVALID_PARAMS, f"Invalid params: resource {res.uri!r} has neither text nor blob")


def slash_command(parts: tuple[m.ContentPart, ...], known: Collection[str]) -> tuple[str, str] | None:
    """``/help`` or ``/model gpt-4o`` as (name, args) when the name is a registered command."""
    if len(parts) != 1 or not isinstance(parts[0], m.TextPart):
        return None
    text = parts[0].text.strip()
    if not text.startswith("/"):
        return None
    name, _, args = text[1:].partition(" ")
    return (name, args.strip()) if name in known else None


def available_commands(commands: Iterable[m.CommandInfo]) -> AvailableCommandsUpdate:
    return AvailableCommandsUpdate(
        available_commands=tuple(
            AvailableCommand(name=c.name, description=c.description, input=CommandInput(c.usage) if c.usage else None)
            for c in commands
        )
    )


# ---------------------------------------------------------------- tools


def tool_kind(name: str, category: str = "general", access: str = "query") -> str:
    """The ACP tool kind an editor uses to pick an icon, guessed from the tool's name and access."""
    lowered = name.lower()
    for kind, words in (
        ("fetch", ("fetch", "http", "web", "url", "download")),
        ("think", ("think", "reason", "plan")),
        ("search", ("search", "grep", "find")),
        ("delete", ("delete", "remove")),
        ("execute", ("exec", "shell", "run_", "command")),
    ):
        if any(word in lowered for word in words):
            return kind
    if access == "update":
        return "edit"
    if category == "files" or lowered.startswith(("read", "list", "get")):
        return "read"
    return "other"


def parse_arguments(arguments: str) -> Any:
    """The model's JSON arguments as data (``rawInput``); the text itself when it is not JSON."""
    try:
        return _decode_json(arguments or "{}")
    except msgspec.DecodeError:
        return arguments


def tool_title(name: str, args: Any) -> str:
    title = name.replace("_", " ").strip().capitalize() or "Tool"
    path = args.get("path") if isinstance(args, dict) else None
    return f"{title} {path}" if isinstance(path, str) and path else title


def absolute(path: str, cwd: str) -> str:
    return os.path.normpath(path if os.path.isabs(path) else os.path.join(cwd, path))


def _call_details(args: Any, cwd: str, kind: str) -> tuple[tuple[ToolContent | Diff, ...], tuple[Location, ...]]:
    """Where a file tool acts (the editor can follow along) and, for an edit, the new text."""
    if not isinstance(args, dict) or not isinstance(args.get("path"), str) or not args["path"]:
        return (), ()
    path = absolute(args["path"], cwd)
    line = args.get("line")
    location = Location(path=path, line=line if isinstance(line, int) and not isinstance(line, bool) else None)
    content: tuple[ToolContent | Diff, ...] = ()
    if kind == "edit" and isinstance(args.get("content"), str):
        content = (Diff(path=path, new_text=args["content"]),)
    return content, (location,)


def tool_call(call_id: str, name: str, arguments: str, cwd: str, *, category: str = "general", access: str = "query") -> ToolCallStart:
    args = parse_arguments(arguments)
    kind = tool_kind(name, category, access)
    content, locations = _call_details(args, cwd, kind)
    return ToolCallStart(
        tool_call_id=call_id,
        title=tool_title(name, args),
        kind=kind,
        status="pending",
        raw_input=args,
        content=content,
        locations=locations,
    )


def tool_done(call_id: str, result: str, failed: bool) -> ToolCallProgress:
    content = (ToolContent(Text(result)),) if result else ()
    return ToolCallProgress(tool_call_id=call_id, status="failed" if failed else "completed", content=content)


def in_progress(call_id: str) -> ToolCallProgress:
    """The call runs now: it needed no approval, or the editor just gave it."""
    return ToolCallProgress(tool_call_id=call_id, status="in_progress")


# ---------------------------------------------------------------- permission

PERMISSION_OPTIONS: tuple[dict[str, str], ...] = (
    {"optionId": "allow_once", "name": "Allow once", "kind": "allow_once"},
    {"optionId": "allow_always", "name": "Always allow", "kind": "allow_always"},
    {"optionId": "reject_once", "name": "Reject", "kind": "reject_once"},
    {"optionId": "reject_always", "name": "Always reject", "kind": "reject_always"},
)

_DECISIONS = {
    "allow_once": (True, False),
    "allow_always": (True, True),
    "reject_once": (False, False),
    "reject_always": (False, True),
}


def permission_request(session_id: str, event: m.ToolApprovalRequested, cwd: str, *, category: str = "general", access: str = "query") -> dict[str, Any]:
    start = tool_call(event.call_id, event.name, event.arguments, cwd, category=category, access=access)
    tool = {"toolCallId": start.tool_call_id, "title": start.title, "kind": start.kind, "rawInput": start.raw_input}
    if start.content:
        tool["content"] = msgspec.to_builtins(start.content)
    if start.locations:
        tool["locations"] = msgspec.to_builtins(start.locations)
    return {"sessionId": session_id, "toolCall": tool, "options": list(PERMISSION_OPTIONS)}


def permission_decision(result: Any) -> tuple[bool, bool, str | None]:
    """(approved, remember, reason) from the editor's answer; anything unclear is a rejection."""
    try:
        outcome = msgspec.convert(result, PermissionResult).outcome
    except msgspec.ValidationError:
        return False, False, "the editor's answer was not understood"
    if isinstance(outcome, PermissionCancelled):
        return False, False, "cancelled"
    decision = _DECISIONS.get(outcome.option_id)
    if decision is None:
        return False, False, f"unknown option {outcome.option_id!r}"
    approved, remember = decision
    return approved, remember, None if approved else "rejected in the editor"


# ---------------------------------------------------------------- run end -> prompt answer

STOP_REASONS: dict[str, str] = {
    "end_turn": "end_turn",
    "max_tokens": "max_tokens",
    "tool_iterations": "max_turn_requests",
    "turn_limit": "max_turn_requests",
    "interrupted": "cancelled",
    "refusal": "refusal",
}


def stop_reason(event: m.RunFinished) -> str:
    return "cancelled" if event.interrupted else STOP_REASONS.get(event.stop_reason, "end_turn")


def usage_result(usage: m.Usage) -> dict[str, int]:
    return {"inputTokens": usage.input_tokens, "outputTokens": usage.output_tokens, "totalTokens": usage.total_tokens}


def kernel_failure(error: m.ErrorInfo) -> RpcFailure:
    """A kernel error as a JSON-RPC error; the stable kernel code travels in ``data``."""
    data: dict[str, Any] = {"code": error.code}
    if error.details:
        data["details"] = error.details
    if error.code in ("invalid_request", "parse_error"):
        return RpcFailure(INVALID_PARAMS, error.message, data)
    if error.code == "not_found":
        return RpcFailure(RESOURCE_NOT_FOUND, error.message, data)
    return RpcFailure(INTERNAL_ERROR, error.message, data)


def prompt_answer(end: m.RunFinished | m.RunFailed | None, *, cancelled: bool) -> dict[str, Any]:
    """The result of ``session/prompt`` once its run is over; a failed run raises its RpcFailure.

    ``cancelled`` (the editor sent ``session/cancel``) or an end that will not be known
    (events lost, the session closed) answers ``cancelled``, never an error.
    """
    if cancelled or end is None:
        return {"stopReason": "cancelled"}
    if isinstance(end, m.RunFailed):
        raise kernel_failure(end.error)
    return {"stopReason": stop_reason(end), "usage": usage_result(end.usage)}


# ---------------------------------------------------------------- run events -> updates


class SessionStream:
    """Turns one session's kernel events into ``session/update`` payloads."""

    def __init__(self, cwd: str, context_window: int) -> None:
        self.cwd = cwd
        self.context_window = context_window

    def updates(self, *events: m.Event) -> list[Update]:
        """The updates of events that arrived together.

        A call the kernel will ask about stays ``pending`` until the editor allows it; a
        call that will not run (refused, e.g. a tool the editor rejected "always") goes
        straight to ``failed``; any other call is shown running at once.
        """
        out: list[Update] = []
        for event in events:
            if isinstance(event, m.TextDelta):
                if event.text:
                    out.append(AgentMessageChunk(content=Text(event.text)))
            elif isinstance(event, m.ReasoningDelta):
                if event.text:
                    out.append(AgentThoughtChunk(content=Text(event.text)))
            elif isinstance(event, m.ToolCallStarted):
                out.append(tool_call(event.call_id, event.name, event.arguments, self.cwd, category=event.category, access=event.access))
                if not (event.needs_approval or event.refused):
                    out.append(in_progress(event.call_id))
            elif isinstance(event, m.ToolResult):
                out.append(tool_done(event.call_id, event.result, event.outcome != "ok"))
            elif isinstance(event, m.RunFinished):
                used = event.usage.total_tokens
                out.append(UsageUpdate(used=used, size=max(self.context_window, used)))
        return out


# ---------------------------------------------------------------- history -> updates


def history_updates(messages: Iterable[m.Message], cwd: str) -> list[Update]:
    """The updates that replay a stored conversation (``session/load``)."""
    out: list[Update] = []
    for msg in messages:
        if msg.role == "user":
            if msg.content:
                out.append(UserMessageChunk(content=Text(msg.content)))
            out.extend(UserMessageChunk(content=_content(part)) for part in msg.parts)
        elif msg.role == "assistant":
            if msg.content:
                out.append(AgentMessageChunk(content=Text(msg.content)))
            out.extend(tool_call(call.id, call.name, call.arguments, cwd) for call in msg.tool_calls)
        elif msg.role == "tool" and msg.tool_call_id is not None:
            # Messages stored before outcomes existed have none: they count as completed.
            out.append(tool_done(msg.tool_call_id, msg.content, msg.outcome not in (None, "ok")))
    return out


def _content(part: m.ContentPart) -> Content:
    if isinstance(part, m.TextPart):
        return Text(part.text)
    if isinstance(part, m.ImagePart):
        return Image(data=part.data, mime_type=part.mime_type)
    text = part.data.decode("utf-8", errors="replace")
    return Resource(TextResource(uri=part.name, text=text, mime_type=part.content_type))
