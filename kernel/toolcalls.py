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

import logging
from typing import TYPE_CHECKING, Any, Literal

import anyio
import msgspec

from .jobs import ActiveRun
from .model import (
    REFUSED_OUTCOMES,
    ApprovalPolicy,
    KernelError,
    Message,
    ToolApprovalRequested,
    ToolCall,
    ToolCallStarted,
    ToolOutcome,
    ToolResult,
)
from .provider import ToolSpec
from .tools import Tool, ToolContext, ToolFailure, ToolLimiter

if TYPE_CHECKING:
    from .run import Ids, RunState
    from .session import Session

log = logging.getLogger("gateway.kernel")

_decode_args = msgspec.json.Decoder(dict[str, Any]).decode

Decision = Literal["run", "ask", "reject"]


class ToolExecution(msgspec.Struct, frozen=True, kw_only=True):
    """What running (or refusing) a tool produced: the model's text, and how it ended."""

    result: str
    outcome: ToolOutcome = "ok"
    error: str | None = None  # the bare reason of a failure or refusal

    @classmethod
    def failed(cls, outcome: ToolOutcome, error: str, prefix: str = "tool error: ") -> ToolExecution:
        return cls(result=prefix + error, outcome=outcome, error=error)


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
    def __init__(self, session: Session, run: ActiveRun, state: RunState, ids: Ids, policy: ApprovalPolicy) -> None:
        self.session = session
        self.active = run
        self.state = state
        self.ids = ids
        self.policy = policy
        options = run.job.options
        self.tools = session.kernel.tools_for(session.agent, session) if options.use_tools else {}
        # The client's own tools shadow the agent's tools of the same name.
        self.client_tools = {t.name: t for t in options.client_tools}
        self.limiter = ToolLimiter(session.kernel.settings.tools.limits)
        ask = options.ask_before_tool_execution
        self.ask_before = session.agent.ask_before_tool_execution if ask is None else ask

    def specs(self) -> tuple[ToolSpec, ...]:
        """The tools of the next model call, asked for again at each one: a tool source whose
        list changed during the run (an MCP server's ``listChanged``) is seen at once."""
        if self.active.job.options.use_tools:
            self.tools = self.session.kernel.tools_for(self.session.agent, self.session)
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
        limit = self.session.kernel.settings.tools.result_max_chars
        result = done.result
        if len(result) > limit:
            result = result[:limit] + f"\n[truncated: {len(result) - limit} more characters]"
        if done.outcome in REFUSED_OUTCOMES:
            self.state.rejected.append((call.name, result))
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
        return await self.session.kernel.invoke_tool(tool, arguments, self.session, call_id=call.id)

    async def _ask(self, tool: Tool, call: ToolCall) -> tuple[bool, str | None]:
        session = self.session
        timeout = session.approval_timeout_s
        if timeout is None:
            timeout = session.kernel.settings.session.approval_timeout_s
        asked = ToolApprovalRequested(
            **self.ids, call_id=call.id, name=call.name, arguments=call.arguments, description=tool.description, timeout_s=timeout
        )
        answer = await session.machine.ask("tool_approval", call.id, timeout, lambda: session.emit(asked))
        if answer.timed_out:
            return False, "approval timed out"
        if answer.remember:
            session.remembered[tool.name] = answer.yes
        return answer.yes, answer.reason


def _declined(name: str, why: str | None) -> str:
    return f"the user declined to run {name}" + (f" ({why})" if why else "")


async def invoke(tool: Tool, arguments: dict[str, Any], context: ToolContext, timeout_s: float) -> ToolExecution:
    """Run a tool's handler; expected failures become an outcome, never an exception."""
    try:
        with anyio.fail_after(timeout_s):
            return ToolExecution(result=str(await tool.handler(arguments, context)))
    except ToolFailure as exc:
        return ToolExecution.failed("error", str(exc))
    except KernelError as exc:
        return ToolExecution.failed("error", exc.message)
    except TimeoutError:
        return ToolExecution.failed("timed_out", f"{tool.name} timed out after {timeout_s:g}s")
    except Exception as exc:
        log.exception("tool %s raised", tool.name)
        return ToolExecution.failed("error", f"{type(exc).__name__}: {exc}")
