"""Sans-IO codec of AG-UI, the request side: a ``RunAgentInput`` in -> kernel commands out.

A thread is a kernel session (``threadId`` = session id), and the thread's history lives
in the gateway: the client's ``messages`` are read only for what is new at their end
(:func:`plan_run`) — a user turn is a prompt, tool messages answering the client's own
tools continue the run that called them, nothing new is a "sync" run answered with a
``MESSAGES_SNAPSHOT``. A run with ``resume`` answers the interrupt its predecessor ended
with (:func:`plan_resume`), and the kernel run that waited goes on. The event side (kernel
events -> AG-UI events) is :mod:`.events`. Errors take AG-UI's own shape, a ``RUN_ERROR``
event, as the body of a 4xx/5xx answer before a stream opens. Pure; never raises on input.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence
from typing import Any, Literal, Protocol

import msgspec

from kernel import JsonDecoder, message_from_parts, parse_wire_int
from kernel import model as m
from kernel.errors import http_headers, http_status

from . import wire

_decode_input: JsonDecoder[wire.RunAgentInput] = JsonDecoder(wire.RunAgentInput)
_MSGSPEC_PATH = re.compile(r" - at `\$\.?(.*)`$")
#: A thread id is a kernel session id and a URL path segment: keep it plain.
_THREAD_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_RUN_ID_CHARS = 256

# ---------------------------------------------------------------- errors


class AguiError(msgspec.Struct, frozen=True, kw_only=True):
    """A refusal before any stream opens: an HTTP status with a ``RUN_ERROR`` body."""

    status: int
    code: str
    message: str
    headers: dict[str, str] = {}

    def body(self) -> wire.RunError:
        return wire.RunError(message=self.message, code=self.code)


class HttpFailure(Protocol):
    """What the router hands its error shaper (``transports.shared.HttpError``)."""

    @property
    def status(self) -> int: ...

    @property
    def message(self) -> str: ...

    @property
    def code(self) -> str | None: ...


def error_body(error: HttpFailure) -> wire.RunError:
    """Router error shaper: auth, Origin, size, rate, 404 and 405 in AG-UI's shape."""
    return wire.RunError(message=error.message, code=error.code or "error")


def bad_request(message: str) -> AguiError:
    return AguiError(status=400, code="invalid_request", message=message)


def from_kernel(error: m.ErrorInfo) -> AguiError:
    """A command the kernel refused, before the stream opened (status and headers: kernel.errors)."""
    return AguiError(status=http_status(error.code), code=error.code, message=error.message, headers=http_headers(error))


# ---------------------------------------------------------------- the request


def decode_input(raw: bytes) -> wire.RunAgentInput | AguiError:
    if not raw.strip():
        return bad_request("The request body is empty; expected a JSON RunAgentInput.")
    try:
        parsed = _decode_input.decode(raw)
    except msgspec.ValidationError as exc:
        text = str(exc)
        found = _MSGSPEC_PATH.search(text)
        where = f" (at {found.group(1)})" if found and found.group(1) else ""
        return bad_request(f"Invalid RunAgentInput{where}: {text}")
    except msgspec.DecodeError as exc:
        return AguiError(status=400, code="parse_error", message=f"The body is not valid JSON: {exc}")
    if not _THREAD_ID.match(parsed.thread_id):
        return bad_request("threadId must be 1-128 characters of A-Z, a-z, 0-9, '.', '_', ':' and '-'.")
    if not parsed.run_id or len(parsed.run_id) > MAX_RUN_ID_CHARS:
        return bad_request(f"runId must be 1-{MAX_RUN_ID_CHARS} characters.")
    return parsed


def valid_thread_id(thread_id: str) -> bool:
    return bool(_THREAD_ID.match(thread_id))


class RunPlan(msgspec.Struct, frozen=True, kw_only=True):
    """What one run of a thread asks of the kernel.

    ``kind``: ``prompt`` (a new user turn), ``continue`` (the client answered its tool
    calls, or retries a turn the kernel holds unanswered), or ``sync`` (nothing new: the
    answer is the thread's messages).
    """

    kind: Literal["prompt", "continue", "sync"]
    #: Saved before the run: the client's copy of a thread new to the gateway, then the
    #: tool messages answering the client's tool calls.
    save: tuple[m.Message, ...] = ()
    prompt: tuple[m.ContentPart, ...] = ()
    options: m.PromptOptions = m.PromptOptions()


