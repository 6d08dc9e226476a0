"""Running the model's tool calls: limits, approval, execution, outcomes.

Each call gets a ``tool_call`` event first, saying whether a question follows. Then, in
order: an unknown tool or a call over its per-run limit is refused; a call that needs
approval is decided by what the client asked to remember, then by the run's
:class:`~kernel.model.ApprovalPolicy` (which may ask the client, and a question not
answered in time is a refusal); the tool runs under a timeout. The model always gets a
tool message back, so the conversation stays well-formed whatever happens; how the call
ended travels as data (:data:`~kernel.model.ToolOutcome`) on the event and the message.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from .jobs import ActiveRun, Ids, RunState
from .model import (
    REFUSED_OUTCOMES,
    ApprovalPolicy,
    Message,
    ToolApprovalRequested,
    ToolCall,
    ToolCallStarted,
    ToolProgress,
    ToolResult,
)
from .provider import ToolSpec
from .tools import Tool, ToolExecution, ToolLimiter

if TYPE_CHECKING:
    from .host import RunSession

_decode_args = msgspec.json.Decoder(dict[str, Any]).decode

Decision = Literal["run", "ask", "reject"]
#: Outcomes of calls that never ran (the others are told as the tool runs).
NOT_RUN = REFUSED_OUTCOMES | {"invalid_arguments"}


def decide(tool: Tool, *, remembered: bool | None, ask_before: bool, policy: ApprovalPolicy) -> Decision:
    """Whether a call runs, waits for the client, or is refused — decided once, here.

    ``ask_before``: the request (or else the agent) asks before every tool call.
    """
    if remembered is not None:
        return "run" if remembered else "reject"
    if not (ask_before or tool.requires_approval):
        return "run"
    verdict = policy.decides(tool.name, tool.category)
    return "run" if verdict == "approve" else verdict


class ToolRunner:
    def __init__(self, session: RunSession, run: ActiveRun, state: RunState, ids: Ids, policy: ApprovalPolicy) -> None:
        self.session = session
        self.active = run
        self.state = state
        self.ids = ids
        self.policy = policy
        options = run.job.options
        self.tools = session.host.tools_for(session.agent, session) if options.use_tools else {}
        # The client's own tools shadow the agent's tools of the same name.
        self.client_tools = {t.name: t for t in options.client_tools}
        self.limiter = ToolLimiter(session.host.settings.tools.limits)
        ask = options.ask_before_tool_execution
        self.ask_before = session.agent.ask_before_tool_execution if ask is None else ask

    def specs(self) -> tuple[ToolSpec, ...]:
        """The tools of the next model call, asked for again at each one: a tool source whose
        list changed during the run (an MCP server's ``listChanged``) is seen at once."""
        if self.active.job.options.use_tools:
            self.tools = self.session.host.tools_for(self.session.agent, self.session)
        agent = [tool.spec() for name, tool in self.tools.items() if name not in self.client_tools]
        client = [ToolSpec(name=t.name, description=t.description, parameters=t.parameters) for t in self.client_tools.values()]
        return (*agent, *client)

    def is_client_tool(self, name: str) -> bool:
        return name in self.client_tools

    async def announce_client_call(self, call: ToolCall) -> None:
        """A call the client will run: announced like any call, never executed here."""
        self.state.tool_calls += 1
        tool = self.client_tools[call.name]
        await self.session.emit(
            ToolCallStarted(**self.ids, call_id=call.id, name=call.name, arguments=call.arguments, description=tool.description, category="client")
        )

    async def run(self, call: ToolCall) -> Message:
        tool = self.tools.get(call.name)
        self.state.tool_calls += 1
        decision, settled, arguments = self._decide(tool, call)
        await self.session.emit(
            ToolCallStarted(
                **self.ids,
                call_id=call.id,
                name=call.name,
                arguments=call.arguments,
                description=tool.description if tool else "",
                category=tool.category if tool else "general",
                access=tool.access if tool else "query",
                needs_approval=decision == "ask",
                refused=settled is not None,
            )
        )
        if settled is not None:
            done = settled
        else:
            assert tool is not None
            done = await self._approve_and_run(tool, call, decision, arguments)
        limit = self.session.host.settings.tools.result_max_chars
        result = done.result
        if len(result) > limit:
            result = result[:limit] + f"\n[truncated: {len(result) - limit} more characters]"
        if done.outcome in REFUSED_OUTCOMES:
            self.state.rejected.append((call.name, result))
        if done.outcome in NOT_RUN:  # counted with its outcome, no time spent
            observers = self.session.host.observers
            observers.tool_call_started(self.active.facts, call.name, call.id)
            observers.tool_call_ended(self.active.facts, call.name, call.id, done.outcome, 0.0)
        await self.session.emit(
            ToolResult(
                **self.ids,
                call_id=call.id,
                name=call.name,
                result=result,
                outcome=done.outcome,
                error=done.error,
                is_error=done.outcome != "ok",
                rejected=done.outcome in REFUSED_OUTCOMES,
            )
        )
        return Message(role="tool", tool_call_id=call.id, name=call.name, content=result, outcome=done.outcome)

    def _decide(self, tool: Tool | None, call: ToolCall) -> tuple[Decision, ToolExecution | None, dict[str, Any]]:
        """Everything known before the ``tool_call`` event: whether the call will ask, and
        its outcome already when it will not run (unknown, over its limit, bad arguments,
        or refused by a remembered answer or the policy)."""
        refused = "tool call rejected: "
        if tool is None:
            return "reject", ToolExecution.failed("rejected", f"unknown tool {call.name!r}", refused), {}
        reason = self.limiter.admit(tool)
        if reason is not None:
            return "reject", ToolExecution.failed("limit_reached", reason, refused), {}
        try:
            arguments = _decode_args(call.arguments or "{}")
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
            error = f"expected a JSON object ({exc})"
            return "reject", ToolExecution(result=f"invalid arguments for {call.name}: {error}", outcome="invalid_arguments", error=error), {}
        remembered = self.session.remembered.get(tool.name)
        decision = decide(tool, remembered=remembered, ask_before=self.ask_before, policy=self.policy)
        if decision == "reject":  # a remembered "no" gives no reason; the policy's "no" gives its own
            why = None if remembered is False else self.policy.reason
            return decision, ToolExecution.failed("rejected", _declined(call.name, why), refused), arguments
        return decision, None, arguments

    async def _approve_and_run(self, tool: Tool, call: ToolCall, decision: Decision, arguments: dict[str, Any]) -> ToolExecution:
        if decision == "ask":
            approved, why = await self._ask(tool, call)
            if not approved:
                return ToolExecution.failed("rejected", _declined(call.name, why), "tool call rejected: ")
        observers, facts = self.session.host.observers, self.active.facts
        observers.tool_call_started(facts, tool.name, call.id)
        started, outcome = time.perf_counter(), "interrupted"
        try:
            done = await self.session.host.invoke_tool(
                tool, arguments, self.session, call_id=call.id, progress=self._progress_of(call), ask=self._question_of(tool, call)
            )
            outcome = done.outcome
        finally:
            observers.tool_call_ended(facts, tool.name, call.id, outcome, time.perf_counter() - started)
        return done

    def _progress_of(self, call: ToolCall) -> Callable[[str], Awaitable[None]]:
        async def progress(text: str) -> None:
            if text:
                await self.session.emit(ToolProgress(**self.ids, call_id=call.id, name=call.name, text=text))

        return progress

    def _question_of(self, tool: Tool, call: ToolCall) -> Callable[[str], Awaitable[tuple[bool, str | None]]]:
        """A running tool's own question (a remote agent asking for input): put to the user
        as an approval of this call, its description the question — unless the run's policy
        answers this tool's calls itself (then it answers the question the same way)."""

        async def ask(question: str) -> tuple[bool, str | None]:
            decided = self.policy.decides(tool.name, tool.category)
            if decided != "ask":
                return decided == "approve", self.policy.reason if decided == "reject" else None
            return await self._ask(tool, call, question)

        return ask

    async def _ask(self, tool: Tool, call: ToolCall, question: str | None = None) -> tuple[bool, str | None]:
        session = self.session
        timeout = session.approval_timeout_s
        if timeout is None:
            timeout = session.host.settings.session.approval_timeout_s
        asked = ToolApprovalRequested(
            **self.ids, call_id=call.id, name=call.name, arguments=call.arguments, description=question or tool.description, timeout_s=timeout
        )
        observers = session.host.observers
        observers.question_asked(self.active.facts, "tool_approval")
        answer = await session.machine.ask("tool_approval", call.id, timeout, lambda: session.emit(asked))
        observers.question_answered(self.active.facts, "tool_approval", "timed_out" if answer.timed_out else "approved" if answer.yes else "rejected")
        if answer.timed_out:
            return False, "approval timed out"
        if answer.remember and question is None:  # "always" is about running the tool, not its questions
            session.remembered[tool.name] = answer.yes
        return answer.yes, answer.reason


def _declined(name: str, why: str | None) -> str:
    return f"the user declined to run {name}" + (f" ({why})" if why else "")
