"""The Agent Client Protocol's shapes on the wire, as msgspec Structs.

The params of the editor's methods, the gateway's requests to the editor and the
answers it reads back, the ``session/update`` payloads it sends, and the results of
the session methods: camelCase on the wire, tagged by ``type`` or
``sessionUpdate``, empty optional fields left out. The JSON-RPC envelope around
them is :mod:`.jsonrpc`.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

PROTOCOL_VERSION = 1


# ---------------------------------------------------------------- method params (editor -> gateway)


class FsCapabilities(msgspec.Struct, rename="camel"):
    read_text_file: bool = False
    write_text_file: bool = False


class ClientCapabilities(msgspec.Struct, rename="camel"):
    fs: FsCapabilities = msgspec.field(default_factory=FsCapabilities)
    terminal: bool = False


class InitializeParams(msgspec.Struct, rename="camel"):
    # Some editors send a date string ("2025-06-18"); it is accepted and answered with ours.
    protocol_version: int | str = PROTOCOL_VERSION
    client_capabilities: ClientCapabilities = msgspec.field(default_factory=ClientCapabilities)
    client_info: dict[str, Any] | None = None


class NameValue(msgspec.Struct):
    """An MCP server's environment variable (stdio) or HTTP header."""

    name: str
    value: str


class StdioMcpServer(msgspec.Struct):
    """An MCP server the gateway starts for the session (the schema gives it no ``type``)."""

    name: str
    command: str
    args: list[str] = []
    env: list[NameValue] = []


class HttpMcpServer(msgspec.Struct):
    """An MCP server at a streamable HTTP endpoint (``type: "http"``)."""

    name: str
    url: str
    headers: list[NameValue] = []


McpServer = StdioMcpServer | HttpMcpServer


class NewSessionParams(msgspec.Struct, rename="camel"):
    """``mcpServers`` is checked apart (:func:`.codec.mcp_servers`): its entries are told
    apart by a ``type`` that the stdio one does not have."""

    cwd: str
    mcp_servers: list[Any] = []


class LoadSessionParams(msgspec.Struct, rename="camel"):
    """``session/load`` and ``session/resume`` (the same params: one replays, one does not)."""

    session_id: str
    cwd: str
    mcp_servers: list[Any] = []


class ListSessionsParams(msgspec.Struct, rename="camel"):
    cwd: str | None = None
    cursor: str | None = None


class AuthenticateParams(msgspec.Struct, rename="camel"):
    """The schema requires ``methodId``; with no authentication needed, none is insisted on."""

    method_id: str | None = None


class SetConfigOptionParams(msgspec.Struct, rename="camel"):
    """A select's value id (``type`` absent), or a boolean (``type: "boolean"``)."""

    session_id: str
    config_id: str
    value: str | bool
    type: str | None = None


class CancelRequestParams(msgspec.Struct, rename="camel"):
    """``$/cancel_request``: the id of one of the editor's requests still in progress."""

    request_id: int | str | None


class TextBlock(msgspec.Struct, tag="text", tag_field="type"):
    text: str


class ImageBlock(msgspec.Struct, tag="image", tag_field="type", rename="camel"):
    data: bytes
    mime_type: str = "image/png"
    uri: str | None = None


class AudioBlock(msgspec.Struct, tag="audio", tag_field="type", rename="camel"):
    data: str
    mime_type: str = ""


class EmbeddedResource(msgspec.Struct, rename="camel"):
    """Text or blob contents of a resource the editor embedded (an open buffer, a file)."""

    uri: str
    text: str | None = None
    blob: bytes | None = None
    mime_type: str | None = None


class ResourceBlock(msgspec.Struct, tag="resource", tag_field="type"):
    resource: EmbeddedResource


class ResourceLinkBlock(msgspec.Struct, tag="resource_link", tag_field="type", rename="camel"):
    uri: str
    name: str = ""
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None
    size: int | None = None


ContentBlock = TextBlock | ImageBlock | AudioBlock | ResourceBlock | ResourceLinkBlock


class PromptParams(msgspec.Struct, rename="camel"):
    session_id: str
    prompt: list[ContentBlock]
    # ACP's extension point; ``_meta.traceparent`` is the editor's W3C trace context.
    meta: dict[str, Any] | None = msgspec.field(default=None, name="_meta")


class SessionParams(msgspec.Struct, rename="camel"):
    """``session/cancel`` and anything else that only names a session."""

    session_id: str


class SetModeParams(msgspec.Struct, rename="camel"):
    session_id: str
    mode_id: str


class SetModelParams(msgspec.Struct, rename="camel"):
    session_id: str
    model_id: str


# ---------------------------------------------------------------- the gateway's requests to the editor, and its answers


class ReadTextFileParams(msgspec.Struct, kw_only=True, rename="camel", omit_defaults=True):
    session_id: str
    path: str
    line: int | None = None
    limit: int | None = None


class WriteTextFileParams(msgspec.Struct, kw_only=True, rename="camel"):
    session_id: str
    path: str
    content: str


class PermissionSelected(msgspec.Struct, tag="selected", tag_field="outcome", rename="camel"):
    option_id: str


class PermissionCancelled(msgspec.Struct, tag="cancelled", tag_field="outcome"):
    pass


class PermissionResult(msgspec.Struct):
    """The result of ``session/request_permission``."""

    outcome: PermissionSelected | PermissionCancelled


