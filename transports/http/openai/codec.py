"""Sans-IO codec of the OpenAI-compatible surface (``/v1/chat/completions``, ``/v1/models``).

In: a chat-completions request body -> a :class:`ChatPlan` (which agent, the prior turns
as kernel history, the last user message as the prompt, per-request options, the
client's own tools) -> the kernel commands of one throw-away conversation. Out: the
run's events -> exactly OpenAI's ``chat.completion.chunk`` payloads (the server frames
them as SSE) or one ``chat.completion``; the model list; errors in OpenAI's
``{"error": {"message", "type", "param", "code"}}`` shape. Pure; never raises on input.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence
from typing import Any, Protocol
from urllib.parse import unquote_to_bytes

import msgspec

from kernel import JsonDecoder, message_from_parts
from kernel import model as m
from kernel.errors import http_headers, http_status

from .wire import (
    ChatCompletion,
    ChatRequest,
    Chunk,
    InMessage,
    ModelInfo,
    ModelList,
    OpenAIError,
    OutChoice,
    OutChunkChoice,
    OutDelta,
    OutFunction,
    OutMessage,
    OutToolCall,
    OutToolCallDelta,
    OutUsage,
    UsageChunk,
)

_encode = msgspec.json.encode
_decode_request: JsonDecoder[ChatRequest] = JsonDecoder(ChatRequest)
_MSGSPEC_PATH = re.compile(r" - at `\$\.?(.*)`$")
#: What OpenAI accepts as a function tool's name (both OpenAI dialects check it).
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

# ---------------------------------------------------------------- errors


class HttpFailure(Protocol):
    """What the router hands its error shaper (``transports.shared.HttpError``),
    as far as this codec reads it."""

    @property
    def status(self) -> int: ...

    @property
    def message(self) -> str: ...

    @property
    def headers(self) -> dict[str, str]: ...


def bad_request(message: str, param: str | None = None, code: str | None = None) -> OpenAIError:
    return OpenAIError(status=400, message=message, param=param, code=code)


_HTTP_SHAPES: dict[int, tuple[str, str | None]] = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "forbidden"),
    404: ("invalid_request_error", None),
    405: ("invalid_request_error", None),
    409: ("invalid_request_error", "conflict"),
    413: ("invalid_request_error", "request_too_large"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
}


def from_http(error: HttpFailure) -> OpenAIError:
    kind, code = _HTTP_SHAPES.get(error.status, ("server_error", None))
    return OpenAIError(status=error.status, message=error.message, type=kind, code=code, headers=error.headers)


def openai_error_body(error: HttpFailure) -> Any:
    """Router error shaper for the OpenAI routes (401, 404, 405, 413 before a handler runs)."""
    return from_http(error).body()


#: OpenAI's ``type`` and ``code`` for a kernel code (others: ``server_error`` and the kernel's
#: code); the status is kernel.errors' but where OpenAI's own convention differs (below).
_RUN_ERRORS: dict[str, tuple[str, str | None]] = {
    "parse_error": ("invalid_request_error", None),
    "invalid_request": ("invalid_request_error", None),
    "too_large": ("invalid_request_error", "context_length_exceeded"),
    "not_found": ("invalid_request_error", "model_not_found"),
    "busy": ("invalid_request_error", "conflict"),
    "rate_limited": ("rate_limit_error", "rate_limit_exceeded"),
    "unauthorized": ("invalid_request_error", "invalid_api_key"),
    "forbidden": ("invalid_request_error", "forbidden"),
    "upstream_unauthorized": ("server_error", "upstream_unauthorized"),
    "provider_error": ("server_error", "upstream_error"),
    "timeout": ("server_error", "timeout"),
}
#: A run's context too long is OpenAI's 400 (its SDKs raise BadRequestError for it); the one
#: status of this dialect that is not kernel.errors' (tests/kernel/test_errors.py declares it).
_RUN_STATUS: dict[str, int] = {"too_large": 400}


def from_error_info(error: m.ErrorInfo) -> OpenAIError:
    """A kernel error (a failed run or a refused command) in OpenAI's shape, with the status
    and headers (``Retry-After``) of kernel.errors."""
    kind, code = _RUN_ERRORS.get(error.code, ("server_error", error.code))
    status = _RUN_STATUS.get(error.code) or http_status(error.code)
    return OpenAIError(
        status=status, message=error.message, type=kind, code=code,
        param="model" if code == "model_not_found" else None, headers=http_headers(error),
    )


def run_timeout(timeout_s: float) -> OpenAIError:
    return OpenAIError(status=504, type="server_error", code="timeout", message=f"The model did not answer within {timeout_s:g}s")


def client_gone() -> OpenAIError:
    """What a request whose client left is answered (if anybody still reads it)."""
    return OpenAIError(status=400, message="The client closed the request", code="client_closed")


# ---------------------------------------------------------------- request in


def decode_chat_request(raw: bytes) -> ChatRequest | OpenAIError:
    if not raw.strip():
        return bad_request("The request body is empty; expected a JSON chat completions request.")
    try:
        return _decode_request.decode(raw)
    except msgspec.ValidationError as exc:
        return invalid_field(exc)
    except msgspec.DecodeError as exc:
        return bad_request(f"We could not parse the JSON body of your request ({exc}).")


def invalid_field(exc: msgspec.ValidationError, at: str = "") -> OpenAIError:
    """A msgspec validation error as a 400 whose ``param`` names the field; ``at`` is
    where the validated value sits in the request (``input[2]``), when not at its top."""
    text = str(exc)
    found = _MSGSPEC_PATH.search(text)
    path = found.group(1) if found else ""
    if not at:
        return bad_request(f"Invalid request: {text}", param=path or None)
    param = f"{at}.{path}" if path and not path.startswith("[") else f"{at}{path}"
    reason = text[: found.start()] if found else text
    return bad_request(f"Invalid request: {reason} - at `{param}`", param=param)


class ChatPlan(msgspec.Struct, frozen=True, kw_only=True):
    """What one chat-completions request asks of the kernel."""

    agent_id: str
    response_model: str
    history: tuple[m.Message, ...]
    prompt_parts: tuple[m.ContentPart, ...]
    #: The last message is a tool result: run the model on the history, no new user turn.
    continuation: bool
    #: Carries the client's own tools too (``client_tools``): the model may call them and
    #: the calls go back to the client, as the OpenAI API does.
    options: m.PromptOptions
    stream: bool
    include_usage: bool


def resolve_model(model: str, agents: Sequence[m.AgentInfo]) -> tuple[m.AgentInfo, str | None]:
    """``model`` names an agent (by name or id), or else is a provider model for the default agent."""
    if not model or model == "default":
        return agents[0], None
    for agent in agents:
        if model in (agent.name, agent.id):
            return agent, None
    return agents[0], model


def plan_chat(request: ChatRequest, agents: Sequence[m.AgentInfo], *, context_limit: int) -> ChatPlan | OpenAIError:
    if not agents:
        return OpenAIError(status=500, message="No agent is configured", type="server_error")
    if request.n not in (None, 1):
        return bad_request("Only n=1 is supported.", param="n")
    max_tokens = request.max_completion_tokens if request.max_completion_tokens is not None else request.max_tokens
    if max_tokens is not None and max_tokens < 1:
        param = "max_completion_tokens" if request.max_completion_tokens is not None else "max_tokens"
        return bad_request("max_tokens must be at least 1.", param=param)
    if request.temperature is not None and not 0 <= request.temperature <= 2:
        return bad_request("temperature must be between 0 and 2.", param="temperature")
    if not request.messages:
        return bad_request("messages must not be empty.", param="messages")
    tools = _client_tools(request)
    if isinstance(tools, OpenAIError):
        return tools
    fmt = _response_format(request.response_format)
    if isinstance(fmt, OpenAIError):
        return fmt
    choice = tool_choice(request.tool_choice, "tool_choice", nested=True)
    if isinstance(choice, OpenAIError):
        return choice
    converted = _conversation(request.messages)
    if isinstance(converted, OpenAIError):
        return converted
    system, turns = converted
    last = request.messages[-1]
    if last.role == "user":
        prompt = turns[-1]
        parts = prompt.parts or ((m.TextPart(prompt.content),) if prompt.content.strip() else ())
        if not parts:
            return bad_request("The last user message is empty.", param=f"messages[{len(request.messages) - 1}].content")
        history, continuation = turns[:-1], False
    elif last.role == "tool":
        history, parts, continuation = turns, (), True
    else:
        return bad_request("The last message must come from the user or be a tool result.", param="messages")
    agent, model_override = resolve_model(request.model, agents)
    options = m.PromptOptions(
        max_tokens=max_tokens,
        temperature=request.temperature,
        system_prompt=system,
        model=model_override,
        max_context_messages=max(context_limit, len(history) + 1),
        client_tools=tools,
        stream=bool(request.stream),
        output_format=fmt,
        tool_choice=choice,
        parallel_tool_calls=request.parallel_tool_calls,
    )
    return ChatPlan(
        agent_id=agent.id,
        response_model=request.model or agent.name,
        history=tuple(history),
        prompt_parts=parts,
        continuation=continuation,
        options=options,
        stream=bool(request.stream),
        include_usage=bool(request.stream and request.stream_options and request.stream_options.include_usage),
    )


def _client_tools(request: ChatRequest) -> tuple[m.ClientTool, ...] | OpenAIError:
    if not request.tools or request.tool_choice == "none":
        return ()
    specs: list[m.ClientTool] = []
    for i, tool in enumerate(request.tools):
        if tool.type != "function" or tool.function is None:
            return bad_request("Only tools of type 'function' are supported.", param=f"tools[{i}].type")
        if not TOOL_NAME.match(tool.function.name):
            return bad_request("Tool names must be 1-64 characters of a-z, A-Z, 0-9, _ and -.", param=f"tools[{i}].function.name")
        parameters = tool.function.parameters or {"type": "object", "properties": {}}
        specs.append(m.ClientTool(name=tool.function.name, description=tool.function.description, parameters=parameters))
    return tuple(specs)


def _response_format(value: dict[str, Any] | None) -> m.OutputFormat | OpenAIError | None:
    """``response_format``: the schema sits under ``json_schema``."""
    if value is None:
        return None
    spec = value.get("json_schema")
    if value.get("type") == "json_schema" and not isinstance(spec, dict):
        return bad_request("response_format of type 'json_schema' needs a json_schema object.", param="response_format.json_schema")
    return output_format(value.get("type"), spec if isinstance(spec, dict) else {}, "response_format")


def output_format(kind: Any, spec: dict[str, Any], param: str) -> m.OutputFormat | OpenAIError | None:
    """A requested output format (both OpenAI dialects): ``text`` is free text (None);
    ``json_schema`` needs a ``name`` OpenAI would accept and an object ``schema``."""
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        return m.OutputFormat(type="json_object")
    if kind != "json_schema":
        return bad_request(f"Unsupported format type {kind!r}: use 'text', 'json_object' or 'json_schema'.", param=f"{param}.type")
    name = spec.get("name", "output")
    where = f"{param}.json_schema" if param == "response_format" else param
    if not isinstance(name, str) or not TOOL_NAME.match(name):
        return bad_request("The schema's name must be 1-64 characters of a-z, A-Z, 0-9, _ and -.", param=f"{where}.name")
    schema = spec.get("schema", {})
    if not isinstance(schema, dict):
        return bad_request("The schema must be a JSON Schema object.", param=f"{where}.schema")
    strict = spec.get("strict")
    if strict is not None and not isinstance(strict, bool):
        return bad_request("strict must be a boolean.", param=f"{where}.strict")
    return m.OutputFormat(type="json_schema", name=name, schema=schema, strict=strict)


_CHOICE_MODES = ("auto", "required", "none")


def tool_choice(value: Any, param: str, *, nested: bool) -> m.ToolChoice | OpenAIError | None:
    """``tool_choice`` (both OpenAI dialects): ``auto`` / ``required`` / ``none``, or a
    forced function — ``{"type": "function", "function": {"name"}}`` in chat completions
    (``nested``), ``{"type": "function", "name"}`` in the Responses API. Whether the named
    tool exists is the kernel's to say (it may be one of the agent's tools)."""
    if value is None or value == "auto":
        return None
    if isinstance(value, str):
        if value not in _CHOICE_MODES:
            return bad_request(f"tool_choice must be one of {', '.join(map(repr, _CHOICE_MODES))} or a function.", param=param)
        return m.ToolChoice(mode=value)  # type: ignore[arg-type]
    if not isinstance(value, dict) or value.get("type") != "function":
        return bad_request("Only a tool_choice of type 'function' can force a tool.", param=f"{param}.type")
    holder = value.get("function") if nested else value
    name = holder.get("name") if isinstance(holder, dict) else None
    if not isinstance(name, str) or not name:
        return bad_request("A forced function needs its name.", param=f"{param}.function.name" if nested else f"{param}.name")
    return m.ToolChoice(mode="tool", name=name)


def _conversation(messages: Sequence[InMessage]) -> tuple[str | None, list[m.Message]] | OpenAIError:
    """System/developer text (the system prompt override) and the other turns as kernel messages."""
    system: list[str] = []
    turns: list[m.Message] = []
    call_names: dict[str, str] = {}
    for i, msg in enumerate(messages):
        where = f"messages[{i}].content"
        parts = _parts(msg.content, where)
        if isinstance(parts, OpenAIError):
            return parts
        texts = [p.text for p in parts if isinstance(p, m.TextPart)]
        if msg.role in ("system", "developer"):
            if len(texts) != len(parts):
                return bad_request("System messages may only contain text.", param=where)
            system.append("\n".join(texts))
        elif msg.role == "user":
            turns.append(message_from_parts(parts))
        elif msg.role == "assistant":
            calls = tuple(
                m.ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments or "{}") for c in msg.tool_calls or ()
            )
            call_names.update((c.id, c.name) for c in calls)
            turns.append(m.Message(role="assistant", content="".join(texts), tool_calls=calls))
        else:
            if not msg.tool_call_id:
                return bad_request("A tool message needs tool_call_id.", param=f"messages[{i}].tool_call_id")
            turns.append(
                m.Message(
                    role="tool", content="\n".join(texts), tool_call_id=msg.tool_call_id, name=call_names.get(msg.tool_call_id)
                )
            )
    return ("\n\n".join(system) if system else None), turns


def _parts(content: str | list[dict[str, Any]] | None, where: str) -> tuple[m.ContentPart, ...] | OpenAIError:
    if content is None:
        return ()
    if isinstance(content, str):
        return (m.TextPart(content),) if content else ()
    parts: list[m.ContentPart] = []
    for j, item in enumerate(content):
        kind = item.get("type")
        param = f"{where}[{j}]"
        if kind == "text" and isinstance(item.get("text"), str):
            parts.append(m.TextPart(item["text"]))
        elif kind == "refusal" and isinstance(item.get("refusal"), str):
            parts.append(m.TextPart(item["refusal"]))
        elif kind == "image_url":
            url = item.get("image_url")
            url = url.get("url") if isinstance(url, dict) else url
            decoded = data_url(url) if isinstance(url, str) else None
            if decoded is None:
                return bad_request("Images must be given as base64 data: URLs.", param=param)
            parts.append(m.ImagePart(data=decoded[1], mime_type=decoded[0]))
        elif kind == "file":
            spec = item.get("file")
            data = spec.get("file_data") if isinstance(spec, dict) else None
            decoded = data_url(data) if isinstance(data, str) else None
            if decoded is None or not isinstance(spec, dict):
                return bad_request("Files must be given inline as file_data data: URLs.", param=param)
            filename = spec.get("filename")
            parts.append(m.FilePart(name=filename if isinstance(filename, str) else "file", data=decoded[1], content_type=decoded[0]))
        else:
            return bad_request(f"Unsupported content part type {kind!r}.", param=param)
    return tuple(parts)


def data_url(url: str) -> tuple[str, bytes] | None:
    """``(mime type, bytes)`` of a ``data:`` URL (base64 or percent-encoded); None otherwise."""
    if not url.startswith("data:"):
        return None
    header, sep, payload = url[5:].partition(",")
    if not sep:
        return None
    fields = header.split(";")
    mime = fields[0].strip() or "text/plain"
    if "base64" in fields[1:]:
        try:
            return mime, base64.b64decode("".join(payload.split()), validate=True)
        except (binascii.Error, ValueError):
            return None
    return mime, unquote_to_bytes(payload)


# ---------------------------------------------------------------- kernel commands

#: The label of the throw-away session of each request (``runs.ephemeral_run``: OpenAI clients
#: send the whole conversation every time, so it lives in memory only, for one run).
EPHEMERAL_LABEL = "openai chat (ephemeral)"


def run_command(plan: ChatPlan, session_id: str, request_id: str) -> m.Prompt | m.Continue:
    """The last user message as the prompt or, when the conversation ends with the
    results of the client's tool calls, a ``continue`` (no new user turn)."""
    return m.conversation_turn(session_id, request_id, plan.prompt_parts, plan.options, continuation=plan.continuation)


