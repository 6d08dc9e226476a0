"""Running the model's tool calls: limits, approval, execution, results.

Each call gets a ``tool_call`` event first. Then, in order: an unknown tool or a
call over its per-run limit is rejected back to the model; a call that needs
approval waits for the client (a timeout counts as a rejection); the tool runs
under a timeout. The model always gets a tool message back, so the conversation
stays well-formed whatever happens.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from .model import KernelError, Message, ToolApprovalRequested, ToolCall, ToolCallStarted, ToolResult
from .provider import ToolSpec
from .tools import Tool, ToolFailure, ToolLimiter

if TYPE_CHECKING:
    from .run import RunState
    from .session import ActiveRun, Session

log = logging.getLogger("gateway.kernel")

_decode_args = msgspec.json.Decoder(dict[str, Any]).decode


class ToolRunner:
    def __init__(self, session: Session, run: ActiveRun, state: RunState, ids: dict[str, str | None]) -> None:
        self.session = session
        self.active = run
        self.state = state
        self.ids = ids
        options = run.job.options
        self.tools = session.kernel.tools_for(session.agent) if options.use_tools else {}
        # The client's own tools shadow the agent's tools of the same name.
        self.client_tools = {t.name: t for t in options.client_tools}
        self.limiter = ToolLimiter(session.kernel.settings.tools.limits)

    def specs(self) -> tuple[ToolSpec, ...]:
        agent = [tool.spec() for name, tool in self.tools.items() if name not in self.client_tools]
        client = [ToolSpec(name=t.name, description=t.description, parameters=t.parameters) for t in self.client_tools.values()]
        return (*agent, *client)

    def is_client_tool(self, name: str) -> bool:
        return name in self.client_tools

    def announce_client_call(self, call: ToolCall) -> None:
        """A call the client will run: announced like any call, never executed here."""
        self.state.tool_calls += 1
        tool = self.client_tools[call.name]
        self.session.emit(
            ToolCallStarted(**self.ids, call_id=call.id, name=call.name, arguments=call.arguments, description=tool.description, category="client")
        )

    async def run(self, call: ToolCall) -> Message:
        tool = self.tools.get(call.name)
        self.state.tool_calls += 1
        self.session.emit(
            ToolCallStarted(
                **self.ids,
                call_id=call.id,
                name=call.name,
                arguments=call.arguments,
                description=tool.description if tool else "",
                category=tool.category if tool else "general",
                access=tool.access if tool else "query",
            )
        )
        result, is_error, rejected = await self._decide_and_execute(tool, call)
        limit = self.session.kernel.settings.tools.result_max_chars
        if len(result) > limit:
            result = result[:limit] + f"\n[truncated: {len(result) - limit} more characters]"
        if rejected:
            self.state.rejected.append((call.name, result))
        self.session.emit(
            ToolResult(**self.ids, call_id=call.id, name=call.name, result=result, is_error=is_error, rejected=rejected)
        )
        return Message(role="tool", tool_call_id=call.id, name=call.name, content=result)

    async def _decide_and_execute(self, tool: Tool | None, call: ToolCall) -> tuple[str, bool, bool]:
        if tool is None:
            return f"tool call rejected: unknown tool {call.name!r}", True, True
        reason = self.limiter.admit(tool)
        if reason is not None:
            return f"tool call rejected: {reason}", True, True
        try:
            arguments = _decode_args(call.arguments or "{}")
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return f"invalid arguments for {call.name}: expected a JSON object ({exc})", True, False
        if self._needs_approval(tool):
            approved, why = await self._ask(tool, call)
            if not approved:
                return f"tool call rejected: the user declined to run {call.name}" + (f" ({why})" if why else ""), True, True
        return await self.session.kernel.invoke_tool(tool, arguments, self.session)

    def _needs_approval(self, tool: Tool) -> bool:
        if tool.name in self.session.tool_policy:
            return True  # _ask answers from the remembered decision (allow or reject) without asking
        ask = self.active.job.options.ask_before_tool_execution
        if ask is None:
            ask = self.session.agent.ask_before_tool_execution
        return ask or tool.requires_approval

    async def _ask(self, tool: Tool, call: ToolCall) -> tuple[bool, str | None]:
        from .session import Question

        remembered = self.session.tool_policy.get(tool.name)
        if remembered is not None:
            return remembered, None
        timeout = self.session.approval_timeout_s
        if timeout is None:
            timeout = self.session.kernel.settings.session.approval_timeout_s
        question = Question(call.id)
        self.active.question = question
        self.session.state = "awaiting_tool_approval"
        self.session.emit(
            ToolApprovalRequested(
                **self.ids,
                call_id=call.id,
                name=call.name,
                arguments=call.arguments,
                description=tool.description,
                timeout_s=timeout,
            )
        )
        with anyio.move_on_after(timeout):
            await question.answered.wait()
        self.active.question = None
        self.session.state = "running"
        if not question.answered.is_set():
            return False, "approval timed out"
        if question.remember:
            self.session.tool_policy[tool.name] = question.yes
        return question.yes, question.reason


async def invoke(tool: Tool, arguments: dict[str, Any], context: Any, timeout_s: float) -> tuple[str, bool, bool]:
    """Run a tool's handler; expected failures become an error result, never an exception."""
    try:
        with anyio.fail_after(timeout_s):
            return str(await tool.handler(arguments, context)), False, False
    except ToolFailure as exc:
        return f"tool error: {exc}", True, False
    except KernelError as exc:
        return f"tool error: {exc.message}", True, False
    except TimeoutError:
        return f"tool error: {tool.name} timed out after {timeout_s:g}s", True, False
    except Exception as exc:
        log.exception("tool %s raised", tool.name)
        return f"tool error: {type(exc).__name__}: {exc}", True, False

