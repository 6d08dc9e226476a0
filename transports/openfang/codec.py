"""Sans-IO codec of the OpenFang socket dialect.

:class:`Connection` is one socket's worth of dialect state, as h11's ``Connection`` is
an HTTP connection's: frames in -> what to do (a kernel command, a local command, or a
frame to send back); kernel events in -> frames out. It owns the verbose level, one
:class:`Outbound` (turn encoder + text coalescer) per session the socket follows, the
requests the socket sent (it renders only its own turns) and the question pending for
it. The server feeds it and sends what it returns; it does no I/O, and nothing a client
sends makes it raise.

The pieces it is made of are pure functions and small classes, tested on their own:
:func:`decode_frame` (one client frame -> a kernel command, a ``Ping``, a
:class:`LocalCommand` or an :class:`~.wire.ErrorOut` with OpenFang's exact wording),
:class:`TurnEncoder` (kernel events of the runs one client started -> OpenFang's turn
sequence) and :class:`Outbound` (that plus text coalescing, clock passed in).
"""

from __future__ import annotations

import itertools
import unicodedata
import uuid
from collections.abc import Collection, Iterable, Mapping
from typing import Any

import msgspec

from kernel import TOO_DEEP, decode_json
from kernel import model as m
from transports.shared.coalesce import DeltaCoalescer

from .sessionids import public_session_id
from .wire import (
    AgentEntry,
    AgentsUpdated,
    ApprovalInfo,
    CommandResult,
    Connected,
    ErrorOut,
    Phase,
    Pong,
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
#: OpenFang's verbose levels, in the order ``/verbose`` cycles them: how much of a tool's input and result is shown.
VERBOSE_LEVELS: tuple[VerboseLevel, ...] = ("off", "on", "full")
INPUT_PREVIEW = {"on": 100, "full": 500}
RESULT_PREVIEW = {"on": 200, "full": 4000}
#: Why a question is declined when the socket that was asked goes away.
CLIENT_GONE = "the client disconnected"

#: The commands OpenFang's dashboard offers and this transport answers (name, description, category).
WEB_COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("help", "Show available commands", "general"),
    ("new", "Reset session (clear history)", "session"),
    ("reset", "Reset session (clear history)", "session"),
    ("compact", "Trigger LLM session compaction", "session"),
    ("model", "Show or switch model (/model [name])", "agent"),
    ("stop", "Cancel current agent run", "session"),
    ("usage", "Show session token usage", "info"),
    ("context", "Show context window usage & pressure", "info"),
    ("verbose", "Cycle tool detail level (/verbose [off|on|full])", "display"),
    ("queue", "Check if agent is processing", "info"),
    ("approve", "Run the tool waiting for approval (/approve [always])", "session"),
    ("deny", "Decline the tool waiting for approval (/deny [reason])", "session"),
    ("continue", "Continue past the agent's turn limit", "session"),
)


class Ping(msgspec.Struct, frozen=True):
    """``{"type":"ping"}``: answered with ``{"type":"pong"}``."""


class LocalCommand(msgspec.Struct, frozen=True, kw_only=True):
    """A ``command`` frame the transport answers from its own state (verbose, queue...)."""

    name: str
    args: str = ""
    session_id: str | None = None

    @property
    def needs_session(self) -> bool:
        """Whether the answer needs the session's :class:`SessionFacts` (all but ``verbose``)."""
        return self.name != "verbose"


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
    #: the approval policy every prompt carries (None: the kernel's default, ask)
    approval: m.ApprovalPolicy | None = None


class Decoded(msgspec.Struct, frozen=True):
    """What one frame asks for, and the OpenFang command name it answers to."""

    item: m.Command | Ping | LocalCommand | ErrorOut
    command: str | None = None


class Action(msgspec.Struct, frozen=True):
    """A frame's command for the server to carry out (in the session it resolves), and
    the OpenFang command name its answer goes out under."""

    command: m.Command | LocalCommand
    name: str = ""


class SessionFacts(msgspec.Struct, frozen=True, kw_only=True):
    """What the server looks up for a :class:`LocalCommand` (``queue``, ``usage``, ``help``...)."""

    session_id: str
    #: the session's info (None: it does not exist yet)
    info: m.SessionInfo | None = None
    #: how many history messages the agent's model sees
    history_window: int = 0
    #: the kernel's slash commands
    commands: tuple[m.CommandInfo, ...] = ()