# ---------------------------------------------------------------- answers out

FINISH_REASONS: dict[str, str] = {
    "end_turn": "stop",
    "max_tokens": "length",
    "tool_iterations": "length",
    "turn_limit": "length",
    "refusal": "content_filter",
}

#: The SSE data of the stream's last event.
DONE = b"[DONE]"

#: The events that become answer text. A streamed answer sends its headers at the first
#: of them (or at the run's end), so that a failure before it keeps its HTTP status.
OUTPUT = (m.TextDelta, m.ReasoningDelta)


def usage_of(usage: m.Usage) -> OutUsage:
    return OutUsage(prompt_tokens=usage.input_tokens, completion_tokens=usage.output_tokens, total_tokens=usage.total_tokens)


def reasoning_text(events: Sequence[m.Event]) -> str:
    return "".join(event.text for event in events if isinstance(event, m.ReasoningDelta))


def end_error(end: m.RunFinished | m.RunFailed) -> OpenAIError | None:
    """The error a run's end is, in OpenAI's shape (None: the answer is whole). An
    interrupted answer is one too — drained, shut down, timed out or cut by an interrupt —
    so that no client takes a partial answer for a complete one (``kernel.run_end_error``)."""
    error = m.run_end_error(end)
    return from_error_info(error) if error is not None else None


