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
from typing import TYPE_CHECKING

import anyio
import anyio.lowlevel
import msgspec

from .attachments import file_text, message_from_parts
from .jobs import ActiveRun, Ids, RunJob, RunState
from .model import (
    ApprovalPolicy,
    ErrorInfo,
    FilePart,
    KernelError,
    Message,
    ModelResponding,
    PromptOptions,
    ReasoningDelta,
    RunFailed,
    RunFinished,
    RunStarted,
    StopReason,
    TextDelta,
    TextPart,
    ToolCall,
    ToolChoice,
    TurnLimitReached,
    TurnStarted,
    Usage,
)
from .observe import ModelCall, RunFacts, RunOutcome
from .provider import (
    FinishChunk,
    Provider,
    ProviderError,
    ProviderRequest,
    ReasoningChunk,
    ResponseStarted,
    TextChunk,
    ToolCallChunk,
    ToolSpec,
    UsageChunk,
)
from .toolcalls import ToolRunner

if TYPE_CHECKING:
    from .host import RunSession

log = logging.getLogger("gateway.kernel")


async def execute_run(session: RunSession, run: ActiveRun) -> None:
    job = run.job
    ids: Ids = {"session_id": session.id, "run_id": job.run_id, "request_id": job.request_id}
    state = RunState()
    observers = session.host.observers
    observers.run_started(run.facts)
    try:
        await _prepare(session, job)
    except KernelError as exc:
        observers.run_ended(run.facts, "failed", exc.code)
        await session.emit(RunStarted(**ids, agent_id=session.agent.agent_id(), regenerate=job.regenerate))
        await _end(session, run, RunFailed(**ids, error=exc.info()))
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
        try:
            await session.persist(state.new_messages)
        except KernelError as exc:  # not recorded (this instance lost the session): the run did not end whole
            error = exc.info()
        session.usage = session.usage + state.usage
        # Told before the last event: a client that sees the run end finds it counted.
        observers.run_ended(run.facts, _outcome(stop, error), error.code if error is not None else None)
        if error is not None:
            await _end(session, run, RunFailed(**ids, error=error, text=state.text, usage=state.usage))
            return
        await _end(
            session,
            run,
            RunFinished(
                **ids,
                text=state.text,
                usage=state.usage,
                interrupted=interrupted,
                interrupt_cause=run.cause if interrupted else None,
                stop_reason=stop,
                iterations=state.iterations,
                tool_calls=state.tool_calls,
                rejected_tools=tuple(state.rejected),
                pending_tool_calls=tuple(state.pending_client_calls),
                context_tokens=state.context_tokens,
            ),
        )


async def _end(session: RunSession, run: ActiveRun, end: RunFinished | RunFailed) -> None:
    """Publish the run's end, marked so first: a session that closes while the publish waits
    (for a slow reader) owes the readers nothing more. (One that closed before — the run
    outlived the unload's grace — ended the run for them, and publishes nothing more.)"""
    run.ended = True
    await session.emit(end)


def _outcome(stop: StopReason, error: ErrorInfo | None) -> RunOutcome:
    if error is not None:
        return "failed"
    if stop == "interrupted":
        return "interrupted"
    return "limit" if stop in ("turn_limit", "tool_iterations") else "completed"


async def _prepare(session: RunSession, job: RunJob) -> None:
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
    await session.persist([message_from_parts(job.parts)])


async def _loop(session: RunSession, run: ActiveRun, state: RunState, ids: Ids) -> StopReason:
    host = session.host
    agent = session.agent
    options = run.job.options
    policy = options.approval or ApprovalPolicy()
    provider = host.provider_for(agent)
    tools = ToolRunner(session, run, state, ids, policy) if options.use_tools or options.client_tools else None
    max_iterations = options.max_tool_iterations or agent.max_tool_iterations
    max_turns = session.turn_limit
    if options.tool_choice is not None:  # a choice the tools cannot meet is refused before a turn counts
        _tool_choice(options, tools.specs() if tools is not None else (), first=True)
    for iteration in range(max_iterations + 1):
        # A run interrupted before its first model call must not reach the provider at all.
        await anyio.lowlevel.checkpoint_if_cancelled()
        if max_turns > 0 and session.turns >= max_turns:
            if not await _confirm_turns(session, policy, ids, max_turns, run.facts):
                return "turn_limit"
        session.turns += 1
        state.iterations = iteration
        await session.emit(TurnStarted(**ids, turn=session.turns, iteration=iteration))
        specs, choice = _tool_choice(options, tools.specs() if tools is not None else (), first=iteration == 0)
        request = ProviderRequest(
            model=options.model or session.model_override or agent.model or provider.model,
            messages=_window(session, options),
            tools=specs,
            max_tokens=options.max_tokens,
            temperature=options.temperature,
            top_p=options.top_p,
            stop=options.stop,
            stream=options.stream,
            output_format=options.output_format,
            tool_choice=choice,
            parallel_tool_calls=options.parallel_tool_calls if specs else None,
        )
        calls, finish = await _model_call(session, provider, request, state, ids, run.facts)
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


