"""The OpenFang wire shapes: server → client WebSocket events as msgspec Structs.

Field names, order and presence follow OpenFang 0.6.x (``crates/openfang-api/src/ws.rs``):
``phase.detail`` is always present (``null`` when empty), ``response.cost_usd`` is
``null`` and ``iterations`` 0.  Fields that OpenFang leaves out in some cases
(``typing.tool``, ``tool_result.result`` with verbose off) are ``UNSET`` so msgspec
omits them instead of sending ``null``.
"""

from __future__ import annotations

from typing import Literal

import msgspec
from msgspec import UNSET, UnsetType

VerboseLevel = Literal["off", "on", "full"]
Pressure = Literal["low", "medium", "high", "critical"]


class _Out(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Common base: every server event is a JSON object tagged by ``type``."""


class AgentEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One agent as ``agents_updated`` lists it (the same keys as OpenFang)."""

    id: str
    name: str
    state: str = "Running"
    model_provider: str = ""
    model_name: str = ""


class Connected(_Out, frozen=True, tag="connected"):
    agent_id: str


class AgentsUpdated(_Out, frozen=True, tag="agents_updated"):
    agents: tuple[AgentEntry, ...]


class Typing(_Out, frozen=True, tag="typing"):
    state: Literal["start", "tool", "stop"]
    tool: str | UnsetType = UNSET


class Phase(_Out, frozen=True, tag="phase"):
    phase: Literal["streaming", "thinking", "tool_use", "done", "context_warning"]
    detail: str | None = None


class TextDeltaOut(_Out, frozen=True, tag="text_delta"):
    content: str


class ToolStart(_Out, frozen=True, tag="tool_start"):
    id: str
    tool: str


class ToolEnd(_Out, frozen=True, tag="tool_end"):
    id: str
    tool: str
    input: str


class ToolResultOut(_Out, frozen=True, tag="tool_result"):
    id: str
    tool: str
    result: str | UnsetType = UNSET
    is_error: bool = False


class ResponseOut(_Out, frozen=True, tag="response"):
    content: str
    input_tokens: int
    output_tokens: int
    iterations: int = 0
    cost_usd: float | None = None
    context_pressure: Pressure = "low"
    # Our addition: only present when a stop/interrupt cut the turn short.
    interrupted: bool | UnsetType = UNSET


class SilentComplete(_Out, frozen=True, tag="silent_complete"):
    input_tokens: int
    output_tokens: int


class ApprovalInfo(msgspec.Struct, frozen=True, kw_only=True):
    """Our addition to ``command_result``: the tool call waiting for a yes/no."""

    id: str
    tool: str
    input: str
    timeout_s: float | None = None


class CommandResult(_Out, frozen=True, tag="command_result"):
    command: str
    message: str
    context_pressure: Pressure | UnsetType = UNSET
    approval: ApprovalInfo | UnsetType = UNSET


class ErrorOut(_Out, frozen=True, tag="error"):
    content: str


class Pong(_Out, frozen=True, tag="pong"):
    pass


ServerEvent = (
    Connected
    | AgentsUpdated
    | Typing
    | Phase
    | TextDeltaOut
    | ToolStart
    | ToolEnd
    | ToolResultOut
    | ResponseOut
    | SilentComplete
    | CommandResult
    | ErrorOut
    | Pong
)

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(ServerEvent)


def encode(event: ServerEvent) -> str:
    """One server event as the text of one WebSocket frame."""
    return _encoder.encode(event).decode("utf-8")


def decode(text: str | bytes) -> ServerEvent:
    """Parse a server event (used by tests and by Python clients of this dialect)."""
    return _decoder.decode(text)
