"""The Agent-CLI transport: a WebSocket endpoint binding the codec to the kernel.

One connection = one new kernel session (``OpenSession``, then ``ConfigureSession``
with the transport's turn limit and approval timeout). Two tasks per connection: the
reader decodes frames and executes them at once, in order (so a prompt queues behind
a running one in the kernel while an Interrupt or a confirmation acts immediately);
the writer forwards the session's events, turning everything that is ready at the
same moment into frames in one go (adjacent stream chunks merged). Slash commands
run in their own tasks, since a plugin's command may be slow. When the client goes,
``CloseSession(if_unwatched=True)`` ends its runs unless another client watches.
"""

from __future__ import annotations

import logging
import os
from functools import partial

import anyio
import msgspec
from anyio.abc import TaskStatus

from kernel import Follower, Kernel, KernelError, SideTasks, side_tasks
from kernel import model as m
from transports.base import BannerLine
from transports.shared import (
    CLOSE_INTERNAL_ERROR,
    CLOSE_NORMAL,
    TOKEN_ENV_VAR,
    ConfigError,
    DeltaCoalescer,
    Router,
    WebSocket,
    WsIdle,
    WsInvalidFrame,
    WsRateLimited,
    WsText,
    WsTooLarge,
    add_health_routes,
    page_url,
    resolve_token,
    serve_http,
    validate_bind,
)

from .codec import AgentCliCodec, Incoming
from .config import AgentCliConfig
from .inputs import Limits

log = logging.getLogger("gateway.agent_cli")

#: Slash commands running at once per connection; the reader waits beyond that.
MAX_CONCURRENT_COMMANDS = 4


class AgentCliTransport:
    name = "agent-cli"
    description = "Agent-CLI remote protocol: JSON requests/responses over a WebSocket (v1.0-v1.7)"
    Config = AgentCliConfig

    async def serve(self, kernel: Kernel, config: AgentCliConfig, *, task_status: TaskStatus[str | None] = anyio.TASK_STATUS_IGNORED) -> None:
        validate_bind(config, os.environ.get(TOKEN_ENV_VAR))  # here, so it is not wrapped in a task group's error
        try:
            kernel.agent(config.agent)  # an unknown agent is a start-up error, not a per-connection one
        except KernelError as exc:
            raise ConfigError(f"[transports.agent_cli] agent: {exc.message}") from None
        router = Router(config, keys=kernel, transport=self.name)
        router.websocket(config.path, partial(_serve_connection, kernel, config))
        add_health_routes(router, kernel)
        await serve_http(
            router, config, lag_grace_s=kernel.settings.session.lag_grace_s, error_body=router.error_body,
            connections=(kernel.observers, self.name), task_status=task_status,
        )

    def banner(self, kernel: Kernel, config: AgentCliConfig, address: str | None, command: str) -> list[BannerLine]:
        """The socket's URL, with the token as ``?token=`` when one is set."""
        ws_base = (address or "").replace("http://", "ws://", 1)
        return [BannerLine("agent-cli", page_url(ws_base, resolve_token(config), config.path))]


async def _serve_connection(kernel: Kernel, config: AgentCliConfig, ws: WebSocket) -> None:
    if not await ws.accept():
        return
    ws.send_timeout_s = kernel.settings.session.lag_grace_s  # a client that stops reading is cut off
    try:
        opened = await kernel.execute(m.OpenSession(agent_id=config.agent), ws.caller)
        session_id = opened.session.session_id
        # approval_timeout_s = 0: the kernel's own timeout applies (left unchanged).
        timeout_s = config.approval_timeout_s if config.approval_timeout_s > 0 else msgspec.UNSET
        await kernel.execute(m.ConfigureSession(session_id=session_id, max_turns=config.max_turns, approval_timeout_s=timeout_s), ws.caller)
    except KernelError as exc:
        log.error("agent-cli: cannot open a session: %s", exc.message)
        await ws.close(CLOSE_INTERNAL_ERROR, "cannot open a session")
        return
    await _Connection(kernel, config, ws, session_id).run()


