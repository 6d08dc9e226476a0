"""A2A ⇄ kernel, sans-IO: JSON-RPC requests in, kernel parts and answers out; runs out as
Tasks and stream events, in A2A 1.0's shapes or 0.3's.

The server works in 1.0's shapes only: a 0.3 request is translated to its 1.0 twin on the way
in, and every result back to 0.3 on the way out (:func:`to_v03`), so there is one code path
per method. Errors are :class:`Failure` values with A2A's JSON-RPC code, its
``google.rpc.ErrorInfo`` reason and the kernel code whose HTTP status the REST binding sends
(``kernel.errors``: the status is never chosen here).
"""

from __future__ import annotations

import base64
import binascii
import time
import uuid
from datetime import datetime
from typing import Any, Literal

import msgspec

from kernel import model as m
from kernel.errors import http_headers, http_status

from . import wire as w

Version = Literal["1.0", "0.3"]
TaskState = Literal["working", "input_required", "completed", "failed", "canceled"]

ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"
ERROR_DOMAIN = "a2a-protocol.org"
ANSWER_ARTIFACT = "answer"

# ---------------------------------------------------------------- errors


class Failure(msgspec.Struct, frozen=True, kw_only=True):
    """An A2A error: JSON-RPC ``code``, ErrorInfo ``reason``, gRPC ``status`` name, and the
    kernel code that gives the HTTP status (REST binding)."""

    code: int
    reason: str
    status: str
    kernel_code: m.ErrorCode
    message: str
    metadata: dict[str, str] = {}
    #: The kernel error's HTTP headers (``Retry-After`` from its details), for the REST binding.
    headers: dict[str, str] = {}

    @property
    def http_status(self) -> int:
        return http_status(self.kernel_code)


class FailureKind(msgspec.Struct, frozen=True):
    """One of A2A's errors; called with a message it makes the :class:`Failure`."""

    code: int
    reason: str
    status: str
    kernel_code: m.ErrorCode

    def __call__(self, message: str, **metadata: str) -> Failure:
        return Failure(code=self.code, reason=self.reason, status=self.status, kernel_code=self.kernel_code, message=message, metadata=metadata)


task_not_found = FailureKind(-32001, "TASK_NOT_FOUND", "NOT_FOUND", "not_found")
task_not_cancelable = FailureKind(-32002, "TASK_NOT_CANCELABLE", "FAILED_PRECONDITION", "invalid_request")
push_not_supported = FailureKind(-32003, "PUSH_NOTIFICATION_NOT_SUPPORTED", "FAILED_PRECONDITION", "invalid_request")
unsupported_operation = FailureKind(-32004, "UNSUPPORTED_OPERATION", "FAILED_PRECONDITION", "invalid_request")
content_type_not_supported = FailureKind(-32005, "CONTENT_TYPE_NOT_SUPPORTED", "INVALID_ARGUMENT", "invalid_request")
extended_card_not_configured = FailureKind(-32007, "EXTENDED_AGENT_CARD_NOT_CONFIGURED", "FAILED_PRECONDITION", "invalid_request")
version_not_supported = FailureKind(-32009, "VERSION_NOT_SUPPORTED", "FAILED_PRECONDITION", "invalid_request")
invalid_request = FailureKind(-32600, "INVALID_REQUEST", "INVALID_ARGUMENT", "invalid_request")
method_not_found = FailureKind(-32601, "METHOD_NOT_FOUND", "NOT_FOUND", "not_found")
invalid_params = FailureKind(-32602, "INVALID_PARAMS", "INVALID_ARGUMENT", "invalid_request")
parse_error = FailureKind(-32700, "PARSE_ERROR", "INVALID_ARGUMENT", "parse_error")

