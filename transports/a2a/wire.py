"""A2A's wire shapes: ProtoJSON of A2A 1.0 (camelCase, ``TASK_STATE_*`` enums) and A2A 0.3
(``kind`` on parts and results, lowercase states), as msgspec Structs.

Only the fields the gateway reads or writes are declared; decoding ignores the rest (a newer
client's fields must not break an older server). The 1.0 shapes are the server's working
model; 0.3 requests are translated into them and answers back (:mod:`.codec`). Every output
Struct omits empty fields, as ProtoJSON does.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

# ---------------------------------------------------------------- JSON-RPC 2.0

RpcId = str | int | None


class RpcRequest(msgspec.Struct, kw_only=True):
    jsonrpc: str = ""
    method: str = ""
    id: RpcId = None
    params: msgspec.Raw = msgspec.Raw(b"{}")


class RpcError(msgspec.Struct, kw_only=True, omit_defaults=True):
    code: int
    message: str
    data: list[dict[str, Any]] | None = None


class RpcResult(msgspec.Struct, kw_only=True):
    id: RpcId
    result: Any
    jsonrpc: str = "2.0"


class RpcErrorResponse(msgspec.Struct, kw_only=True):
    id: RpcId
    error: RpcError
    jsonrpc: str = "2.0"


class _Proto(msgspec.Struct, kw_only=True, omit_defaults=True, rename="camel"):
    """ProtoJSON: camelCase names, empty fields left out."""


# ---------------------------------------------------------------- A2A 1.0 objects

TaskState10 = Literal[
    "TASK_STATE_UNSPECIFIED",
    "TASK_STATE_SUBMITTED",
    "TASK_STATE_WORKING",
    "TASK_STATE_COMPLETED",
    "TASK_STATE_FAILED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_INPUT_REQUIRED",
    "TASK_STATE_REJECTED",
    "TASK_STATE_AUTH_REQUIRED",
]
Role10 = Literal["ROLE_UNSPECIFIED", "ROLE_USER", "ROLE_AGENT"]


class Part(_Proto):
    """Exactly one of ``text``, ``raw`` (base64 bytes), ``url``, ``data`` (any JSON)."""

    text: str | None = None
    raw: bytes | None = None
    url: str | None = None
    data: Any = msgspec.UNSET
    metadata: dict[str, Any] | None = None
    filename: str | None = None
    media_type: str | None = None


class Message(_Proto):
    message_id: str = ""
    context_id: str | None = None
    task_id: str | None = None
    role: Role10 = "ROLE_UNSPECIFIED"
    parts: list[Part] = []
    metadata: dict[str, Any] | None = None
    extensions: list[str] = []
    reference_task_ids: list[str] = []


class TaskStatus(_Proto):
    state: TaskState10 = "TASK_STATE_UNSPECIFIED"
    message: Message | None = None
    timestamp: str | None = None


class Artifact(_Proto):
    artifact_id: str = ""
    name: str | None = None
    description: str | None = None
    parts: list[Part] = []
    metadata: dict[str, Any] | None = None


class Task(_Proto):
    id: str = ""
    context_id: str = ""
    status: TaskStatus = msgspec.field(default_factory=TaskStatus)
    artifacts: list[Artifact] = []
    history: list[Message] = []
    metadata: dict[str, Any] | None = None


class TaskStatusUpdateEvent(_Proto):
    task_id: str
    context_id: str
    status: TaskStatus
    metadata: dict[str, Any] | None = None


class TaskArtifactUpdateEvent(_Proto):
    task_id: str
    context_id: str
    artifact: Artifact
    append: bool = False
    last_chunk: bool = False
    metadata: dict[str, Any] | None = None


class StreamResponse(_Proto):
    """Exactly one member set."""

    task: Task | None = None
    message: Message | None = None
    status_update: TaskStatusUpdateEvent | None = None
    artifact_update: TaskArtifactUpdateEvent | None = None


class AuthenticationInfo(_Proto):
    scheme: str = ""
    credentials: str | None = None


class TaskPushNotificationConfig(_Proto):
    tenant: str | None = None
    id: str | None = None
    task_id: str = ""
    url: str = ""
    token: str | None = None
    authentication: AuthenticationInfo | None = None


# ---------------------------------------------------------------- A2A 1.0 requests


class SendMessageConfiguration(_Proto):
    accepted_output_modes: list[str] = []
    task_push_notification_config: TaskPushNotificationConfig | None = None
    history_length: int | None = None
    return_immediately: bool = False


class SendMessageRequest(_Proto):
    tenant: str | None = None
    message: Message | None = None
    configuration: SendMessageConfiguration | None = None
    metadata: dict[str, Any] | None = None


class GetTaskRequest(_Proto):
    tenant: str | None = None
    id: str = ""
    history_length: int | None = None


class ListTasksRequest(_Proto):
    tenant: str | None = None
    context_id: str | None = None
    status: TaskState10 | None = None
    page_size: int | None = None
    page_token: str | None = None
    history_length: int | None = None
    status_timestamp_after: str | None = None
    include_artifacts: bool | None = None


class ListTasksResponse(_Proto):
    tasks: list[Task] = []
    next_page_token: str = ""
    page_size: int = 0
    total_size: int = 0


class TaskIdRequest(_Proto):
    """``CancelTask`` and ``SubscribeToTask``."""

    tenant: str | None = None
    id: str = ""
    metadata: dict[str, Any] | None = None


class PushConfigRequest(_Proto):
    """``Get`` / ``Delete`` / ``ListTaskPushNotificationConfig(s)``."""

    tenant: str | None = None
    task_id: str = ""
    id: str | None = None
    page_size: int | None = None
    page_token: str | None = None


class ListPushConfigsResponse(_Proto):
    configs: list[TaskPushNotificationConfig] = []
    next_page_token: str = ""


# ---------------------------------------------------------------- the agent card


class AgentInterface(_Proto):
    url: str
    protocol_binding: str
    protocol_version: str
    tenant: str | None = None


class AgentCapabilities(_Proto):
    streaming: bool = False
    push_notifications: bool = False
    extended_agent_card: bool = False


class AgentSkill(_Proto):
    id: str
    name: str
    description: str
    tags: list[str] = []
    examples: list[str] = []


class AgentProvider(_Proto):
    organization: str
    url: str


class HttpAuthSecurityScheme(_Proto):
    scheme: str
    description: str | None = None


class SecurityScheme(_Proto):
    """1.0's oneof, with 0.3's flat fields beside it (``type``, ``scheme``): each version's
    parser reads its own and ignores the other's, so one card serves both."""

    http_auth_security_scheme: HttpAuthSecurityScheme
    type: str | None = None
    scheme: str | None = None