def plan_run(request: wire.RunAgentInput, history: Sequence[m.Message], *, agent_prompt: str) -> RunPlan | AguiError:
    """Reconcile the client's ``messages`` with the thread's ``history`` (the kernel's)."""
    tools = _client_tools(request.tools)
    if isinstance(tools, AguiError):
        return tools
    converted = _conversation(request.messages)
    if isinstance(converted, AguiError):
        return converted
    system, turns = converted
    demands = _forwarded(request.forwarded_props)
    if isinstance(demands, AguiError):
        return demands
    options = m.PromptOptions(
        system_prompt=_system_prompt(agent_prompt, system, request.context), client_tools=tools,
        output_format=demands.output_format, tool_choice=demands.tool_choice, parallel_tool_calls=demands.parallel_tool_calls,
    )
    # The tail: the trailing user turns (a prompt), or the trailing tool results (answers).
    tail_start = len(turns)
    last_role = turns[-1][1].role if turns else None
    while last_role in ("user", "tool") and tail_start > 0 and turns[tail_start - 1][1].role == last_role:
        tail_start -= 1
    tail = turns[tail_start:]
    # A thread new to the gateway takes the client's copy of what came before the tail.
    seed = tuple(msg for _, msg in turns[:tail_start]) if not history else ()
    known = list(history) if history else list(seed)
    if last_role == "user":
        fresh = _unanswered_user_turns(known, [msg for _, msg in tail])
        if not fresh:  # the kernel holds these turns unanswered (a failed run): retry them
            return RunPlan(kind="continue", save=seed, options=options)
        parts = tuple(part for msg in fresh for part in _user_parts(msg))
        return RunPlan(kind="prompt", save=seed, prompt=parts, options=options)
    if last_role == "tool":
        answers = _tool_answers(known, tail)
        if isinstance(answers, AguiError):
            return answers
        if answers:
            return RunPlan(kind="continue", save=(*seed, *answers), options=options)
    return RunPlan(kind="sync", save=seed, options=options)


def run_commands(plan: RunPlan, thread_id: str, request_id: str) -> tuple[m.SaveHistory | None, m.Prompt | m.Continue | None]:
    """The history to save first (if any) and the command that starts the run (None: sync)."""
    save = m.SaveHistory(session_id=thread_id, messages=plan.save) if plan.save else None
    if plan.kind == "prompt":
        return save, m.Prompt(session_id=thread_id, request_id=request_id, parts=plan.prompt, options=plan.options)
    if plan.kind == "continue":
        return save, m.Continue(session_id=thread_id, request_id=request_id, options=plan.options)
    return save, None


def _client_tools(tools: Sequence[wire.Tool]) -> tuple[m.ClientTool, ...] | AguiError:
    specs: list[m.ClientTool] = []
    for i, tool in enumerate(tools):
        if not _TOOL_NAME.match(tool.name):
            return bad_request(f"tools[{i}].name: tool names are 1-64 characters of a-z, A-Z, 0-9, _ and -.")
        parameters = tool.parameters if tool.parameters is not None else {"type": "object", "properties": {}}
        if not isinstance(parameters, dict):
            return bad_request(f"tools[{i}].parameters must be a JSON schema object.")
        specs.append(m.ClientTool(name=tool.name, description=tool.description, parameters=parameters))
    return tuple(specs)


def _forwarded(props: Any) -> wire.ForwardedDemands | AguiError:
    """Structured output and tool use asked for in ``forwardedProps`` (other keys ignored)."""
    if not isinstance(props, dict):
        return wire.ForwardedDemands()
    known = {key: props[key] for key in ("outputFormat", "toolChoice", "parallelToolCalls") if key in props}
    try:
        return msgspec.convert(known, wire.ForwardedDemands)
    except msgspec.ValidationError as exc:
        return bad_request(f"Invalid forwardedProps: {exc}")


def _system_prompt(agent_prompt: str, system: list[str], context: Sequence[wire.Context]) -> str | None:
    """The agent's prompt, then the client's system/developer messages and its context."""
    extra = [text for text in system if text.strip()]
    if context:
        extra.append("Context from the application:\n" + "\n".join(f"- {c.description}: {c.value}" for c in context))
    if not extra:
        return None
    return "\n\n".join(text for text in (agent_prompt, *extra) if text)