def failed_before_output(end: m.RunFinished | m.RunFailed | None, events: Sequence[m.Event]) -> OpenAIError | None:
    """The run failed (or was interrupted) before any text: a stream whose headers are not
    sent yet answers with the failure's real HTTP status (the usual case for an upstream
    rate limit)."""
    if end is not None and not any(isinstance(e, OUTPUT) for e in events):
        return end_error(end)
    return None


def _tool_calls(calls: Sequence[m.ToolCall]) -> list[OutToolCall]:
    return [OutToolCall(id=c.id, type="function", function=OutFunction(name=c.name, arguments=c.arguments)) for c in calls]


def completion(
    *, completion_id: str, created: int, model: str, finished: m.RunFinished, reasoning: str, client_calls: Sequence[m.ToolCall]
) -> ChatCompletion:
    """One non-streamed answer: the run's text, the client's tool calls if the model made any."""
    message = OutMessage(
        role="assistant",
        content=finished.text if finished.text or not client_calls else None,
        refusal=None,
        tool_calls=_tool_calls(client_calls) or None,
        reasoning_content=reasoning or None,
    )
    finish = "tool_calls" if client_calls else FINISH_REASONS.get(finished.stop_reason, "stop")
    return ChatCompletion(
        id=completion_id, object="chat.completion", created=created, model=model,
        choices=[OutChoice(index=0, message=message, logprobs=None, finish_reason=finish)],
        usage=usage_of(finished.usage),
    )