#: Kernel codes without an A2A twin: JSON-RPC's internal error, reason = the code in capitals.
_GRPC_STATUS: dict[str, str] = {
    "unauthorized": "UNAUTHENTICATED",
    "forbidden": "PERMISSION_DENIED",
    "busy": "ABORTED",
    "interrupted": "ABORTED",
    "too_large": "INVALID_ARGUMENT",
    "rate_limited": "RESOURCE_EXHAUSTED",
    "provider_error": "UNAVAILABLE",
    "upstream_unauthorized": "INTERNAL",
    "unavailable": "UNAVAILABLE",
    "draining": "UNAVAILABLE",
    "owner_lost": "UNAVAILABLE",
    "timeout": "DEADLINE_EXCEEDED",
}


def from_kernel(error: m.ErrorInfo) -> Failure:
    """A kernel error as A2A's: not_found is a task not found, invalid_request invalid params,
    anything else JSON-RPC's internal error carrying the kernel code."""
    if error.code == "not_found":
        return task_not_found(error.message)
    if error.code in ("invalid_request", "parse_error"):
        return invalid_params(error.message)
    return Failure(
        code=-32603, reason=error.code.upper(), status=_GRPC_STATUS.get(error.code, "INTERNAL"),
        kernel_code=error.code, message=error.message, metadata={"code": error.code}, headers=http_headers(error),
    )


def error_info(failure: Failure) -> dict[str, Any]:
    return {"@type": ERROR_INFO_TYPE, "reason": failure.reason, "domain": ERROR_DOMAIN, "metadata": dict(failure.metadata)}


def rpc_error(failure: Failure, request_id: w.RpcId) -> w.RpcErrorResponse:
    return w.RpcErrorResponse(id=request_id, error=w.RpcError(code=failure.code, message=failure.message, data=[error_info(failure)]))


def rest_error(failure: Failure) -> dict[str, Any]:
    """``google.rpc.Status`` — the only error form the SDK's REST client maps."""
    return {"error": {"code": failure.http_status, "status": failure.status, "message": failure.message, "details": [error_info(failure)]}}


def http_failure(status: int, code: str | None, message: str) -> Failure:
    """An error of the shared plumbing (token, Origin, size, rate, 404/405) in A2A's form."""
    if code == "not_found":
        return method_not_found(message)
    if code == "method_not_allowed":
        return Failure(code=-32601, reason="METHOD_NOT_FOUND", status="UNIMPLEMENTED", kernel_code="invalid_request", message=message)
    known: m.ErrorCode = code if code in _GRPC_STATUS or code in ("parse_error", "invalid_request", "internal") else "internal"  # type: ignore[assignment]
    if status == 400 and known == "internal":
        known = "invalid_request"
    return from_kernel(m.ErrorInfo(code=known, message=message))


# ---------------------------------------------------------------- versions and methods

METHODS_10 = frozenset(
    {
        "SendMessage", "SendStreamingMessage", "GetTask", "ListTasks", "CancelTask", "SubscribeToTask",
        "CreateTaskPushNotificationConfig", "GetTaskPushNotificationConfig", "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig", "GetExtendedAgentCard",
    }
)
METHODS_03: dict[str, str] = {
    "message/send": "SendMessage",
    "message/stream": "SendStreamingMessage",
    "tasks/get": "GetTask",
    "tasks/cancel": "CancelTask",
    "tasks/resubscribe": "SubscribeToTask",
    "tasks/pushNotificationConfig/set": "CreateTaskPushNotificationConfig",
    "tasks/pushNotificationConfig/get": "GetTaskPushNotificationConfig",
    "tasks/pushNotificationConfig/list": "ListTaskPushNotificationConfigs",
    "tasks/pushNotificationConfig/delete": "DeleteTaskPushNotificationConfig",
    "agent/getAuthenticatedExtendedCard": "GetExtendedAgentCard",
}
STREAMING = frozenset({"SendStreamingMessage", "SubscribeToTask"})


