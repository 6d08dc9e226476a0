"""Authorization: what a caller may do, on which sessions, within which limits.

Transports authenticate (credentials -> :class:`~kernel.model.Principal`); the kernel
authorizes, here, for every command (``Kernel.execute`` and the cluster's
``execute_forwarded``) and every subscription — no transport checks ownership itself.

* **Scopes**: one table, command type -> the scope it needs (:data:`SCOPE_OF`).
* **Ownership**: a session belongs to the principal that created it. A command on another
  principal's session fails exactly as for a missing session (``not_found``, the same
  message), so a key learns nothing of others' sessions; lists show one's own only. The
  admin sees and acts on every session.
* **Agents**: a key restricted to some agents can neither use nor list the others.
* **Limits** (per key: runs per minute, concurrent runs, tokens per day): checked before a
  run is accepted, so a refused run never reaches the upstream model.

The principal of the command being carried out is kept in a context variable while its
handler runs, so that a session the handler creates records its owner without every
handler taking the caller as an argument.
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import anyio
import msgspec

from . import model as m
from .keys import audit, utc_day
from .observe import ModelCall, Observer, RunFacts, RunOutcome

if TYPE_CHECKING:
    from .kernel import Kernel

log = logging.getLogger("gateway.kernel")

#: The scope each command needs. ``OpenSession`` of a session that does not exist yet
#: creates one, which needs ``prompt`` (:func:`needed_scope`).
SCOPE_OF: dict[type, m.Scope] = {
    m.Prompt: "prompt",
    m.Interrupt: "prompt",
    m.Regenerate: "prompt",
    m.Continue: "prompt",
    m.ClearContext: "prompt",
    m.ConfigureSession: "prompt",
    m.DeleteSession: "prompt",
    m.SaveHistory: "prompt",
    m.ClearHistory: "prompt",
    m.RunCommand: "prompt",
    m.ResolveToolApproval: "approve",
    m.ResolveTurnLimit: "approve",
    m.ListAgents: "read",
    m.ListCommands: "read",
    m.ListTools: "read",
    m.ListModels: "read",
    m.ListSessions: "read",
    m.OpenSession: "read",
    m.GetSession: "read",
    m.GetHistory: "read",
    m.CloseSession: "read",
    m.GetStatus: "read",
    # A direct tool call skips the run's approval and limits: the operator's business.
    m.ExecuteTool: "admin",
    m.GetSettings: "admin",
    m.UpdateSettings: "admin",
}

#: Commands that create their session when it does not exist; for a key every other command
#: needs it to exist (reading a session nobody has is `not_found`, never an empty new one).
CREATING = (m.Prompt, m.OpenSession, m.RunCommand, m.SaveHistory)

_acting: contextvars.ContextVar[m.Caller] = contextvars.ContextVar("gateway_caller", default=m.LOCAL_CALLER)


@contextmanager
def acting_as(caller: m.Caller) -> Iterator[None]:
    token = _acting.set(caller)
    try:
        yield
    finally:
        _acting.reset(token)


def acting_caller() -> m.Caller:
    """Who the command being carried out is for: what a cluster forwards beside it."""
    return _acting.get()


#: The public name (``kernel.current_caller``): a cluster plugin serializes it with a command.
current_caller = acting_caller


def acting_principal() -> m.Principal:
    """The owner of a session the command being carried out creates."""
    return _acting.get().principal


def missing(session_id: str | None) -> m.KernelError:
    """The one answer for a session that does not exist *and* for one of another principal."""
    return m.KernelError("not_found", f"Session not found: {session_id}")


def needed_scope(command: m.Command, exists: bool) -> m.Scope:
    if isinstance(command, m.OpenSession) and not exists:
        return "prompt"
    return SCOPE_OF.get(type(command), "admin")


def authorize(principal: m.Principal, command: m.Command, owner: str | None, agent_id: str | None) -> None:
    """Raise unless ``principal`` may carry out ``command``. ``owner``: the target session's
    owner (None: no such session, or the command has none); ``agent_id``: the agent the
    command would use (the session's, or the one it names). Pure: the property tests walk
    every command x scope x own/other session through it."""
    if owner is not None and not visible(principal, owner):
        raise missing(command.session_id)
    if owner is None and command.session_id is not None and not isinstance(command, CREATING) and not principal.is_admin:
        raise missing(command.session_id)
    scope = needed_scope(command, owner is not None)
    if not principal.can(scope):
        raise m.KernelError("forbidden", f"this key lacks the {scope!r} scope needed for {type(command).__name__}")
    if agent_id is not None and not principal.may_use(agent_id):
        raise m.KernelError("forbidden", f"this key may not use the agent {agent_id!r}")


def visible(principal: m.Principal, owner: str) -> bool:
    return principal.is_admin or owner == principal.name


def filter_reply(principal: m.Principal, reply: m.Reply) -> m.Reply:
    """Lists show a key its own sessions and the agents it may use (the admin: everything)."""
    if principal.is_admin:
        return reply
    if isinstance(reply, m.SessionList):
        kept = tuple(s for s in reply.sessions if s.owner == principal.name and principal.may_use(s.agent_id))
        return m.SessionList(request_id=reply.request_id, sessions=kept)
    if isinstance(reply, m.AgentList):
        return m.AgentList(request_id=reply.request_id, agents=tuple(a for a in reply.agents if principal.may_use(a.id)))
    return reply


@runtime_checkable
class RateWindows(Protocol):
    """Runs started per key in the last minute: in this process, or in Redis for a cluster
    (one window for all instances)."""

    async def hit(self, name: str, limit: int, window_s: float) -> float:
        """Count one run unless ``limit`` were started in the last ``window_s``: 0.0 when
        counted, else the seconds until one would be."""
        ...


class LocalWindows:
    """Exact sliding windows in memory, one per key name (names are bounded by the keys).
    ``clock``: seconds, monotonic (tests pass their own to see a window pass)."""

    def __init__(self, clock: Callable[[], float] = anyio.current_time) -> None:
        self._stamps: dict[str, deque[float]] = {}
        self.clock = clock

    async def hit(self, name: str, limit: int, window_s: float) -> float:
        now = self.clock()
        stamps = self._stamps.setdefault(name, deque())
        while stamps and stamps[0] <= now - window_s:
            stamps.popleft()
        if len(stamps) >= limit:
            return max(stamps[0] + window_s - now, 0.001)
        stamps.append(now)
        return 0.0


def _seconds_to_midnight_utc(now: float) -> float:
    return 86400.0 - (now % 86400.0)


class Access:
    """The kernel's authorization, bound to its sessions, store and keys."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        # A cluster that keeps windows in its shared store (Redis) has one window per key for
        # all instances; without one, this process counts alone.
        shared = kernel.cluster if isinstance(kernel.cluster, RateWindows) else None
        self.windows: RateWindows = shared if shared is not None else LocalWindows()
        self.meter = UsageMeter(self)
        # Tokens of ended runs not yet in the store, by key (counted by ``admit`` meanwhile).
        self.unrecorded: dict[str, int] = {}

    async def target(self, session_id: str) -> tuple[str, str] | None:
        """The owner and agent of a session (live here, else as stored); None if it does not exist."""
        live = self.kernel.sessions.get(session_id)
        if live is not None:
            return live.owner, live.agent.agent_id()
        record = await self.kernel.store.get_session(session_id)
        return (record.owner, record.agent_id) if record is not None else None

    def _named_agent(self, command: m.Command) -> str | None:
        named = getattr(command, "agent_id", None)
        if named is not None:
            return self.kernel.agent(named).agent_id()
        if isinstance(command, (m.Prompt, m.OpenSession)):  # a new session gets the default agent
            return self.kernel.agent(None).agent_id()
        return None

    async def check(self, caller: m.Caller, command: m.Command) -> None:
        """Ownership, scope and agents of one command (raises ``not_found`` / ``forbidden``)."""
        principal = caller.principal
        if principal.is_admin:
            return
        session_id = command.session_id
        found = await self.target(session_id) if session_id is not None else None
        owner, agent_id = found if found is not None else (None, None)
        try:
            authorize(principal, command, owner, agent_id if found is not None else self._named_agent(command))
        except m.KernelError as exc:
            audit.warning(
                "refused: key %s %s on %s via %s: %s", principal.name, type(command).__name__, session_id or "-", caller.transport or "-", exc.code
            )
            raise

    def scoped(self, principal: m.Principal, reply: m.Reply) -> m.Reply:
        """A reply as the principal may see it: lists filtered (:func:`filter_reply`), and the
        status's counts (live sessions, runs, followers) of its own sessions only."""
        if principal.is_admin:
            return reply
        if isinstance(reply, m.StatusReport):
            own = [s for s in self.kernel.sessions.values() if s.owner == principal.name]
            clients: dict[str, int] = {}
            for session in own:
                for client in session.hub.clients():
                    clients[client] = clients.get(client, 0) + 1
            return msgspec.structs.replace(
                reply, sessions=len(own), active_runs=sum(1 for s in own if s.active is not None), clients=clients
            )
        return filter_reply(principal, reply)

    async def check_follow(self, caller: m.Caller, session_id: str) -> None:
        """A subscription reads a session: ``read`` and ownership, as ``GetSession``."""
        await self.check(caller, m.GetSession(session_id=session_id))

    async def admit(self, caller: m.Caller, command: m.Command) -> None:
        """At the instance a command arrives at: a revoked key is refused, and a run is
        refused with ``rate_limited`` (``retry_after_s`` in the details) over a key's limits —
        before anything reaches the upstream model."""
        principal = caller.principal
        record = await self.kernel.keys.current(principal)
        if record is None or not isinstance(command, m.RUN_COMMANDS):
            return
        now = time.time()
        spent = record.tokens_on(utc_day(now)) + self.unrecorded.get(principal.name, 0)
        if record.tokens_per_day and spent >= record.tokens_per_day:
            self._refuse(caller, "tokens_per_day", record.tokens_per_day, _seconds_to_midnight_utc(now))
        if record.concurrent:
            target = self.kernel.sessions.get(command.session_id) if command.session_id else None
            running = sum(1 for s in self.kernel.sessions.values() if s.owner == principal.name and s.busy)
            if (target is None or not target.busy) and running >= record.concurrent:
                self._refuse(caller, "concurrent", record.concurrent, 1.0)
        if record.rpm:
            wait = await self.windows.hit(principal.name, record.rpm, 60.0)
            if wait > 0:
                self._refuse(caller, "rpm", record.rpm, wait)

    @staticmethod
    def _refuse(caller: m.Caller, limit: str, value: int, wait_s: float) -> None:
        audit.warning("refused: key %s over its %s limit (%d) via %s", caller.principal.name, limit, value, caller.transport or "-")
        raise m.KernelError(
            "rate_limited", f"this key is over its {limit} limit ({value})",
            details={"limit": limit, "retry_after_s": max(1, round(wait_s + 0.4999))},
        )

    async def ran(self, owner: str, usage: m.Usage) -> None:
        """A run of ``owner``'s session ended: one request and its tokens count towards the
        key's day (in the store, which every instance shares)."""
        tokens = usage.input_tokens + usage.output_tokens
        try:
            await self.kernel.keys.record_run(owner, usage)
        except m.KernelError as exc:  # the run's answer stands; only the count is lost
            log.warning("could not record the usage of key %s: %s", owner, exc.message)
        finally:
            left = self.unrecorded.get(owner, 0) - tokens
            if left > 0:
                self.unrecorded[owner] = left
            else:
                self.unrecorded.pop(owner, None)


class UsageMeter(Observer):
    """Counts each key's tokens from its runs' model calls. Observers are synchronous: the
    tokens are held in :attr:`Access.unrecorded` at once (so the next run of the key sees
    them) and written to the store by a task of the kernel."""

    def __init__(self, access: Access) -> None:
        self.access = access

    def model_call_ended(self, run: RunFacts, call: ModelCall) -> None:
        run.slots["keys"] = run.slots.get("keys", m.Usage()) + call.usage

    def run_ended(self, run: RunFacts, outcome: RunOutcome, error_code: str | None) -> None:
        kernel = self.access.kernel
        session = kernel.sessions.get(run.session_id)
        usage: m.Usage = run.slots.get("keys", m.Usage())
        if session is None or session.owner == m.ADMIN.name or kernel._task_group is None:
            return
        tokens = usage.input_tokens + usage.output_tokens
        self.access.unrecorded[session.owner] = self.access.unrecorded.get(session.owner, 0) + tokens
        kernel._task_group.start_soon(self.access.ran, session.owner, usage)
