"""Wire shapes of the OpenAI Responses API: the request (the fields the gateway honours
or must refuse), the ``response`` object with its output items, and the typed stream
events, exactly as OpenAI sends them (``openai.types.responses`` is the reference).

Input items come as plain JSON objects because a message item may omit its ``type``;
the codec converts each one to the Struct of its kind below, so that an error names
the item it is about. Errors use the OpenAI shape of the sibling chat dialect
(:class:`transports.http.openai.wire.OpenAIError`).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

# ---------------------------------------------------------------- request


class ConversationRef(msgspec.Struct, kw_only=True):
    id: str


class ResponsesRequest(msgspec.Struct, kw_only=True):
    """``POST /v1/responses``; fields not listed are accepted and ignored."""

    model: str = ""
    input: str | list[dict[str, Any]] = ""
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    previous_response_id: str | None = None
    #: A kernel session id (the ``conversation.id`` of an earlier stored response, or a
    #: session started through another dialect): continue it as it is now.
    conversation: str | ConversationRef | None = None
    store: bool | None = None
    stream: bool | None = None
    background: bool | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    reasoning: dict[str, Any] | None = None
    metadata: dict[str, str] | None = None
    parallel_tool_calls: bool | None = None
    truncation: str | None = None
    text: dict[str, Any] | None = None
    prompt: dict[str, Any] | None = None
    user: str | None = None
    #: ``"reasoning.encrypted_content"``: reasoning items carry a sealed copy of their text,
    #: for a client that keeps nothing stored (``store: false``) to send back.
    include: list[str] | None = None


class FunctionToolDef(msgspec.Struct, kw_only=True):
    """A ``{"type": "function", ...}`` entry of ``tools``: a tool the client runs."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class InputText(msgspec.Struct, tag="input_text", tag_field="type"):
    text: str


class InputImage(msgspec.Struct, kw_only=True, tag="input_image", tag_field="type"):
    image_url: str | None = None
    file_id: str | None = None
    detail: str | None = None


class InputFile(msgspec.Struct, kw_only=True, tag="input_file", tag_field="type"):
    file_data: str | None = None
    filename: str | None = None
    file_id: str | None = None
    file_url: str | None = None


class EchoedText(msgspec.Struct, tag="output_text", tag_field="type"):
    """The text of an assistant message the client sends back (an earlier output)."""

    text: str


class EchoedRefusal(msgspec.Struct, tag="refusal", tag_field="type"):
    refusal: str


InputPart = InputText | InputImage | InputFile | EchoedText | EchoedRefusal


class MessageItem(msgspec.Struct, kw_only=True):
    """``{"role", "content"}`` with or without ``"type": "message"``."""

    role: Literal["user", "system", "developer", "assistant"]
    content: str | list[InputPart]


class FunctionCallItem(msgspec.Struct, kw_only=True):
    """An earlier ``function_call`` output item, sent back with the conversation;
    ``namespace`` names the ``namespace`` tool holding the function (Codex)."""

    call_id: str
    name: str
    arguments: str = ""
    namespace: str | None = None


class CustomToolCallItem(msgspec.Struct, kw_only=True):
    """An earlier ``custom_tool_call`` output item: a free-form tool's raw text input."""

    call_id: str
    name: str
    input: str = ""
    namespace: str | None = None


class ReasoningItem(msgspec.Struct, kw_only=True):
    """An earlier ``reasoning`` output item; ``encrypted_content`` is the gateway's sealed
    copy of its text when the client asked for ``reasoning.encrypted_content``."""

    id: str | None = None
    encrypted_content: str | None = None


class ItemReference(msgspec.Struct, kw_only=True):
    """``{"type": "item_reference", "id"}``: an item of a stored response, by its id."""

    id: str


class FunctionCallOutputItem(msgspec.Struct, kw_only=True):
    """The client's result of one of its function calls."""

    call_id: str
    output: str | list[InputPart]


# ---------------------------------------------------------------- tool definitions


