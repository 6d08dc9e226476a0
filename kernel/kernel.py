"""The kernel facade: one ``execute(command) -> reply`` and one ``subscribe``.

Transports translate their wire into :mod:`kernel.model` commands, call
:meth:`Kernel.execute`, and render the reply plus the session's events. The kernel
owns the sessions (one actor task each, in its task group), the registries given
to it by the composition root, and the store.
"""

from __future__ import annotations

import logging
import secrets
import time
import weakref
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, overload

import anyio
import msgspec
from anyio.abc import TaskGroup

from . import model as m
from .access import Access, acting_as, acting_caller, acting_principal
from .attachments import admit_message, admit_parts
from .cluster import Cluster, RemoteSubscription
from .commands import CommandContext, SlashCommand
from .files import WorkspaceFiles
from .host import ToolScope
from .hub import Subscription
from .jobs import HistoryJob
from .keys import Keyring, KeyView
from .observe import ObserverFactory, Observers
from .overrides import SETTINGS_KEY, SettingsOverrides
from .provider import Provider
from .routing import ClusterRouting, draining_error
from .session import Session
from .settings import AgentSettings, Settings, mask_secrets, to_data
from .state import Answer
from .store import SessionRecord, SQLiteStore, Store
from .tools import Tool, ToolContext, ToolExecution, ToolProgressSink, ToolQuestion, invoke

if TYPE_CHECKING:
    from .follow import RunFollower

log = logging.getLogger("gateway.kernel")

ProviderFactory = Callable[[Settings], Provider]


#: How often a drain looks for sessions whose runs ended (to give their leases up).
DRAIN_POLL_S = 0.05
#: How long requests that follow a run get to write their end when the gateway stops (a
#: remote follower notices within the cluster's owner check, a second).
FOLLOWERS_GRACE_S = 2.0
FOLLOW_STOPPED = "This gateway instance stopped before the run's end reached it: retry, the conversation goes on elsewhere"
#: The longest a readiness check waits for the store or the cluster.
READY_CHECK_S = 2.0


def gateway_version() -> str:
    """The installed gateway package's version."""
    try:
        from importlib.metadata import version

        return version("gateway")
    except Exception:
        return "0.0.0"


