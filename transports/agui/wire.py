"""Wire shapes of AG-UI (``@ag-ui/core`` 1.x): the ``RunAgentInput`` a client POSTs and the
events the gateway streams back.

camelCase on the wire (``rename="camel"``), event ``type`` values in SCREAMING_SNAKE, and
every optional field left out rather than sent as ``null`` (the client's schemas strip
or reject what they do not expect, so the gateway sends only what they describe). The
input side is lenient where AG-UI is (unknown fields pass, as its loose objects allow);
its messages and content parts are the same structs the gateway sends back in a
``MESSAGES_SNAPSHOT``.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from kernel import model as m

#: The protocol version the gateway speaks (``RUN_STARTED.protocolVersion``).
PROTOCOL_VERSION = "1.0"


class _Shape(msgspec.Struct, kw_only=True, rename="camel", omit_defaults=True):
    """Common settings: camelCase names, optional fields omitted when unset."""


# ---------------------------------------------------------------- content parts


class DataSource(_Shape, tag_field="type", tag="data"):
    """Bytes carried inline, base64 in ``value``."""

    value: str
    mime_type: str


class UrlSource(_Shape, tag_field="type", tag="url"):
    value: str
    mime_type: str | None = None


class FileSource(_Shape, tag_field="type", tag="file"):
    """A handle a model provider issued (no bytes travel)."""

    value: str
    provider: str | None = None
    mime_type: str | None = None


Source = DataSource | UrlSource | FileSource


class TextPart(_Shape, tag_field="type", tag="text"):
    text: str


class ImagePart(_Shape, tag_field="type", tag="image"):
    source: Source


class AudioPart(_Shape, tag_field="type", tag="audio"):
    source: Source


class VideoPart(_Shape, tag_field="type", tag="video"):
    source: Source


class DocumentPart(_Shape, tag_field="type", tag="document"):
    source: Source


class BinaryPart(_Shape, tag_field="type", tag="binary"):
    """The pre-1.0 shape of an attachment, still sent by older clients."""

    mime_type: str
    data: str | None = None
    url: str | None = None
    id: str | None = None
    filename: str | None = None


Part = TextPart | ImagePart | AudioPart | VideoPart | DocumentPart | BinaryPart


# ---------------------------------------------------------------- messages


class FunctionCall(_Shape):
    name: str
    arguments: str


class ToolCall(_Shape):
    id: str
    type: Literal["function"]
    function: FunctionCall


class DeveloperMessage(_Shape, tag_field="role", tag="developer"):
    id: str
    content: str


class SystemMessage(_Shape, tag_field="role", tag="system"):
    id: str
    content: str


class AssistantMessage(_Shape, tag_field="role", tag="assistant"):
    id: str
    content: str | None = None
    tool_calls: list[ToolCall] | None = None


class UserMessage(_Shape, tag_field="role", tag="user"):
    id: str
    content: str | list[Part]


class ToolMessage(_Shape, tag_field="role", tag="tool"):
    id: str
    content: str | list[Part]
    tool_call_id: str
    error: str | None = None


class ActivityMessage(_Shape, tag_field="role", tag="activity"):
    """A front-end's progress widget: not conversation content (ignored)."""

    id: str
    activity_type: str
    content: dict[str, Any]


class ReasoningMessage(_Shape, tag_field="role", tag="reasoning"):
    """Reasoning shown in the front-end: the model gets no copy of it back (ignored)."""

    id: str
    content: str


Message = DeveloperMessage | SystemMessage | AssistantMessage | UserMessage | ToolMessage | ActivityMessage | ReasoningMessage


# ---------------------------------------------------------------- the request


class Tool(_Shape):
    """A tool the front-end runs itself (``parameters``: a JSON schema)."""

    name: str
    description: str = ""
    parameters: Any = None


class Context(_Shape):
    description: str
    value: str


class ResumeEntry(_Shape):
    """The answer to one interrupt of the previous run."""

    interrupt_id: str
    status: Literal["resolved", "cancelled"]
    payload: Any = None


class ForwardedDemands(_Shape):
    """What the gateway reads of ``forwardedProps`` (AG-UI leaves its content to the agent):
    structured output and tool use for the run, in the kernel's own shapes
    (``{"outputFormat": {"type": "json_schema", "name", "schema", "strict"}, "toolChoice":
    {"mode": "tool", "name"}, "parallelToolCalls": false}``); other keys are the client's."""

    output_format: m.OutputFormat | None = None
    tool_choice: m.ToolChoice | None = None
    parallel_tool_calls: bool | None = None


