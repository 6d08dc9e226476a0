"""The OpenFang transport: one raw-ASGI app (REST + SSE + WebSocket) on hypercorn.

``serve`` runs until cancelled; the shared plumbing then closes open sockets with
1001 and ends SSE streams before hypercorn stops. The gateway console, when the gateway
gives one (``console=``, built from this transport's config), answers the requests no
OpenFang route takes — ``/``, its files and the native API — unless ``console`` is off
or ``dashboard_dir`` serves a dashboard there instead.

A socket only pumps: frames in -> its :class:`~.codec.Connection` -> kernel commands
out; events in -> the connection -> frames out. The receive loop never waits for a
run: a prompt is handed to the kernel (which queues it behind a running one) and the
session's events are written by one forwarder task per followed session, so ``stop``
interrupts a running turn at once. Each forwarder waits for events until the
coalescer's deadline and writes what is ready in one go.
"""

from __future__ import annotations

import logging

import anyio
import msgspec
from anyio.abc import TaskStatus

from kernel import Follower, Kernel, SideTasks, side_tasks
from kernel import model as m
from transports.base import BannerLine, ConsoleFactory
from transports.shared import (
    CLOSE_NORMAL,
    Router,
    WebSocket,
    WsIdle,
    WsInvalidFrame,
    WsRateLimited,
    WsText,
    WsTooLarge,
    add_health_routes,
    add_metrics_route,
    page_url,
    resolve_token,
    serve_http,
)

from .a2a import OpenFangA2A
from .codec import Connection, LocalCommand, SessionFacts, idle_closed, rate_limited, too_large
from .config import OpenFangConfig
from .dashboard import OpenFangDashboard
from .rest import OpenFangRest
from .state import ActiveSessions, Agents, UploadStore
from .wire import ErrorOut, ServerEvent, encode

log = logging.getLogger("gateway.openfang")


def wants_console(config: OpenFangConfig) -> bool:
    """The console at ``/``, unless it is turned off or a dashboard is served there."""
    return config.console and not config.dashboard_dir


def build_app(kernel: Kernel, config: OpenFangConfig, console: ConsoleFactory | None = None) -> Router:
    """The ASGI application of the dialect (usable with any ASGI server), with the console
    behind it when one is given and the config wants it."""
    router = Router(config, keys=kernel, transport=OpenFangTransport.name)
    if console is not None and wants_console(config):
        router.fallback = console(kernel, config)
    agents = Agents(kernel)
    sessions = ActiveSessions(kernel)
    uploads = UploadStore(max_bytes=config.upload_store_bytes, ttl_s=config.upload_ttl_s)
    OpenFangRest(kernel, config, agents=agents, sessions=sessions, uploads=uploads).register(router)
    OpenFangDashboard(kernel, config, agents=agents, sessions=sessions).register(router)
    OpenFangA2A(kernel, config).register(router)
    add_health_routes(router, kernel)
    add_metrics_route(router, kernel.observers.metrics)

    def known_agent(ws: WebSocket) -> None:
        # After the built-in 401 / 403 Origin / 429 per-IP checks: 400 bad id, 404 unknown.
        ws.state["agent_id"] = agents.resolve(ws.path_params["id"])

    @router.websocket("/api/agents/{id}/ws")
    async def agent_ws(ws: WebSocket) -> None:
        if not await ws.accept([known_agent]):
            return
        agent_id = ws.state["agent_id"]
        ws.send_timeout_s = kernel.settings.session.lag_grace_s  # a client that stops reading is cut off
        log.info("socket from %s for agent %s", ws.client_host, agent_id)
        await AgentSocket(ws, kernel, config, agent_id, agents=agents, sessions=sessions, uploads=uploads).run()

    return router


