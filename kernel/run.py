"""The run loop: provider stream -> deltas -> tool calls -> results -> ... -> answer.

One run answers one prompt (or regenerates the last answer). It may span several
model calls ("turns") when the model uses tools. An interrupt cancels the run's
scope: the provider stream is closed at once, partial text is kept, and the run
ends with ``run_finished(interrupted=True)`` exactly once. A provider failure ends
it with ``run_failed``; the session lives on either way.
"""

from __future__ import annotations

import logging
from contextlib import aclosing
from typing import TYPE_CHECKING, TypedDict

import anyio
import anyio.lowlevel
import msgspec

from .jobs import ActiveRun, RunJob
from .model import (
    ApprovalPolicy,
    ContentPart,
    ErrorInfo,
    FilePart,
    ImagePart,
    KernelError,
    Message,
    PromptOptions,
    ReasoningDelta,
    RunFailed,
    RunFinished,
    RunStarted,
    StopReason,
    TextDelta,
    TextPart,
    ToolCall,
    TurnLimitReached,
    TurnStarted,
    Usage,
)
from .provider import (
    FinishChunk,
    Provider,
    ProviderError,
    ProviderRequest,
    ReasoningChunk,
    TextChunk,
    ToolCallChunk,
    UsageChunk,
)
from .toolcalls import ToolRunner

if TYPE_CHECKING:
    from .session import Session



class Ids(TypedDict):
    """What every event of a run carries."""

    session_id: str
    run_id: str
    request_id: str | None

log = logging.getLogger("gateway.kernel")


class RunState:
    """What a run has produced so far; kept when the run is interrupted."""

    def __init__(self) -> None:
        self.text = ""
        self.usage = Usage()
        self.iterations = 0
        self.tool_calls = 0
        self.rejected: list[tuple[str, str]] = []
        self.new_messages: list[Message] = []
        self.open_calls: list[ToolCall] = []
        self.pending_client_calls: list[ToolCall] = []
        self.partial_parts: list[str] = []  # this model call's text so far (joined once: no quadratic +=)
        self.context_tokens = 0

    @property
    def partial(self) -> str:
        return "".join(self.partial_parts)

    def take_partial(self) -> str:
        text = self.partial
        self.partial_parts = []
        return text


def user_message(parts: tuple[ContentPart, ...]) -> Message:
    texts = [p.text for p in parts if isinstance(p, TextPart)]
    if len(texts) == len(parts):
        return Message(role="user", content="\n".join(texts))
    return Message(role="user", content="", parts=parts)


async def execute_run(session: Session, run: ActiveRun) -> None:
    job = run.job
    ids: Ids = {"session_id": session.id, "run_id": job.run_id, "request_id": job.request_id}
    state = RunState()
    try:
        await _prepare(session, job)
    except KernelError as exc:
        await session.emit(RunStarted(**ids, agent_id=session.agent.agent_id(), regenerate=job.regenerate))
        await session.emit(RunFailed(**ids, error=exc.info()))
        return
    await session.emit(RunStarted(**ids, agent_id=session.agent.agent_id(), regenerate=job.regenerate))
    error: ErrorInfo | None = None
    stop: StopReason = "end_turn"
    with run.scope:
        try:
            stop = await _loop(session, run, state, ids)
        except ProviderError as exc:
            error = ErrorInfo(code=exc.code, message=exc.message, details=_provider_details(exc))
        except KernelError as exc:
            error = exc.info()
        except Exception as exc:
            log.exception("run %s failed", job.run_id)
            error = ErrorInfo(code="internal", message=f"internal error: {type(exc).__name__}: {exc}")
    interrupted = run.interrupted and error is None
    if interrupted:
        stop = "interrupted"
        partial = state.take_partial()
        if partial:
            state.text += partial
            state.new_messages.append(Message(role="assistant", content=partial))
    for call in state.open_calls:
        state.new_messages.append(
            Message(role="tool", tool_call_id=call.id, name=call.name, content="interrupted before the tool finished", outcome="interrupted")
        )
    with anyio.CancelScope(shield=True):
        await session.persist(state.new_messages)
        session.usage = session.usage + state.usage
        if error is not None:
            await session.emit(RunFailed(**ids, error=error, text=state.text, usage=state.usage))
            return
        await session.emit(
            RunFinished(
            **ids,
                text=state.text,
                usage=state.usage,
                interrupted=interrupted,
                stop_reason=stop,
                iterations=state.iterations,
                tool_calls=state.tool_calls,
                rejected_tools=tuple(state.rejected),
                pending_tool_calls=tuple(state.pending_client_calls),
                context_tokens=state.context_tokens,
            )
        )


