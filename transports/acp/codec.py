"""Sans-IO translation between ACP shapes and the kernel model.

Prompt content blocks become kernel content parts; kernel events become
``session/update`` payloads (message chunks with their ``messageId``, tool calls —
a ``run_command`` call with its terminal —, the plan of an ``update_plan`` call,
usage at a run's end); stored history becomes the updates that replay it
(``session/load``); the editor's permission answer becomes a tool-approval
decision; a run's end becomes the prompt's answer. Pure functions and one small
per-session object (:class:`SessionStream`), unit-tested on transcripts. What the
editor sees of a session besides its conversation is :mod:`.session_meta`.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Collection, Iterable
from typing import Any

import msgspec

from kernel import JsonDecoder
from kernel import model as m

from .jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, RESOURCE_NOT_FOUND, RpcFailure
from .wire import (
    PROTOCOL_VERSION,
    AgentMessageChunk,
    AgentThoughtChunk,
    AudioBlock,
    AvailableCommand,
    AvailableCommandsUpdate,
    CallContent,
    CommandInput,
    Content,
    ContentBlock,
    Diff,
    HttpMcpServer,
    Image,
    ImageBlock,
    Location,
    McpServer,
    PermissionCancelled,
    PermissionResult,
    PlanEntry,
    PlanUpdate,
    Resource,
    ResourceBlock,
    ResourceLinkBlock,
    StdioMcpServer,
    Text,
    TextBlock,
    TextResource,
    ToolCallProgress,
    ToolCallStart,
    ToolContent,
    ToolTerminal,
    Update,
    UsageUpdate,
    UserMessageChunk,
)

_decode_json = JsonDecoder[Any]().decode

# ---------------------------------------------------------------- initialize

#: The editor answers every tool approval (``session/request_permission``). ACP has no
#: turn-limit question: a run at the limit stops, and its prompt ends ``max_turn_requests``.
APPROVAL = m.ApprovalPolicy(mode="ask", turn_limit="stop")


def negotiate_version(client: int | str) -> int:
    """The lower of the client's version and ours; a date string or a pre-1 number gets ours."""
    if isinstance(client, int) and client >= 1:
        return min(client, PROTOCOL_VERSION)
    return PROTOCOL_VERSION


def initialize_result(version: int, agent_version: str) -> dict[str, Any]:
    """What the gateway can do. No authentication is needed, so ``authMethods`` is empty
    (``authenticate`` and ``logout`` still answer, for editors that call them anyway)."""
    return {
        "protocolVersion": version,
        "agentCapabilities": {
            "loadSession": True,
            "promptCapabilities": {"image": True, "audio": False, "embeddedContext": True},
            "mcpCapabilities": {"http": True, "sse": False},
            "sessionCapabilities": {"list": {}, "resume": {}, "close": {}, "delete": {}},
            "auth": {"logout": {}},
        },
        "authMethods": [],
        "agentInfo": {"name": "gateway", "title": "Gateway", "version": agent_version},
    }


def mcp_servers(entries: Iterable[Any]) -> tuple[McpServer, ...]:
    """The editor's MCP servers of ``session/new``, ``load`` or ``resume``: stdio (no
    ``type``) and ``http`` ones. An SSE or other server, which ``initialize`` did not
    advertise, or a malformed entry answers ``-32602`` naming it."""
    servers: list[McpServer] = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise RpcFailure(INVALID_PARAMS, f"Invalid params: mcpServers[{index}]: expected an object")
        kind, name = entry.get("type", "stdio"), entry.get("name")
        where = f"mcpServers[{index}]" + (f" ({name})" if isinstance(name, str) else "")
        if kind not in ("stdio", "http"):
            raise RpcFailure(INVALID_PARAMS, f"Invalid params: {where}: {kind!r} MCP servers are not supported (stdio and http are)")
        fields = {k: v for k, v in entry.items() if k != "type"}
        try:
            servers.append(msgspec.convert(fields, StdioMcpServer) if kind == "stdio" else msgspec.convert(fields, HttpMcpServer))
        except msgspec.ValidationError as exc:
            raise RpcFailure(INVALID_PARAMS, f"Invalid params: {where}: {exc}") from None
    return tuple(servers)


#: A W3C ``traceparent`` is 55 characters in version 00; a longer value is not passed on.
TRACEPARENT_MAX = 128


def meta_traceparent(meta: dict[str, Any] | None) -> str | None:
    """The editor's W3C trace context from a request's ``_meta`` (the kernel validates it)."""
    value = (meta or {}).get("traceparent")
    return value.strip() if isinstance(value, str) and 0 < len(value.strip()) <= TRACEPARENT_MAX else None