class RunAgentInput(_Shape):
    thread_id: str
    run_id: str
    messages: list[Message]
    parent_run_id: str | None = None
    protocol_version: str | None = None
    state: Any = None
    tools: list[Tool] = []
    context: list[Context] = []
    forwarded_props: Any = None
    resume: list[ResumeEntry] | None = None


class ApprovalAnswer(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The ``payload`` of a resume entry answering a tool approval or the turn limit."""

    approved: bool = True
    reason: str | None = None
    remember: bool = False


# ---------------------------------------------------------------- events


class RunStarted(_Shape, tag_field="type", tag="RUN_STARTED"):
    thread_id: str
    run_id: str
    protocol_version: str
    parent_run_id: str | None = None


class Interrupt(_Shape):
    """Something the run waits for: here a tool approval or the turn-limit question."""

    id: str
    reason: str
    message: str | None = None
    tool_call_id: str | None = None
    response_schema: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None


class SuccessOutcome(_Shape, tag_field="type", tag="success"):
    pending_tool_call_ids: list[str] | None = None


class InterruptOutcome(_Shape, tag_field="type", tag="interrupt"):
    interrupts: list[Interrupt]


class CancelledOutcome(_Shape, tag_field="type", tag="cancelled"):
    pass


Outcome = SuccessOutcome | InterruptOutcome | CancelledOutcome


class TokenUsage(_Shape):
    input_tokens: int
    output_tokens: int
    total_tokens: int


class RunFinished(_Shape, tag_field="type", tag="RUN_FINISHED"):
    thread_id: str
    run_id: str
    outcome: Outcome
    result: dict[str, Any] | None = None
    usage: list[TokenUsage] | None = None


class RunError(_Shape, tag_field="type", tag="RUN_ERROR"):
    message: str
    code: str | None = None


class TextMessageStart(_Shape, tag_field="type", tag="TEXT_MESSAGE_START"):
    message_id: str
    role: Literal["assistant"]


class TextMessageContent(_Shape, tag_field="type", tag="TEXT_MESSAGE_CONTENT"):
    message_id: str
    delta: str


class TextMessageEnd(_Shape, tag_field="type", tag="TEXT_MESSAGE_END"):
    message_id: str


class ReasoningStart(_Shape, tag_field="type", tag="REASONING_START"):
    message_id: str


class ReasoningMessageStart(_Shape, tag_field="type", tag="REASONING_MESSAGE_START"):
    message_id: str
    role: Literal["reasoning"]


class ReasoningMessageContent(_Shape, tag_field="type", tag="REASONING_MESSAGE_CONTENT"):
    message_id: str
    delta: str


class ReasoningMessageEnd(_Shape, tag_field="type", tag="REASONING_MESSAGE_END"):
    message_id: str


class ReasoningEnd(_Shape, tag_field="type", tag="REASONING_END"):
    message_id: str


class ToolCallStart(_Shape, tag_field="type", tag="TOOL_CALL_START"):
    tool_call_id: str
    tool_call_name: str
    parent_message_id: str | None = None


class ToolCallArgs(_Shape, tag_field="type", tag="TOOL_CALL_ARGS"):
    tool_call_id: str
    delta: str


class ToolCallEnd(_Shape, tag_field="type", tag="TOOL_CALL_END"):
    tool_call_id: str


class ToolCallResult(_Shape, tag_field="type", tag="TOOL_CALL_RESULT"):
    message_id: str
    tool_call_id: str
    content: str
    role: Literal["tool"]
    #: How the call ended, as data: ``{"outcome": "ok"|"rejected"|…, "error"?: reason}``.
    metadata: dict[str, Any] | None = None


class MessagesSnapshot(_Shape, tag_field="type", tag="MESSAGES_SNAPSHOT"):
    messages: list[Message]


Event = (
    RunStarted
    | RunFinished
    | RunError
    | TextMessageStart
    | TextMessageContent
    | TextMessageEnd
    | ReasoningStart
    | ReasoningMessageStart
    | ReasoningMessageContent
    | ReasoningMessageEnd
    | ReasoningEnd
    | ToolCallStart
    | ToolCallArgs
    | ToolCallEnd
    | ToolCallResult
    | MessagesSnapshot
)
