"""``GET /api/agents/{id}/ws``: one OpenFang chat socket bound to the kernel.

The receive loop never waits for a run: a prompt is handed to the kernel (which
queues it behind a running one) and its events are rendered by one forwarder task
per session, so ``stop`` interrupts a running turn at once.  Each forwarder waits for
kernel events with the coalescer's deadline, batches what is ready, and writes one
frame per OpenFang event.
"""

from __future__ import annotations

import itertools
import logging
import uuid

import anyio
import msgspec
from anyio.abc import TaskGroup

from kernel import Follower, Kernel, KernelError
from kernel import model as m
from transports.shared import (
    CLOSE_NORMAL,
    WebSocket,
    WsIdle,
    WsInvalidFrame,
    WsRateLimited,
    WsText,
    WsTooLarge,
)

from .coalesce import DeltaCoalescer
from .codec import (
    DecodeContext,
    LocalCommand,
    Outbound,
    Ping,
    TurnEncoder,
    command_result,
    context_pressure,
    decode_frame,
    next_verbose,
)
from .config import OpenFangConfig
from .rest_codec import WEB_COMMANDS, agent_entry
from .state import ActiveSessions, Agents, UploadStore
from .wire import (
    AgentsUpdated,
    CommandResult,
    Connected,
    ErrorOut,
    Pong,
    ServerEvent,
    VerboseLevel,
    encode,
)