def _conversation(messages: Sequence[wire.Message]) -> tuple[list[str], list[tuple[int, m.Message]]] | AguiError:
    """System/developer text, and the other turns as kernel messages (with their index)."""
    system: list[str] = []
    turns: list[tuple[int, m.Message]] = []
    for i, msg in enumerate(messages):
        if isinstance(msg, (wire.SystemMessage, wire.DeveloperMessage)):
            system.append(msg.content)
        elif isinstance(msg, wire.UserMessage):
            parts = _parts(msg.content, f"messages[{i}].content")
            if isinstance(parts, AguiError):
                return parts
            if not parts:
                return bad_request(f"messages[{i}].content: a user message needs content.")
            turns.append((i, message_from_parts(parts)))
        elif isinstance(msg, wire.AssistantMessage):
            calls = tuple(m.ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments or "{}") for c in msg.tool_calls or ())
            turns.append((i, m.Message(role="assistant", content=msg.content or "", tool_calls=calls)))
        elif isinstance(msg, wire.ToolMessage):
            parts = _parts(msg.content, f"messages[{i}].content")
            if isinstance(parts, AguiError):
                return parts
            texts = [p.text for p in parts if isinstance(p, m.TextPart)]
            if len(texts) != len(parts):
                return bad_request(f"messages[{i}].content: a tool result may only contain text.")
            outcome: m.ToolOutcome = "error" if msg.error else "ok"
            turns.append((i, m.Message(role="tool", content="\n".join(texts), tool_call_id=msg.tool_call_id, outcome=outcome)))
        # activity and reasoning messages are the front-end's: the model gets no copy of them
    return system, turns


def _parts(content: str | list[wire.Part], where: str) -> tuple[m.ContentPart, ...] | AguiError:
    if isinstance(content, str):
        return (m.TextPart(content),) if content else ()
    parts: list[m.ContentPart] = []
    for j, part in enumerate(content):
        converted = _part(part, f"{where}[{j}]")
        if isinstance(converted, AguiError):
            return converted
        parts.append(converted)
    return tuple(parts)


def _part(part: wire.Part, where: str) -> m.ContentPart | AguiError:
    if isinstance(part, wire.TextPart):
        return m.TextPart(part.text)
    if isinstance(part, wire.BinaryPart):
        data = _base64(part.data, where) if part.data is not None else bad_request(f"{where}: send attachments inline (data), not by url or id.")
        if isinstance(data, AguiError):
            return data
        if part.mime_type.startswith("image/"):
            return m.ImagePart(data=data, mime_type=part.mime_type)
        return m.FilePart(name=part.filename or "file", data=data, content_type=part.mime_type)
    if isinstance(part, (wire.AudioPart, wire.VideoPart)):
        return bad_request(f"{where}: {type(part).__name__.removesuffix('Part').lower()} input is not supported; send text, images and documents.")
    source = part.source
    if not isinstance(source, wire.DataSource):
        return bad_request(f"{where}.source: the gateway fetches nothing; send the bytes inline (source type \"data\").")
    data = _base64(source.value, f"{where}.source.value")
    if isinstance(data, AguiError):
        return data
    if isinstance(part, wire.ImagePart):
        return m.ImagePart(data=data, mime_type=source.mime_type)
    return m.FilePart(name="document", data=data, content_type=source.mime_type)


def _base64(value: str, where: str) -> bytes | AguiError:
    try:
        return base64.b64decode("".join(value.split()), validate=True)
    except (binascii.Error, ValueError):
        return bad_request(f"{where}: not valid base64.")


def _unanswered_user_turns(history: Sequence[m.Message], tail: list[m.Message]) -> list[m.Message]:
    """The tail's user turns the kernel does not already hold unanswered at its end."""
    start = len(history)
    while start > 0 and history[start - 1].role == "user":
        start -= 1
    held = [(msg.content, msg.parts) for msg in history[start:]]
    fresh = list(tail)
    while held and fresh and (fresh[0].content, fresh[0].parts) == held[0]:
        held.pop(0)
        fresh.pop(0)
    return fresh