def decode_frame(text: str, ctx: DecodeContext) -> Decoded:
    """One client frame → what to do.  Never raises (fuzzed)."""
    try:
        parsed: Any = decode_json(text)
    except msgspec.DecodeError as exc:
        if str(exc) == TOO_DEEP:  # JSON, but deeper than anything decodes: not plain text either
            return Decoded(ErrorOut(content=f"Invalid message: {TOO_DEEP}"))
        parsed = {"type": "message", "content": text}
    obj: dict[str, Any] = parsed if isinstance(parsed, dict) else {}
    kind = obj.get("type")
    kind = kind if isinstance(kind, str) else "message"
    session_id = obj.get("session_id")
    if session_id is not None and not valid_session_name(session_id):
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


def valid_session_name(value: object) -> bool:
    """Whether a ``session_id`` in a frame or body can name a session (any printable id)."""
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
        m.Prompt(
            text=content, parts=tuple(parts), agent_id=ctx.agent_id, session_id=session_id, request_id=ctx.request_id,
            options=m.PromptOptions(approval=ctx.approval),
        )
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
    ids: dict[str, Any] = {"session_id": session_id, "request_id": ctx.request_id}
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
            inner = decode_json(content)
        except msgspec.DecodeError:
            inner = None
        if isinstance(inner, dict) and isinstance(inner.get("content"), str):
            content = inner["content"]
    return "".join(c for c in content if c in "\n\t" or unicodedata.category(c) not in ("Cc", "Cs")).strip()


def attachment_part(upload: Upload) -> m.ContentPart:
    """Images reach the model as images; everything else as a named file."""
    if upload.content_type.lower().startswith("image/"):
        return m.ImagePart(data=upload.data, mime_type=upload.content_type)
    return m.FilePart(name=upload.filename, data=upload.data, content_type=upload.content_type)


def agent_entry(info: m.AgentInfo) -> AgentEntry:
    return AgentEntry(id=info.id, name=info.name, state="Running", model_provider=info.provider, model_name=info.model)


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
    for level in VERBOSE_LEVELS:
        if level == wanted:
            return level
    return VERBOSE_LEVELS[(VERBOSE_LEVELS.index(current) + 1) % len(VERBOSE_LEVELS)]


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


def compact_message(message_count: int, history_window: int) -> str:
    """The answer to ``compact`` (socket and REST): the gateway never summarises history.

    OpenFang answers "No compaction needed (...)" below its threshold; here the model
    always sees a window of the newest messages, so nothing ever needs compacting.
    """
    return (
        f"No compaction needed ({message_count} messages; the model always sees the newest {history_window}). "
        "Use /new to start over."
    )


def too_large(limit_bytes: int) -> ErrorOut:
    return ErrorOut(content=f"Message too large (max {limit_bytes // 1024}KB)")


def rate_limited(limit_per_minute: int) -> ErrorOut:
    return ErrorOut(content=f"Rate limit exceeded. Max {limit_per_minute} messages per minute.")


def idle_closed(idle_s: float) -> ErrorOut:
    minutes = f"{idle_s / 60:g} min" if idle_s >= 60 else f"{idle_s:g} s"
    return ErrorOut(content=f"Connection closed due to inactivity ({minutes} timeout)")


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

    def feed(self, event: m.Event) -> list[ServerEvent]:
        if isinstance(event, m.SubscriberLagged):
            return [ErrorOut(content=f"This connection fell behind and missed events: {event.error.message}")]
        if not isinstance(event, m.RunEvent) or event.request_id not in self.mine:
            return []
        run_id = event.run_id
        match event:
            case m.RunStarted():
                self.streamed[run_id] = []
                return [Typing(state="start"), Phase(phase="streaming")]
            case m.TurnStarted(iteration=iteration):
                self.awaiting_turns = False
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
            case m.ToolResult(call_id=call_id, name=name, result=result, outcome=outcome):
                if self.pending_approval == call_id:
                    self.pending_approval = None
                is_error = outcome != "ok"
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
            case m.RunFinished() if m.forced_end_error(event) is None:
                return self._finished(event)
            case m.RunFinished() | m.RunFailed():
                # A failure, or an interrupt the client did not ask for (drain, shutdown,
                # timeout): OpenFang's error frame, never a normal-looking response.
                error = m.forced_end_error(event)
                assert error is not None
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


def _delta_text(frame: ServerEvent) -> str | None:
    return frame.content if isinstance(frame, TextDeltaOut) else None


