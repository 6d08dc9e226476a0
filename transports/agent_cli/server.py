"""The Agent-CLI transport: a WebSocket endpoint binding the codec to the kernel.

One connection = one new kernel session. Two tasks per connection: the reader
decodes frames and executes them at once, in order (so a prompt queues behind a
running one in the kernel while an Interrupt or a confirmation acts immediately);
the writer forwards the session's events, turning everything that is ready at
the same moment into frames in one go (adjacent stream chunks merged). Slash
commands run in their own tasks, since a plugin's command may be slow.
"""

from __future__ import annotations

import logging
import os
from functools import partial
from typing import Literal

import anyio
from anyio.abc import TaskGroup, TaskStatus

from kernel import Follower, Kernel, KernelError
from kernel import model as m
from transports.shared import (
    CLOSE_INTERNAL_ERROR,
    CLOSE_NORMAL,
    TOKEN_ENV_VAR,
    ConfigError,
    Router,
    ServerConfig,
    WebSocket,
    WsIdle,
    WsInvalidFrame,
    WsRateLimited,
    WsText,
    WsTooLarge,
    serve_http,
    validate_bind,
)

from .codec import AgentCliCodec, Incoming
from .inputs import Limits

log = logging.getLogger("gateway.agent_cli")

#: Slash commands running at once per connection; the reader waits beyond that.
MAX_CONCURRENT_COMMANDS = 4


class AgentCliConfig(ServerConfig, kw_only=True, forbid_unknown_fields=True):
    """``[transports.agent_cli]``; every option is described in docs/agent-cli.md."""

    port: int = 8080
    path: str = "/"
    agent: str | None = None
    complete_tag: Literal["Complete", "StreamComplete"] = "Complete"
    approval_timeout_s: float = 300.0
    max_turns: int | None = None
    max_queued_requests: int = 8
    max_file_bytes: int = 1_048_576
    max_image_bytes: int = 3_145_728
    max_input_parts: int = 16
    max_message_bytes: int = 4_194_304

    def check(self) -> None:
        if not self.path.startswith("/"):
            raise ConfigError(f"[transports.agent_cli] path must start with '/': {self.path!r}")
        for name in ("max_queued_requests", "max_file_bytes", "max_image_bytes", "max_input_parts"):
            if getattr(self, name) < (0 if name == "max_queued_requests" else 1):
                raise ConfigError(f"[transports.agent_cli] {name} is out of range: {getattr(self, name)}")
        if self.max_turns is not None and self.max_turns < 0:
            raise ConfigError("[transports.agent_cli] max_turns must be >= 0 (0 = unlimited)")


class AgentCliTransport:
    name = "agent-cli"
    description = "Agent-CLI remote protocol: JSON requests/responses over a WebSocket (v1.0-v1.7)"
    Config = AgentCliConfig

    async def serve(self, kernel: Kernel, config: AgentCliConfig, *, task_status: TaskStatus[str | None] = anyio.TASK_STATUS_IGNORED) -> None:
        config.check()
        validate_bind(config, os.environ.get(TOKEN_ENV_VAR))  # here, so it is not wrapped in a task group's error
        try:
            kernel.agent(config.agent)  # an unknown agent is a start-up error, not a per-connection one
        except KernelError as exc:
            raise ConfigError(f"[transports.agent_cli] agent: {exc.message}") from None
        router = Router(config)
        router.websocket(config.path, partial(_serve_connection, kernel, config))
        await serve_http(router, config, lag_grace_s=kernel.settings.session.lag_grace_s, task_status=task_status)


async def _serve_connection(kernel: Kernel, config: AgentCliConfig, ws: WebSocket) -> None:
    if not await ws.accept():
        return
    ws.send_timeout_s = kernel.settings.session.lag_grace_s  # a client that stops reading is cut off
    try:
        session = await kernel.session(None, config.agent)
    except KernelError as exc:
        log.error("agent-cli: cannot open a session: %s", exc.message)
        await ws.close(CLOSE_INTERNAL_ERROR, "cannot open a session")
        return
    session.max_turns = config.max_turns
    if config.approval_timeout_s > 0:
        session.approval_timeout_s = config.approval_timeout_s
    await _Connection(kernel, config, ws, session.id).run()


class _Connection:
    def __init__(self, kernel: Kernel, config: AgentCliConfig, ws: WebSocket, session_id: str) -> None:
        self.kernel = kernel
        self.config = config
        self.ws = ws
        self.session_id = session_id
        limits = Limits(max_file_bytes=config.max_file_bytes, max_image_bytes=config.max_image_bytes, max_parts=config.max_input_parts)
        self.codec = AgentCliCodec(
            session_id, complete_tag=config.complete_tag, limits=limits, max_queued_requests=config.max_queued_requests
        )
        self.commands = anyio.Semaphore(MAX_CONCURRENT_COMMANDS)

    async def run(self) -> None:
        follower = await Follower.open(self.kernel, self.session_id)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self.write_events, follower)
                await self.read(tg)
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await self.release(follower)

    # -------------------------------------------------------------- reading

    async def read(self, tg: TaskGroup) -> None:
        async for event in self.ws:
            if isinstance(event, WsText):
                await self.on_frame(event.text, tg)
            elif isinstance(event, WsTooLarge):
                await self.send([self.codec.too_large(event.size_bytes, event.limit_bytes)])
            elif isinstance(event, WsRateLimited):
                await self.send([self.codec.rate_limited(event.limit_per_minute, event.retry_after_s)])
            elif isinstance(event, WsInvalidFrame):
                await self.send([self.codec.invalid_frame(event.reason)])
            elif isinstance(event, WsIdle):
                session = self.kernel.sessions.get(self.session_id)
                if session is None or not session.busy:
                    await self.ws.close(CLOSE_NORMAL, "idle")

    async def on_frame(self, text: str, tg: TaskGroup) -> None:
        decoded = self.codec.decode(text)
        if isinstance(decoded, str):
            await self.send([decoded])
        elif isinstance(decoded.command, m.RunCommand):
            await self.commands.acquire()
            tg.start_soon(self.run_command, decoded)
        else:
            await self.execute(decoded)

    async def run_command(self, incoming: Incoming) -> None:
        try:
            await self.execute(incoming)
        finally:
            self.commands.release()

    async def execute(self, incoming: Incoming) -> None:
        try:
            reply = await self.kernel.execute(incoming.command)
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
        while batch := await follower.next_batch():
            lost = batch.pop() if isinstance(batch[-1], m.SubscriberLagged) else None
            frames = self.codec.on_events(batch)
            if lost is not None:
                frames += self.codec.events_lost(lost.error.message)
            if not await self.send(frames):
                return

    async def send(self, frames: list[str]) -> bool:
        return await self.ws.send_texts(frames)

    # -------------------------------------------------------------- end

    async def release(self, follower: Follower) -> None:
        """The client is gone: end its runs and unload its session (the history stays stored).

        Left alone when another client (another transport) watches the same session.
        """
        follower.close()
        session = self.kernel.sessions.get(self.session_id)
        if session is None or session.hub.subscriber_count > 0:
            return
        await self.kernel.unload_session(self.session_id)
