"""The one shared model: content parts, commands, events, replies and errors.

Every dialect codec translates to and from these types and nothing else, so a
conversation started through one transport can be continued or watched through
another. All types are frozen msgspec Structs in tagged unions (``type`` field,
snake_case tags) so that the native stdio and HTTP dialects can put them on the
wire as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import msgspec
from msgspec import UNSET, UnsetType

# ---------------------------------------------------------------- errors

ErrorCode = Literal[
    "parse_error",
    "invalid_request",
    "not_found",
    "busy",
    # The client's own credentials were refused.
    "unauthorized",
    # The credentials are valid but their scopes or agents do not allow the command.
    "forbidden",
    "rate_limited",
    "too_large",
    "provider_error",
    "tool_error",
    "timeout",
    "internal",
    # A shared service (the store's database, the cluster's Redis) cannot be reached.
    "unavailable",
    # The instance that ran a session died mid-run; another took the session over.
    "owner_lost",
    # The upstream model refused the gateway's own API key (never the client's credentials).
    "upstream_unauthorized",
    # This instance is draining (shutting down): new runs go elsewhere or wait for the restart.
    "draining",
    # A run was interrupted before its answer was whole (by a client's interrupt command).
    "interrupted",
]


class ErrorInfo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A structured error with a stable code; each dialect maps it to its own shape."""

    code: ErrorCode
    message: str
    details: dict[str, Any] | None = None