def version_of(header: str | None) -> Version | Failure:
    """``A2A-Version``: absent or empty is 0.3 (as the SDK's own server reads it)."""
    value = (header or "").strip()
    if not value:
        return "0.3"
    major, _, minor = value.partition(".")
    if major == "1":
        return "1.0"
    if major == "0" and minor.split(".")[0] == "3":
        return "0.3"
    return version_not_supported(f"A2A version {value!r} is not supported; this server speaks 1.0 and 0.3")


class Call(msgspec.Struct, frozen=True, kw_only=True):
    """A decoded JSON-RPC call: its id, the 1.0 method name, the params of that method."""

    id: w.RpcId
    method: str
    params: Any


_rpc_decoder = msgspec.json.Decoder(w.RpcRequest)


def decode_call(body: bytes, version: Version) -> Call | tuple[Failure, w.RpcId]:
    """One JSON-RPC request (the method named in ``version``'s vocabulary) with typed params."""
    try:
        request = _rpc_decoder.decode(body)
    except msgspec.ValidationError as exc:
        return invalid_request(f"Not a JSON-RPC 2.0 request: {exc}"), None
    except msgspec.DecodeError as exc:
        return parse_error(f"Malformed JSON: {exc}"), None
    if request.jsonrpc != "2.0" or not request.method:
        return invalid_request('A JSON-RPC request needs "jsonrpc": "2.0" and a method'), request.id
    method = request.method if version == "1.0" else METHODS_03.get(request.method, "")
    if method not in METHODS_10:
        other = METHODS_03.get(request.method) if version == "1.0" else (request.method if request.method in METHODS_10 else None)
        hint = ""
        if other:
            hint = " (an A2A 0.3 name: send A2A-Version: 0.3)" if version == "1.0" else " (an A2A 1.0 name: send the header A2A-Version: 1.0)"
        failure = version_not_supported if other and version == "0.3" else method_not_found
        return failure(f"Method not found: {request.method!r}{hint}"), request.id
    params = decode_params(method, bytes(request.params), version)
    if isinstance(params, Failure):
        return params, request.id
    return Call(id=request.id, method=method, params=params)


_PARAMS_10: dict[str, type[Any]] = {
    "SendMessage": w.SendMessageRequest,
    "SendStreamingMessage": w.SendMessageRequest,
    "GetTask": w.GetTaskRequest,
    "ListTasks": w.ListTasksRequest,
    "CancelTask": w.TaskIdRequest,
    "SubscribeToTask": w.TaskIdRequest,
    "CreateTaskPushNotificationConfig": w.TaskPushNotificationConfig,
    "GetTaskPushNotificationConfig": w.PushConfigRequest,
    "ListTaskPushNotificationConfigs": w.PushConfigRequest,
    "DeleteTaskPushNotificationConfig": w.PushConfigRequest,
    "GetExtendedAgentCard": w.TaskIdRequest,
}
_PARAMS_03: dict[str, type[Any]] = {
    "SendMessage": w.MessageSendParams03,
    "SendStreamingMessage": w.MessageSendParams03,
    "GetTask": w.TaskQueryParams03,
    "CancelTask": w.TaskQueryParams03,
    "SubscribeToTask": w.TaskQueryParams03,
    "CreateTaskPushNotificationConfig": w.TaskPushConfig03,
    "GetTaskPushNotificationConfig": w.PushConfigParams03,
    "ListTaskPushNotificationConfigs": w.PushConfigParams03,
    "DeleteTaskPushNotificationConfig": w.PushConfigParams03,
    "GetExtendedAgentCard": w.TaskIdRequest,
}


def decode_params(method: str, raw: bytes, version: Version) -> Any:
    """The params of a 1.0 ``method`` (0.3's translated into them); a Failure names the problem."""
    shape = (_PARAMS_10 if version == "1.0" else _PARAMS_03)[method]
    try:
        params = msgspec.json.decode(raw or b"{}", type=shape)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        return invalid_params(f"Invalid params for {method}: {exc}")
    return params if version == "1.0" else _from_v03(params)


