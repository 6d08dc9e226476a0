"""A session is an actor: one task owns its context and takes jobs from a bounded inbox.

Runs and history changes queue in the inbox and are done in order, one at a time, so
nothing changes the context while a run reads it. Interrupts and answers to a run's
questions do not queue: they act on the active run at once (through its cancel scope,
or the question :class:`~kernel.state.SessionMachine` holds open).
"""

from __future__ import annotations

import logging
import re
import secrets
import time
from collections import deque
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from .host import seq_key
from .hub import EventHub
from .jobs import ActiveRun, HistoryJob, Job, RunJob
from .model import (
    ContextCleared,
    Event,
    FileAccess,
    InterruptCause,
    KernelError,
    Message,
    ReasoningDelta,
    SessionInfo,
    TextDelta,
    ToolSource,
    Usage,
    parts_text,
    session_closed_end,
)
from .observe import CURRENT_RUN
from .run import execute_run
from .state import Answer, QuestionKind, SessionMachine
from .store import fenced_out

if TYPE_CHECKING:
    from .host import SessionHost
    from .settings import AgentSettings

log = logging.getLogger("gateway.kernel")


TITLE_CHARS = 60


_WORD = re.compile(r"\S+")


def title_of(message: Message) -> str | None:
    """A session's title from its first prompt: one line, at most ``TITLE_CHARS`` long.

    Only the words the title needs are read, not the whole prompt: a proxied request's
    prompt can be long, and its title is made on the way to the model call."""
    words: list[str] = []
    length = -1
    for word in _WORD.finditer(message.content or parts_text(message.parts)):
        words.append(word.group())
        length += len(words[-1]) + 1
        if length > TITLE_CHARS:
            break
    if not words:
        return None
    text = " ".join(words)
    return text if len(text) <= TITLE_CHARS else text[: TITLE_CHARS - 1].rstrip() + "…"