class NamespaceToolDef(msgspec.Struct, kw_only=True):
    """``{"type": "namespace", "name", "tools": [function tools]}``: a group of the
    client's functions (Codex's sub-agent tools); a call names both."""

    name: str
    description: str | None = None
    tools: list[dict[str, Any]] = msgspec.field(default_factory=list)


class CustomToolDef(msgspec.Struct, kw_only=True):
    """``{"type": "custom", "name", "description", "format"?}``: a free-form tool whose
    one input is raw text (``format`` may constrain it with a grammar: told to the model
    in the description, not enforced)."""

    name: str
    description: str | None = None
    format: dict[str, Any] | None = None


# ---------------------------------------------------------------- response object


class OutputText(msgspec.Struct, kw_only=True, tag="output_text", tag_field="type"):
    text: str
    annotations: list[Any] = msgspec.field(default_factory=list)
    logprobs: list[Any] = msgspec.field(default_factory=list)


class SummaryText(msgspec.Struct, tag="summary_text", tag_field="type"):
    text: str


class OutputMessage(msgspec.Struct, kw_only=True, tag="message", tag_field="type"):
    id: str
    status: Literal["in_progress", "completed", "incomplete"]
    role: Literal["assistant"] = "assistant"
    content: list[OutputText] = msgspec.field(default_factory=list)


class FunctionCall(msgspec.Struct, kw_only=True, tag="function_call", tag_field="type"):
    id: str
    call_id: str
    name: str
    arguments: str
    status: Literal["in_progress", "completed", "incomplete"] = "completed"
    #: The ``namespace`` tool the function belongs to (None: a top-level function).
    namespace: str | None = None


class CustomToolCall(msgspec.Struct, kw_only=True, tag="custom_tool_call", tag_field="type"):
    """A call of a ``custom`` (free-form) tool: ``input`` is its raw text."""

    id: str
    call_id: str
    name: str
    input: str
    namespace: str | None = None


class Reasoning(msgspec.Struct, kw_only=True, tag="reasoning", tag_field="type"):
    id: str
    summary: list[SummaryText] = msgspec.field(default_factory=list)
    status: Literal["in_progress", "completed", "incomplete"] = "completed"
    #: The summary's text sealed by the gateway (``include: ["reasoning.encrypted_content"]``).
    encrypted_content: str | None = None


OutputItem = OutputMessage | FunctionCall | CustomToolCall | Reasoning


class InputTokensDetails(msgspec.Struct, kw_only=True):
    cached_tokens: int = 0
    cache_write_tokens: int = 0


class OutputTokensDetails(msgspec.Struct, kw_only=True):
    reasoning_tokens: int = 0


class ResponseUsage(msgspec.Struct, kw_only=True):
    input_tokens: int
    output_tokens: int
    total_tokens: int
    input_tokens_details: InputTokensDetails = msgspec.field(default_factory=InputTokensDetails)
    output_tokens_details: OutputTokensDetails = msgspec.field(default_factory=OutputTokensDetails)


class ResponseError(msgspec.Struct, kw_only=True):
    code: str
    message: str


class IncompleteDetails(msgspec.Struct, kw_only=True):
    reason: Literal["max_output_tokens", "content_filter"] | None = None


class FunctionToolOut(msgspec.Struct, kw_only=True, tag="function", tag_field="type"):
    name: str
    description: str | None
    parameters: dict[str, Any]
    strict: bool


ResponseStatus = Literal["completed", "in_progress", "failed", "incomplete", "cancelled"]


class Response(msgspec.Struct, kw_only=True):
    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: ResponseStatus
    completed_at: int | None = None
    error: ResponseError | None = None
    incomplete_details: IncompleteDetails | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    model: str
    output: list[OutputItem] = msgspec.field(default_factory=list)
    parallel_tool_calls: bool = True
    previous_response_id: str | None = None
    reasoning: dict[str, Any] = msgspec.field(default_factory=lambda: {"effort": None, "summary": None})
    store: bool = True
    temperature: float | None = None
    text: dict[str, Any] = msgspec.field(default_factory=lambda: {"format": {"type": "text"}})
    tool_choice: str | dict[str, Any] = "auto"
    #: The request's tools as offered: function tools normalised, the others as sent.
    tools: list[Any] = msgspec.field(default_factory=list)
    top_p: float | None = None
    truncation: str = "disabled"
    usage: ResponseUsage | None = None
    user: str | None = None
    metadata: dict[str, str] = msgspec.field(default_factory=dict)
    #: The kernel session holding the conversation (stored responses only).
    conversation: ConversationRef | None = None