def decode_body(raw: bytes, shape: type[Any]) -> Any:
    """A REST request body of the given 1.0 shape."""
    try:
        return msgspec.json.decode(raw or b"{}", type=shape)
    except msgspec.ValidationError as exc:
        return invalid_params(f"Invalid request body: {exc}")
    except msgspec.DecodeError as exc:
        return parse_error(f"Malformed JSON: {exc}")


# ---------------------------------------------------------------- message parts in


def prompt_parts(parts: list[w.Part]) -> tuple[m.ContentPart, ...] | Failure:
    """A message's parts as the kernel's: text; data as its JSON text (the model reads text);
    ``raw`` bytes as an image or file part; a ``url`` as a file part holding the URL
    (``text/uri-list``: the gateway never fetches what a caller points it at)."""
    out: list[m.ContentPart] = []
    for index, part in enumerate(parts):
        if part.text is not None:
            out.append(m.TextPart(part.text))
        elif part.data is not msgspec.UNSET:
            out.append(m.TextPart(msgspec.json.encode(part.data).decode()))
        elif part.raw is not None:
            media = part.media_type or "application/octet-stream"
            if media.startswith("image/"):
                out.append(m.ImagePart(data=part.raw, mime_type=media))
            else:
                out.append(m.FilePart(name=part.filename or f"file-{index + 1}", data=part.raw, content_type=media))
        elif part.url is not None:
            out.append(m.FilePart(name=part.filename or part.url, data=part.url.encode(), content_type="text/uri-list"))
        else:
            return invalid_params(f"parts[{index}] holds none of text, raw, url, data")
    if not out:
        return invalid_params("The message has no parts")
    return tuple(out)


#: Output modes this server answers in (an answer is text); a client accepting none of them is refused.
TEXT_MODES = frozenset({"text/plain", "text", "text/*", "*/*", "text/markdown"})


def output_modes_problem(accepted: list[str]) -> Failure | None:
    if accepted and not TEXT_MODES.intersection(mode.split(";")[0].strip().lower() for mode in accepted):
        return content_type_not_supported(f"This agent answers in text/plain; the client accepts only {', '.join(accepted)}")
    return None


def parse_timestamp(value: str) -> float | Failure:
    """An RFC 3339 timestamp (``statusTimestampAfter``) as seconds since the epoch."""
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return invalid_params(f"Not an RFC 3339 timestamp: {value!r}")


_YES = frozenset({"approve", "approved", "yes", "y", "ok", "continue", "allow"})
_NO = frozenset({"reject", "rejected", "no", "n", "deny", "stop", "cancel"})


def answer_of(parts: list[w.Part]) -> tuple[bool, str | None] | None:
    """The answer to a question in a message on a waiting task: a data part
    ``{"approved": bool, "reason"?}`` / ``{"continue": bool}``, or the whole text
    ``approve`` / ``reject`` (and a few synonyms). None: not an answer."""
    for part in parts:
        data = part.data
        if isinstance(data, dict):
            for key in ("approved", "continue"):
                value = data.get(key)
                if isinstance(value, bool):
                    reason = data.get("reason")
                    return value, reason if isinstance(reason, str) else None
    texts = [part.text for part in parts if part.text is not None]
    if len(texts) == 1:
        word = texts[0].strip().strip(".!").lower()
        if word in _YES:
            return True, None
        if word in _NO:
            return False, None
    return None


# ---------------------------------------------------------------- tasks out


class TaskView(msgspec.Struct, frozen=True, kw_only=True):
    """What a Task shows: the server fills it from its task record."""

    task_id: str
    context_id: str
    state: TaskState
    text: str = ""
    prompt: tuple[m.ContentPart, ...] = ()
    question: m.ToolApprovalRequested | m.TurnLimitReached | None = None
    error: m.ErrorInfo | None = None
    updated_at: float = 0.0