class KernelError(Exception):
    """Raised by the kernel for a command it cannot carry out."""

    def __init__(self, code: ErrorCode, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code: ErrorCode = code
        self.message = message
        self.details = details

    def info(self) -> ErrorInfo:
        return ErrorInfo(code=self.code, message=self.message, details=self.details)


# ---------------------------------------------------------------- who is asking

#: What a principal may do: ``read`` (list, history, follow), ``prompt`` (prompt, interrupt,
#: regenerate, clear), ``approve`` (answer questions), ``admin`` (everything, every session).
Scope = Literal["read", "prompt", "approve", "admin"]


class Principal(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Who sends a command, as the transport authenticated it; the kernel authorizes.

    ``name`` is the key's name (``admin`` for the admin token and local transports): it is
    what sessions record as their owner and what metrics may be labelled with. ``agents``
    empty means every agent.
    """

    name: str
    scopes: tuple[Scope, ...] = ("admin",)
    agents: tuple[str, ...] = ()

    @property
    def is_admin(self) -> bool:
        return "admin" in self.scopes

    def can(self, scope: Scope) -> bool:
        return self.is_admin or scope in self.scopes

    def may_use(self, agent_id: str) -> bool:
        return self.is_admin or not self.agents or agent_id in self.agents


#: The admin: the ``--token`` / ``GATEWAY_TOKEN`` holder, and local transports unless configured.
ADMIN = Principal(name="admin")


class Caller(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What a transport knows about who sends a command, passed beside it to ``Kernel.execute``
    (never inside a command, so no wire dialect can set it): the principal, the transport's
    name (a bounded metric label) and the caller's W3C ``traceparent`` to continue."""

    principal: Principal = ADMIN
    transport: str | None = None
    traceparent: str | None = None


LOCAL_CALLER = Caller()


# ---------------------------------------------------------------- content


class TextPart(msgspec.Struct, frozen=True, tag="text", tag_field="type"):
    text: str


class ImagePart(msgspec.Struct, frozen=True, tag="image", tag_field="type"):
    """Raw image bytes; JSON dialects carry them base64-encoded (msgspec does it)."""

    data: bytes
    mime_type: str = "image/png"


class FilePart(msgspec.Struct, frozen=True, tag="file", tag_field="type"):
    """A file the user attached. Text-like files reach the model as text with their name."""

    name: str
    data: bytes
    content_type: str = "text/plain"


ContentPart = TextPart | ImagePart | FilePart


def parts_text(parts: list[ContentPart] | tuple[ContentPart, ...]) -> str:
    """The plain-text view of some parts, used for history listings and slash commands."""
    chunks: list[str] = []
    for part in parts:
        if isinstance(part, TextPart):
            chunks.append(part.text)
        elif isinstance(part, FilePart):
            chunks.append(f"[file {part.name}]")
        else:
            chunks.append(f"[image {part.mime_type}]")
    return "\n".join(chunks)


# ---------------------------------------------------------------- conversation


#: How a tool call ended, as data: codecs map it to their wire, nobody parses result text.
#: ``rejected``: declined by the user or the approval policy, or an unknown tool;
#: ``limit_reached``: over its per-run limit; ``timed_out``: the tool ran past its timeout;
#: ``interrupted``: the run was interrupted before the tool finished.
ToolOutcome = Literal["ok", "error", "rejected", "invalid_arguments", "limit_reached", "timed_out", "interrupted"]

#: Outcomes in which the tool did not run because it was refused.
REFUSED_OUTCOMES: frozenset[str] = frozenset({"rejected", "limit_reached"})


class ToolCall(msgspec.Struct, frozen=True, kw_only=True):
    """One tool call the model asked for; ``arguments`` is the model's JSON text."""

    id: str
    name: str
    arguments: str


class Message(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One context message, in the shape the providers translate to their APIs."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    parts: tuple[ContentPart, ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    created_at: float = 0.0
    # For a tool message: how the call ended (None for messages stored before outcomes existed).
    outcome: ToolOutcome | None = None
    # The run that stored it and the client's id of that run (set by the session as it
    # stores a run's messages): a dialect whose runs are addressable objects (A2A's tasks)
    # finds a run's messages — and its end — again after a restart.
    run_id: str | None = None
    request_id: str | None = None
    # Stored after the run was interrupted (its partial answer): the run did not end whole.
    interrupted: bool = False


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
        )


# ---------------------------------------------------------------- commands


class ClientTool(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A tool the *client* runs: offered to the model, never executed by the gateway.

    When the model calls one, the run ends with ``stop_reason="tool_calls"`` and the
    calls in ``run_finished.pending_tool_calls``; the client answers with tool messages
    (``save_history``) and a ``continue`` command (the OpenAI tools round trip).
    """

    name: str
    description: str = ""
    parameters: dict[str, Any] = {}


class ApprovalPolicy(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """How a run's questions are answered: by the client (``ask``) or by this policy.

    A tool call that needs approval (the tool requires it, or the agent or request asks
    before every tool) is run without a question when its name is in ``allow_tools`` or
    its category in ``allow_categories``; otherwise ``mode`` decides: ``ask`` the client,
    ``approve`` it, or ``reject`` it (the model is told ``reason``). ``turn_limit`` does the
    same for the turn-limit question: ``ask``, ``continue`` (reset the count) or ``stop``;
    left out, it asks when ``mode`` asks and stops otherwise (nobody is there to ask).
    Each transport chooses the policy its clients can live with (docs/architecture.md).
    """

    mode: Literal["ask", "approve", "reject"] = "ask"
    allow_tools: tuple[str, ...] = ()
    allow_categories: tuple[str, ...] = ()
    turn_limit: Literal["ask", "continue", "stop"] | None = None
    reason: str | None = None

    def decides(self, name: str, category: str) -> Literal["ask", "approve", "reject"]:
        if name in self.allow_tools or category in self.allow_categories:
            return "approve"
        return self.mode

    def at_turn_limit(self) -> Literal["ask", "continue", "stop"]:
        if self.turn_limit is not None:
            return self.turn_limit
        return "ask" if self.mode == "ask" else "stop"


#: A transport's config field for its policy: a table, or a mode as shorthand.
ApprovalSetting = ApprovalPolicy | Literal["ask", "approve", "reject"]


def approval_policy(value: ApprovalSetting, *, reason: str | None = None, unattended: str | None = None) -> ApprovalPolicy:
    """A policy from a transport's config value: a table, or one of its modes as shorthand.

    ``reason`` is the default for a policy that gives none. ``unattended`` names who cannot
    be asked (``"OpenAI clients"``): a policy that would ask them anything — which only waits
    out the approval timeout — is refused with a ValueError saying so.
    """
    policy = value if isinstance(value, ApprovalPolicy) else ApprovalPolicy(mode=value)
    if policy.reason is None and reason is not None:
        policy = msgspec.structs.replace(policy, reason=reason)
    if unattended is not None and "ask" in (policy.mode, policy.at_turn_limit()):
        raise ValueError(f'{unattended} cannot be asked; use "reject", "approve" or a table without "ask"')
    return policy


class OutputFormat(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """The shape the run's answer must have (structured output).

    ``json_schema``: a JSON document valid against ``schema`` (``name`` labels it for the
    model; ``strict`` asks the upstream to enforce it exactly); ``json_object``: any JSON
    object. The kernel cannot know which model call of a run gives the final answer, so
    the format goes with every call, as with a model asked directly: a call may still use
    tools, and only an answer without tool calls is held to the format.
    """

    type: Literal["json_schema", "json_object"]
    name: str = "output"
    schema: dict[str, Any] = {}
    strict: bool | None = None


class ToolChoice(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """How the run's *first* model call may use tools: ``auto`` (the model decides),
    ``required`` (some tool: one of the client's own when it brought any), ``tool`` (the
    tool ``name``), ``none`` (no tools this run).

    Only the first call is bound: once the forced call has its result, the model must be
    free to answer (a forced tool on every call would loop until the iteration limit).
    Forcing a tool the run does not offer is an ``invalid_request``.
    """

    mode: Literal["auto", "required", "tool", "none"] = "auto"
    name: str | None = None


class PromptOptions(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Per-request overrides of the agent's defaults (Agent-CLI ``config`` and friends)."""

    max_tokens: int | None = None
    system_prompt: str | None = None
    use_tools: bool = True
    max_context_messages: int | None = None
    ask_before_tool_execution: bool | None = None
    max_tool_iterations: int | None = None
    model: str | None = None
    temperature: float | None = None
    client_tools: tuple[ClientTool, ...] = ()
    # False: the client takes the whole answer at once (a non-stream OpenAI request), so the
    # provider may ask its upstream for one answer instead of a stream; the text then
    # arrives as one delta.
    stream: bool = True
    # None: every question is asked (the kernel's default, as if ``ApprovalPolicy()``).
    approval: ApprovalPolicy | None = None
    #: Structured output: the answer's required shape (None: free text).
    output_format: OutputFormat | None = None
    #: Forced or forbidden tool use for the run's first model call (None: ``auto``).
    tool_choice: ToolChoice | None = None
    #: False: at most one tool call per model answer (None: the upstream's default).
    parallel_tool_calls: bool | None = None
    #: Nucleus sampling, (0, 1] (None: the upstream's default).
    top_p: float | None = None
    #: Sequences at which the model stops (Anthropic's ``stop_sequences``, OpenAI's ``stop``).
    stop: tuple[str, ...] = ()

    def problem(self) -> str | None:
        """What is wrong with these options, or None: the one rule every dialect's requests
        meet (the kernel refuses a run whose options break it, as ``invalid_request``)."""
        for name in ("max_tokens", "max_context_messages", "max_tool_iterations"):
            value = getattr(self, name)
            if value is not None and value < 1:
                return f"{name} must be at least 1 (got {value})"
        if self.temperature is not None and not 0 <= self.temperature <= 2:
            return f"temperature must be between 0 and 2 (got {self.temperature:g})"
        if self.top_p is not None and not 0 < self.top_p <= 1:
            return f"top_p must be above 0 and at most 1 (got {self.top_p:g})"
        if any(not sequence for sequence in self.stop):
            return "stop sequences must not be empty"
        return None


class _Command(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", omit_defaults=True):
    """Common fields: the target session and the client's correlation id."""

    session_id: str | None = None
    request_id: str | None = None


class Prompt(_Command, frozen=True, tag="prompt"):
    parts: tuple[ContentPart, ...] = ()
    text: str | None = None
    agent_id: str | None = None
    options: PromptOptions = PromptOptions()

    def content_parts(self) -> tuple[ContentPart, ...]:
        if self.text is not None:
            return (TextPart(self.text), *self.parts)
        return self.parts


class Interrupt(_Command, frozen=True, tag="interrupt"):
    """Stop the active run; or only the run with ``run_id``, or the run the client started
    with ``target_request_id`` (active or still queued: a queued one ends as interrupted
    without reaching the model). An error says when there is nothing to interrupt."""

    run_id: str | None = None
    target_request_id: str | None = None
    # Why: the client asked (or left), or the run outlived a dialect's wait ("timeout").
    cause: Literal["client", "timeout"] = "client"


class Regenerate(_Command, frozen=True, tag="regenerate"):
    options: PromptOptions = PromptOptions()


class Continue(_Command, frozen=True, tag="continue"):
    """Run the model on the context as it is, with no new user message
    (e.g. after the client saved the results of its own tool calls)."""

    options: PromptOptions = PromptOptions()


class ClearContext(_Command, frozen=True, tag="clear_context"):
    pass


class ResolveToolApproval(_Command, frozen=True, tag="resolve_tool_approval"):
    call_id: str | None = None
    approved: bool = False
    reason: str | None = None
    # Remember the answer for this tool for the rest of the session (ACP "always").
    remember: bool = False


class ResolveTurnLimit(_Command, frozen=True, tag="resolve_turn_limit"):
    confirmed: bool = False
    reason: str | None = None


class RunCommand(_Command, frozen=True, tag="run_command"):
    """A slash command by name, e.g. ``help`` or ``model gpt-4o``."""

    name: str
    args: str = ""


class ExecuteTool(_Command, frozen=True, tag="execute_tool"):
    """A direct tool call by a client: not subject to per-run limits or approval."""

    name: str
    arguments: dict[str, Any] = {}


class ListAgents(_Command, frozen=True, tag="list_agents"):
    pass


class ListCommands(_Command, frozen=True, tag="list_commands"):
    pass


class ListTools(_Command, frozen=True, tag="list_tools"):
    pass


class ListModels(_Command, frozen=True, tag="list_models"):
    """The models an agent's provider offers (its configured one first)."""

    agent_id: str | None = None


class ListSessions(_Command, frozen=True, tag="list_sessions"):
    agent_id: str | None = None


class OpenSession(_Command, frozen=True, tag="open_session"):
    """Create the session (or find it when it exists) for an agent.

    ``ephemeral``: a new session that lives in memory only, never stored or listed (a
    throw-away conversation such as one OpenAI-compatible request); delete it when done.
    ``history``: an ephemeral session's prior turns, its context from the start (admitted as
    ``SaveHistory``'s are). A client that sends its whole conversation with every request
    gets its session in one command: no history change queued through the session's task,
    and back, before the run.
    """

    agent_id: str | None = None
    label: str | None = None
    ephemeral: bool = False
    history: tuple[Message, ...] = ()


class GetSession(_Command, frozen=True, tag="get_session"):
    """A session's info (loaded from the store when it is not live); ``not_found`` if unknown."""


@runtime_checkable
class FileAccess(Protocol):
    """How file tools reach files. The default is the workspace on disk; the ACP
    transport swaps in the editor's view (unsaved buffers included)."""

    async def read_text(self, path: str, *, line: int | None = None, limit: int | None = None) -> str: ...

    async def write_text(self, path: str, content: str) -> None: ...


@runtime_checkable
class ToolSource(Protocol):
    """More tools for a session besides its agent's (an editor's terminal, MCP servers).

    Asked at every model call, so a source whose tools change (an MCP server's
    ``listChanged``) is seen at once. The items are :class:`kernel.Tool` objects.
    """

    def tools(self) -> Sequence[Any]: ...


class ConfigureSession(_Command, frozen=True, tag="configure_session"):
    """Per-session overrides; a field left out is not changed, ``null`` resets it.

    ``files`` and ``tool_sources`` are for in-process transports only (objects, never on a
    wire): where the session's file tools read and write (ACP: the editor's buffers), and
    where its extra tools come from.
    """

    max_turns: int | UnsetType | None = UNSET
    approval_timeout_s: float | UnsetType | None = UNSET
    model: str | UnsetType | None = UNSET
    files: FileAccess | UnsetType | None = UNSET
    tool_sources: tuple[ToolSource, ...] | UnsetType = UNSET


class CloseSession(_Command, frozen=True, tag="close_session"):
    """Take a live session out of memory (its client left): its runs, queued ones too,
    end as interrupted; the stored history stays. ``if_unwatched``: only when no other
    subscriber follows it (another client, another transport)."""

    if_unwatched: bool = False


class DeleteSession(_Command, frozen=True, tag="delete_session"):
    pass


class GetStatus(_Command, frozen=True, tag="get_status"):
    pass


class GetSettings(_Command, frozen=True, tag="get_settings"):
    pass


class UpdateSettings(_Command, frozen=True, tag="update_settings"):
    """A partial update: nested tables merge into the current settings, then validate."""

    changes: dict[str, Any] = {}


class GetHistory(_Command, frozen=True, tag="get_history"):
    limit: int | None = None


class SaveHistory(_Command, frozen=True, tag="save_history"):
    """Append messages to the history; an empty list clears it."""

    messages: tuple[Message, ...] = ()


class ClearHistory(_Command, frozen=True, tag="clear_history"):
    pass


Command = (
    Prompt
    | Interrupt
    | Regenerate
    | Continue
    | ClearContext
    | ResolveToolApproval
    | ResolveTurnLimit
    | RunCommand
    | ExecuteTool
    | ListAgents
    | ListCommands
    | ListTools
    | ListSessions
    | OpenSession
    | DeleteSession
    | GetStatus
    | GetSettings
    | UpdateSettings
    | GetHistory
    | SaveHistory
    | ClearHistory
    | GetSession
    | ConfigureSession
    | CloseSession
    | ListModels
)

# ---------------------------------------------------------------- events

StopReason = Literal["end_turn", "max_tokens", "tool_iterations", "turn_limit", "interrupted", "refusal", "tool_calls"]


class _Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", omit_defaults=True):
    session_id: str
    seq: int = 0


class RunEvent(_Event, frozen=True, kw_only=True):
    """Every event that belongs to one run: ``isinstance(event, RunEvent)``."""

    run_id: str
    request_id: str | None = None


class RunStarted(RunEvent, frozen=True, tag="run_started"):
    agent_id: str = ""
    regenerate: bool = False


class TextDelta(RunEvent, frozen=True, tag="text_delta"):
    text: str


class ReasoningDelta(RunEvent, frozen=True, tag="reasoning_delta"):
    text: str


class ToolCallStarted(RunEvent, frozen=True, tag="tool_call"):
    """The model asked for a tool; sent before approval or execution."""

    call_id: str
    name: str
    arguments: str
    description: str = ""
    category: str = "general"
    access: str = "query"
    # Whether a ``tool_approval_requested`` question follows (the kernel's decision).
    needs_approval: bool = False
    # The call will not run (an unknown tool, over its limit, invalid arguments, or refused
    # by a remembered answer or the policy): its ``tool_result`` with the outcome follows.
    refused: bool = False


class ToolApprovalRequested(RunEvent, frozen=True, tag="tool_approval_requested"):
    call_id: str
    name: str
    arguments: str
    description: str = ""
    timeout_s: float | None = None


class ToolResult(RunEvent, frozen=True, tag="tool_result"):
    """``result`` is what the model sees; ``outcome`` says how the call ended and
    ``error`` why it failed (the bare reason, for clients that show it apart)."""

    call_id: str
    name: str
    result: str
    outcome: ToolOutcome = "ok"
    error: str | None = None
    is_error: bool = False
    rejected: bool = False


class ToolProgress(RunEvent, frozen=True, tag="tool_progress"):
    """A running tool's progress (a remote A2A agent's answer as it streams), for the dialects
    that can show it; the model sees only the tool's result."""

    call_id: str
    name: str
    text: str


class TurnLimitReached(RunEvent, frozen=True, tag="turn_limit_reached"):
    current_turns: int
    max_turns: int
    reason: str = ""


class TurnStarted(RunEvent, frozen=True, tag="turn_started"):
    """One model call begins (turn = model call, as Agent-CLI counts them)."""

    turn: int
    iteration: int = 0


class ModelResponding(RunEvent, frozen=True, tag="model_responding"):
    """The model accepted the turn's request and its answer is on the way (an upstream's
    status and headers arrived); nothing to show yet. A dialect that holds its response's
    headers until the run's first output, so that an early failure keeps its real HTTP
    status, sends them now: its client then reads the headers while the model works, as it
    would from the upstream itself, and a failure from here on is one the upstream too would
    report inside its stream. Not every provider says so (the echo model does not)."""

    turn: int


#: Why a run was interrupted: the client asked; the gateway drains or shuts down; it ran out of
#: time; this instance lost the session to another (``owner_lost``: its lease ran out).
InterruptCause = Literal["client", "drain", "shutdown", "timeout", "owner_lost"]


class RunFinished(RunEvent, frozen=True, tag="run_finished"):
    text: str
    usage: Usage = Usage()
    interrupted: bool = False
    stop_reason: StopReason = "end_turn"
    iterations: int = 0
    tool_calls: int = 0
    rejected_tools: tuple[tuple[str, str], ...] = ()
    # Calls of client tools the client must run (stop_reason "tool_calls").
    pending_tool_calls: tuple[ToolCall, ...] = ()
    # Input tokens of the run's last model call: how full the context window is now
    # (``usage`` sums every call of the run, so it overstates it on tool runs).
    context_tokens: int = 0
    # With ``interrupted``: why (None is a client's interrupt, for events stored before causes).
    interrupt_cause: InterruptCause | None = None


class RunFailed(RunEvent, frozen=True, tag="run_failed"):
    error: ErrorInfo
    text: str = ""
    usage: Usage = Usage()


class ContextCleared(_Event, frozen=True, tag="context_cleared"):
    request_id: str | None = None


class SubscriberLagged(_Event, frozen=True, tag="subscriber_lagged"):
    """Sent as the last event to a subscriber that fell too far behind.

    It can subscribe again with ``after_seq=last_seq`` to resume while the
    events are retained.
    """

    last_seq: int
    error: ErrorInfo

    @property
    def end_code(self) -> ErrorCode:
        """How a run whose events this loss cut off ends: ``owner_lost`` when they went with
        the session's previous owner (the run will not go on), else ``rate_limited`` (the
        reader fell behind)."""
        return "owner_lost" if self.error.code == "owner_lost" else "rate_limited"


Event = (
    RunStarted
    | TextDelta
    | ReasoningDelta
    | ToolCallStarted
    | ToolApprovalRequested
    | ToolResult
    | ToolProgress
    | TurnLimitReached
    | TurnStarted
    | ModelResponding
    | RunFinished
    | RunFailed
    | ContextCleared
    | SubscriberLagged
)

RUN_END_EVENTS = (RunFinished, RunFailed)

#: The commands that start a run (refused while draining, counted by a key's limits).
RUN_COMMANDS = (Prompt, Regenerate, Continue)


def conversation_turn(
    session_id: str, request_id: str | None, parts: tuple[ContentPart, ...], options: PromptOptions, *, continuation: bool
) -> Prompt | Continue:
    """The run of a client's conversation request (OpenAI chat, Responses, Anthropic): its last
    user turn as a prompt or, when the conversation ends with its tool results, a ``continue``
    (no new user turn)."""
    if continuation:
        return Continue(session_id=session_id, request_id=request_id, options=options)
    return Prompt(session_id=session_id, request_id=request_id, parts=parts, options=options)

_INTERRUPT_ERRORS: dict[str, ErrorInfo] = {
    "client": ErrorInfo(code="interrupted", message="The run was interrupted before its answer was complete"),
    "drain": ErrorInfo(code="draining", message="The gateway is draining: the run was interrupted before its answer was complete"),
    "shutdown": ErrorInfo(code="draining", message="The gateway shut down: the run was interrupted before its answer was complete"),
    "timeout": ErrorInfo(code="timeout", message="The run did not end in time: it was interrupted before its answer was complete"),
    "owner_lost": ErrorInfo(
        code="owner_lost", message="Another gateway instance took the session over: the run was interrupted before its answer was complete"
    ),
}


def run_end_error(end: RunFinished | RunFailed) -> ErrorInfo | None:
    """None when the run's answer is whole; otherwise why it is not.

    The one rule behind "an interrupted answer never looks complete": every dialect ends a
    run for which this is not None in its own failure form (OpenAI chat an in-stream error,
    Responses ``response.failed``/``incomplete``, Anthropic ``event: error``, AG-UI
    ``RUN_ERROR``, …) — only the client's own cancel (it closed the stream) goes unseen.
    """
    if isinstance(end, RunFailed):
        return end.error
    if not end.interrupted:
        return None
    return _INTERRUPT_ERRORS[end.interrupt_cause or "client"]


#: Why a run ends when its session closed before the run told its end (the run outlived the
#: unload's grace, or it was still queued): the words of the made-up ``run_failed``.
SESSION_CLOSED = "the session was closed before the run ended"


def session_closed_end(session_id: str, run_id: str, request_id: str | None, cause: InterruptCause) -> RunFailed:
    """The ``run_failed`` a closing session gives a run of its that never told its end: a
    failure in every dialect, never a whole-looking answer. Its code is the one an interrupt
    of the same cause gives (``draining`` for a drain or a shutdown, ``owner_lost`` when
    another instance runs the session now, ``timeout``, ``interrupted`` when a client closed
    it), so that a client tells the cases apart the same way whichever end the run got."""
    code = _INTERRUPT_ERRORS[cause].code
    return RunFailed(session_id=session_id, run_id=run_id, request_id=request_id, error=ErrorInfo(code=code, message=SESSION_CLOSED))


def forced_end_error(end: RunFinished | RunFailed) -> ErrorInfo | None:
    """:func:`run_end_error` for a dialect that has an "interrupted" answer of its own (the
    native ``interrupted: true``, OpenFang's and Agent-CLI's interrupted markers, ACP's
    ``cancelled``): a client's interrupt is shown in that form, so this is None for it; a
    failure, a drain, a shutdown or a timeout is still the dialect's failure form."""
    if isinstance(end, RunFinished) and end.interrupted and (end.interrupt_cause or "client") == "client":
        return None
    return run_end_error(end)

# ---------------------------------------------------------------- replies


class AgentInfo(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    name: str
    description: str = ""
    provider: str = ""
    model: str = ""
    tools: tuple[str, ...] = ()


class ToolInfo(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    description: str
    parameters: dict[str, Any]
    category: str = "general"
    access: str = "query"
    requires_approval: bool = False


class CommandInfo(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    description: str
    usage: str = ""


SessionState = Literal["idle", "running", "awaiting_tool_approval", "awaiting_turn_confirmation", "closed"]


class SessionInfo(msgspec.Struct, frozen=True, kw_only=True):
    session_id: str
    agent_id: str
    label: str | None = None
    # The first prompt, shortened: what a session list shows.
    title: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    message_count: int = 0
    state: SessionState = "idle"
    last_seq: int = 0
    # Tokens used by the session's runs since it was loaded in this process.
    usage: Usage = Usage()
    # Live only (a session not loaded has none of these):
    run_id: str | None = None  # the active run
    request_id: str | None = None  # the client's id of the active run
    queued: int = 0  # jobs waiting behind it
    queued_requests: tuple[str, ...] = ()  # the client's ids of the runs among them
    pending_call_id: str | None = None  # the tool call waiting for approval
    subscribers: int = 0
    clients: tuple[str, ...] = ()  # who follows it: the transports' names, one each
    model: str = ""  # the model the session's next run uses
    max_turns: int = 0  # its turn limit (0: none)
    # The principal (key name) it belongs to; lists show a key only its own (kernel/access.py).
    owner: str = "admin"

    @property
    def busy(self) -> bool:
        """A run is going or waiting in its inbox (what decides "keep the idle connection" or
        "this run must wait")."""
        return self.run_id is not None or self.queued > 0


class _Reply(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", omit_defaults=True):
    request_id: str | None = None


class Accepted(_Reply, frozen=True, tag="accepted"):
    """A command that starts or steers a run was taken; its outcome comes as events."""

    session_id: str
    run_id: str | None = None
    queued: bool = False


class Done(_Reply, frozen=True, tag="ok"):
    message: str = ""


class AgentList(_Reply, frozen=True, tag="agents"):
    agents: tuple[AgentInfo, ...]


class CommandList(_Reply, frozen=True, tag="commands"):
    commands: tuple[CommandInfo, ...]


class ToolList(_Reply, frozen=True, tag="tools"):
    tools: tuple[ToolInfo, ...]


class SessionList(_Reply, frozen=True, tag="sessions"):
    sessions: tuple[SessionInfo, ...]


class SessionOpened(_Reply, frozen=True, tag="session"):
    session: SessionInfo


class ModelInfo(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    provider: str


class ModelList(_Reply, frozen=True, tag="models"):
    models: tuple[ModelInfo, ...]


class CommandOutput(_Reply, frozen=True, tag="command_output"):
    name: str
    output: str


class ToolOutput(_Reply, frozen=True, tag="tool_output"):
    name: str
    result: str
    is_error: bool = False


class StatusReport(_Reply, frozen=True, tag="status"):
    version: str
    uptime_s: float
    provider: str
    model: str
    sessions: int
    active_runs: int
    agents: int
    # Subscriptions to live sessions, by the name of the transport that holds them.
    clients: dict[str, int] = {}


class SettingsView(_Reply, frozen=True, tag="settings"):
    """Settings as plain data with every secret masked."""

    settings: dict[str, Any]


class HistoryView(_Reply, frozen=True, tag="history"):
    session_id: str
    messages: tuple[Message, ...]


class ErrorReply(_Reply, frozen=True, tag="error"):
    error: ErrorInfo


Reply = (
    Accepted
    | Done
    | AgentList
    | CommandList
    | ToolList
    | SessionList
    | SessionOpened
    | ModelList
    | CommandOutput
    | ToolOutput
    | StatusReport
    | SettingsView
    | HistoryView
    | ErrorReply
)