class AgentSocket:
    """One accepted socket: the receive loop plus a forwarder per followed session."""

    def __init__(
        self,
        ws: WebSocket,
        kernel: Kernel,
        config: OpenFangConfig,
        agent_id: str,
        *,
        agents: Agents,
        sessions: ActiveSessions,
        uploads: UploadStore,
    ) -> None:
        self.ws = ws
        self.kernel = kernel
        self.config = config
        self.agent_id = agent_id
        self.agents = agents
        self.sessions = sessions
        self.uploads = uploads
        # Who opened the socket (its upgrade request's key): every command and follower is theirs.
        self.caller = ws.caller
        self.codec = Connection(
            agent_id,
            approval=config.socket_policy,
            window_tokens=config.context_window_tokens,
            coalesce_s=config.coalesce_ms / 1000.0,
            coalesce_chars=config.coalesce_chars,
        )
        self._tasks: SideTasks | None = None

    async def send(self, frames: list[ServerEvent]) -> bool:
        return await self.ws.send_texts([encode(frame) for frame in frames]) if frames else True

    async def run(self) -> None:
        await self.send(self.codec.hello(self.agents.infos()))
        # The poll of the agent list and the session forwards are stopped, not cancelled from
        # outside, when the socket is done (kernel/companions.py).
        async with side_tasks() as tasks:
            self._tasks = tasks
            tasks.start_soon(self._watch_agents)
            async for event in self.ws:
                match event:
                    case WsText(text=text):
                        await self.send(await self._on_text(text))
                    case WsTooLarge(limit_bytes=limit):
                        await self.send([too_large(limit)])
                    case WsRateLimited(limit_per_minute=limit):
                        await self.send([rate_limited(limit)])
                    case WsInvalidFrame(reason=reason):
                        await self.send([ErrorOut(content=reason)])
                    case WsIdle(idle_s=idle):
                        await self.send([idle_closed(idle)])
                        await self.ws.close(CLOSE_NORMAL, "idle timeout")

    # ------------------------------------------------------------------ inbound

    async def _on_text(self, text: str) -> list[ServerEvent]:
        action = self.codec.receive(text, uploads=self.uploads.snapshot(), kernel_commands=self.kernel.commands.keys())
        if isinstance(action, list):
            return action
        command = action.command
        try:
            if isinstance(command, LocalCommand):
                return self.codec.local(command, await self._facts(command) if command.needs_session else None)
            if isinstance(command, m.Prompt):
                return await self._prompt(command)
            return await self._command(command, action.name)
        except m.KernelError as exc:  # e.g. the agent was removed from the settings
            return self.codec.refused(exc, command if isinstance(command, m.Prompt) else None)

    async def _open(self, session_id: str) -> None:
        """Create the session, or load it: it is used from now on."""
        await self.kernel.execute(m.OpenSession(session_id=session_id, agent_id=self.agent_id), self.caller)

    async def _prompt(self, prompt: m.Prompt) -> list[ServerEvent]:
        session_id = await self._session_for(prompt.session_id, last=False)
        await self._open(session_id)
        self.sessions.touch(self.agent_id, session_id, self.caller)
        if not self.codec.follows(session_id):
            await self._follow(session_id)
        await self.kernel.execute(self.codec.sending(prompt, session_id), self.caller)
        return []

    async def _session_for(self, requested: str | None, *, last: bool = True) -> str:
        """The kernel id of a frame's session: the one it names (``session_id``, any id),
        else (for a command) the last one prompted, else the agent's active one."""
        if requested is not None:
            return await self.sessions.named(self.agent_id, requested, self.caller)
        if last and self.codec.last_session is not None:
            return self.codec.last_session
        return await self.sessions.get(self.agent_id, self.caller)

    async def _command(self, command: m.Command, name: str) -> list[ServerEvent]:
        reply: m.Reply | m.KernelError
        try:
            session_id = await self._session_for(command.session_id)
            await self._open(session_id)
            reply = await self.kernel.execute(msgspec.structs.replace(command, session_id=session_id), self.caller)
        except m.KernelError as exc:
            reply = exc
        return self.codec.answered(name, reply)

    async def _facts(self, command: LocalCommand) -> SessionFacts:
        session_id = await self._session_for(command.session_id)
        try:
            reply = await self.kernel.execute(m.GetSession(session_id=session_id), self.caller)
            info: m.SessionInfo | None = reply.session
        except m.KernelError:  # not created yet
            info = None
        return SessionFacts(
            session_id=session_id,
            info=info,
            history_window=self.kernel.agent(self.agent_id).max_context_messages,
            commands=tuple(c.info() for c in self.kernel.commands.values()),
        )

    # ----------------------------------------------------------------- outbound

    async def _follow(self, session_id: str) -> None:
        """Subscribe to a session (once) before the first prompt goes to it."""
        assert self._tasks is not None
        follower = await Follower.open(self.kernel, session_id, client="openfang", caller=self.caller)
        self.codec.follow(session_id)
        self._tasks.start_soon(self._forward, follower)

    async def _forward(self, follower: Follower) -> None:
        session_id = follower.session_id
        try:
            while not follower.closed and not self.ws.closed:
                batch = await follower.next_batch(self.codec.deadline(session_id))
                if not await self.send(self.codec.on_events(session_id, batch, anyio.current_time())):
                    return
        finally:
            follower.close()
            # A session closed elsewhere is followed anew by the next prompt; questions
            # left to a socket that is gone are answered "no" now, not at their timeout.
            with anyio.CancelScope(shield=True):
                for decline in self.codec.unfollow(session_id):
                    try:
                        await self.kernel.execute(decline, self.caller)
                    except m.KernelError:
                        pass  # answered meanwhile, or the session is gone

    async def _watch_agents(self) -> None:
        """``agents_updated`` again only when the agent list changed (OpenFang polls every 5 s)."""
        while self.config.agents_poll_s > 0:
            await anyio.sleep(self.config.agents_poll_s)
            if not await self.send(self.codec.agents_changed(self.agents.infos())):
                return


class OpenFangTransport:
    """OpenFang's WebSocket + REST + SSE API, so its dashboard, SDKs and apps work unchanged."""

    name = "openfang"
    description = "OpenFang dialect: WebSocket /api/agents/{id}/ws, REST /api/..., SSE streaming"
    Config = OpenFangConfig
    hosts_console = True

    def __init__(self) -> None:
        self.console: ConsoleFactory | None = None

    async def serve(
        self,
        kernel: Kernel,
        config: OpenFangConfig,
        *,
        task_status: TaskStatus[str | None] = anyio.TASK_STATUS_IGNORED,
        console: ConsoleFactory | None = None,
    ) -> None:
        self.console = console
        app = build_app(kernel, config, console)
        await serve_http(
            app, config, lag_grace_s=kernel.settings.session.lag_grace_s, error_body=app.error_body,
            connections=(kernel.observers, self.name), task_status=task_status,
        )

    def banner(self, kernel: Kernel, config: OpenFangConfig, address: str | None, command: str) -> list[BannerLine]:
        """Each agent's WebSocket URL (with the token a browser client passes as ``?token=``),
        and the console's when it is served here."""
        token = resolve_token(config)
        ws_base = (address or "").replace("http://", "ws://", 1)
        lines = [
            BannerLine("openfang", f"{page_url(ws_base, token, f'/api/agents/{agent.agent_id()}/ws')}  (agent {agent.name!r}; REST {address}/api)")
            for agent in kernel.settings.agents
        ]
        if self.console is not None and wants_console(config):
            lines.append(BannerLine("console", page_url(address, token)))
        return lines


__all__ = ["OpenFangTransport", "build_app"]