def prompt_options(mode: str) -> m.PromptOptions:
    """Mode ``ask`` asks before every tool; ``default`` leaves it to the agent (approval tools always ask)."""
    return m.PromptOptions(ask_before_tool_execution=True if mode == "ask" else None, approval=APPROVAL)


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
    """``Read file src/a.py``, ``Run command pytest -q``: the tool, and what it acts on; an
    MCP server's tool (``SERVER__TOOL``) says whose it is: ``Search (docs) rust``."""
    server, mcp, own = name.partition("__")
    title = (own if mcp and own else name).replace("_", " ").strip().capitalize() or "Tool"
    if mcp and own and server:
        title = f"{title} ({server})"
    if not isinstance(args, dict):
        return title
    path, command = args.get("path"), args.get("command")
    if isinstance(command, str) and command:
        extra = args.get("args")
        words = [command, *(extra if isinstance(extra, list) and all(isinstance(a, str) for a in extra) else ())]
        return f"{title} {shlex.join(words)}"
    return f"{title} {path}" if isinstance(path, str) and path else title


def absolute(path: str, cwd: str) -> str:
    return os.path.normpath(path if os.path.isabs(path) else os.path.join(cwd, path))


def _call_details(args: Any, cwd: str, kind: str) -> tuple[tuple[CallContent, ...], tuple[Location, ...]]:
    """Where a file tool acts (the editor can follow along) and, for an edit, the new text."""
    if not isinstance(args, dict) or not isinstance(args.get("path"), str) or not args["path"]:
        return (), ()
    path = absolute(args["path"], cwd)
    line = args.get("line")
    location = Location(path=path, line=line if isinstance(line, int) and not isinstance(line, bool) else None)
    content: tuple[CallContent, ...] = ()
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


def tool_done(call_id: str, result: str, failed: bool, terminal: str | None = None) -> ToolCallProgress:
    """A call's end. A call shown with a terminal keeps it (an update replaces the content):
    the editor goes on showing that command's output, which is what the result says."""
    content: tuple[CallContent, ...] = (ToolContent(Text(result)),) if result else ()
    if terminal is not None:
        content = (ToolTerminal(terminal),)
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
    failed = m.forced_end_error(end)  # a drain, shutdown or timeout is an error, not "cancelled"
    if failed is not None:
        raise kernel_failure(failed)
    assert isinstance(end, m.RunFinished)
    return {"stopReason": stop_reason(end), "usage": usage_result(end.usage)}


# ---------------------------------------------------------------- plans

#: The built-in planning tool (plugins/tools/plan.py): its entries have the shape of ACP's.
PLAN_TOOL = "update_plan"


class _PlanArguments(msgspec.Struct):
    entries: tuple[PlanEntry, ...]


_decode_plan = JsonDecoder[_PlanArguments](_PlanArguments).decode


def plan_entries(arguments: str) -> tuple[PlanEntry, ...] | None:
    """The plan an ``update_plan`` call proposes (None when its arguments are not a plan)."""
    try:
        return _decode_plan(arguments or "{}").entries
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


# ---------------------------------------------------------------- run events -> updates