class Kernel:
    def __init__(
        self,
        settings: Settings,
        *,
        providers: Mapping[str, ProviderFactory],
        tools: Iterable[Tool] = (),
        commands: Iterable[SlashCommand] = (),
        store: Store | None = None,
        shutdown_grace_s: float = 5.0,
        tool_sources: Iterable[m.ToolSource] = (),
        cluster: Cluster | None = None,
        observers: Iterable[ObserverFactory] = (),
    ) -> None:
        self.settings = settings
        self.version = gateway_version()
        self.provider_factories = dict(providers)
        self.tools: dict[str, Tool] = {t.name: t for t in tools}
        # Sources of tools for every session (configured MCP servers), asked at each model call.
        self.tool_sources: tuple[m.ToolSource, ...] = tuple(tool_sources)
        # Other gateway instances sharing the sessions (None: this process is the gateway).
        self.cluster = cluster
        self.commands: dict[str, SlashCommand] = {c.name: c for c in commands}
        self.store: Store = store if store is not None else SQLiteStore(settings.store.path)
        self.sessions: dict[str, Session] = {}
        self.started_at = time.time()
        self.shutdown_grace_s = shutdown_grace_s
        self._providers: dict[str, Provider] = {}
        self._retired_providers: list[Provider] = []
        self._task_group: TaskGroup | None = None
        self._session_lock = anyio.Lock()
        # Settings changed by clients, kept in the store (kernel/overrides.py).
        self._overrides = SettingsOverrides(self.store)
        # Draining (SIGTERM): new runs are refused, readiness is off, runs in flight go on.
        self.draining = False
        # Set when the drain is over and the gateway stops: commands still waiting on another
        # instance give up with a clear ``draining`` error instead of being cut mid-request.
        self.stopping = anyio.Event()
        # The runs requests follow here (kernel.RunFollower), their sessions' owners here or not,
        # and the followers here of sessions other instances own (a drain waits for their runs).
        self.run_followers: set[RunFollower] = set()
        self.remote_followers: weakref.WeakSet[RemoteSubscription] = weakref.WeakSet()
        # Telemetry (metrics, traces): told the facts of every run (kernel/observe.py).
        self.observers = Observers(o for o in (factory(self) for factory in observers) if o is not None)
        # Cluster routing (kernel/routing.py): forwarding, takeover, remote subscriptions.
        self.routing = ClusterRouting(self, cluster) if cluster is not None else None
        # Who may do what (kernel/keys.py, kernel/access.py): the keys, ownership, scopes and
        # per-key limits; the meter counts each key's tokens from its runs' model calls.
        self.keys = Keyring(self.store, settings.auth)
        self.access = Access(self)
        self.observers = Observers((*self.observers.all, self.access.meter))

    # -------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> Kernel:
        await self.store.open()
        self.settings = await self._overrides.load(self.settings)
        self._task_group = anyio.create_task_group()
        await self._task_group.__aenter__()
        if self.cluster is not None:
            await self._task_group.start(self.cluster.run, self)
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        """Interrupt runs, let them record their end, then stop every actor."""
        assert self._task_group is not None
        self.stopping.set()
        with anyio.CancelScope(shield=True):
            self.interrupt_all()
            await self.wait_idle(self.shutdown_grace_s)
            for session in self.sessions.values():
                session.close()
            if self.cluster is not None:
                await self.cluster.close()
        self._task_group.cancel_scope.cancel()
        try:
            result = await self._task_group.__aexit__(*exc_info)
        finally:
            with anyio.CancelScope(shield=True):
                for provider in [*self._providers.values(), *self._retired_providers]:
                    await provider.aclose()
                await self.store.close()
        return result

    def interrupt_all(self, cause: m.InterruptCause = "shutdown") -> int:
        """Every accepted run ends as interrupted (with ``cause``: how the dialects tell the
        client its answer is not whole); returns how many sessions had one."""
        return sum(1 for session in self.sessions.values() if session.interrupt(closing=True, cause=cause))

    def start_draining(self) -> None:
        """From now on new runs are refused with ``draining`` (retryable: another instance, or
        this one restarted, serves them) and :meth:`readiness` says so; nothing else changes."""
        if not self.draining:
            self.draining = True
            log.info("draining: new runs are refused; %d in flight go on", self.active_runs())

    def active_runs(self) -> int:
        return sum(1 for session in self.sessions.values() if session.busy)

    async def drain(self, timeout_s: float) -> int:
        """SIGTERM's drain: refuse new runs, let those in flight (queued ones too) end for up
        to ``timeout_s``, then interrupt what is left with cause ``drain``. In a cluster each
        session is given up (its lease released) as soon as it has no work, so another
        instance takes its next prompt at once. Returns how many sessions were interrupted."""
        self.start_draining()
        with anyio.move_on_after(timeout_s):
            while True:
                if self.cluster is not None:
                    for session in [s for s in self.sessions.values() if not s.busy and not s.ephemeral]:
                        await self.unload_session(session.id)
                # Runs other instances own count too, while a client here follows one.
                remote = any(f.following_a_run for f in list(self.remote_followers))
                if not any(s.busy for s in self.sessions.values()) and not self.run_followers and not remote:
                    break
                await anyio.sleep(DRAIN_POLL_S)
        left = self.interrupt_all("drain")
        if left:
            log.warning("drain: %d run(s) still in flight after %gs: interrupted", left, timeout_s)
            await self.wait_idle(self.shutdown_grace_s)
        await self.end_followed_runs(m.ErrorInfo(code="draining", message=FOLLOW_STOPPED))
        self.stopping.set()
        return left

    async def end_followed_runs(self, error: m.ErrorInfo) -> None:
        """The gateway stops: every request still following a run (one another instance owns,
        or one whose end has not reached it), and every follower here of a run another
        instance owns (a WebSocket watching its session), ends it with ``error``, and gets a
        moment to write it before the transports close their connections."""
        for follower in list(self.run_followers):
            follower.stop(error)
        for remote in list(self.remote_followers):
            remote.stop(error)
        for _ in range(round(FOLLOWERS_GRACE_S / DRAIN_POLL_S)):
            if not self.run_followers and not any(remote.pending for remote in list(self.remote_followers)):
                break
            await anyio.sleep(DRAIN_POLL_S)

    async def readiness(self) -> dict[str, str]:
        """What keeps this instance from taking traffic, by check (empty: ready): draining,
        the store not answering, the cluster's Redis not answering. Each check is bounded."""
        problems: dict[str, str] = {}
        if self.draining:
            problems["draining"] = "the gateway is draining (shutting down)"
        checks: list[tuple[str, Callable[[], Awaitable[object]]]] = [("store", partial(self.store.get_value, SETTINGS_KEY))]
        if self.cluster is not None:
            checks.append(("cluster", self.cluster.ping))
        for name, check in checks:
            try:
                with anyio.fail_after(READY_CHECK_S):
                    await check()
            except TimeoutError:
                problems[name] = f"no answer within {READY_CHECK_S:g}s"
            except Exception as exc:
                problems[name] = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
        return problems

    async def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no session has work, at most ``timeout_s``; False on timeout."""
        with anyio.move_on_after(timeout_s):
            for session in list(self.sessions.values()):
                await session.wait_idle()
            return True
        return False

    # -------------------------------------------------------------- registries

    def agent(self, ref: str | None) -> AgentSettings:
        """An agent by id or name; None or ``default`` is the first configured one."""
        agents = self.settings.agents
        if ref is None or ref == "default":
            return agents[0]
        for agent in agents:
            if ref in (agent.agent_id(), agent.name):
                return agent
        raise m.KernelError("not_found", f"Agent not found: {ref}")

    def provider_name(self, agent: AgentSettings | None = None) -> str:
        name = (agent.provider if agent else None) or self.settings.provider.default
        if name == "auto":
            name = "openai" if self.settings.provider.openai.api_key else "echo"
        return name

    def provider_for(self, agent: AgentSettings | None = None) -> Provider:
        name = self.provider_name(agent)
        provider = self._providers.get(name)
        if provider is None:
            factory = self.provider_factories.get(name)
            if factory is None:
                raise m.KernelError("not_found", f"no provider named {name!r} is installed")
            provider = self._providers[name] = factory(self.settings)
        return provider

    @property
    def clustered(self) -> bool:
        return self.cluster is not None

    def session_states(self) -> Counter[str]:
        """How many live sessions are in each state (idle, running, awaiting_…): for gauges."""
        return Counter(session.state for session in self.sessions.values())

    def all_tools(self, session: ToolScope | None = None) -> dict[str, Tool]:
        """The registered tools, those of the kernel's tool sources, and the session's own."""
        found = dict(self.tools)
        for source in (*self.tool_sources, *(session.tool_sources if session is not None else ())):
            found.update((tool.name, tool) for tool in source.tools())
        return found

    def tools_for(self, agent: AgentSettings, session: ToolScope | None = None) -> dict[str, Tool]:
        tools = self.all_tools(session)
        if "*" in agent.tools:
            return tools
        wanted = set(agent.tools) | {t.name for s in (session.tool_sources if session is not None else ()) for t in s.tools()}
        return {name: tool for name, tool in tools.items() if name in wanted}

    def agent_model(self, agent: AgentSettings) -> str:
        """The model an agent's runs use: its own, else its provider's (what its info says,
        without listing its tools: a session's info asks on every request's path)."""
        return agent.model or self._provider_model(agent, self.provider_name(agent))

    def agent_info(self, agent: AgentSettings) -> m.AgentInfo:
        provider = self.provider_name(agent)
        model = agent.model or self._provider_model(agent, provider)
        return m.AgentInfo(
            id=agent.agent_id(),
            name=agent.name,
            description=agent.description,
            provider=provider,
            model=model,
            tools=tuple(self.tools_for(agent)),
        )

    def _provider_model(self, agent: AgentSettings, provider: str) -> str:
        if provider == "openai":
            return self.settings.provider.openai.model
        try:
            return self.provider_for(agent).model
        except Exception:  # a provider that cannot start yet still lists by name
            return provider

    def workspace_files(self) -> WorkspaceFiles:
        """The default file access of tools: the configured workspace on disk."""
        return WorkspaceFiles(self.settings.tools.workspace, max_bytes=self.settings.tools.file_max_bytes)

    async def invoke_tool(
        self, tool: Tool, arguments: dict[str, Any], session: ToolScope | None, *, call_id: str | None = None,
        progress: ToolProgressSink | None = None, ask: ToolQuestion | None = None,
    ) -> ToolExecution:
        context = ToolContext(
            session_id=session.id if session is not None else "",
            agent_id=(session.agent if session is not None else self.agent(None)).agent_id(),
            workspace=WorkspaceFiles(self.settings.tools.workspace).root,
            files=session.files if session is not None and session.files is not None else self.workspace_files(),
            store=self.store,
            call_id=call_id,
            progress=progress,
            ask=ask,
        )
        return await invoke(tool, arguments, context, self.settings.tools.timeout_s)

    # -------------------------------------------------------------- sessions

    async def session(
        self,
        session_id: str | None = None,
        agent_id: str | None = None,
        *,
        create: bool = True,
        label: str | None = None,
        ephemeral: bool = False,
        history: tuple[m.Message, ...] = (),
    ) -> Session:
        """The live session, loaded from the store or created on first use.

        ``ephemeral`` creates a new session that lives in memory only (never stored,
        never listed): a throw-away conversation such as one OpenAI-compatible request,
        with ``history`` as its context from the start.
        """
        if ephemeral:
            throwaway = Session(self, session_id or secrets.token_hex(16), self.agent(agent_id), label=label, created_at=time.time(), ephemeral=True)
            throwaway.owner = acting_principal().name
            throwaway.remember(list(history), throwaway.created_at)  # before its task starts: nothing else reads it yet
            return self._start(throwaway)
        if session_id is not None and session_id in self.sessions:
            return self.sessions[session_id]
        async with self._session_lock:
            if session_id is not None and session_id in self.sessions:
                return self.sessions[session_id]
            if self.draining and self.cluster is not None:  # leases are given up now, not taken
                raise draining_error()
            record = await self.store.get_session(session_id) if session_id else None
            if record is None:
                if not create:
                    raise m.KernelError("not_found", f"Session not found: {session_id}")
                agent = self.agent(agent_id)
                record = SessionRecord(
                    session_id=session_id or secrets.token_hex(16),
                    agent_id=agent.agent_id(),
                    label=label,
                    created_at=time.time(),
                    owner=acting_principal().name,
                )
                await self.store.save_session(record)
                fence = await self.routing.hold(record.session_id) if self.routing is not None else None
                messages: list[m.Message] = []
            else:
                agent = self._agent_or_default(record.agent_id)
                fence = await self.routing.hold(record.session_id) if self.routing is not None else None
                messages = await self.store.load_messages(record.session_id, self.settings.session.history_cap)
            session = Session(self, record.session_id, agent, label=record.label, created_at=record.created_at)
            session.fence = fence
            session.title = record.title
            session.owner = record.owner
            session.updated_at = record.updated_at or record.created_at
            session.context.extend(messages)
            if self.routing is not None:
                await self.routing.take_over(session)
            return self._start(session)

    def _start(self, session: Session) -> Session:
        if session.id in self.sessions:
            raise m.KernelError("invalid_request", f"session {session.id} already exists")
        self.sessions[session.id] = session
        assert self._task_group is not None, "use the kernel inside 'async with'"
        self._task_group.start_soon(session.actor, name=f"session {session.id}")
        return session

    async def unload_session(self, session_id: str, *, grace_s: float = 2.0) -> bool:
        """Take a live session out of memory (its client left); the stored history stays.

        Its runs, queued ones included, end as interrupted first. False when it was not loaded.
        """
        session = self.sessions.get(session_id)
        if session is None:
            return False
        session.interrupt(closing=True)
        with anyio.move_on_after(grace_s):
            await session.wait_idle()
        if self.sessions.get(session_id) is session:
            del self.sessions[session_id]
        session.close()
        if self.cluster is not None and not session.ephemeral:
            await self.cluster.release(session_id)
        return True

    def _agent_or_default(self, agent_id: str) -> AgentSettings:
        try:
            return self.agent(agent_id)
        except m.KernelError:
            log.warning("session agent %s is no longer configured; using the default agent", agent_id)
            return self.agent(None)

    async def subscribe(
        self, session_id: str, after_seq: int | None = None, *, buffer_size: int | None = None, client: str | None = None,
        caller: m.Caller = m.LOCAL_CALLER,
    ) -> Subscription | RemoteSubscription:
        """Follow a session's events (after ``after_seq``, else from now on). ``caller`` needs
        the ``read`` scope and to own the session: another's answers as a missing one."""
        await self.access.admit(caller, m.GetSession(session_id=session_id))
        await self.access.check(caller, m.GetSession(session_id=session_id))
        remote = await self.routing.remote_subscription(session_id, after_seq, client) if self.routing is not None else None
        if remote is not None:
            self.remote_followers.add(remote)
            return remote
        session = await self.session(session_id, create=False)
        return session.hub.subscribe(after_seq, buffer_size=buffer_size, client=client)

    async def authenticate(self, secret: str | None) -> m.Principal | None:
        """The principal of an API key a client presented (None: no such live key). The
        transports' shared resolver calls it; the admin token is theirs to compare."""
        return await self.keys.authenticate(secret)

    async def keys_required(self) -> bool:
        """Whether keys exist, so that a request without credentials is refused even on a
        gateway without an admin token."""
        return await self.keys.required()

    async def list_keys(self, caller: m.Caller = m.LOCAL_CALLER) -> list[KeyView]:
        """Every key with its limits and usage (never a secret): the admin's to read."""
        if not caller.principal.is_admin:
            raise m.KernelError("forbidden", "listing keys needs the 'admin' scope")
        return await self.keys.views()

    def run_accepted_elsewhere(self, accepted: m.Accepted) -> None:
        """A run command routed from here was accepted: every follower here of its session
        (which reads the shared stream) is owed the run's end, also if the stream never tells
        of the run (its owner died before starting it)."""
        assert accepted.run_id is not None
        for remote in list(self.remote_followers):
            if remote.session_id == accepted.session_id:
                remote.expect(accepted.run_id, accepted.request_id)

    def lease_lost(self, session_id: str) -> None:
        """Another instance owns the session now (our lease expired): stop running it here.
        Its runs end ``owner_lost`` (never a whole-looking answer: what they would still
        write is refused by the store's fence anyway), and their ends reach the clients here
        before the session is closed."""
        session = self.sessions.pop(session_id, None)
        if session is None:
            return
        log.warning("lost the lease of session %s to another instance: unloading it", session_id)
        session.interrupt(closing=True, cause="owner_lost")
        assert self._task_group is not None

        async def close_when_idle() -> None:
            with anyio.move_on_after(self.shutdown_grace_s):
                await session.wait_idle()
            session.close()

        self._task_group.start_soon(close_when_idle, name=f"letting session {session_id} go")

    # -------------------------------------------------------------- commands

    # One overload per command: a caller gets the precise reply type (checked at run time
    # against REPLY_TYPES, so a reply of another type, even a peer instance's, is ``internal``).
    @overload
    async def execute(self, command: m.Prompt | m.Regenerate | m.Continue, caller: m.Caller = ...) -> m.Accepted: ...

    @overload
    async def execute(self, command: m.Interrupt | m.ResolveToolApproval | m.ResolveTurnLimit | m.DeleteSession | m.CloseSession, caller: m.Caller = ...) -> m.Done: ...

    @overload
    async def execute(self, command: m.ClearContext | m.SaveHistory | m.ClearHistory, caller: m.Caller = ...) -> m.Done | m.Accepted: ...

    @overload
    async def execute(self, command: m.RunCommand, caller: m.Caller = ...) -> m.CommandOutput: ...

    @overload
    async def execute(self, command: m.ExecuteTool, caller: m.Caller = ...) -> m.ToolOutput: ...

    @overload
    async def execute(self, command: m.OpenSession | m.GetSession | m.ConfigureSession, caller: m.Caller = ...) -> m.SessionOpened: ...

    @overload
    async def execute(self, command: m.ListSessions, caller: m.Caller = ...) -> m.SessionList: ...

    @overload
    async def execute(self, command: m.GetStatus, caller: m.Caller = ...) -> m.StatusReport: ...

    @overload
    async def execute(self, command: m.GetSettings | m.UpdateSettings, caller: m.Caller = ...) -> m.SettingsView: ...

    @overload
    async def execute(self, command: m.GetHistory, caller: m.Caller = ...) -> m.HistoryView: ...

    @overload
    async def execute(self, command: m.ListAgents, caller: m.Caller = ...) -> m.AgentList: ...

    @overload
    async def execute(self, command: m.ListCommands, caller: m.Caller = ...) -> m.CommandList: ...

    @overload
    async def execute(self, command: m.ListTools, caller: m.Caller = ...) -> m.ToolList: ...

    @overload
    async def execute(self, command: m.ListModels, caller: m.Caller = ...) -> m.ModelList: ...

    @overload
    async def execute(self, command: m.Command, caller: m.Caller = ...) -> m.Reply: ...

    async def execute(self, command: m.Command, caller: m.Caller = m.LOCAL_CALLER) -> m.Reply:
        """Carry out one command. Failures raise :class:`KernelError` with a stable code.

        ``caller`` is who sends it, as the transport authenticated it (principal, transport
        name, ``traceparent``); local callers and tests act as the admin.

        In a cluster, a command about a session that another instance owns is carried
        out there (its reply returned as if local); one whose owner is gone takes the
        session over.

        The caller's key is checked here (revoked, over a limit) and, in a cluster, travels
        with a forwarded command (:func:`~kernel.access.acting_caller`); where the command
        is carried out, :meth:`execute_forwarded` checks scope and ownership.
        """
        await self.access.admit(caller, command)
        with acting_as(caller):
            reply = await self._route(command, caller)
        if not isinstance(reply, REPLY_TYPES.get(type(command), ())):
            raise m.KernelError("internal", f"{type(command).__name__} was answered with {type(reply).__name__}")
        return reply

    async def find_session(self, session_id: str, caller: m.Caller = m.LOCAL_CALLER) -> m.SessionInfo | None:
        """``GetSession`` for a session that may not exist: None when it does not (or is not
        the caller's to see); every other error is raised. What each dialect asked before
        deciding between "continue this thread" and "start it"."""
        try:
            return (await self.execute(m.GetSession(session_id=session_id), caller)).session
        except m.KernelError as exc:
            if exc.code == "not_found":
                return None
            raise

    async def _route(self, command: m.Command, caller: m.Caller) -> m.Reply:
        routed = await self.routing.route(command) if self.routing is not None else None
        if routed is not None:
            return routed
        return await self.execute_forwarded(command, caller)

    async def execute_forwarded(self, command: m.Command, caller: m.Caller | None = None) -> m.Reply:
        """Carry out a command here (the cluster's callback for commands forwarded to us).
        A run's command hands its caller (transport, ``traceparent``) to the run's telemetry.
        ``caller``: the one a peer forwarded beside the command; None is the caller of the
        command being routed here (a takeover or hand-over carries it out locally as them)."""
        caller = caller if caller is not None else acting_caller()
        handler = _HANDLERS.get(type(command))
        run_handler = _RUN_HANDLERS.get(type(command))
        if handler is None and run_handler is None:
            raise m.KernelError("invalid_request", f"unsupported command {type(command).__name__}")
        if self.draining and isinstance(command, m.RUN_COMMANDS):
            raise draining_error()
        await self.access.check(caller, command)
        with acting_as(caller):
            if run_handler is not None:
                return await run_handler(self, command, caller)
            assert handler is not None
            return self.access.scoped(caller.principal, await handler(self, command))

    async def _start_run(self, session: Session, cmd: m.Prompt | m.Regenerate | m.Continue, caller: m.Caller, **job: Any) -> m.Reply:
        problem = cmd.options.problem()
        if problem is not None:
            raise m.KernelError("invalid_request", f"Invalid options: {problem}")
        run = session.new_run(cmd.request_id, options=cmd.options, caller=caller, **job)
        queued = session.enqueue(run)
        return m.Accepted(request_id=cmd.request_id, session_id=session.id, run_id=run.run_id, queued=queued)

    async def _prompt(self, cmd: m.Prompt, caller: m.Caller) -> m.Reply:
        parts = admit_parts(cmd.content_parts())  # the attachment policy, before a session is made
        if not parts:
            raise m.KernelError("invalid_request", "empty prompt")
        session = await self.session(cmd.session_id, cmd.agent_id)
        return await self._start_run(session, cmd, caller, parts=parts)

    async def _regenerate(self, cmd: m.Regenerate, caller: m.Caller) -> m.Reply:
        return await self._start_run(await self.session(cmd.session_id, create=False), cmd, caller, regenerate=True)

    async def _continue(self, cmd: m.Continue, caller: m.Caller) -> m.Reply:
        return await self._start_run(await self.session(cmd.session_id, create=False), cmd, caller, resume=True)

    async def _interrupt(self, cmd: m.Interrupt) -> m.Reply:
        session = await self.session(cmd.session_id, create=False)
        if not session.interrupt(run_id=cmd.run_id, request_id=cmd.target_request_id, cause=cmd.cause):
            raise m.KernelError("invalid_request", "No active model output to interrupt")
        return m.Done(request_id=cmd.request_id, message="interrupted")

    async def _change_history(self, cmd: m.Command, job: HistoryJob, done: str) -> m.Reply:
        """History changes wait in the session's inbox behind a run (answered ``queued``)."""
        session = await self.session(cmd.session_id, create=not isinstance(cmd, m.ClearContext))
        if await session.change_history(job):
            return m.Done(request_id=cmd.request_id, message=done)
        return m.Accepted(request_id=cmd.request_id, session_id=session.id, queued=True)

    async def _clear_context(self, cmd: m.ClearContext) -> m.Reply:
        return await self._change_history(cmd, HistoryJob("clear_context", cmd.request_id), "context cleared")

    async def _resolve_tool_approval(self, cmd: m.ResolveToolApproval) -> m.Reply:
        session = await self.session(cmd.session_id, create=False)
        session.answer("tool_approval", cmd.call_id, Answer(yes=cmd.approved, reason=cmd.reason, remember=cmd.remember))
        return m.Done(request_id=cmd.request_id, message="approved" if cmd.approved else "rejected")

    async def _resolve_turn_limit(self, cmd: m.ResolveTurnLimit) -> m.Reply:
        session = await self.session(cmd.session_id, create=False)
        session.answer("turn_limit", None, Answer(yes=cmd.confirmed, reason=cmd.reason))
        return m.Done(request_id=cmd.request_id, message="confirmed" if cmd.confirmed else "declined")

    async def _run_command(self, cmd: m.RunCommand) -> m.Reply:
        name = cmd.name.lstrip("/")
        command = self.commands.get(name)
        if command is None:
            raise m.KernelError("not_found", f"Unknown command: /{name}. Try /help.")
        session = await self.session(cmd.session_id)
        ctx = CommandContext(
            kernel=self, session_id=session.id, agent_id=session.agent.agent_id(), request_id=cmd.request_id, caller=acting_caller()
        )
        try:
            output = await command.handler(ctx, cmd.args)
        except m.KernelError:
            raise
        except Exception as exc:
            log.exception("slash command /%s failed", name)
            raise m.KernelError("internal", f"/{name} failed: {type(exc).__name__}: {exc}") from None
        return m.CommandOutput(request_id=cmd.request_id, name=name, output=output)

    async def _execute_tool(self, cmd: m.ExecuteTool) -> m.Reply:
        # Every tool a session could be offered: the registered ones and those of tool sources.
        tool = self.all_tools(self.sessions.get(cmd.session_id) if cmd.session_id else None).get(cmd.name)
        if tool is None:
            raise m.KernelError("not_found", f"Unknown tool: {cmd.name}")
        # Without a session the call runs in the default agent's context; no session is made.
        session = await self.session(cmd.session_id) if cmd.session_id else None
        done = await self.invoke_tool(tool, dict(cmd.arguments), session)
        return m.ToolOutput(request_id=cmd.request_id, name=cmd.name, result=done.result, is_error=done.outcome != "ok")

    async def _open_session(self, cmd: m.OpenSession) -> m.Reply:
        if cmd.history and not cmd.ephemeral:
            raise m.KernelError("invalid_request", "history opens an ephemeral session only; save a stored session's with save_history")
        history = tuple(admit_message(message) for message in cmd.history)  # as SaveHistory's
        session = await self.session(cmd.session_id, cmd.agent_id, label=cmd.label, ephemeral=cmd.ephemeral, history=history)
        return m.SessionOpened(request_id=cmd.request_id, session=session.info())

    async def _get_session(self, cmd: m.GetSession) -> m.Reply:
        session = await self.session(cmd.session_id, create=False)
        return m.SessionOpened(request_id=cmd.request_id, session=session.info())

    async def _configure_session(self, cmd: m.ConfigureSession) -> m.Reply:
        session = await self.session(cmd.session_id, create=False)
        if cmd.max_turns is not msgspec.UNSET:
            if cmd.max_turns is not None and cmd.max_turns < 0:
                raise m.KernelError("invalid_request", "max_turns must be >= 0 (0 = unlimited)")
            session.max_turns = cmd.max_turns
        if cmd.approval_timeout_s is not msgspec.UNSET:
            if cmd.approval_timeout_s is not None and cmd.approval_timeout_s <= 0:
                raise m.KernelError("invalid_request", "approval_timeout_s must be > 0")
            session.approval_timeout_s = cmd.approval_timeout_s
        if cmd.model is not msgspec.UNSET:
            session.model_override = cmd.model.strip() or None if cmd.model is not None else None
        if cmd.files is not msgspec.UNSET:
            session.files = cmd.files
        if cmd.tool_sources is not msgspec.UNSET:
            session.tool_sources = cmd.tool_sources
        return m.SessionOpened(request_id=cmd.request_id, session=session.info())

    async def _close_session(self, cmd: m.CloseSession) -> m.Reply:
        if cmd.session_id is None:
            raise m.KernelError("invalid_request", "session_id is required")
        live = self.sessions.get(cmd.session_id)
        if live is not None and cmd.if_unwatched and live.hub.subscriber_count > 0:
            return m.Done(request_id=cmd.request_id, message="session still watched")
        await self.unload_session(cmd.session_id)
        return m.Done(request_id=cmd.request_id, message="session closed")

    async def _delete_session(self, cmd: m.DeleteSession) -> m.Reply:
        if cmd.session_id is None:
            raise m.KernelError("invalid_request", "session_id is required")
        live = self.sessions.get(cmd.session_id)
        loaded = await self.unload_session(cmd.session_id)  # its runs end (and record) first
        if live is not None and live.ephemeral:
            return m.Done(request_id=cmd.request_id, message="session deleted")
        if not loaded and await self.store.get_session(cmd.session_id) is None:
            raise m.KernelError("not_found", f"Session not found: {cmd.session_id}")
        await self.store.delete_session(cmd.session_id)
        if self.cluster is not None:
            self.cluster.ended(cmd.session_id)
        return m.Done(request_id=cmd.request_id, message="session deleted")

    async def _list_sessions(self, cmd: m.ListSessions) -> m.Reply:
        agent_id = self.agent(cmd.agent_id).agent_id() if cmd.agent_id else None
        records = await self.store.list_sessions(agent_id)
        infos = []
        for r in records:
            live = self.sessions.get(r.session_id)
            infos.append(
                live.info()
                if live
                else m.SessionInfo(
                    session_id=r.session_id, agent_id=r.agent_id, label=r.label, title=r.title, created_at=r.created_at,
                    updated_at=r.updated_at, message_count=r.message_count, owner=r.owner,
                )
            )
        return m.SessionList(request_id=cmd.request_id, sessions=tuple(infos))

    async def _get_status(self, cmd: m.GetStatus) -> m.Reply:
        return m.StatusReport(
            request_id=cmd.request_id,
            version=self.version,
            uptime_s=round(time.time() - self.started_at, 3),
            provider=self.provider_name(),
            model=self.agent_model(self.agent(None)),
            sessions=len(self.sessions),
            active_runs=sum(1 for s in self.sessions.values() if s.active is not None),
            agents=len(self.settings.agents),
            clients=dict(Counter(client for s in self.sessions.values() for client in s.hub.clients())),
        )

    def settings_view(self) -> dict[str, Any]:
        """The effective settings as plain data, every secret masked."""
        view: dict[str, Any] = mask_secrets(to_data(self.settings))
        return view

    async def _get_settings(self, cmd: m.GetSettings) -> m.Reply:
        return m.SettingsView(request_id=cmd.request_id, settings=self.settings_view())

    async def _update_settings(self, cmd: m.UpdateSettings) -> m.Reply:
        await self.update_settings(cmd.changes)
        return m.SettingsView(request_id=cmd.request_id, settings=self.settings_view())

    async def update_settings(self, changes: dict[str, Any]) -> None:
        """Validate, apply and persist a partial update; providers are rebuilt lazily.
        Masked secrets sent back (``sk-…abcd``) leave the real ones as they are."""
        await self._overrides.apply(changes, lambda: self.settings, self._install_settings)

    def _install_settings(self, new: Settings) -> None:
        old, self.settings = self.settings, new
        if old.provider != new.provider or old.agents != new.agents:
            # Runs in flight keep streaming from the old instances; they close at exit.
            self._retired_providers.extend(self._providers.values())
            self._providers = {}
        for session in self.sessions.values():
            session.agent = self._agent_or_default(session.agent.agent_id())

    async def _get_history(self, cmd: m.GetHistory) -> m.Reply:
        session = await self.session(cmd.session_id)
        cap = self.settings.session.history_cap  # the store keeps no more: a larger limit means "all"
        messages = await session.history(min(cmd.limit, cap) if cmd.limit and cmd.limit > 0 else cap)
        return m.HistoryView(request_id=cmd.request_id, session_id=session.id, messages=tuple(messages))

    async def _save_history(self, cmd: m.SaveHistory) -> m.Reply:
        if not cmd.messages:
            return await self._change_history(cmd, HistoryJob("replace", cmd.request_id), "history cleared")
        messages = tuple(admit_message(message) for message in cmd.messages)  # as a prompt's parts are
        return await self._change_history(cmd, HistoryJob("append", cmd.request_id, messages), "history saved")

    async def _clear_history(self, cmd: m.ClearHistory) -> m.Reply:
        return await self._change_history(cmd, HistoryJob("clear_history", cmd.request_id), "history cleared")

    async def _list_agents(self, cmd: m.ListAgents) -> m.Reply:
        return m.AgentList(request_id=cmd.request_id, agents=tuple(self.agent_info(a) for a in self.settings.agents))

    async def _list_commands(self, cmd: m.ListCommands) -> m.Reply:
        return m.CommandList(request_id=cmd.request_id, commands=tuple(c.info() for c in self.commands.values()))

    async def _list_tools(self, cmd: m.ListTools) -> m.Reply:
        live = self.sessions.get(cmd.session_id) if cmd.session_id else None
        return m.ToolList(request_id=cmd.request_id, tools=tuple(t.info() for t in self.all_tools(live).values()))

    async def _list_models(self, cmd: m.ListModels) -> m.Reply:
        agent = self.agent(cmd.agent_id)
        name = self.provider_name(agent)
        provider = self.provider_for(agent)
        configured = self.agent_model(agent)
        listing = getattr(provider, "list_models", None)
        offered = list(await listing()) if listing is not None else []
        ids = [configured, *(model for model in offered if model != configured)]
        return m.ModelList(request_id=cmd.request_id, models=tuple(m.ModelInfo(id=model, provider=name) for model in ids))