class _Connection:
    def __init__(self, kernel: Kernel, config: AgentCliConfig, ws: WebSocket, session_id: str) -> None:
        self.kernel = kernel
        self.config = config
        self.ws = ws
        self.session_id = session_id
        # Who opened the socket (its upgrade request's key): the session is theirs.
        self.caller = ws.caller
        limits = Limits(max_file_bytes=config.max_file_bytes, max_image_bytes=config.max_image_bytes, max_parts=config.max_input_parts)
        self.codec = AgentCliCodec(
            session_id,
            complete_tag=config.complete_tag,
            non_stream_tool_activity=config.non_stream_tool_activity,
            limits=limits,
            max_queued_requests=config.max_queued_requests,
            approval=config.approval(),
            coalescer=DeltaCoalescer(config.coalesce_ms / 1000.0, config.coalesce_chars),
        )
        self.commands = anyio.Semaphore(MAX_CONCURRENT_COMMANDS)

    async def run(self) -> None:
        follower = await Follower.open(self.kernel, self.session_id, client="agent-cli", caller=self.caller)
        try:
            # The writer and the commands still running are stopped, not cancelled from outside,
            # when the client goes (kernel/companions.py).
            async with side_tasks() as tasks:
                tasks.start_soon(self.write_events, follower)
                await self.read(tasks)
        finally:
            with anyio.CancelScope(shield=True):
                await self.release(follower)

    # -------------------------------------------------------------- reading

    async def read(self, tasks: SideTasks) -> None:
        async for event in self.ws:
            if isinstance(event, WsText):
                await self.on_frame(event.text, tasks)
            elif isinstance(event, WsTooLarge):
                await self.send([self.codec.too_large(event.size_bytes, event.limit_bytes)])
            elif isinstance(event, WsRateLimited):
                await self.send([self.codec.rate_limited(event.limit_per_minute, event.retry_after_s)])
            elif isinstance(event, WsInvalidFrame):
                await self.send([self.codec.invalid_frame(event.reason)])
            elif isinstance(event, WsIdle) and not await self.busy():
                await self.ws.close(CLOSE_NORMAL, "idle")

    async def busy(self) -> bool:
        """Whether a run of the session is going or waiting (an idle connection is kept then)."""
        try:
            info = await self.kernel.find_session(self.session_id, self.caller)
        except KernelError:
            return False
        return info is not None and info.busy

    async def on_frame(self, text: str, tasks: SideTasks) -> None:
        decoded = self.codec.decode(text)
        if isinstance(decoded, str):
            await self.send([decoded])
        elif isinstance(decoded.command, m.RunCommand):
            await self.commands.acquire()
            tasks.start_soon(self.run_command, decoded)
        else:
            await self.execute(decoded)

    async def run_command(self, incoming: Incoming) -> None:
        try:
            await self.execute(incoming)
        finally:
            self.commands.release()

    async def execute(self, incoming: Incoming) -> None:
        try:
            reply = await self.kernel.execute(incoming.command, self.caller)
        except KernelError as exc:
            frames = self.codec.on_error(incoming, exc)
        except Exception as exc:  # a plugin's command or tool bug must not end the connection
            log.exception("agent-cli: %s failed", incoming.variant)
            frames = self.codec.on_error(incoming, KernelError("internal", f"internal error: {type(exc).__name__}"))
        else:
            frames = self.codec.on_reply(incoming, reply)
        await self.send(frames)

    # -------------------------------------------------------------- writing

    async def write_events(self, follower: Follower) -> None:
        """Forward events until the session's hub closes; after a real gap (events lost
        while this client fell behind) its open runs end with a ``connection_error``."""
        while not follower.closed:
            batch = await follower.next_batch(self.codec.deadline)
            now = anyio.current_time()
            if not batch:
                frames = self.codec.tick(now)
            elif isinstance(batch[-1], m.SubscriberLagged):
                frames = self.codec.on_events(batch[:-1], now) + self.codec.events_lost(batch[-1].error.message)
            else:
                frames = self.codec.on_events(batch, now)
            if not await self.send(frames):
                return

    async def send(self, frames: list[str]) -> bool:
        return await self.ws.send_texts(frames)

    # -------------------------------------------------------------- end

    async def release(self, follower: Follower) -> None:
        """The client is gone: end its runs and unload its session (the history stays stored).

        Left alone when another client (another transport) watches the same session: this
        connection's own subscription is closed first, so the kernel counts only the others.
        """
        follower.close()
        try:
            await self.kernel.execute(m.CloseSession(session_id=self.session_id, if_unwatched=True), self.caller)
        except KernelError as exc:  # e.g. deleted meanwhile by another client
            log.debug("agent-cli: closing session %s: %s", self.session_id, exc.message)