_STATES: dict[str, w.TaskState10] = {
    "working": "TASK_STATE_WORKING",
    "input_required": "TASK_STATE_INPUT_REQUIRED",
    "completed": "TASK_STATE_COMPLETED",
    "failed": "TASK_STATE_FAILED",
    "canceled": "TASK_STATE_CANCELED",
}
TERMINAL_STATES = frozenset({"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"})


def state_of(name: str) -> w.TaskState10:
    return _STATES[name]


def timestamp(at: float) -> str:
    seconds = time.gmtime(at)
    return time.strftime("%Y-%m-%dT%H:%M:%S", seconds) + f".{int(at % 1 * 1000):03d}Z"


def _message_id() -> str:
    return uuid.uuid4().hex


def parts_out(parts: tuple[m.ContentPart, ...]) -> list[w.Part]:
    out: list[w.Part] = []
    for part in parts:
        if isinstance(part, m.TextPart):
            out.append(w.Part(text=part.text))
        elif isinstance(part, m.ImagePart):
            out.append(w.Part(raw=part.data, media_type=part.mime_type))
        elif part.content_type == "text/uri-list":
            out.append(w.Part(url=part.data.decode(errors="replace"), filename=part.name))
        else:
            out.append(w.Part(raw=part.data, filename=part.name, media_type=part.content_type))
    return out


def question_message(view: TaskView) -> w.Message | None:
    """The status message of a task that waits for input: what to answer, as text and data."""
    question = view.question
    if question is None:
        return None
    if isinstance(question, m.ToolApprovalRequested):
        try:
            arguments: Any = msgspec.json.decode(question.arguments) if question.arguments else {}
        except msgspec.DecodeError:
            arguments = question.arguments
        text = (
            f"The agent wants to run the tool {question.name} with {question.arguments or '{}'}. "
            'Answer "approve" or "reject" (or a data part {"approved": true|false, "reason": "..."}).'
        )
        data: dict[str, Any] = {"question": "tool_approval", "tool": question.name, "arguments": arguments, "callId": question.call_id}
    else:
        text = (
            f"The agent reached its turn limit ({question.current_turns} of {question.max_turns}). "
            'Answer "continue" or "stop" (or a data part {"continue": true|false}).'
        )
        data = {"question": "turn_limit", "currentTurns": question.current_turns, "maxTurns": question.max_turns}
    return w.Message(
        message_id=_message_id(), context_id=view.context_id, task_id=view.task_id, role="ROLE_AGENT",
        parts=[w.Part(text=text), w.Part(data=data)],
    )


def _error_message(view: TaskView) -> w.Message | None:
    if view.error is None:
        return None
    return w.Message(
        message_id=_message_id(), context_id=view.context_id, task_id=view.task_id, role="ROLE_AGENT",
        parts=[w.Part(text=view.error.message)], metadata={"code": view.error.code},
    )


def status_of(view: TaskView) -> w.TaskStatus:
    message = question_message(view) if view.state == "input_required" else _error_message(view)
    return w.TaskStatus(state=state_of(view.state), message=message, timestamp=timestamp(view.updated_at or time.time()))


def task_out(view: TaskView, *, history_length: int | None = None, artifacts: bool = True) -> w.Task:
    """The Task: its status, the answer as one artifact, the history (user message, answer)."""
    history: list[w.Message] = []
    if view.prompt:
        history.append(w.Message(message_id=f"{view.task_id}-user", context_id=view.context_id, task_id=view.task_id, role="ROLE_USER", parts=parts_out(view.prompt)))
    if view.text and view.state == "completed":
        history.append(w.Message(message_id=f"{view.task_id}-agent", context_id=view.context_id, task_id=view.task_id, role="ROLE_AGENT", parts=[w.Part(text=view.text)]))
    if history_length is not None:
        history = history[len(history) - history_length :] if history_length > 0 else []
    answer = [w.Artifact(artifact_id=ANSWER_ARTIFACT, name="answer", parts=[w.Part(text=view.text)])] if view.text and artifacts else []
    return w.Task(id=view.task_id, context_id=view.context_id, status=status_of(view), artifacts=answer, history=history)