#: What each command is answered with (the overloads of ``Kernel.execute`` say the same).
REPLY_TYPES: dict[type, tuple[type, ...]] = {
    m.Prompt: (m.Accepted,),
    m.Regenerate: (m.Accepted,),
    m.Continue: (m.Accepted,),
    m.Interrupt: (m.Done,),
    m.ResolveToolApproval: (m.Done,),
    m.ResolveTurnLimit: (m.Done,),
    m.DeleteSession: (m.Done,),
    m.CloseSession: (m.Done,),
    m.ClearContext: (m.Done, m.Accepted),
    m.SaveHistory: (m.Done, m.Accepted),
    m.ClearHistory: (m.Done, m.Accepted),
    m.RunCommand: (m.CommandOutput,),
    m.ExecuteTool: (m.ToolOutput,),
    m.OpenSession: (m.SessionOpened,),
    m.GetSession: (m.SessionOpened,),
    m.ConfigureSession: (m.SessionOpened,),
    m.ListSessions: (m.SessionList,),
    m.GetStatus: (m.StatusReport,),
    m.GetSettings: (m.SettingsView,),
    m.UpdateSettings: (m.SettingsView,),
    m.GetHistory: (m.HistoryView,),
    m.ListAgents: (m.AgentList,),
    m.ListCommands: (m.CommandList,),
    m.ListTools: (m.ToolList,),
    m.ListModels: (m.ModelList,),
}