class ReadTextFileResult(msgspec.Struct):
    """The result of ``fs/read_text_file``."""

    content: str


class EnvVariable(msgspec.Struct, frozen=True):
    name: str
    value: str


class CreateTerminalParams(msgspec.Struct, kw_only=True, rename="camel", omit_defaults=True):
    session_id: str
    command: str
    args: tuple[str, ...] = ()
    env: tuple[EnvVariable, ...] = ()
    cwd: str | None = None
    output_byte_limit: int | None = None


class TerminalParams(msgspec.Struct, kw_only=True, rename="camel"):
    """``terminal/output``, ``wait_for_exit``, ``kill`` and ``release``: one terminal of a session."""

    session_id: str
    terminal_id: str


class CreateTerminalResult(msgspec.Struct, rename="camel"):
    terminal_id: str


class TerminalExitStatus(msgspec.Struct, rename="camel"):
    """How a command ended (also the result of ``terminal/wait_for_exit``)."""

    exit_code: int | None = None
    signal: str | None = None


class TerminalOutputResult(msgspec.Struct, rename="camel"):
    output: str
    truncated: bool = False
    exit_status: TerminalExitStatus | None = None


# ---------------------------------------------------------------- session/update (gateway -> editor)


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


class Diff(msgspec.Struct, frozen=True, tag="diff", tag_field="type", rename="camel", omit_defaults=True):
    path: str
    new_text: str
    old_text: str | None = None


class ToolContent(msgspec.Struct, frozen=True, tag="content", tag_field="type"):
    content: Content


class ToolTerminal(msgspec.Struct, frozen=True, tag="terminal", tag_field="type", rename="camel"):
    """A terminal the editor shows live inside the tool call (the ``run_command`` tool)."""

    terminal_id: str


CallContent = ToolContent | Diff | ToolTerminal


class Location(msgspec.Struct, frozen=True, omit_defaults=True):
    path: str
    line: int | None = None


class _Update(msgspec.Struct, frozen=True, kw_only=True, tag_field="sessionUpdate", rename="camel", omit_defaults=True):
    pass


class UserMessageChunk(_Update, frozen=True, tag="user_message_chunk"):
    content: Content
    message_id: str | None = None  # chunks of one message share it


class AgentMessageChunk(_Update, frozen=True, tag="agent_message_chunk"):
    content: Content
    message_id: str | None = None


class AgentThoughtChunk(_Update, frozen=True, tag="agent_thought_chunk"):
    content: Content
    message_id: str | None = None


class ToolCallStart(_Update, frozen=True, tag="tool_call"):
    tool_call_id: str
    title: str
    kind: str
    status: str
    raw_input: Any = None
    content: tuple[CallContent, ...] = ()
    locations: tuple[Location, ...] = ()


class ToolCallProgress(_Update, frozen=True, tag="tool_call_update"):
    tool_call_id: str
    status: str
    content: tuple[CallContent, ...] = ()


class CommandInput(msgspec.Struct, frozen=True):
    hint: str


class AvailableCommand(msgspec.Struct, frozen=True, omit_defaults=True):
    name: str
    description: str
    input: CommandInput | None = None


class AvailableCommandsUpdate(_Update, frozen=True, tag="available_commands_update"):
    available_commands: tuple[AvailableCommand, ...]


class CurrentModeUpdate(_Update, frozen=True, tag="current_mode_update"):
    current_mode_id: str


class UsageUpdate(_Update, frozen=True, tag="usage_update"):
    used: int
    size: int


class PlanEntry(msgspec.Struct, frozen=True):
    """One step of the model's plan (the ``update_plan`` tool's entries have this shape)."""

    content: str
    priority: Literal["high", "medium", "low"]
    status: Literal["pending", "in_progress", "completed"]


class PlanUpdate(_Update, frozen=True, tag="plan"):
    entries: tuple[PlanEntry, ...]


class ConfigValue(msgspec.Struct, frozen=True, omit_defaults=True):
    value: str
    name: str
    description: str | None = None


class SelectOption(msgspec.Struct, frozen=True, kw_only=True, tag="select", tag_field="type", rename="camel", omit_defaults=True):
    """A session config option shown as a drop-down (``type: "select"``)."""

    id: str
    name: str
    current_value: str
    options: tuple[ConfigValue, ...]
    description: str | None = None
    category: str | None = None


class ConfigOptionUpdate(_Update, frozen=True, tag="config_option_update"):
    config_options: tuple[SelectOption, ...]


class SessionInfoUpdate(_Update, frozen=True, tag="session_info_update"):
    title: str | None = None
    updated_at: str | None = None  # ISO 8601


Update = (
    UserMessageChunk
    | AgentMessageChunk
    | AgentThoughtChunk
    | ToolCallStart
    | ToolCallProgress
    | PlanUpdate
    | AvailableCommandsUpdate
    | CurrentModeUpdate
    | ConfigOptionUpdate
    | SessionInfoUpdate
    | UsageUpdate
)


class SessionNotification(msgspec.Struct, frozen=True, rename="camel"):
    session_id: str
    update: Update


# ---------------------------------------------------------------- results of the editor's session methods


class ListedSession(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    session_id: str
    cwd: str
    title: str | None = None
    updated_at: str | None = None  # ISO 8601


class SessionPage(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """The result of ``session/list``; no ``nextCursor``: the last page."""

    sessions: tuple[ListedSession, ...]
    next_cursor: str | None = None
