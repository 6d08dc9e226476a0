"""Tools: what a tool declares, the context it runs in, and per-run limits.

Limits are by category x access (query/update), the Packet dialect's model,
kept in the kernel so that every transport gets them. A direct ``execute_tool``
from a client is exempt.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from .model import FileAccess, ToolInfo
from .provider import ToolSpec

if TYPE_CHECKING:
    from .store import Store

Access = Literal["query", "update"]


class ToolFailure(Exception):
    """Raised by a tool for an expected failure; the model sees the message as the result."""


class ToolContext(msgspec.Struct, kw_only=True):
    session_id: str
    agent_id: str
    workspace: Path
    files: FileAccess
    store: Store | None = None
    # The model's id of the call being run (None for a client's direct ``execute_tool``), so
    # a tool that shows progress elsewhere (ACP's editor terminal) can point at its call.
    call_id: str | None = None


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
