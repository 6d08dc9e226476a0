"""Sans-IO codec of the OpenFang dialect.

Inbound: :func:`decode_frame` turns one client text frame into a kernel command, a
``Ping``, a :class:`LocalCommand` (answered by the transport from its own state) or an
:class:`~.wire.ErrorOut` with OpenFang's exact wording.  It never raises.

Outbound: :class:`TurnEncoder` turns the kernel events of the runs one client started
into OpenFang's turn sequence; :class:`Outbound` adds text-delta coalescing on top.
Both are pure: the caller owns the clock and the socket.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Collection, Iterable, Mapping
from typing import Any

import msgspec

from kernel import model as m

from .coalesce import DeltaCoalescer
from .wire import (
    ApprovalInfo,
    CommandResult,
    ErrorOut,
    Phase,
    Pressure,
    ResponseOut,
    ServerEvent,
    SilentComplete,
    TextDeltaOut,
    ToolEnd,
    ToolResultOut,
    ToolStart,
    Typing,
    VerboseLevel,
)

#: Commands the transport answers itself (OpenFang's ``handle_command`` plus help).
LOCAL_COMMANDS = frozenset({"help", "compact", "usage", "context", "verbose", "queue", "budget", "peers", "a2a"})
#: Our extensions for the questions OpenFang never asks (tool approval, turn limit).
APPROVAL_WORDS = {"/approve": True, "/allow": True, "/deny": False, "/reject": False}
MAX_SESSION_ID_CHARS = 128
#: OpenFang's verbose levels: how much of a tool's input and result is shown.
INPUT_PREVIEW = {"on": 100, "full": 500}
RESULT_PREVIEW = {"on": 200, "full": 4000}


class Ping(msgspec.Struct, frozen=True):
    """``{"type":"ping"}``: answered with ``{"type":"pong"}``."""


class LocalCommand(msgspec.Struct, frozen=True, kw_only=True):
    """A ``command`` frame the transport answers from its own state (verbose, queue...)."""

    name: str
    args: str = ""
    session_id: str | None = None


class Upload(msgspec.Struct, frozen=True, kw_only=True):
    """An uploaded file, referenced by ``file_id`` in a message's ``attachments``."""

    filename: str
    content_type: str
    data: bytes


class DecodeContext(msgspec.Struct, frozen=True, kw_only=True):
    """What decoding needs to know about the connection (all plain data)."""

    agent_id: str
    request_id: str | None = None
    uploads: Mapping[str, Upload] = {}
    kernel_commands: Collection[str] = ()
    #: call id of a tool approval this client was asked for, if any
    pending_approval: str | None = None
    awaiting_turns: bool = False


class Decoded(msgspec.Struct, frozen=True):
    """The decoded frame and, for ``command`` frames, the name to answer under."""

    item: m.Command | Ping | LocalCommand | ErrorOut
    command: str | None = None


def decode_frame(text: str, ctx: DecodeContext) -> Decoded:
    """One client frame → what to do.  Never raises (fuzzed)."""
    try:
        parsed: Any = json.loads(text)
    except (ValueError, RecursionError):
        parsed = {"type": "message", "content": text}
    obj: dict[str, Any] = parsed if isinstance(parsed, dict) else {}
    kind = obj.get("type")
    kind = kind if isinstance(kind, str) else "message"
    session_id = obj.get("session_id")
    if session_id is not None and not _valid_session_id(session_id):
        return Decoded(ErrorOut(content="Invalid session_id"))
    if kind == "message":
        return _decode_message(obj, session_id, ctx)
    if kind == "command":
        name = obj.get("command")
        args = obj.get("args")
        return decode_command(name if isinstance(name, str) else "", args if isinstance(args, str) else "", session_id, ctx)
    if kind == "ping":
        return Decoded(Ping())
    return Decoded(ErrorOut(content=f"Unknown message type: {kind}"))


def _valid_session_id(value: object) -> bool:
    return (
        isinstance(value, str)
        and 0 < len(value) <= MAX_SESSION_ID_CHARS
        and not any(unicodedata.category(c)[0] in "CZ" for c in value)
    )


