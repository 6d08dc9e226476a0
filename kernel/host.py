"""What a session and its runs need from their surroundings, as protocols.

A :class:`~kernel.session.Session` used to hold the whole :class:`~kernel.kernel.Kernel`
and reach for seven of its members; the kernel, the session, the run loop and the tool
runner imported each other's types in a circle. These protocols say exactly what each side
uses, so the modules import only this one (types only), and a session or a run can be
driven by a small fake host in a test (tests/kernel/test_host.py).

* :class:`SessionHost` — what a session, its runs and its tool calls ask of the kernel.
* :class:`ToolScope` — what the kernel reads of a session to find and call its tools.
* :class:`RunSession` — what a run (``run.py``, ``toolcalls.py``) uses of its session.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .model import Event, FileAccess, Message, ToolSource, Usage
    from .observe import Observers
    from .provider import Provider
    from .settings import AgentSettings, Settings
    from .state import SessionMachine
    from .store import Store
    from .tools import Tool, ToolExecution, ToolProgressSink, ToolQuestion


class ToolScope(Protocol):
    """The session a tool is looked up for and runs in (its id, agent, files, own sources)."""

    @property
    def id(self) -> str: ...

    @property
    def agent(self) -> AgentSettings: ...

    @property
    def files(self) -> FileAccess | None: ...

    @property
    def tool_sources(self) -> tuple[ToolSource, ...]: ...


class SessionHost(Protocol):
    """What sessions, runs and tool calls need of the kernel — and nothing else."""

    @property
    def settings(self) -> Settings: ...

    @property
    def store(self) -> Store: ...

    @property
    def observers(self) -> Observers:
        """Telemetry: told the facts of every run (kernel/observe.py)."""
        ...

    @property
    def clustered(self) -> bool:
        """Other instances may take sessions over: a session records how far its seqs went."""
        ...

    def provider_for(self, agent: AgentSettings | None = None) -> Provider: ...

    def tools_for(self, agent: AgentSettings, session: ToolScope | None = None) -> dict[str, Tool]: ...

    def agent_model(self, agent: AgentSettings) -> str: ...

    async def invoke_tool(
        self, tool: Tool, arguments: dict[str, Any], session: ToolScope | None, *, call_id: str | None = None,
        progress: ToolProgressSink | None = None, ask: ToolQuestion | None = None,
    ) -> ToolExecution: ...


class RunSession(ToolScope, Protocol):
    """What a run reads and changes of its session (the actor runs one run at a time)."""

    host: SessionHost
    context: list[Message]
    turns: int
    usage: Usage
    model_override: str | None
    approval_timeout_s: float | None
    remembered: dict[str, bool]
    machine: SessionMachine

    @property
    def turn_limit(self) -> int: ...

    async def emit(self, event: Event) -> Event: ...

    async def persist(self, messages: list[Message]) -> None: ...

    async def replace_history(self, messages: list[Message]) -> None: ...


def seq_key(session_id: str) -> str:
    """The store's record of a clustered session's last seq, kept as runs are persisted, so
    an instance that takes it over never reuses a seq even if the cluster lost its stream."""
    return f"seq:{session_id}"