class StreamEncoder:
    """A run's kernel events as A2A stream events: the answer as chunks of one artifact
    (``append`` after the first, ``lastChunk`` on the last), tool calls and tool progress as
    working statuses, then the status the run ends in — terminal, or INPUT_REQUIRED for a
    question — after which the stream is ``done``."""

    def __init__(self, task_id: str, context_id: str, *, sent_text: bool = False) -> None:
        self.task_id = task_id
        self.context_id = context_id
        self.sent_text = sent_text
        self.done = False

    def _chunk(self, text: str, *, last: bool) -> w.StreamResponse:
        artifact = w.Artifact(artifact_id=ANSWER_ARTIFACT, name="answer", parts=[w.Part(text=text)])
        update = w.TaskArtifactUpdateEvent(task_id=self.task_id, context_id=self.context_id, artifact=artifact, append=self.sent_text, last_chunk=last)
        self.sent_text = True
        return w.StreamResponse(artifact_update=update)

    def status(self, view: TaskView) -> w.StreamResponse:
        self.done = view.state != "working"
        return w.StreamResponse(status_update=w.TaskStatusUpdateEvent(task_id=self.task_id, context_id=self.context_id, status=status_of(view)))

    def _working(self, text: str, data: dict[str, Any]) -> w.StreamResponse:
        """A ``TASK_STATE_WORKING`` status whose message says what the agent does now."""
        message = w.Message(
            message_id=_message_id(), context_id=self.context_id, task_id=self.task_id, role="ROLE_AGENT", parts=[w.Part(text=text), w.Part(data=data)],
        )
        status = w.TaskStatus(state="TASK_STATE_WORKING", message=message, timestamp=timestamp(time.time()))
        return w.StreamResponse(status_update=w.TaskStatusUpdateEvent(task_id=self.task_id, context_id=self.context_id, status=status))

    def feed(self, event: m.Event, view: TaskView) -> list[w.StreamResponse]:
        """``view``: the task as it stands after the event. Besides the answer and the end, a
        tool call and a running tool's progress are working statuses (text and data)."""
        if self.done:
            return []
        if isinstance(event, m.TextDelta):
            return [self._chunk(event.text, last=False)] if event.text else []
        if isinstance(event, m.ToolCallStarted) and not event.refused:
            data = {"event": "tool_call", "tool": event.name, "arguments": event.arguments, "callId": event.call_id}
            return [self._working(f"The agent calls the tool {event.name}", data)]
        if isinstance(event, m.ToolProgress):
            return [self._working(event.text, {"event": "tool_progress", "tool": event.name, "callId": event.call_id})]
        if isinstance(event, m.ToolApprovalRequested | m.TurnLimitReached):
            return [self.status(view)]
        if isinstance(event, m.RunFinished | m.RunFailed):
            out = [self._chunk("", last=True)] if self.sent_text else []
            return [*out, self.status(view)]
        return []


# ---------------------------------------------------------------- A2A 0.3


_STATES_03: dict[str, w.TaskState03] = {
    "TASK_STATE_SUBMITTED": "submitted",
    "TASK_STATE_WORKING": "working",
    "TASK_STATE_INPUT_REQUIRED": "input-required",
    "TASK_STATE_COMPLETED": "completed",
    "TASK_STATE_CANCELED": "canceled",
    "TASK_STATE_FAILED": "failed",
    "TASK_STATE_REJECTED": "rejected",
    "TASK_STATE_AUTH_REQUIRED": "auth-required",
    "TASK_STATE_UNSPECIFIED": "unknown",
}


