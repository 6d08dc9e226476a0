"""The wire shapes the gateway sends: content blocks, tool-call content and the
``session/update`` payloads, as msgspec Structs (camelCase on the wire, tagged by
``type`` or ``sessionUpdate``, empty optional fields left out).
"""

from __future__ import annotations

from typing import Any

import msgspec


class Text(msgspec.Struct, frozen=True, tag="text", tag_field="type"):
    text: str


class Image(msgspec.Struct, frozen=True, tag="image", tag_field="type", rename="camel"):
    data: bytes
    mime_type: str


class TextResource(msgspec.Struct, frozen=True, rename="camel", omit_defaults=True):
    uri: str
    text: str
    mime_type: str | None = None


class Resource(msgspec.Struct, frozen=True, tag="resource", tag_field="type"):
    resource: TextResource


Content = Text | Image | Resource


class ToolContent(msgspec.Struct, frozen=True, tag="content", tag_field="type"):
    content: Content


class Diff(msgspec.Struct, frozen=True, tag="diff", tag_field="type", rename="camel", omit_defaults=True):
    path: str
    new_text: str
    old_text: str | None = None


class Location(msgspec.Struct, frozen=True, omit_defaults=True):
    path: str
    line: int | None = None


class _Update(msgspec.Struct, frozen=True, kw_only=True, tag_field="sessionUpdate", rename="camel", omit_defaults=True):
    pass


class UserMessageChunk(_Update, tag="user_message_chunk"):
    content: Content


class AgentMessageChunk(_Update, tag="agent_message_chunk"):
    content: Content


class AgentThoughtChunk(_Update, tag="agent_thought_chunk"):
    content: Content


class ToolCallStart(_Update, tag="tool_call"):
    tool_call_id: str
    title: str
    kind: str
    status: str
    raw_input: Any = None
    content: tuple[ToolContent | Diff, ...] = ()
    locations: tuple[Location, ...] = ()


class ToolCallProgress(_Update, tag="tool_call_update"):
    tool_call_id: str
    status: str
    content: tuple[ToolContent | Diff, ...] = ()


class CommandInput(msgspec.Struct, frozen=True):
    hint: str


class AvailableCommand(msgspec.Struct, frozen=True, omit_defaults=True):
    name: str
    description: str
    input: CommandInput | None = None


class AvailableCommandsUpdate(_Update, tag="available_commands_update"):
    available_commands: tuple[AvailableCommand, ...]


class CurrentModeUpdate(_Update, tag="current_mode_update"):
    current_mode_id: str


class UsageUpdate(_Update, tag="usage_update"):
    used: int
    size: int


Update = (
    UserMessageChunk
    | AgentMessageChunk
    | AgentThoughtChunk
    | ToolCallStart
    | ToolCallProgress
    | AvailableCommandsUpdate
    | CurrentModeUpdate
    | UsageUpdate
)


class SessionNotification(msgspec.Struct, frozen=True, rename="camel"):
    session_id: str
    update: Update