async def _prepare(session: Session, job: RunJob) -> None:
    if job.regenerate:
        last_user = max((i for i, m in enumerate(session.context) if m.role == "user"), default=None)
        if last_user is None:
            raise KernelError("invalid_request", "nothing to regenerate: the session has no user message")
        await session.replace_history(session.context[: last_user + 1])
        return
    if job.resume:
        if not session.context:
            raise KernelError("invalid_request", "nothing to continue: the session has no messages")
        return
    if not job.parts:
        raise KernelError("invalid_request", "empty prompt")
    for part in job.parts:
        if isinstance(part, TextPart) and not part.text.strip() and len(job.parts) == 1:
            raise KernelError("invalid_request", "empty prompt")
    await session.persist([user_message(job.parts)])


async def _loop(session: Session, run: ActiveRun, state: RunState, ids: Ids) -> StopReason:
    kernel = session.kernel
    agent = session.agent
    options = run.job.options
    policy = options.approval or ApprovalPolicy()
    provider = kernel.provider_for(agent)
    tools = ToolRunner(session, run, state, ids, policy) if options.use_tools or options.client_tools else None
    max_iterations = options.max_tool_iterations or agent.max_tool_iterations
    max_turns = session.turn_limit
    for iteration in range(max_iterations + 1):
        # A run interrupted before its first model call must not reach the provider at all.
        await anyio.lowlevel.checkpoint_if_cancelled()
        if max_turns > 0 and session.turns >= max_turns:
            if not await _confirm_turns(session, policy, ids, max_turns):
                return "turn_limit"
        session.turns += 1
        state.iterations = iteration
        await session.emit(TurnStarted(**ids, turn=session.turns, iteration=iteration))
        request = ProviderRequest(
            model=options.model or session.model_override or agent.model or provider.model,
            messages=_window(session, options),
            tools=tools.specs() if tools is not None else (),
            max_tokens=options.max_tokens,
            temperature=options.temperature,
            stream=options.stream,
        )
        calls, finish = await _stream(session, provider, request, state, ids)
        text = state.take_partial()
        state.text += text
        if not calls:
            if text:
                state.new_messages.append(Message(role="assistant", content=text))
            return "max_tokens" if finish == "length" else "end_turn"
        state.new_messages.append(Message(role="assistant", content=text, tool_calls=tuple(calls)))
        assert tools is not None
        state.open_calls = [call for call in calls if not tools.is_client_tool(call.name)]
        for call in calls:
            if tools.is_client_tool(call.name):
                await tools.announce_client_call(call)
                state.pending_client_calls.append(call)
            else:
                state.new_messages.append(await tools.run(call))
                state.open_calls.remove(call)
        # Tool results must reach the store before the next model call is acknowledged.
        await session.persist(state.new_messages)
        state.new_messages = []
        if state.pending_client_calls:
            return "tool_calls"
    return "tool_iterations"


def _window(session: Session, options: PromptOptions) -> tuple[Message, ...]:
    agent = session.agent
    limit = options.max_context_messages or agent.max_context_messages
    window = session.context[-limit:] if limit > 0 else []
    while window and window[0].role == "tool":
        window = window[1:]
    system = options.system_prompt if options.system_prompt is not None else agent.system_prompt
    head = (Message(role="system", content=system),) if system else ()
    return head + tuple(_model_view(m) for m in _answer_every_call(window))