#: The commands that start a run take its caller too (the run's transport and traceparent).
_RUN_HANDLERS: dict[type, Callable[[Kernel, Any, m.Caller], Awaitable[m.Reply]]] = {
    m.Prompt: Kernel._prompt,
    m.Regenerate: Kernel._regenerate,
    m.Continue: Kernel._continue,
}

_HANDLERS: dict[type, Callable[[Kernel, Any], Awaitable[m.Reply]]] = {
    m.Interrupt: Kernel._interrupt,
    m.ClearContext: Kernel._clear_context,
    m.ResolveToolApproval: Kernel._resolve_tool_approval,
    m.ResolveTurnLimit: Kernel._resolve_turn_limit,
    m.RunCommand: Kernel._run_command,
    m.ExecuteTool: Kernel._execute_tool,
    m.OpenSession: Kernel._open_session,
    m.DeleteSession: Kernel._delete_session,
    m.ListSessions: Kernel._list_sessions,
    m.GetStatus: Kernel._get_status,
    m.GetSettings: Kernel._get_settings,
    m.UpdateSettings: Kernel._update_settings,
    m.GetHistory: Kernel._get_history,
    m.SaveHistory: Kernel._save_history,
    m.ClearHistory: Kernel._clear_history,
    m.ListAgents: Kernel._list_agents,
    m.ListCommands: Kernel._list_commands,
    m.ListTools: Kernel._list_tools,
    m.GetSession: Kernel._get_session,
    m.ConfigureSession: Kernel._configure_session,
    m.CloseSession: Kernel._close_session,
    m.ListModels: Kernel._list_models,
}