class Session:
    def __init__(
        self, host: SessionHost, session_id: str, agent: AgentSettings, *, label: str | None, created_at: float, ephemeral: bool = False
    ) -> None:
        cfg = host.settings.session
        self.host = host
        self.id = session_id
        self.agent = agent
        self.label = label
        self.created_at = created_at
        self.updated_at = created_at
        # An ephemeral session lives in memory only (a throw-away conversation, e.g. one
        # OpenAI-compatible request): nothing of it reaches the store.
        self.ephemeral = ephemeral
        # The store's fence of this instance's hold on the session (a cluster's takeover sets
        # it; kernel/store.py): its history writes are refused once another instance took it.
        self.fence: int | None = None
        # The principal (key name) it belongs to (kernel/access.py); set by whoever creates it.
        self.owner = "admin"
        self.context: list[Message] = []
        self.turns = 0
        self.usage = Usage()
        # Per-session overrides (ConfigureSession), None: the agent's or the kernel's value.
        self.max_turns: int | None = None
        self.approval_timeout_s: float | None = None
        self.model_override: str | None = None
        self.files: FileAccess | None = None
        self.tool_sources: tuple[ToolSource, ...] = ()
        self.title: str | None = None
        # Answers the client asked to remember ("always"), by tool name.
        self.remembered: dict[str, bool] = {}
        self.machine = SessionMachine()
        self.active: ActiveRun | None = None
        self.hub = EventHub(
            session_id,
            retention=cfg.event_retention,
            buffer_size=cfg.subscriber_buffer,
            grace_s=cfg.lag_grace_s,
            buffer_bytes=cfg.subscriber_buffer_bytes,
            retention_bytes=cfg.event_retention_bytes,
        )
        self.hub.on_lag_cut = host.observers.follower_cut
        self._inbox: deque[Job] = deque()
        self._inbox_size = cfg.inbox_size
        self._wake = anyio.Event()
        self.closing = False
        self.closing_cause: InterruptCause = "client"
        self._first_delta = False
        self._idle = anyio.Event()
        self._idle.set()

    # -------------------------------------------------------------- info

    @property
    def state(self) -> str:
        return self.machine.state

    def info(self) -> SessionInfo:
        active = self.active.job if self.active is not None else None
        return SessionInfo(
            session_id=self.id,
            agent_id=self.agent.agent_id(),
            label=self.label,
            title=self.title,
            created_at=self.created_at,
            updated_at=self.updated_at,
            message_count=len(self.context),
            state=self.machine.state,
            last_seq=self.hub.last_seq,
            usage=self.usage,
            run_id=active.run_id if active is not None else None,
            request_id=active.request_id if active is not None else None,
            queued=len(self._inbox),
            queued_requests=tuple(j.request_id for j in self._inbox if isinstance(j, RunJob) and j.request_id is not None),
            pending_call_id=self.machine.pending_key,
            subscribers=self.hub.subscriber_count,
            clients=tuple(sorted(set(self.hub.clients()))),
            model=self.model,
            max_turns=self.turn_limit,
            owner=self.owner,
        )

    @property
    def model(self) -> str:
        """The model the next run uses (a request's own ``model`` option aside)."""
        return self.model_override or self.host.agent_model(self.agent)

    @property
    def turn_limit(self) -> int:
        return self.max_turns if self.max_turns is not None else self.agent.max_turns

    @property
    def busy(self) -> bool:
        return self.active is not None or bool(self._inbox)

    async def emit(self, event: Event) -> Event:
        """Publish an event; while a subscriber is behind, wait for it (within its grace).

        The first delta of a streamed run is handed over to the readers it (or an event just before
        it) woke (:meth:`~kernel.hub.EventHub.hand_over`): the run goes on — parses the
        provider's next chunk — once they have written it, so the first token is never held back
        behind a burst; after it, deltas pile up in busy readers' buffers and merge, which
        is what makes bursts cheap. (Other events do not wait: a client that sees
        ``run_finished`` finds the session idle.)
        """
        stamped = self.hub.publish(event)
        if self.hub.backlogged:
            await self.hub.room()
        elif self._first_delta and isinstance(event, TextDelta | ReasoningDelta):
            self._first_delta = False
            await self.hub.hand_over()
        return stamped

    # -------------------------------------------------------------- inbox

    def enqueue(self, job: Job) -> bool:
        """Queue a job; returns whether it waits behind another. Full inbox = ``busy``."""
        if self.machine.state == "closed":
            raise KernelError("not_found", f"session {self.id} is closed")
        if len(self._inbox) >= self._inbox_size:
            raise KernelError("busy", f"session {self.id} has too many queued requests")
        queued = self.busy
        self._inbox.append(job)
        self._wake.set()
        if self._idle.is_set():
            self._idle = anyio.Event()
        return queued

    def new_run(self, request_id: str | None, **options: Any) -> RunJob:
        return RunJob(secrets.token_hex(8), request_id, **options)

    async def change_history(self, job: HistoryJob) -> bool:
        """Queue a history change; True once it is applied, False when it waits behind a run."""
        if not self.enqueue(job):
            await job.done.wait()
            if job.error is not None:
                raise job.error
            return True
        return False

    async def actor(self) -> None:
        """The session's one task: take jobs in order, one at a time."""
        while True:
            while not self._inbox:
                if self.machine.state == "closed":
                    return
                self._idle.set()
                self._wake = anyio.Event()
                await self._wake.wait()
            job = self._inbox[0]
            try:
                if isinstance(job, HistoryJob):
                    await self._apply(job)
                else:
                    await self._run(job)
            except Exception:
                log.exception("session %s: job failed", self.id)
            finally:
                if self._inbox and self._inbox[0] is job:
                    self._inbox.popleft()

    async def _run(self, job: RunJob) -> None:
        run = self.active = ActiveRun(job, session_id=self.id, agent=self.agent.agent_id())
        self._inbox.popleft()
        if job.interrupted or self.closing:
            # Accepted before the interrupt arrived: it still ends, once, as interrupted.
            run.interrupt(job.interrupt_cause if job.interrupted else self.closing_cause)
        self.machine.move("start_run")
        # A run whose answer is asked for whole (``options.stream`` false: a non-stream request)
        # has no first token to hurry out: its reader waits for the run's end, and handing the
        # first delta over cost it a scheduling round more before that end.
        self._first_delta = job.options.stream
        current = CURRENT_RUN.set(run.facts)  # log lines of the run say which run they are about
        try:
            await execute_run(self, run)
        finally:
            CURRENT_RUN.reset(current)
            self.active = None
            if self.machine.state != "closed":
                self.machine.move("end_run")

    async def _apply(self, job: HistoryJob) -> None:
        try:
            if job.change == "append":
                await self.persist(list(job.messages))
            else:
                if job.change != "replace":
                    self.turns = 0
                await self.replace_history(list(job.messages))
                if job.change == "clear_context":
                    await self.emit(ContextCleared(session_id=self.id, request_id=job.request_id))
        except KernelError as exc:
            job.error = exc
        finally:
            job.done.set()

    async def wait_idle(self) -> None:
        await self._idle.wait()

    def close(self) -> None:
        """Stop the actor (after its current job) and end every subscription.

        A run that has not told its end by now — the active one outlived the unload's grace
        (a stalled store write, a tool that ignores cancellation), or one still queued — is
        ended for its readers first (:func:`~kernel.model.session_closed_end`; in no history):
        following a session never stops in silence in the middle of a run, in any dialect.
        What such a run still does afterwards is published no more."""
        if self.machine.state != "closed":
            self.machine.move("close")
        unended = [job for job in self._inbox if isinstance(job, RunJob)]
        if self.active is not None and not self.active.ended:
            self.active.ended = True
            unended.insert(0, self.active.job)
        for owed in unended:
            self.hub.publish(session_closed_end(self.id, owed.run_id, owed.request_id, self.closing_cause))
        for job in self._inbox:
            if isinstance(job, HistoryJob):
                job.error = KernelError("not_found", f"session {self.id} was closed")
                job.done.set()
        self._inbox.clear()
        self._wake.set()
        self._idle.set()
        self.hub.close()

    # -------------------------------------------------------------- acting at once

    def interrupt(
        self, *, closing: bool = False, run_id: str | None = None, request_id: str | None = None, cause: InterruptCause = "client"
    ) -> bool:
        """Stop a run; False when there is none to stop.

        With neither id: the active run, or else the next queued one (accepted but not
        started: it ends as interrupted without a model call). With ``run_id`` or
        ``request_id``: that run only, active or queued (an error if there is none).
        ``closing`` (shutdown, the client left) ends every accepted run. ``cause`` is why
        (the client, a dialect's timeout, the gateway draining or shutting down): it
        travels on the run's ``run_finished`` so every dialect ends it in its failure form.
        """
        if closing and not self.closing:
            self.closing, self.closing_cause = True, cause
        queued = [job for job in self._inbox if isinstance(job, RunJob) and not job.interrupted]
        if closing:
            for job in queued:
                job.interrupt(cause)
            if self.active is not None:
                self.active.interrupt(cause)
            return bool(queued) or self.active is not None
        if run_id is not None or request_id is not None:
            def wanted(job: RunJob) -> bool:
                return (run_id is None or job.run_id == run_id) and (request_id is None or job.request_id == request_id)

            if self.active is not None and wanted(self.active.job):
                self.active.interrupt(cause)
                return True
            match = next((job for job in queued if wanted(job)), None)
            if match is None:
                which = f"run {run_id}" if run_id is not None else f"the run of request {request_id}"
                raise KernelError("invalid_request", f"{which} is not running")
            match.interrupt(cause)
            return True
        if self.active is not None:
            self.active.interrupt(cause)
            return True
        if queued:
            queued[0].interrupt(cause)
            return True
        return False

    def answer(self, kind: QuestionKind, key: str | None, answer: Answer) -> None:
        self.machine.answer(kind, key, answer, self.id)

    # -------------------------------------------------------------- the context (actor only)

    async def replace_history(self, messages: list[Message]) -> None:
        """Set the context (and the stored history) to ``messages``."""
        self.context[:] = messages
        self.updated_at = time.time()
        if not self.ephemeral:
            await self.host.store.replace_messages(self.id, self.context, fence=self.fence)

    def remember(self, messages: list[Message], now: float) -> list[Message]:
        """Add messages to the context (in memory only), as they are stored: dated ``now``
        unless they are, the first user message as the title, the history cap kept."""
        stamped = [m if m.created_at else msgspec.structs.replace(m, created_at=now) for m in messages]
        self.context.extend(stamped)
        self.updated_at = now
        if self.title is None:
            self.title = next((title_of(m) for m in stamped if m.role == "user"), None)
        cap = self.host.settings.session.history_cap
        if len(self.context) > cap:
            del self.context[: len(self.context) - cap]
        return stamped

    async def persist(self, messages: list[Message]) -> None:
        """Append to the context and the store before anything is acknowledged.

        Not once this instance knows it lost the session (``lease_lost``): another instance
        runs it now, and what this one would still write would land in its history or not
        depending on how the two raced to the store's fence — refused, as the fence would."""
        if not messages:
            return
        if self.closing and self.closing_cause == "owner_lost":
            raise fenced_out(self.id)
        now = time.time()
        if self.active is not None:  # a run's messages say which run stored them (Message.run_id)
            run = self.active
            messages = [
                msgspec.structs.replace(
                    m, created_at=m.created_at or now, run_id=run.job.run_id, request_id=run.job.request_id, interrupted=run.interrupted
                )
                for m in messages
            ]
        untitled = self.title is None
        stamped = self.remember(messages, now)
        if untitled and self.title is not None and not self.ephemeral:
            await self.host.store.set_title(self.id, self.title)
        if not self.ephemeral:
            await self.host.store.append_messages(self.id, stamped, self.host.settings.session.history_cap, fence=self.fence)
            if self.host.clustered:  # how far the seqs went, for whoever takes it over
                await self.host.store.set_value(seq_key(self.id), str(self.hub.last_seq).encode())

    async def history(self, limit: int) -> list[Message]:
        if self.ephemeral:
            return self.context[-limit:]
        return await self.host.store.load_messages(self.id, limit)