class SessionStream:
    """Turns one session's kernel events into ``session/update`` payloads.

    It keeps what the events alone do not say at the moment an update is made: which
    model call of a run is streaming (each model call is one message, with its own
    ``messageId``), the tool calls still open (a run that ends first, interrupted, ends
    them ``failed``: the kernel sends no result for them), the plan an ``update_plan``
    call proposes (shown once the call succeeds), and the terminal shown in a
    ``run_command`` call. A session runs one run at a time, so all of it is forgotten at
    a run's end.
    """

    def __init__(self, cwd: str, context_window: int) -> None:
        self.cwd = cwd
        self.context_window = context_window
        self._calls: dict[str, int] = {}  # run id -> its model call streaming now
        self._open: dict[str, None] = {}  # tool calls started and not ended, in order
        self._plans: dict[str, tuple[PlanEntry, ...]] = {}  # call id -> the plan it proposes
        self._terminals: dict[str, str] = {}  # call id -> the terminal shown in it
        self._progress: dict[str, list[str]] = {}  # call id -> the progress a running tool reported

    def message_id(self, run_id: str) -> str:
        return f"{run_id}-{self._calls.get(run_id, 0)}"

    def show_terminal(self, call_id: str, terminal_id: str) -> ToolCallProgress:
        """The update that embeds a running command's terminal in its tool call."""
        self._terminals[call_id] = terminal_id
        return ToolCallProgress(tool_call_id=call_id, status="in_progress", content=(ToolTerminal(terminal_id),))

    def updates(self, *events: m.Event) -> list[Update]:
        """The updates of events that arrived together.

        A call the kernel will ask about stays ``pending`` until the editor allows it; a
        call that will not run (refused, e.g. a tool the editor rejected "always") goes
        straight to ``failed``; any other call is shown running at once.
        """
        out: list[Update] = []
        for event in events:
            if isinstance(event, m.TurnStarted):
                self._calls[event.run_id] = event.iteration
            elif isinstance(event, m.TextDelta):
                if event.text:
                    out.append(AgentMessageChunk(content=Text(event.text), message_id=self.message_id(event.run_id)))
            elif isinstance(event, m.ReasoningDelta):
                if event.text:
                    out.append(AgentThoughtChunk(content=Text(event.text), message_id=self.message_id(event.run_id)))
            elif isinstance(event, m.ToolCallStarted):
                out.append(tool_call(event.call_id, event.name, event.arguments, self.cwd, category=event.category, access=event.access))
                if not (event.needs_approval or event.refused):
                    out.append(in_progress(event.call_id))
                if event.name == PLAN_TOOL and (plan := plan_entries(event.arguments)) is not None:
                    self._plans[event.call_id] = plan
                self._open[event.call_id] = None
            elif isinstance(event, m.ToolProgress):
                # An update replaces a call's content: it carries all the progress so far.
                shown = self._progress.setdefault(event.call_id, [])
                shown.append(event.text)
                out.append(ToolCallProgress(tool_call_id=event.call_id, status="in_progress", content=(ToolContent(Text("".join(shown))),)))
            elif isinstance(event, m.ToolResult):
                self._open.pop(event.call_id, None)
                self._progress.pop(event.call_id, None)
                out.append(tool_done(event.call_id, event.result, event.outcome != "ok", self._terminals.get(event.call_id)))
                plan = self._plans.pop(event.call_id, None)
                if plan is not None and event.outcome == "ok":
                    out.append(PlanUpdate(entries=plan))
            elif isinstance(event, (m.RunFinished, m.RunFailed)):
                out.extend(self._end_run(event))
        return out

    def _end_run(self, event: m.RunFinished | m.RunFailed) -> list[Update]:
        """Calls left open end ``failed``; a finished run reports how full the context is."""
        out: list[Update] = [tool_done(c, "interrupted before the tool finished", True, self._terminals.get(c)) for c in self._open]
        if isinstance(event, m.RunFinished):
            # The last model call's input (which holds the earlier calls' output) and what
            # came out since; the run's sum when the kernel does not know the former.
            used = event.context_tokens + event.usage.output_tokens if event.context_tokens else event.usage.total_tokens
            out.append(UsageUpdate(used=used, size=max(self.context_window, used)))
        self._calls.pop(event.run_id, None)
        self._open.clear()
        self._plans.clear()
        self._terminals.clear()
        return out


# ---------------------------------------------------------------- history -> updates


def history_updates(messages: Iterable[m.Message], cwd: str) -> list[Update]:
    """The updates that replay a stored conversation (``session/load``), each message
    with its own ``messageId``, and the plans its ``update_plan`` calls set."""
    out: list[Update] = []
    plans: dict[str, tuple[PlanEntry, ...]] = {}
    for index, msg in enumerate(messages):
        message_id = f"history-{index}"
        if msg.role == "user":
            if msg.content:
                out.append(UserMessageChunk(content=Text(msg.content), message_id=message_id))
            out.extend(UserMessageChunk(content=_content(part), message_id=message_id) for part in msg.parts)
        elif msg.role == "assistant":
            if msg.content:
                out.append(AgentMessageChunk(content=Text(msg.content), message_id=message_id))
            for call in msg.tool_calls:
                out.append(tool_call(call.id, call.name, call.arguments, cwd))
                if call.name == PLAN_TOOL and (plan := plan_entries(call.arguments)) is not None:
                    plans[call.id] = plan
        elif msg.role == "tool" and msg.tool_call_id is not None:
            # Messages stored before outcomes existed have none: they count as completed.
            ok = msg.outcome in (None, "ok")
            out.append(tool_done(msg.tool_call_id, msg.content, not ok))
            plan = plans.pop(msg.tool_call_id, None)
            if plan is not None and ok:
                out.append(PlanUpdate(entries=plan))
    return out


def _content(part: m.ContentPart) -> Content:
    if isinstance(part, m.TextPart):
        return Text(part.text)
    if isinstance(part, m.ImagePart):
        return Image(data=part.data, mime_type=part.mime_type)
    text = part.data.decode("utf-8", errors="replace")
    return Resource(TextResource(uri=part.name, text=text, mime_type=part.content_type))