def _decode_message(obj: dict[str, Any], session_id: str | None, ctx: DecodeContext) -> Decoded:
    raw = obj.get("content")
    if not isinstance(raw, str) or not raw.strip():
        return Decoded(ErrorOut(content="Missing or empty 'content' field"))
    content = sanitize_user_input(raw)
    if not content:
        return Decoded(ErrorOut(content="Message content is empty after sanitization"))
    answer = _typed_answer(content, session_id, ctx)
    if answer is not None:
        return answer
    parts: list[m.ContentPart] = []
    attachments = obj.get("attachments")
    for ref in attachments if isinstance(attachments, list) else ():
        file_id = ref.get("file_id") if isinstance(ref, dict) else None
        if not isinstance(file_id, str):
            continue  # OpenFang skips references it cannot read
        upload = ctx.uploads.get(file_id)
        if upload is None:
            return Decoded(ErrorOut(content=f"Attachment not found: {file_id} (upload it again)"))
        parts.append(attachment_part(upload))
    return Decoded(
        m.Prompt(text=content, parts=tuple(parts), agent_id=ctx.agent_id, session_id=session_id, request_id=ctx.request_id)
    )


def _typed_answer(content: str, session_id: str | None, ctx: DecodeContext) -> Decoded | None:
    """``/approve``, ``/deny [reason]``, ``/continue`` typed as a message answer a pending question.

    The dashboard sends unknown slash commands as plain messages, so this is how its
    users answer the questions OpenFang itself never asks.
    """
    word, _, rest = content.partition(" ")
    word = word.lower()
    if ctx.pending_approval is not None and word in APPROVAL_WORDS:
        name = "approve" if APPROVAL_WORDS[word] else "deny"
        return decode_command(name, rest.strip(), session_id, ctx)
    if ctx.awaiting_turns and word in ("/continue", "/stop"):
        return decode_command(word[1:], rest.strip(), session_id, ctx)
    return None


def decode_command(name: str, args: str, session_id: str | None, ctx: DecodeContext) -> Decoded:
    """A ``command`` frame → kernel command or local command (OpenFang's names)."""
    ids = {"session_id": session_id, "request_id": ctx.request_id}
    if name == "stop":
        return Decoded(m.Interrupt(**ids), name)
    if name in ("new", "reset"):
        return Decoded(m.ClearContext(**ids), name)
    if name in ("approve", "deny"):
        approved = name == "approve"
        remember = approved and args.strip().lower() == "always"
        reason = None if approved or not args.strip() else args.strip()
        return Decoded(
            m.ResolveToolApproval(**ids, call_id=ctx.pending_approval, approved=approved, reason=reason, remember=remember),
            name,
        )
    if name == "continue":
        return Decoded(m.ResolveTurnLimit(**ids, confirmed=True), name)
    if name in ctx.kernel_commands and name != "help":
        return Decoded(m.RunCommand(**ids, name=name, args=args), name)
    if name in LOCAL_COMMANDS:
        return Decoded(LocalCommand(name=name, args=args, session_id=session_id), name)
    return Decoded(ErrorOut(content=f"Unknown command: {name}"), name)


def sanitize_user_input(content: str) -> str:
    """OpenFang's sanitizer: unwrap a JSON envelope, drop control characters, trim."""
    if content.startswith("{"):
        try:
            inner = json.loads(content)
        except (ValueError, RecursionError):
            inner = None
        if isinstance(inner, dict) and isinstance(inner.get("content"), str):
            content = inner["content"]
    return "".join(c for c in content if c in "\n\t" or unicodedata.category(c) not in ("Cc", "Cs")).strip()


def attachment_part(upload: Upload) -> m.ContentPart:
    """Images reach the model as images; everything else as a named file."""
    if upload.content_type.lower().startswith("image/"):
        return m.ImagePart(data=upload.data, mime_type=upload.content_type)
    return m.FilePart(name=upload.filename, data=upload.data, content_type=upload.content_type)


