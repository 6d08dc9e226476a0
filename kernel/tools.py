"""Tools: what a tool declares, the context it runs in, and per-run limits.

Limits are by category x access (query/update), the Packet dialect's model,
kept in the kernel so that every transport gets them. A direct ``execute_tool``
from a client is exempt.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio
import msgspec

from .model import FileAccess, KernelError, ToolInfo, ToolOutcome
from .provider import ToolSpec

if TYPE_CHECKING:
    from .store import Store

Access = Literal["query", "update"]

log = logging.getLogger("gateway.kernel")


class ToolFailure(Exception):
    """Raised by a tool for an expected failure; the model sees the message as the result."""


#: How a tool reports progress: a piece of text to show (a remote agent's answer so far).
ToolProgressSink = Callable[[str], Awaitable[None]]
#: How a tool asks the user: the question -> (approved, the user's reply if any).
ToolQuestion = Callable[[str], Awaitable[tuple[bool, str | None]]]


class ToolContext(msgspec.Struct, kw_only=True):
    session_id: str
    agent_id: str
    workspace: Path
    files: FileAccess
    store: Store | None = None
    # The model's id of the call being run (None for a client's direct ``execute_tool``), so
    # a tool that shows progress elsewhere (ACP's editor terminal) can point at its call.
    call_id: str | None = None
    # Within a run (None for a direct ``execute_tool``): report progress as a ``tool_progress``
    # event, and ask the user a question as a ``tool_approval_requested`` on this call —
    # answered (approved, the user's reason as their reply) or declined like any approval.
    progress: ToolProgressSink | None = None
    ask: ToolQuestion | None = None


ToolHandler = Callable[[dict[str, Any], ToolContext], Awaitable[str]]


class Tool(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    description: str
    parameters: dict[str, Any]
    handler: ToolHandler
    category: str = "general"
    access: Access = "query"
    requires_approval: bool = False

    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)

    def info(self) -> ToolInfo:
        return ToolInfo(
            name=self.name,
            description=self.description,
            parameters=self.parameters,
            category=self.category,
            access=self.access,
            requires_approval=self.requires_approval,
        )


class ToolLimiter:
    """Counts model-initiated calls per (category, access) within one run."""

    def __init__(self, limits: dict[str, int]) -> None:
        self._limits = limits
        self._used: dict[str, int] = {}

    def admit(self, tool: Tool) -> str | None:
        """Count the call, or return why it is rejected."""
        key = f"{tool.category}_{tool.access}_max"
        limit = self._limits.get(key)
        used = self._used.get(key, 0)
        if limit is not None and used >= limit:
            return f"{tool.category} {tool.access} limit reached ({limit} per run)"
        self._used[key] = used + 1
        return None


class ToolExecution(msgspec.Struct, frozen=True, kw_only=True):
    """What running (or refusing) a tool produced: the model's text, and how it ended."""

    result: str
    outcome: ToolOutcome = "ok"
    error: str | None = None  # the bare reason of a failure or refusal

    @classmethod
    def failed(cls, outcome: ToolOutcome, error: str, prefix: str = "tool error: ") -> ToolExecution:
        return cls(result=prefix + error, outcome=outcome, error=error)


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