def _answer_every_call(window: list[Message]) -> list[Message]:
    """Models reject a tool call without a result (a crash mid-round, a client tool
    never answered): give each such call an explicit "no result" message."""
    out: list[Message] = []
    waiting: list[ToolCall] = []
    for message in window:
        if message.role == "tool":
            waiting = [c for c in waiting if c.id != message.tool_call_id]
        else:
            out.extend(_unanswered(waiting))
            waiting = list(message.tool_calls)
        out.append(message)
    out.extend(_unanswered(waiting))
    return out


def _unanswered(calls: list[ToolCall]) -> list[Message]:
    return [Message(role="tool", tool_call_id=c.id, name=c.name, content="(no result: the call was not answered)") for c in calls]


def _model_view(message: Message) -> Message:
    """Files become text with their name; images stay parts (providers send data URLs)."""
    if not message.parts:
        return message
    parts: list[TextPart | ImagePart] = []
    for part in message.parts:
        if isinstance(part, FilePart):
            body = part.data.decode("utf-8", errors="replace")
            parts.append(TextPart(f"File: {part.name} ({part.content_type})\n```\n{body}\n```"))
        else:
            parts.append(part)
    texts = [p.text for p in parts if isinstance(p, TextPart)]
    if len(texts) == len(parts):
        return msgspec.structs.replace(message, content="\n\n".join(texts), parts=())
    return msgspec.structs.replace(message, parts=tuple(parts))


async def _stream(session: Session, provider: Provider, request: ProviderRequest, state: RunState, ids: Ids) -> tuple[list[ToolCall], str | None]:
    fragments: dict[int, dict[str, str]] = {}
    finish: str | None = None
    async with aclosing(provider.stream(request)) as chunks:
        async for chunk in chunks:
            if isinstance(chunk, TextChunk):
                if chunk.text:
                    state.partial_parts.append(chunk.text)
                    await session.emit(TextDelta(**ids, text=chunk.text))
            elif isinstance(chunk, ReasoningChunk):
                if chunk.text:
                    await session.emit(ReasoningDelta(**ids, text=chunk.text))
            elif isinstance(chunk, ToolCallChunk):
                slot = fragments.setdefault(chunk.index, {"id": "", "name": "", "arguments": ""})
                if chunk.id:
                    slot["id"] = chunk.id
                if chunk.name and chunk.name != slot["name"]:
                    slot["name"] += chunk.name
                slot["arguments"] += chunk.arguments
            elif isinstance(chunk, UsageChunk):
                state.usage = state.usage + chunk.usage
                state.context_tokens = chunk.usage.input_tokens
            elif isinstance(chunk, FinishChunk):
                finish = chunk.reason
    calls = [
        ToolCall(id=slot["id"] or f"call_{ids['run_id']}_{index}", name=slot["name"], arguments=slot["arguments"] or "{}")
        for index, slot in sorted(fragments.items())
        if slot["name"]
    ]
    return calls, finish


async def _confirm_turns(session: Session, policy: ApprovalPolicy, ids: Ids, max_turns: int) -> bool:
    """Whether the run may go past the turn limit: the policy decides, or the client."""
    decision = policy.at_turn_limit()
    if decision == "ask":
        reached = TurnLimitReached(
            **ids, current_turns=session.turns, max_turns=max_turns, reason=f"the session reached its limit of {max_turns} model turns"
        )
        timeout_s = session.kernel.settings.session.turn_confirmation_timeout_s
        go_on = (await session.machine.ask("turn_limit", None, timeout_s, lambda: session.emit(reached))).yes
    else:
        go_on = decision == "continue"
    if go_on:
        session.turns = 0
    return go_on


def _provider_details(exc: ProviderError) -> dict[str, object] | None:
    details: dict[str, object] = {}
    if exc.status is not None:
        details["status"] = exc.status
    if exc.retry_after_s is not None:
        details["retry_after_s"] = exc.retry_after_s
    return details or None