def command_result(command: str, reply: m.Reply | m.KernelError) -> CommandResult | ErrorOut:
    """The answer to a ``command`` frame the kernel carried out (OpenFang's texts)."""
    if isinstance(reply, m.KernelError):
        if command == "stop" and reply.code == "invalid_request":
            return CommandResult(command=command, message="No active run to cancel.")
        return ErrorOut(content=reply.message)
    if command == "stop":
        return CommandResult(command=command, message="Run cancelled.")
    if command in ("new", "reset"):
        if isinstance(reply, m.Accepted) and reply.queued:
            return CommandResult(command=command, message="Session will be reset when the current run ends.")
        return CommandResult(command=command, message="Session reset. Chat history cleared.")
    if command == "approve":
        return CommandResult(command=command, message="Approved: the tool runs now.")
    if command == "deny":
        return CommandResult(command=command, message="Denied: the tool will not run.")
    if command == "continue":
        return CommandResult(command=command, message="Continuing past the turn limit.")
    if isinstance(reply, m.CommandOutput):
        return CommandResult(command=command, message=reply.output)
    if isinstance(reply, m.Done):
        return CommandResult(command=command, message=reply.message)
    return CommandResult(command=command, message="OK")


def next_verbose(current: VerboseLevel, args: str) -> VerboseLevel:
    """``/verbose off|on|full`` sets the level; anything else cycles off → on → full → off."""
    wanted = args.strip().lower()
    if wanted in ("off", "on", "full"):
        return wanted  # type: ignore[return-value]
    return {"off": "on", "on": "full", "full": "off"}[current]  # type: ignore[return-value]


def context_pressure(input_tokens: int, window_tokens: int) -> Pressure:
    """OpenFang's estimate: the last request's input tokens against the context window."""
    pct = min(input_tokens / max(window_tokens, 1) * 100.0, 100.0)
    if pct > 85:
        return "critical"
    if pct > 70:
        return "high"
    if pct > 50:
        return "medium"
    return "low"


def _preview(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit]