def _window(session: RunSession, options: PromptOptions) -> tuple[Message, ...]:
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
    parts = tuple(TextPart(file_text(part)) if isinstance(part, FilePart) else part for part in message.parts)
    texts = [p.text for p in parts if isinstance(p, TextPart)]
    if len(texts) == len(parts):
        return msgspec.structs.replace(message, content="\n\n".join(texts), parts=())
    return msgspec.structs.replace(message, parts=parts)


async def _model_call(
    session: RunSession, provider: Provider, request: ProviderRequest, state: RunState, ids: Ids, facts: RunFacts
) -> tuple[list[ToolCall], str | None]:
    """One model call, told to the observers as it begins and ends (with its usage, finish
    reason or error type); the upstream request carries the trace context they chose."""
    observers = session.host.observers
    call = ModelCall(provider=provider.name, model=request.model, traceparent=facts.traceparent, messages=request.messages, output=state.partial_parts)
    observers.model_call_started(facts, call)
    if call.traceparent is not None:
        request = msgspec.structs.replace(request, traceparent=call.traceparent)
    before = state.usage
    try:
        calls, finish = await _stream(session, provider, request, state, ids, facts)
    except BaseException as exc:
        code = exc.code if isinstance(exc, ProviderError | KernelError) else "interrupted" if isinstance(exc, anyio.get_cancelled_exc_class()) else type(exc).__name__
        call.end(usage=_spent(before, state.usage), finish_reason=None, error_type=code)
        observers.model_call_ended(facts, call)
        if isinstance(exc, ProviderError):
            observers.provider_error(provider.name, exc.code)
        raise
    call.end(usage=_spent(before, state.usage), finish_reason=finish, error_type=None)
    observers.model_call_ended(facts, call)
    return calls, finish


def _spent(before: Usage, after: Usage) -> Usage:
    return Usage(input_tokens=after.input_tokens - before.input_tokens, output_tokens=after.output_tokens - before.output_tokens)


async def _stream(
    session: RunSession, provider: Provider, request: ProviderRequest, state: RunState, ids: Ids, facts: RunFacts
) -> tuple[list[ToolCall], str | None]:
    fragments: dict[int, dict[str, str]] = {}
    finish: str | None = None
    async with aclosing(provider.stream(request)) as chunks:
        async for chunk in chunks:
            if isinstance(chunk, TextChunk):
                if chunk.text:
                    if facts.first_delta is None:
                        session.host.observers.first_delta(facts)
                    state.partial_parts.append(chunk.text)
                    await session.emit(TextDelta(**ids, text=chunk.text))
            elif isinstance(chunk, ReasoningChunk):
                if chunk.text:
                    if facts.first_delta is None:
                        session.host.observers.first_delta(facts)
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
            elif isinstance(chunk, ResponseStarted):
                await session.emit(ModelResponding(**ids, turn=session.turns))
    calls = [
        ToolCall(id=slot["id"] or f"call_{ids['run_id']}_{index}", name=slot["name"], arguments=slot["arguments"] or "{}")
        for index, slot in sorted(fragments.items())
        if slot["name"]
    ]
    return calls, finish


async def _confirm_turns(session: RunSession, policy: ApprovalPolicy, ids: Ids, max_turns: int, facts: RunFacts) -> bool:
    """Whether the run may go past the turn limit: the policy decides, or the client."""
    decision = policy.at_turn_limit()
    if decision == "ask":
        reached = TurnLimitReached(
            **ids, current_turns=session.turns, max_turns=max_turns, reason=f"the session reached its limit of {max_turns} model turns"
        )
        timeout_s = session.host.settings.session.turn_confirmation_timeout_s
        session.host.observers.question_asked(facts, "turn_limit")
        answer = await session.machine.ask("turn_limit", None, timeout_s, lambda: session.emit(reached))
        go_on = answer.yes
        session.host.observers.question_answered(facts, "turn_limit", "timed_out" if answer.timed_out else "approved" if go_on else "rejected")
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


def _tool_choice(options: PromptOptions, specs: tuple[ToolSpec, ...], *, first: bool) -> tuple[tuple[ToolSpec, ...], ToolChoice | None]:
    """The tools of one model call and how it must use them.

    The request's choice binds the run's first call only; later calls are free (``auto``),
    or the model could never answer after the forced call's result. ``none`` offers no tool
    at all, so no later call exists. ``required`` from a client that brought tools of its
    own means one of those (it cannot see the agent's; a call of one would be run here and
    answered, and the client would get no call at all): that call offers only the client's.
    A choice the offered tools cannot meet is refused before any model call, as the
    upstream would refuse it.
    """
    choice = options.tool_choice
    if choice is None or choice.mode == "auto" or not first:
        return specs, None
    if choice.mode == "none":
        return (), None
    if choice.mode == "required" and options.client_tools:
        own = {tool.name for tool in options.client_tools}
        specs = tuple(spec for spec in specs if spec.name in own)
    if not specs:
        raise KernelError("invalid_request", f"tool_choice {choice.mode!r} needs tools, and the run offers none")
    if choice.mode == "tool" and choice.name not in {spec.name for spec in specs}:
        raise KernelError("invalid_request", f"tool_choice names the tool {choice.name!r}, which the run does not offer")
    return specs, choice