class Deleted(msgspec.Struct, kw_only=True):
    id: str
    object: Literal["response"] = "response"
    deleted: bool = True


# ---------------------------------------------------------------- stream events


class _StreamEvent(msgspec.Struct, kw_only=True, tag_field="type"):
    #: Set by the codec as the event is encoded: one more than the previous event's.
    sequence_number: int = 0


class Created(_StreamEvent, kw_only=True, tag="response.created"):
    response: Response


class InProgress(_StreamEvent, kw_only=True, tag="response.in_progress"):
    response: Response


class Completed(_StreamEvent, kw_only=True, tag="response.completed"):
    response: Response


class Failed(_StreamEvent, kw_only=True, tag="response.failed"):
    response: Response


class Incomplete(_StreamEvent, kw_only=True, tag="response.incomplete"):
    response: Response


class ItemAdded(_StreamEvent, kw_only=True, tag="response.output_item.added"):
    output_index: int
    item: OutputItem


class ItemDone(_StreamEvent, kw_only=True, tag="response.output_item.done"):
    output_index: int
    item: OutputItem


class ContentPartAdded(_StreamEvent, kw_only=True, tag="response.content_part.added"):
    item_id: str
    output_index: int
    content_index: int
    part: OutputText


class ContentPartDone(_StreamEvent, kw_only=True, tag="response.content_part.done"):
    item_id: str
    output_index: int
    content_index: int
    part: OutputText


class TextDelta(_StreamEvent, kw_only=True, tag="response.output_text.delta"):
    item_id: str
    output_index: int
    content_index: int
    delta: str
    logprobs: list[Any] = msgspec.field(default_factory=list)


class TextDone(_StreamEvent, kw_only=True, tag="response.output_text.done"):
    item_id: str
    output_index: int
    content_index: int
    text: str
    logprobs: list[Any] = msgspec.field(default_factory=list)


class ArgumentsDelta(_StreamEvent, kw_only=True, tag="response.function_call_arguments.delta"):
    item_id: str
    output_index: int
    delta: str


class ArgumentsDone(_StreamEvent, kw_only=True, tag="response.function_call_arguments.done"):
    item_id: str
    output_index: int
    name: str
    arguments: str


class CustomInputDelta(_StreamEvent, kw_only=True, tag="response.custom_tool_call_input.delta"):
    item_id: str
    output_index: int
    delta: str


class CustomInputDone(_StreamEvent, kw_only=True, tag="response.custom_tool_call_input.done"):
    item_id: str
    output_index: int
    input: str


class SummaryPartAdded(_StreamEvent, kw_only=True, tag="response.reasoning_summary_part.added"):
    item_id: str
    output_index: int
    summary_index: int
    part: SummaryText


class SummaryPartDone(_StreamEvent, kw_only=True, tag="response.reasoning_summary_part.done"):
    item_id: str
    output_index: int
    summary_index: int
    part: SummaryText


class SummaryTextDelta(_StreamEvent, kw_only=True, tag="response.reasoning_summary_text.delta"):
    item_id: str
    output_index: int
    summary_index: int
    delta: str


class SummaryTextDone(_StreamEvent, kw_only=True, tag="response.reasoning_summary_text.done"):
    item_id: str
    output_index: int
    summary_index: int
    text: str


StreamEvent = (
    Created
    | InProgress
    | Completed
    | Failed
    | Incomplete
    | ItemAdded
    | ItemDone
    | ContentPartAdded
    | ContentPartDone
    | TextDelta
    | TextDone
    | ArgumentsDelta
    | ArgumentsDone
    | CustomInputDelta
    | CustomInputDone
    | SummaryPartAdded
    | SummaryPartDone
    | SummaryTextDelta
    | SummaryTextDone
)