log = logging.getLogger("gateway.openfang")
_counter = itertools.count(1)


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
        self.prefix = f"of-{next(_counter)}-{uuid.uuid4().hex[:6]}"
        self.mine: set[str] = set()
        self.verbose: VerboseLevel = "full"
        self.encoders: dict[str, TurnEncoder] = {}
        self.last_session: str | None = None
        self._requests = itertools.count(1)
        self._tg: TaskGroup | None = None

    async def send(self, event: ServerEvent) -> bool:
        return await self.ws.send_text(encode(event))

    async def run(self) -> None:
        await self.send(Connected(agent_id=self.agent_id))
        listing = tuple(agent_entry(info) for info in self.agents.infos())
        await self.send(AgentsUpdated(agents=listing))
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._watch_agents, listing)
            async for event in self.ws:
                match event:
                    case WsText(text=text):
                        try:
                            await self._on_text(text)
                        except KernelError as exc:  # e.g. the agent was removed from the settings
                            await self.send(ErrorOut(content=exc.message))
                    case WsTooLarge(limit_bytes=limit):
                        await self.send(ErrorOut(content=f"Message too large (max {limit // 1024}KB)"))
                    case WsRateLimited(limit_per_minute=limit):
                        await self.send(ErrorOut(content=f"Rate limit exceeded. Max {limit} messages per minute."))
                    case WsInvalidFrame(reason=reason):
                        await self.send(ErrorOut(content=reason))
                    case WsIdle(idle_s=idle):
                        minutes = f"{idle / 60:g} min" if idle >= 60 else f"{idle:g} s"
                        await self.send(ErrorOut(content=f"Connection closed due to inactivity ({minutes} timeout)"))
                        await self.ws.close(CLOSE_NORMAL, "idle timeout")
            tg.cancel_scope.cancel()

    # ------------------------------------------------------------------ inbound

    async def _on_text(self, text: str) -> None:
        target = self.last_session or self.sessions.peek(self.agent_id)
        encoder = self.encoders.get(target) if target else None
        request_id = f"{self.prefix}-{next(self._requests)}"
        ctx = DecodeContext(
            agent_id=self.agent_id,
            request_id=request_id,
            uploads=self.uploads.snapshot(),
            kernel_commands=self.kernel.commands.keys(),
            pending_approval=encoder.pending_approval if encoder else None,
            awaiting_turns=encoder.awaiting_turns if encoder else False,
        )
        decoded = decode_frame(text, ctx)
        item = decoded.item
        if isinstance(item, Ping):
            await self.send(Pong())
        elif isinstance(item, ErrorOut):
            await self.send(item)
        elif isinstance(item, LocalCommand):
            await self.send(await self._local(item))
        elif isinstance(item, m.Prompt):
            await self._prompt(item)
        else:
            await self._kernel_command(item, decoded.command or "")

    async def _session_for(self, requested: str | None, *, for_prompt: bool = False) -> str:
        if requested is not None:
            return requested
        if not for_prompt and self.last_session is not None:
            return self.last_session
        return await self.sessions.get(self.agent_id)

    async def _prompt(self, prompt: m.Prompt) -> None:
        try:
            session_id = await self._session_for(prompt.session_id, for_prompt=True)
            await self.kernel.session(session_id, self.agent_id)
            self.sessions.touch(self.agent_id, session_id)
            await self._follow(session_id)
            assert prompt.request_id is not None
            self.mine.add(prompt.request_id)
            self.last_session = session_id
            await self.kernel.execute(m.Prompt(
                text=prompt.text, parts=prompt.parts, agent_id=self.agent_id,
                session_id=session_id, request_id=prompt.request_id,
            ))
        except KernelError as exc:
            await self.send(ErrorOut(content=exc.message))

    async def _kernel_command(self, command: m.Command, name: str) -> None:
        try:
            session_id = await self._session_for(command.session_id)
            if session_id not in self.kernel.sessions:
                await self.kernel.session(session_id, self.agent_id)
            command = msgspec.structs.replace(command, session_id=session_id)
            reply: m.Reply | KernelError = await self.kernel.execute(command)
        except KernelError as exc:
            reply = exc
        await self.send(command_result(name, reply))

    async def _local(self, command: LocalCommand) -> CommandResult:
        name = command.name
        if name == "verbose":
            self.verbose = next_verbose(self.verbose, command.args)
            for encoder in self.encoders.values():
                encoder.verbose = self.verbose
            return CommandResult(command=name, message=f"Verbose level: **{self.verbose}**")
        session_id = await self._session_for(command.session_id)
        session = self.kernel.sessions.get(session_id)
        encoder = self.encoders.get(session_id)
        if name == "queue":
            busy = session is not None and session.busy
            return CommandResult(command=name, message="Agent is processing a request..." if busy else "Agent is idle.")
        if name == "usage":
            usage = session.usage if session is not None else m.Usage()
            tokens_in, tokens_out = usage.input_tokens, usage.output_tokens
            return CommandResult(command=name, message=f"Session usage: ~{tokens_in} in / ~{tokens_out} out (~{tokens_in + tokens_out} total)")
        if name == "context":
            return self._context(session_id, session.info().message_count if session else 0, encoder)
        if name == "compact":
            window = self.kernel.agent(self.agent_id).max_context_messages
            return CommandResult(command=name, message=(
                f"Compaction is not available here: the model always sees the last {window} messages. "
                "Use /new to clear the history."
            ))
        if name == "budget":
            return CommandResult(command=name, message="No spending limits are configured: this gateway does not meter costs.")
        if name == "peers":
            return CommandResult(command=name, message="OFP network disabled.")
        if name == "a2a":
            return CommandResult(command=name, message="No external A2A agents discovered.")
        lines = [f"`/{n}` — {d}" for n, d, _ in WEB_COMMANDS]
        lines += [f"`/{c.name}` — {c.description}" for c in self.kernel.commands.values() if c.name not in {n for n, _, _ in WEB_COMMANDS}]
        return CommandResult(command="help", message="Available commands:\n" + "\n".join(lines))

    def _context(self, session_id: str, message_count: int, encoder: TurnEncoder | None) -> CommandResult:
        window = self.config.context_window_tokens
        tokens = encoder.last_input_tokens if encoder else 0
        pressure = context_pressure(tokens, window)
        limit = self.kernel.agent(self.agent_id).max_context_messages
        message = (
            f"Session {session_id}: {message_count} messages in history; the model sees the last {limit}.\n"
            f"Last request: ~{tokens} input tokens of a {window}-token window "
            f"({min(tokens / max(window, 1) * 100, 100):.1f}%). Pressure: {pressure}."
        )
        return CommandResult(command="context", message=message, context_pressure=pressure)

    # ----------------------------------------------------------------- outbound

    async def _follow(self, session_id: str) -> None:
        """Subscribe to a session (once) before the first prompt goes to it."""
        if session_id in self.encoders:
            return
        assert self._tg is not None
        encoder = TurnEncoder(self.mine, verbose=self.verbose, window_tokens=self.config.context_window_tokens)
        self.encoders[session_id] = encoder
        feed = await Follower.open(self.kernel, session_id)
        coalescer = DeltaCoalescer(self.config.coalesce_ms / 1000.0, self.config.coalesce_chars)
        self._tg.start_soon(self._forward, feed, Outbound(encoder, coalescer))

    async def _forward(self, feed: Follower, outbound: Outbound) -> None:
        try:
            while not feed.closed and not self.ws.closed:
                batch = await feed.next_batch(outbound.deadline)
                now = anyio.current_time()
                frames = outbound.feed(batch, now) if batch else outbound.tick(now)
                for lost in (e for e in batch if isinstance(e, m.SubscriberLagged)):
                    frames += [*outbound.flush(), ErrorOut(content=f"This connection fell behind and missed events: {lost.error.message}")]
                if frames and not await self.ws.send_texts([encode(frame) for frame in frames]):
                    return
        finally:
            feed.close()
            if self.encoders.get(feed.session_id) is outbound.encoder:
                del self.encoders[feed.session_id]  # a session deleted elsewhere is followed anew
            await self._decline_pending(feed.session_id, outbound.encoder)

    async def _decline_pending(self, session_id: str, encoder: TurnEncoder) -> None:
        """A question asked of a socket that is gone is answered "no" now, not at its timeout."""
        if encoder.pending_approval is None:
            return
        with anyio.CancelScope(shield=True):
            try:
                await self.kernel.execute(m.ResolveToolApproval(
                    session_id=session_id, call_id=encoder.pending_approval, approved=False, reason="the client disconnected",
                ))
            except KernelError:
                pass  # answered meanwhile, or the session is gone

    async def _watch_agents(self, last: tuple[object, ...]) -> None:
        """``agents_updated`` again only when the agent list changed (OpenFang polls every 5 s)."""
        while self.config.agents_poll_s > 0:
            await anyio.sleep(self.config.agents_poll_s)
            listing = tuple(agent_entry(info) for info in self.agents.infos())
            if listing != last:
                last = listing
                if not await self.send(AgentsUpdated(agents=listing)):
                    return