class ChunkEncoder:
    """Kernel events of one run -> the ``chat.completion.chunk`` JSON of each SSE event."""

    def __init__(self, *, completion_id: str, created: int, model: str, include_usage: bool) -> None:
        self.completion_id = completion_id
        self.created = created
        self.model = model
        self.include_usage = include_usage

    def _chunk(self, choices: list[OutChunkChoice], usage: OutUsage | None = None) -> bytes:
        chunk: Chunk
        if self.include_usage:
            chunk = UsageChunk(
                id=self.completion_id, object="chat.completion.chunk", created=self.created, model=self.model,
                system_fingerprint=None, choices=choices, usage=usage,
            )
        else:
            chunk = Chunk(
                id=self.completion_id, object="chat.completion.chunk", created=self.created, model=self.model,
                system_fingerprint=None, choices=choices,
            )
        return _encode(chunk)

    def _delta(self, delta: OutDelta, finish: str | None = None) -> bytes:
        return self._chunk([OutChunkChoice(index=0, delta=delta, logprobs=None, finish_reason=finish)])

    def opening(self) -> bytes:
        return self._delta(OutDelta(role="assistant", content=""))

    def event(self, event: m.Event) -> bytes | None:
        if isinstance(event, m.TextDelta) and event.text:
            return self._delta(OutDelta(content=event.text))
        if isinstance(event, m.ReasoningDelta) and event.text:
            return self._delta(OutDelta(reasoning_content=event.text))
        return None

    def closing(self, finished: m.RunFinished, client_calls: Sequence[m.ToolCall]) -> list[bytes]:
        chunks: list[bytes] = []
        if client_calls:
            deltas = [
                OutToolCallDelta(index=i, id=c.id, type="function", function=OutFunction(name=c.name, arguments=c.arguments))
                for i, c in enumerate(client_calls)
            ]
            chunks.append(self._delta(OutDelta(tool_calls=deltas)))
            chunks.append(self._delta(OutDelta(), "tool_calls"))
        else:
            chunks.append(self._delta(OutDelta(), FINISH_REASONS.get(finished.stop_reason, "stop")))
        if self.include_usage:
            chunks.append(self._chunk([], usage_of(finished.usage)))
        chunks.append(DONE)
        return chunks

    def failure(self, error: OpenAIError) -> bytes:
        """A failure after the stream started: the SDKs raise on a ``data: {"error": ...}`` event."""
        return _encode(error.body())


# ---------------------------------------------------------------- models


def model_list(agents: Sequence[m.AgentInfo], created: int) -> ModelList:
    """Every agent by name, then each provider model the agents use (pass-through names)."""
    data = [ModelInfo(id=a.name, object="model", created=created, owned_by="gateway") for a in agents]
    seen = {a.name for a in agents}
    for agent in agents:
        if agent.model and agent.model not in seen:
            seen.add(agent.model)
            data.append(ModelInfo(id=agent.model, object="model", created=created, owned_by=agent.provider or "gateway"))
    return ModelList(object="list", data=data)


def find_model(agents: Sequence[m.AgentInfo], created: int, model_id: str) -> ModelInfo | OpenAIError:
    for info in model_list(agents, created).data:
        if info.id == model_id:
            return info
    for agent in agents:
        if agent.id == model_id:
            return ModelInfo(id=agent.id, object="model", created=created, owned_by="gateway")
    return OpenAIError(
        status=404, message=f"The model '{model_id}' does not exist", param="model", code="model_not_found"
    )