def _tool_answers(history: Sequence[m.Message], tail: list[tuple[int, m.Message]]) -> list[m.Message] | AguiError:
    """The tail's tool messages that answer a call of the thread still waiting for its result."""
    calls = {call.id: call.name for msg in history for call in msg.tool_calls}
    answered = {msg.tool_call_id for msg in history if msg.role == "tool"}
    answers: list[m.Message] = []
    for i, msg in tail:
        if msg.tool_call_id in answered:
            continue  # the gateway has it already (its own tool's result, or an earlier answer)
        if msg.tool_call_id not in calls:
            return bad_request(f"messages[{i}].toolCallId: {msg.tool_call_id!r} answers no tool call of this thread.")
        answers.append(msgspec.structs.replace(msg, name=calls[msg.tool_call_id]))
        answered.add(msg.tool_call_id)
    return answers


def _user_parts(msg: m.Message) -> tuple[m.ContentPart, ...]:
    return msg.parts or (m.TextPart(msg.content),)


# ---------------------------------------------------------------- resume


class ResumePlan(msgspec.Struct, frozen=True, kw_only=True):
    interrupt_id: str
    answer: m.ResolveToolApproval | m.ResolveTurnLimit


def approval_interrupt_id(seq: int, call_id: str) -> str:
    return f"approval:{seq}:{call_id}"


def turn_limit_interrupt_id(seq: int) -> str:
    return f"turn-limit:{seq}"


def interrupt_seq(interrupt_id: str) -> int | None:
    """The kernel seq of the question an interrupt id names (where the next run picks up)."""
    _, _, rest = interrupt_id.partition(":")
    seq, _, _ = rest.partition(":")
    return parse_wire_int(seq)


def plan_resume(request: wire.RunAgentInput, info: m.SessionInfo) -> ResumePlan | AguiError:
    """The answer the ``resume`` entry gives to the question the thread's run waits on."""
    entries = request.resume or []
    if len(entries) != 1:
        return bad_request("resume must hold one entry: a thread's run waits on one interrupt at a time.")
    entry = entries[0]
    kind, _, rest = entry.interrupt_id.partition(":")
    _, _, call_id = rest.partition(":")
    answer = _answer(entry)
    if isinstance(answer, AguiError):
        return answer
    reason = answer.reason or ("cancelled by the user" if entry.status == "cancelled" else None)
    command: m.ResolveToolApproval | m.ResolveTurnLimit
    if kind == "approval" and info.state == "awaiting_tool_approval" and call_id and call_id == info.pending_call_id:
        command = m.ResolveToolApproval(
            session_id=info.session_id, call_id=call_id, approved=answer.approved, reason=reason, remember=answer.remember
        )
    elif kind == "turn-limit" and info.state == "awaiting_turn_confirmation":
        command = m.ResolveTurnLimit(session_id=info.session_id, confirmed=answer.approved, reason=reason)
    else:
        return AguiError(
            status=409, code="invalid_request",
            message=f"Interrupt {entry.interrupt_id!r} is not open on thread {info.session_id!r} (answered, expired, or never asked).",
        )
    return ResumePlan(interrupt_id=entry.interrupt_id, answer=command)


def _answer(entry: wire.ResumeEntry) -> wire.ApprovalAnswer | AguiError:
    if entry.status == "cancelled":
        return wire.ApprovalAnswer(approved=False)
    payload: Any = entry.payload
    if payload is None:
        return wire.ApprovalAnswer()
    if isinstance(payload, bool):
        return wire.ApprovalAnswer(approved=payload)
    try:
        return msgspec.convert(payload, wire.ApprovalAnswer)
    except msgspec.ValidationError as exc:
        return bad_request(f"resume[0].payload: expected true, false or {{\"approved\": bool, \"reason\"?: str, \"remember\"?: bool}}: {exc}")


# ---------------------------------------------------------------- Last-Event-ID


def resume_after(last_event_id: str | None) -> int | AguiError | None:
    """The kernel seq a reconnecting client saw last (None: replay the whole run)."""
    if last_event_id is None or not last_event_id.strip():
        return None
    seq = parse_wire_int(last_event_id)
    if seq is None:
        return bad_request(f"Last-Event-ID must be an event id this server sent (a number), not {last_event_id[:40]!r}.")
    return seq