class SecurityRequirement(_Proto):
    schemes: dict[str, dict[str, list[str]]] = {}


class AgentCard(_Proto):
    """A 1.0 card; ``url``, ``protocol_version``, ``preferred_transport`` and ``security`` are
    0.3's top-level fields, kept for 0.3 clients (the SDK adds them the same way)."""

    name: str
    description: str
    version: str
    supported_interfaces: list[AgentInterface]
    capabilities: AgentCapabilities
    default_input_modes: list[str]
    default_output_modes: list[str]
    skills: list[AgentSkill]
    provider: AgentProvider | None = None
    documentation_url: str | None = None
    security_schemes: dict[str, Any] | None = None
    security_requirements: list[SecurityRequirement] = []
    url: str | None = None
    protocol_version: str | None = None
    preferred_transport: str | None = None
    security: list[dict[str, list[str]]] = []


# ---------------------------------------------------------------- A2A 0.3

TaskState03 = Literal["submitted", "working", "input-required", "completed", "canceled", "failed", "rejected", "auth-required", "unknown"]


class _V03(msgspec.Struct, kw_only=True, omit_defaults=True, rename="camel"):
    pass


class TextPart03(_V03, tag="text", tag_field="kind"):
    text: str
    metadata: dict[str, Any] | None = None


class FileContent03(_V03):
    bytes: str | None = None  # base64
    uri: str | None = None
    mime_type: str | None = None
    name: str | None = None


class FilePart03(_V03, tag="file", tag_field="kind"):
    file: FileContent03
    metadata: dict[str, Any] | None = None


class DataPart03(_V03, tag="data", tag_field="kind"):
    data: dict[str, Any]
    metadata: dict[str, Any] | None = None


Part03 = TextPart03 | FilePart03 | DataPart03


class Message03(_V03, tag="message", tag_field="kind", kw_only=True):
    message_id: str = ""
    role: Literal["user", "agent"]
    parts: list[Part03] = []
    context_id: str | None = None
    task_id: str | None = None
    metadata: dict[str, Any] | None = None
    reference_task_ids: list[str] = []


class TaskStatus03(_V03):
    state: TaskState03
    message: Message03 | None = None
    timestamp: str | None = None


class Artifact03(_V03):
    artifact_id: str
    parts: list[Part03]
    name: str | None = None
    description: str | None = None
    metadata: dict[str, Any] | None = None


class Task03(_V03, tag="task", tag_field="kind"):
    id: str
    context_id: str
    status: TaskStatus03
    artifacts: list[Artifact03] = []
    history: list[Message03] = []
    metadata: dict[str, Any] | None = None


class StatusUpdate03(_V03, tag="status-update", tag_field="kind", kw_only=True):
    task_id: str
    context_id: str
    status: TaskStatus03
    final: bool  # required by 0.3: always on the wire
    metadata: dict[str, Any] | None = None


class ArtifactUpdate03(_V03, tag="artifact-update", tag_field="kind"):
    task_id: str
    context_id: str
    artifact: Artifact03
    append: bool = False
    last_chunk: bool = False
    metadata: dict[str, Any] | None = None


class PushAuth03(_V03):
    schemes: list[str] = []
    credentials: str | None = None


class PushConfig03(_V03):
    url: str
    id: str | None = None
    token: str | None = None
    authentication: PushAuth03 | None = None


class SendConfiguration03(_V03):
    accepted_output_modes: list[str] = []
    blocking: bool | None = None
    history_length: int | None = None
    push_notification_config: PushConfig03 | None = None


class MessageSendParams03(_V03):
    message: Message03
    configuration: SendConfiguration03 | None = None
    metadata: dict[str, Any] | None = None


class TaskQueryParams03(_V03):
    id: str
    history_length: int | None = None
    metadata: dict[str, Any] | None = None


class TaskPushConfig03(_V03):
    task_id: str
    push_notification_config: PushConfig03


class PushConfigParams03(_V03):
    id: str
    push_notification_config_id: str | None = None