def _part_from_v03(part: w.Part03) -> w.Part | Failure:
    if isinstance(part, w.TextPart03):
        return w.Part(text=part.text, metadata=part.metadata)
    if isinstance(part, w.DataPart03):
        return w.Part(data=part.data, metadata=part.metadata)
    file = part.file
    if file.bytes is not None:
        try:
            raw = base64.b64decode(file.bytes, validate=True)
        except (binascii.Error, ValueError):
            return invalid_params("A file part's bytes are not base64")
        return w.Part(raw=raw, filename=file.name, media_type=file.mime_type)
    if file.uri is not None:
        return w.Part(url=file.uri, filename=file.name, media_type=file.mime_type)
    return invalid_params("A file part needs bytes or uri")


def _message_from_v03(message: w.Message03) -> w.Message | Failure:
    parts: list[w.Part] = []
    for part in message.parts:
        converted = _part_from_v03(part)
        if isinstance(converted, Failure):
            return converted
        parts.append(converted)
    role: w.Role10 = "ROLE_USER" if message.role == "user" else "ROLE_AGENT"
    return w.Message(
        message_id=message.message_id, context_id=message.context_id, task_id=message.task_id, role=role, parts=parts,
        metadata=message.metadata, reference_task_ids=message.reference_task_ids,
    )


def _push_from_v03(task_id: str, config: w.PushConfig03) -> w.TaskPushNotificationConfig:
    auth = config.authentication
    return w.TaskPushNotificationConfig(
        id=config.id, task_id=task_id, url=config.url, token=config.token,
        authentication=w.AuthenticationInfo(scheme=(auth.schemes or [""])[0], credentials=auth.credentials) if auth else None,
    )


def _from_v03(params: Any) -> Any:
    if isinstance(params, w.MessageSendParams03):
        message = _message_from_v03(params.message)
        if isinstance(message, Failure):
            return message
        config = params.configuration
        configuration = None
        if config is not None:
            push = _push_from_v03("", config.push_notification_config) if config.push_notification_config else None
            configuration = w.SendMessageConfiguration(
                accepted_output_modes=config.accepted_output_modes, task_push_notification_config=push,
                history_length=config.history_length, return_immediately=config.blocking is False,
            )
        return w.SendMessageRequest(message=message, configuration=configuration, metadata=params.metadata)
    if isinstance(params, w.TaskQueryParams03):
        return w.GetTaskRequest(id=params.id, history_length=params.history_length)
    if isinstance(params, w.TaskPushConfig03):
        return _push_from_v03(params.task_id, params.push_notification_config)
    if isinstance(params, w.PushConfigParams03):
        return w.PushConfigRequest(task_id=params.id, id=params.push_notification_config_id)
    return params


def _part_to_v03(part: w.Part) -> w.Part03:
    if part.text is not None:
        return w.TextPart03(text=part.text, metadata=part.metadata)
    if part.data is not msgspec.UNSET:
        return w.DataPart03(data=part.data if isinstance(part.data, dict) else {"value": part.data}, metadata=part.metadata)
    if part.raw is not None:
        return w.FilePart03(file=w.FileContent03(bytes=base64.b64encode(part.raw).decode(), mime_type=part.media_type, name=part.filename))
    return w.FilePart03(file=w.FileContent03(uri=part.url, mime_type=part.media_type, name=part.filename))


def _message_to_v03(message: w.Message) -> w.Message03:
    return w.Message03(
        message_id=message.message_id, role="user" if message.role == "ROLE_USER" else "agent",
        parts=[_part_to_v03(p) for p in message.parts], context_id=message.context_id, task_id=message.task_id, metadata=message.metadata,
    )


def _status_to_v03(status: w.TaskStatus) -> w.TaskStatus03:
    message = _message_to_v03(status.message) if status.message is not None else None
    return w.TaskStatus03(state=_STATES_03[status.state], message=message, timestamp=status.timestamp)


def _artifact_to_v03(artifact: w.Artifact) -> w.Artifact03:
    return w.Artifact03(artifact_id=artifact.artifact_id, parts=[_part_to_v03(p) for p in artifact.parts], name=artifact.name, description=artifact.description)


