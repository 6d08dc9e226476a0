"""Wire shapes of the Agent-CLI remote dialect, as msgspec Structs.

Agent-CLI is a Rust program whose enums are serde *externally tagged*: a variant
is an object with one key, the variant's name (``{"Text": "hi"}``), and a unit
variant may also be the bare string (``"GetCommands"``). msgspec has no such
union, so requests are decoded in two steps (the envelope with ``input`` kept as
raw JSON, then the variant picked by its key) and response bodies are Structs
whose single field is renamed to the variant's name.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

# ---------------------------------------------------------------- requests

#: ``0`` means "not set" (use the session default), as the implementation's Option does.
Count = Annotated[int, msgspec.Meta(ge=0)]


class RequestConfig(msgspec.Struct, kw_only=True):
    """Per-request overrides of the session defaults (``config`` of a request)."""

    max_context_num: Count | None = None
    max_tokens: Count | None = None
    ask_before_tool_execution: bool | None = None
    prompt: str | None = None
    max_tool_try: Count | None = None


class Envelope(msgspec.Struct, kw_only=True):
    """A ``RemoteRequest`` with its ``input`` still raw; unknown fields are ignored."""

    request_id: str
    input: msgspec.Raw
    config: RequestConfig | None = None
    stream: bool | None = None
    use_tools: bool | None = None


class IdProbe(msgspec.Struct):
    """Reads only ``request_id`` so that an invalid request can still be answered under it."""

    request_id: Any = None


class ImageInput(msgspec.Struct, kw_only=True):
    data: str
    mime_type: str | None = None


class FileInput(msgspec.Struct, kw_only=True):
    filename: str
    content_type: str
    data: str


class InstructionInput(msgspec.Struct, kw_only=True):
    command: str
    parameters: Any  # required (may be null), as in the implementation


class ToolConfirmationInput(msgspec.Struct, kw_only=True):
    name: str
    arguments: Any  # required (may be null), as in the implementation
    approved: bool
    reason: str | None = None


class TurnConfirmationInput(msgspec.Struct, kw_only=True):
    confirmed: bool
    reason: str | None = None


#: Variants carrying data, and the type their value decodes to.
VALUE_VARIANTS: dict[str, Any] = {
    "Text": str,
    "Image": ImageInput,
    "File": FileInput,
    "Instruction": InstructionInput,
    "Multi": list[msgspec.Raw],
    "ToolConfirmationResponse": ToolConfirmationInput,
    "TurnConfirmationResponse": TurnConfirmationInput,
}
#: Variants without data: ``"Name"`` or ``{"Name": null}``.
UNIT_VARIANTS = ("GetCommands", "Interrupt", "Regenerate", "ClearContext")
ALL_VARIANTS = (*VALUE_VARIANTS, *UNIT_VARIANTS)
#: Variants allowed inside ``Multi``: content, not control.
CONTENT_VARIANTS = ("Text", "Image", "File", "Multi")

# ---------------------------------------------------------------- responses


class TokenUsage(msgspec.Struct, kw_only=True):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


ZERO_USAGE = TokenUsage(prompt_tokens=0, completion_tokens=0, total_tokens=0)


class CompleteInfo(msgspec.Struct, kw_only=True):
    token_usage: TokenUsage | None
    interrupted: bool


class NamedArgs(msgspec.Struct, kw_only=True):
    name: str
    arguments: Any


class NamedResult(msgspec.Struct, kw_only=True):
    name: str
    result: Any


class ConfirmationInfo(msgspec.Struct, kw_only=True):
    name: str
    arguments: Any
    description: str | None


class TurnInfo(msgspec.Struct, kw_only=True):
    current_turns: int
    max_turns: int
    reason: str | None


class TextBody(msgspec.Struct):
    value: str = msgspec.field(name="Text")


class StreamBody(msgspec.Struct):
    value: str = msgspec.field(name="Stream")


class CompleteBody(msgspec.Struct):
    value: CompleteInfo = msgspec.field(name="Complete")


class StreamCompleteBody(msgspec.Struct):
    """The end marker under the implementation's name (``complete_tag = "StreamComplete"``)."""

    value: CompleteInfo = msgspec.field(name="StreamComplete")


class ToolCallBody(msgspec.Struct):
    value: NamedArgs = msgspec.field(name="ToolCall")


class ToolResultBody(msgspec.Struct):
    value: NamedResult = msgspec.field(name="ToolResult")


class MultiBody(msgspec.Struct):
    """A composite reply: the tool activity of a non-streaming run, then its ``Text``
    (``non_stream_tool_activity = "multi"``)."""

    value: list[Any] = msgspec.field(name="Multi")


class ToolConfirmationBody(msgspec.Struct):
    value: ConfirmationInfo = msgspec.field(name="ToolConfirmationRequest")


class TurnConfirmationBody(msgspec.Struct):
    value: TurnInfo = msgspec.field(name="TurnConfirmationRequest")


Body = (
    TextBody
    | StreamBody
    | CompleteBody
    | StreamCompleteBody
    | ToolCallBody
    | ToolResultBody
    | MultiBody
    | ToolConfirmationBody
    | TurnConfirmationBody
)


class RemoteResponse(msgspec.Struct, kw_only=True):
    """One frame to the client; ``error`` and ``token_usage`` are always present (null)."""

    request_id: str
    response: Any  # one of ``Body``: untagged Structs are fine to encode, not to decode
    error: str | None = None
    token_usage: TokenUsage | None = None


class ToolErrorDetails(msgspec.Struct, kw_only=True):
    tool: str
    error: str
    arguments: Any


class ToolError(msgspec.Struct, kw_only=True):
    """The document's structured tool failure, sent as a JSON string in ``error``."""

    type: str
    message: str
    details: ToolErrorDetails
