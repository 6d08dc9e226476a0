"""A session is an actor: one task owns its state and reads a bounded inbox.

Prompts, regenerations and context clears queue in the inbox in order. Interrupts
and answers to approval / turn-limit questions do not queue: they act on the
active run at once (through its cancel scope or its pending question).
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import TYPE_CHECKING, Literal

import anyio
import msgspec
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from .hub import EventHub
from .model import (
    ClearContext,
    ContextCleared,
    Event,
    KernelError,
    Message,
    PromptOptions,
    ContentPart,
    SessionInfo,
    Usage,
)
from .settings import AgentSettings

if TYPE_CHECKING:
    from .kernel import Kernel

log = logging.getLogger("gateway.kernel")

State = Literal["idle", "running", "awaiting_tool_approval", "awaiting_turn_confirmation"]


class RunJob(msgspec.Struct, kw_only=True):
    run_id: str
    request_id: str | None
    parts: tuple[ContentPart, ...] = ()
    options: PromptOptions = PromptOptions()
    regenerate: bool = False
    resume: bool = False


class ClearJob(msgspec.Struct, kw_only=True):
    request_id: str | None


Job = RunJob | ClearJob


class Question:
    """A pending question to the client (tool approval or turn limit) and its answer."""

    def __init__(self, key: str | None) -> None:
        self.key = key
        self.answered = anyio.Event()
        self.yes = False
        self.reason: str | None = None
        self.remember = False

    def answer(self, yes: bool, reason: str | None, remember: bool = False) -> None:
        self.yes, self.reason, self.remember = yes, reason, remember
        self.answered.set()


class ActiveRun:
    def __init__(self, job: RunJob) -> None:
        self.job = job
        self.scope = anyio.CancelScope()
        self.interrupted = False
        self.question: Question | None = None


class Session:
    def __init__(
        self, kernel: Kernel, session_id: str, agent: AgentSettings, *, label: str | None, created_at: float, ephemeral: bool = False
    ) -> None:
        cfg = kernel.settings.session
        self.kernel = kernel
        self.id = session_id
        self.agent = agent
        self.label = label
        self.created_at = created_at
        # An ephemeral session lives in memory only (a throw-away conversation, e.g. one
        # OpenAI-compatible request): nothing of it reaches the store.
        self.ephemeral = ephemeral
        self.context: list[Message] = []
        self.turns = 0
        self.state: State = "idle"
        self.model_override: str | None = None
        # Per-session overrides a transport may set (e.g. Agent-CLI's max_turns, approval timeout).
        self.max_turns: int | None = None
        self.approval_timeout_s: float | None = None
        self.tool_policy: dict[str, bool] = {}
        self.usage = Usage()
        self.active: ActiveRun | None = None
        self.files = None  # a FileAccess override for this session (ACP's editor view)
        self.hub = EventHub(session_id, retention=cfg.event_retention, buffer_size=cfg.subscriber_buffer, grace_s=cfg.lag_grace_s)
        send: MemoryObjectSendStream[Job]
        receive: MemoryObjectReceiveStream[Job]
        send, receive = anyio.create_memory_object_stream[Job](cfg.inbox_size)
        self._inbox_send = send
        self._inbox_receive = receive
        self._queued = 0
        self._queued_runs = 0
        self._interrupt_next = False
        self.closing = False
        self._idle = anyio.Event()
        self._idle.set()

    # -------------------------------------------------------------- info

    def info(self) -> SessionInfo:
        return SessionInfo(
            session_id=self.id,
            agent_id=self.agent.agent_id(),
            label=self.label,
            created_at=self.created_at,
            message_count=len(self.context),
            state=self.state,
            last_seq=self.hub.last_seq,
            usage=self.usage,
        )

    @property
    def busy(self) -> bool:
        return self.active is not None or self._queued > 0

    def emit(self, event: Event) -> Event:
        return self.hub.publish(event)

    # -------------------------------------------------------------- inbox

    def enqueue(self, job: Job) -> bool:
        """Queue a job; returns whether it waits behind another. Full inbox = ``busy``."""
        queued = self.busy
        try:
            self._inbox_send.send_nowait(job)
        except anyio.WouldBlock:
            raise KernelError("busy", f"session {self.id} has too many queued requests") from None
        self._queued += 1
        if isinstance(job, RunJob):
            self._queued_runs += 1
        self._idle = anyio.Event() if self._idle.is_set() else self._idle
        return queued

    def new_run(self, request_id: str | None, **kw: object) -> RunJob:
        return RunJob(run_id=uuid.uuid4().hex[:16], request_id=request_id, **kw)  # type: ignore[arg-type]

    async def actor(self) -> None:
        """The session's one task: take jobs in order, one at a time."""
        from .run import execute_run

        async with self._inbox_receive:
            async for job in self._inbox_receive:
                self._queued -= 1
                try:
                    if isinstance(job, ClearJob):
                        await self.clear_context(job.request_id)
                    else:
                        self._queued_runs -= 1
                        self.active = ActiveRun(job)
                        if self._interrupt_next or self.closing:
                            # Accepted before the interrupt arrived: it still ends, once, as interrupted.
                            self._interrupt_next = False
                            self.active.interrupted = True
                            self.active.scope.cancel()
                        self.state = "running"
                        await execute_run(self, self.active)
                except Exception:
                    log.exception("session %s: job failed", self.id)
                finally:
                    self.active = None
                    self.state = "idle"
                    if self._queued == 0:
                        self._idle.set()

    async def wait_idle(self) -> None:
        await self._idle.wait()

    def close(self) -> None:
        self._inbox_send.close()
        self.hub.close()

    # -------------------------------------------------------------- acting at once

    def interrupt(self, *, closing: bool = False, run_id: str | None = None) -> bool:
        """Stop the active run (or the accepted one about to start); False when none.

        Queued prompts behind the active run are kept, unless the session is
        closing (shutdown), when every accepted run ends as interrupted.
        """
        self.closing = self.closing or closing
        run = self.active
        if run_id is not None and (run is None or run.job.run_id != run_id):
            raise KernelError("invalid_request", f"run {run_id} is not running")
        if run is None:
            if self._queued_runs == 0:
                return False
            self._interrupt_next = True
            return True
        run.interrupted = True
        run.scope.cancel()
        return True

    def resolve(self, kind: State, key: str | None, yes: bool, reason: str | None, remember: bool = False) -> None:
        run = self.active
        question = run.question if run is not None else None
        if run is None or question is None or self.state != kind:
            what = "tool approval" if kind == "awaiting_tool_approval" else "turn confirmation"
            raise KernelError("invalid_request", f"no pending {what} in session {self.id}")
        if key is not None and question.key is not None and key != question.key:
            raise KernelError("not_found", f"no pending tool call {key!r} (pending: {question.key!r})")
        question.answer(yes, reason, remember)

    async def clear_context(self, request_id: str | None) -> None:
        self.turns = 0
        await self.replace_history([])
        self.emit(ContextCleared(session_id=self.id, request_id=request_id))

    async def replace_history(self, messages: list[Message]) -> None:
        """Set the context (and the stored history) to ``messages``."""
        self.context[:] = messages
        if not self.ephemeral:
            await self.kernel.store.replace_messages(self.id, self.context)

    async def persist(self, messages: list[Message]) -> None:
        """Append to the context and the store before anything is acknowledged."""
        if not messages:
            return
        stamped = [m if m.created_at else msgspec.structs.replace(m, created_at=time.time()) for m in messages]
        self.context.extend(stamped)
        cap = self.kernel.settings.session.history_cap
        if len(self.context) > cap:
            del self.context[: len(self.context) - cap]
        if not self.ephemeral:
            await self.kernel.store.append_messages(self.id, stamped, cap)

    async def history(self, limit: int) -> list[Message]:
        if self.ephemeral:
            return self.context[-limit:]
        return await self.kernel.store.load_messages(self.id, limit)


def clear_job(command: ClearContext) -> ClearJob:
    return ClearJob(request_id=command.request_id)