def _delta(text: str) -> ServerEvent:
    return TextDeltaOut(content=text)


class Outbound:
    """A :class:`TurnEncoder` plus text coalescing: events in, frames out, clock passed in."""

    def __init__(self, encoder: TurnEncoder, coalescer: DeltaCoalescer) -> None:
        self.encoder = encoder
        self.coalescer = coalescer

    @property
    def deadline(self) -> float | None:
        return self.coalescer.deadline

    def feed(self, events: Iterable[m.Event], now: float) -> list[ServerEvent]:
        frames = (frame for event in events for frame in self.encoder.feed(event))
        return self.coalescer.merge(frames, now, _delta_text, _delta)

    def tick(self, now: float) -> list[ServerEvent]:
        text = self.coalescer.due(now)
        return [TextDeltaOut(content=text)] if text is not None else []


class Connection:
    """One OpenFang socket: frames in -> what to do; a followed session's events in -> frames out.

    The server resolves sessions and runs commands; everything the dialect remembers
    between frames is here. Questions (tool approval, turn limit) are answered by the
    client unless ``approval`` (set on every prompt) decides them.
    """

    def __init__(
        self,
        agent_id: str,
        *,
        approval: m.ApprovalPolicy | None = None,
        window_tokens: int = 200_000,
        coalesce_s: float = 0.1,
        coalesce_chars: int = 200,
    ) -> None:
        self.agent_id = agent_id
        self.approval = approval
        self.window_tokens = window_tokens
        self.coalesce_s = coalesce_s
        self.coalesce_chars = coalesce_chars
        self.verbose: VerboseLevel = "full"
        #: The session this socket prompted last: where its commands go by default.
        self.last_session: str | None = None
        self._prefix = f"of-{uuid.uuid4().hex[:12]}"
        self._requests = itertools.count(1)
        self._mine: set[str] = set()
        self._followed: dict[str, Outbound] = {}
        self._agents: tuple[AgentEntry, ...] = ()

    # ------------------------------------------------------------ agents

    def hello(self, agents: Iterable[m.AgentInfo]) -> list[ServerEvent]:
        """The frames a new socket gets: ``connected``, then the agent list."""
        self._agents = tuple(agent_entry(info) for info in agents)
        return [Connected(agent_id=self.agent_id), AgentsUpdated(agents=self._agents)]

    def agents_changed(self, agents: Iterable[m.AgentInfo]) -> list[ServerEvent]:
        """``agents_updated`` again, only when the list differs from the last one sent."""
        listing = tuple(agent_entry(info) for info in agents)
        if listing == self._agents:
            return []
        self._agents = listing
        return [AgentsUpdated(agents=listing)]

    # ----------------------------------------------------------- inbound

    def receive(self, text: str, *, uploads: Mapping[str, Upload] = {}, kernel_commands: Collection[str] = ()) -> Action | list[ServerEvent]:
        """One client frame -> the command to carry out, or the frames to send back at once."""
        current = self._followed.get(self.last_session) if self.last_session is not None else None
        ctx = DecodeContext(
            agent_id=self.agent_id,
            request_id=f"{self._prefix}-{next(self._requests)}",
            uploads=uploads,
            kernel_commands=kernel_commands,
            pending_approval=current.encoder.pending_approval if current else None,
            awaiting_turns=current.encoder.awaiting_turns if current else False,
            approval=self.approval,
        )
        decoded = decode_frame(text, ctx)
        item = decoded.item
        if isinstance(item, Ping):
            return [Pong()]
        if isinstance(item, ErrorOut):
            return [item]
        return Action(item, decoded.command or "")

    def sending(self, prompt: m.Prompt, session_id: str) -> m.Prompt:
        """The prompt as it goes to ``session_id`` (which this socket must follow): its turn is rendered here."""
        assert prompt.request_id is not None and session_id in self._followed
        self._mine.add(prompt.request_id)
        self.last_session = session_id
        return msgspec.structs.replace(prompt, session_id=session_id)

    def refused(self, error: m.KernelError, prompt: m.Prompt | None = None) -> list[ServerEvent]:
        """A command (or the prompt) the kernel refused: OpenFang's error frame."""
        if prompt is not None and prompt.request_id is not None:
            self._mine.discard(prompt.request_id)
        return [ErrorOut(content=error.message)]

    def answered(self, command: str, reply: m.Reply | m.KernelError) -> list[ServerEvent]:
        """The ``command_result`` (or error) for a command the kernel carried out."""
        return [command_result(command, reply)]

    def local(self, command: LocalCommand, facts: SessionFacts | None = None) -> list[ServerEvent]:
        """The answer to a local command; ``facts`` when :attr:`LocalCommand.needs_session`."""
        name = command.name
        if name == "verbose":
            self.verbose = next_verbose(self.verbose, command.args)
            for outbound in self._followed.values():
                outbound.encoder.verbose = self.verbose
            return [CommandResult(command=name, message=f"Verbose level: **{self.verbose}**")]
        assert facts is not None
        return [self._local_answer(name, facts)]

    def _local_answer(self, name: str, facts: SessionFacts) -> CommandResult:
        info = facts.info
        if name == "queue":
            busy = info is not None and info.busy
            return CommandResult(command=name, message="Agent is processing a request..." if busy else "Agent is idle.")
        if name == "usage":
            usage = info.usage if info is not None else m.Usage()
            tokens_in, tokens_out = usage.input_tokens, usage.output_tokens
            return CommandResult(command=name, message=f"Session usage: ~{tokens_in} in / ~{tokens_out} out (~{tokens_in + tokens_out} total)")
        if name == "context":
            return self._context(facts)
        if name == "compact":
            count = info.message_count if info is not None else 0
            return CommandResult(command=name, message=compact_message(count, facts.history_window))
        if name == "budget":
            return CommandResult(command=name, message="No spending limits are configured: this gateway does not meter costs.")
        if name == "peers":
            return CommandResult(command=name, message="OFP network disabled.")
        if name == "a2a":
            return CommandResult(command=name, message="No external A2A agents discovered.")
        ours = {n for n, _, _ in WEB_COMMANDS}
        lines = [f"`/{n}` — {d}" for n, d, _ in WEB_COMMANDS]
        lines += [f"`/{c.name}` — {c.description}" for c in facts.commands if c.name not in ours]
        return CommandResult(command="help", message="Available commands:\n" + "\n".join(lines))

    def _context(self, facts: SessionFacts) -> CommandResult:
        window = self.window_tokens
        followed = self._followed.get(facts.session_id)
        tokens = followed.encoder.last_input_tokens if followed else 0
        pressure = context_pressure(tokens, window)
        count = facts.info.message_count if facts.info is not None else 0
        message = (
            f"Session {public_session_id(facts.session_id)}: {count} messages in history; the model sees the last {facts.history_window}.\n"
            f"Last request: ~{tokens} input tokens of a {window}-token window "
            f"({min(tokens / max(window, 1) * 100, 100):.1f}%). Pressure: {pressure}."
        )
        return CommandResult(command="context", message=message, context_pressure=pressure)

    # ---------------------------------------------------------- outbound

    def follows(self, session_id: str) -> bool:
        return session_id in self._followed

    def follow(self, session_id: str) -> None:
        """Start rendering ``session_id`` (the server subscribed to it before its first prompt)."""
        encoder = TurnEncoder(self._mine, verbose=self.verbose, window_tokens=self.window_tokens)
        self._followed[session_id] = Outbound(encoder, DeltaCoalescer(self.coalesce_s, self.coalesce_chars))

    def deadline(self, session_id: str) -> float | None:
        """When the session's buffered text must go out (wait for its events until then)."""
        followed = self._followed.get(session_id)
        return followed.deadline if followed else None

    def on_events(self, session_id: str, events: list[m.Event], now: float) -> list[ServerEvent]:
        """A batch of the session's events (``[]``: its deadline passed) -> frames to send."""
        followed = self._followed[session_id]
        return followed.feed(events, now) if events else followed.tick(now)

    def unfollow(self, session_id: str) -> list[m.Command]:
        """Stop rendering a session (its feed ended, or the socket went away).

        Returns the commands that decline the questions it left open: nobody is left
        to answer them, so they are answered "no" now rather than at their timeout.
        """
        followed = self._followed.pop(session_id, None)
        if followed is None:
            return []
        encoder = followed.encoder
        declines: list[m.Command] = []
        if encoder.pending_approval is not None:
            declines.append(m.ResolveToolApproval(session_id=session_id, call_id=encoder.pending_approval, approved=False, reason=CLIENT_GONE))
        if encoder.awaiting_turns:
            declines.append(m.ResolveTurnLimit(session_id=session_id, confirmed=False, reason=CLIENT_GONE))
        return declines