class TurnEncoder:
    """Kernel events of one session → OpenFang events, for the runs one client started.

    Only runs whose ``request_id`` is in ``mine`` are rendered (a shared set the
    connection fills before it sends each prompt), so two clients on one session each
    see their own turns, as with OpenFang where every socket streams its own request.
    """

    def __init__(self, mine: set[str], *, verbose: VerboseLevel = "full", window_tokens: int = 200_000) -> None:
        self.mine = mine
        self.verbose: VerboseLevel = verbose
        self.window_tokens = window_tokens
        self.streamed: dict[str, list[str]] = {}  # run_id → text sent so far, in pieces
        self.pending_approval: str | None = None
        self.awaiting_turns = False
        self.last_input_tokens = 0

    def owns(self, event: m.Event) -> bool:
        request_id = getattr(event, "request_id", None)
        return request_id is not None and request_id in self.mine and hasattr(event, "run_id")

    def feed(self, event: m.Event) -> list[ServerEvent]:
        if not self.owns(event):
            return []
        run_id: str = event.run_id  # type: ignore[union-attr]
        match event:
            case m.RunStarted():
                self.streamed[run_id] = []
                return [Typing(state="start"), Phase(phase="streaming")]
            case m.TurnStarted(iteration=iteration):
                return [Phase(phase="thinking")] if iteration > 0 else []
            case m.TextDelta(text=text):
                self.streamed.setdefault(run_id, []).append(text)  # joined at the end: no quadratic +=
                return [TextDeltaOut(content=text)]
            case m.ToolCallStarted(call_id=call_id, name=name, arguments=arguments):
                out: list[ServerEvent] = [Typing(state="tool", tool=name), ToolStart(id=call_id, tool=name)]
                if self.verbose != "off":
                    out.append(ToolEnd(id=call_id, tool=name, input=_preview(arguments, INPUT_PREVIEW[self.verbose])))
                out.append(Phase(phase="tool_use", detail=name))
                return out
            case m.ToolApprovalRequested():
                return [self._approval(event)]
            case m.ToolResult(call_id=call_id, name=name, result=result, is_error=is_error):
                if self.pending_approval == call_id:
                    self.pending_approval = None
                if self.verbose == "off":
                    return [ToolResultOut(id=call_id, tool=name, is_error=is_error)]
                return [ToolResultOut(id=call_id, tool=name, result=_preview(result, RESULT_PREVIEW[self.verbose]), is_error=is_error)]
            case m.TurnLimitReached(current_turns=turns, max_turns=limit):
                self.awaiting_turns = True
                message = (
                    f"The agent reached its limit of {limit} model turns ({turns} used). "
                    "Reply /continue to go on or /stop to end the turn."
                )
                return [CommandResult(command="turn_limit", message=message)]
            case m.RunFinished():
                return self._finished(event)
            case m.RunFailed(error=error):
                self._end(event)
                return [Typing(state="stop"), ErrorOut(content=error.message)]
        return []

    def _approval(self, event: m.ToolApprovalRequested) -> CommandResult:
        self.pending_approval = event.call_id
        timeout = f" It is declined automatically after {event.timeout_s:g}s." if event.timeout_s else ""
        message = (
            f"Tool **{event.name}** wants to run with {_preview(event.arguments, INPUT_PREVIEW['full'])}.\n"
            f"Reply /approve (or /approve always) to run it, or /deny [reason].{timeout}"
        )
        info = ApprovalInfo(id=event.call_id, tool=event.name, input=_preview(event.arguments, INPUT_PREVIEW["full"]), timeout_s=event.timeout_s)
        return CommandResult(command="approval", message=message, approval=info)

    def _end(self, event: m.RunFinished | m.RunFailed) -> str:
        """Book-keeping at the end of a run; returns the text streamed for it."""
        if event.request_id is not None:
            self.mine.discard(event.request_id)  # bounded: only requests still running stay
        self.pending_approval = None
        self.awaiting_turns = False
        if isinstance(event, m.RunFinished) and event.context_tokens:
            self.last_input_tokens = event.context_tokens
        return "".join(self.streamed.pop(event.run_id, ()))

    def _finished(self, event: m.RunFinished) -> list[ServerEvent]:
        text = self._end(event)
        usage = event.usage
        if not event.interrupted and text.strip() == "NO_REPLY":
            return [Phase(phase="done"), Typing(state="stop"), SilentComplete(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens)]
        out: list[ServerEvent] = []
        if not text.strip() and not event.interrupted:
            # OpenFang's placeholder for a turn without text; streamed too, so that
            # response.content still equals the concatenated deltas.
            text += f"[The agent completed processing but returned no text response. ({usage.input_tokens} in / {usage.output_tokens} out)]"
            out.append(TextDeltaOut(content=text))
        # Pressure is how full the window is now: the last model call's input, not the run's sum.
        context = event.context_tokens or usage.input_tokens
        pressure = context_pressure(context, self.window_tokens)
        if pressure in ("high", "critical"):
            pct = min(context / max(self.window_tokens, 1) * 100, 100)
            out.append(Phase(phase="context_warning", detail=f"Context window {pct:.0f}% full; /new starts over"))
        response = ResponseOut(
            content=text,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            context_pressure=pressure,
            interrupted=True if event.interrupted else msgspec.UNSET,
        )
        return [*out, Phase(phase="done"), Typing(state="stop"), response]


class Outbound:
    """A :class:`TurnEncoder` plus text coalescing: events in, frames out, clock passed in."""

    def __init__(self, encoder: TurnEncoder, coalescer: DeltaCoalescer) -> None:
        self.encoder = encoder
        self.coalescer = coalescer

    @property
    def deadline(self) -> float | None:
        return self.coalescer.deadline

    def feed(self, events: Iterable[m.Event], now: float) -> list[ServerEvent]:
        out: list[ServerEvent] = []
        for event in events:
            for item in self.encoder.feed(event):
                if isinstance(item, TextDeltaOut):
                    text = self.coalescer.push(item.content, now)
                    if text is not None:
                        out.append(TextDeltaOut(content=text))
                else:
                    out.extend(self.flush())
                    out.append(item)
        return out

    def tick(self, now: float) -> list[ServerEvent]:
        text = self.coalescer.due(now)
        return [TextDeltaOut(content=text)] if text is not None else []

    def flush(self) -> list[ServerEvent]:
        text = self.coalescer.flush()
        return [TextDeltaOut(content=text)] if text is not None else []