def task_to_v03(task: w.Task) -> w.Task03:
    return w.Task03(
        id=task.id, context_id=task.context_id, status=_status_to_v03(task.status),
        artifacts=[_artifact_to_v03(a) for a in task.artifacts], history=[_message_to_v03(h) for h in task.history],
    )


def to_v03(result: Any) -> Any:
    """A 1.0 result in 0.3's shape: a send's ``{task}`` / a stream event bare with its ``kind``,
    ``final`` on the status that ends a stream."""
    if isinstance(result, w.Task):
        return task_to_v03(result)
    if isinstance(result, w.StreamResponse):
        if result.task is not None:
            return task_to_v03(result.task)
        if result.message is not None:
            return _message_to_v03(result.message)
        if result.status_update is not None:
            update = result.status_update
            final = update.status.state in TERMINAL_STATES or update.status.state == "TASK_STATE_INPUT_REQUIRED"
            return w.StatusUpdate03(task_id=update.task_id, context_id=update.context_id, status=_status_to_v03(update.status), final=final)
        assert result.artifact_update is not None
        art = result.artifact_update
        return w.ArtifactUpdate03(
            task_id=art.task_id, context_id=art.context_id, artifact=_artifact_to_v03(art.artifact), append=art.append, last_chunk=art.last_chunk,
        )
    if isinstance(result, w.TaskPushNotificationConfig):
        auth = result.authentication
        config = w.PushConfig03(
            url=result.url, id=result.id, token=result.token,
            authentication=w.PushAuth03(schemes=[auth.scheme], credentials=auth.credentials) if auth else None,
        )
        return w.TaskPushConfig03(task_id=result.task_id, push_notification_config=config)
    if isinstance(result, w.ListPushConfigsResponse):
        return [to_v03(config) for config in result.configs]
    return result


# ---------------------------------------------------------------- the agent card


def agent_card(agent: m.AgentInfo, *, url: str, version: str, tools: list[m.ToolInfo], token_required: bool, push: bool) -> w.AgentCard:
    """The card of one agent served at ``url``: both bindings at 1.0, JSON-RPC at 0.3 too
    (with 0.3's top-level ``url``), one skill for the agent and one per tool it may use;
    ``push``: whether push notifications can go anywhere (the server's allow-list is not empty)."""
    skills = [w.AgentSkill(id=agent.id, name=agent.name, description=agent.description or f"Chat with {agent.name}", tags=["chat"])]
    skills += [w.AgentSkill(id=f"tool:{t.name}", name=t.name, description=t.description or t.name, tags=["tool", t.category]) for t in tools]
    schemes: dict[str, Any] | None = None
    requirements: list[w.SecurityRequirement] = []
    if token_required:
        bearer = w.HttpAuthSecurityScheme(scheme="Bearer", description="The gateway's token or an API key")
        schemes = {"bearer": w.SecurityScheme(http_auth_security_scheme=bearer, type="http", scheme="bearer")}
        requirements = [w.SecurityRequirement(schemes={"bearer": {"list": []}})]
    return w.AgentCard(
        name=agent.name,
        description=agent.description or f"The gateway's agent {agent.name} ({agent.model or agent.provider})",
        version=version,
        supported_interfaces=[
            w.AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0"),
            w.AgentInterface(url=url, protocol_binding="HTTP+JSON", protocol_version="1.0"),
            w.AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="0.3"),
        ],
        capabilities=w.AgentCapabilities(streaming=True, push_notifications=push, extended_agent_card=token_required),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain"],
        skills=skills,
        provider=w.AgentProvider(organization="gateway", url=url),
        security_schemes=schemes,
        security_requirements=requirements,
        security=[{"bearer": []}] if token_required else [],
        url=url,
        protocol_version="0.3.0",
        preferred_transport="JSONRPC",
    )
