"""Several gateway instances as one: the kernel's side of sharing sessions.

Off by default. With a :class:`Cluster` (the Redis implementation is a plugin), exactly one
instance runs a session's actor at a time — the one holding its lease — and the others:

* **forward** every command about that session to the owner and return its reply, so a
  transport cannot tell a session owned elsewhere from a local one (the seam);
* **follow** its events from the cluster's shared stream (:class:`RemoteSubscription`,
  resumable after a ``seq`` on any instance, like a local subscription);
* **take it over** when the owner is gone (its lease expired): the next command, or a
  follower that noticed, claims the session and loads it from the shared store; a run that
  was in flight ends for every follower with ``run_failed`` (``owner_lost``), and the
  ``seq`` goes on from the stream's last one, never reused.

The owner mirrors every event of its sessions into the stream; nothing here waits on the
cluster on the hot path (publishing is batched by the cluster in the background).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Protocol

import anyio
from anyio.abc import TaskStatus

from . import model as m
from .model import ErrorInfo, Event, KernelError, RunFailed, RunStarted, SubscriberLagged

log = logging.getLogger("gateway.cluster")

#: Commands about one session: carried out by the instance that owns it.
ROUTED: tuple[type[m.Command], ...] = (
    m.Prompt,
    m.Regenerate,
    m.Continue,
    m.Interrupt,
    m.ClearContext,
    m.ResolveToolApproval,
    m.ResolveTurnLimit,
    m.ExecuteTool,
    m.OpenSession,
    m.GetSession,
    m.ConfigureSession,
    m.CloseSession,
    m.DeleteSession,
    m.GetHistory,
    m.SaveHistory,
    m.ClearHistory,
)

#: Routed commands that change nothing: carried out again here when their owner did not
#: answer (it died), whether or not it had taken them. Any other command is carried out here
#: only when the owner provably never took it (:class:`CommandWithdrawn`) — at most once.
READ_ONLY: tuple[type[m.Command], ...] = (m.GetSession, m.GetHistory)

#: How long a remote follower waits for events before it checks that the owner is alive.
OWNER_CHECK_S = 1.0


class CommandWithdrawn(KernelError):
    """A forwarded command taken back before its owner took it: it never runs there, so the
    instance that forwarded it may carry it out itself (after taking the session over)."""

    def __init__(self, message: str) -> None:
        super().__init__("unavailable", message)


class ClusterHost(Protocol):
    """What the cluster calls back in its kernel."""

    async def execute_forwarded(self, command: m.Command, caller: m.Caller | None = None) -> m.Reply:
        """Carry out a forwarded command as ``caller`` (who sent it, at the instance it arrived
        at): the owner checks scope and ownership again."""
        ...

    def lease_lost(self, session_id: str) -> None: ...


class Cluster(Protocol):
    instance_id: str

    async def run(self, host: ClusterHost, *, task_status: TaskStatus[None]) -> None:
        """Serve forwarded commands, renew leases and publish events until cancelled."""

    async def close(self) -> None:
        """The kernel is stopping (``run`` is cancelled next): flush, give the leases up."""

    async def claim(self, session_id: str) -> str | None:
        """Take the session's lease (or keep it): None when this instance owns it now,
        else the owner's instance id."""

    async def confirm(self, session_id: str) -> str | None:
        """For a session loaded here: keep its lease (renewed, or taken again if it lapsed
        with nobody else taking it) and return None — or, when another instance holds it now,
        that instance's id (this one stalled past its lease)."""

    async def owner(self, session_id: str) -> str | None:
        """The instance holding the session's lease, if any (nothing is claimed)."""

    async def ping(self) -> None:
        """Return once the cluster's backend answers (readiness); raise KernelError if not."""

    async def release(self, session_id: str) -> None:
        """Give the lease up (the session was unloaded here)."""

    async def forward(self, owner: str, command: m.Command) -> m.Reply:
        """The owner's reply to ``command``; its KernelError is raised here. Carried out at
        most once: the owner takes a command exactly once, and a command given up on is
        withdrawn unless the owner took it first. The wait is bounded by the owner's lease:
        when the lease expires (or moves) before the owner took the command, the command is
        withdrawn and :class:`CommandWithdrawn` raised, so the session is taken over after
        ``lease_s``, not after the forward timeout; when the owner took it and its lease then
        expires, its answer is awaited one more lease, then ``owner_lost`` is raised (the
        command may have been carried out). Any other failure is ``unavailable``."""

    def publish(self, event: Event) -> None:
        """Mirror an event of a session owned here into the shared stream (never blocks)."""

    def ended(self, session_id: str) -> None:
        """The session was deleted: its followers everywhere stop."""

    async def read(self, session_id: str, after_seq: int, timeout_s: float) -> list[Event] | None:
        """Events after ``after_seq`` (waiting up to ``timeout_s`` for the first); ``None``
        once the session was deleted."""

    async def tail(self, session_id: str, count: int) -> list[Event]:
        """The stream's last ``count`` events, oldest first."""


#: Why a run whose owner died ends (a ``run_failed`` with code ``owner_lost``).
OWNER_LOST = "the gateway instance running this session stopped; another took it over"
#: The same for a run the owner accepted and never started (it was queued there, or the owner
#: died before announcing it): the new owner never heard of it.
NEVER_STARTED = "the gateway instance that accepted this run stopped before running it; another took the session over"


def events_lost_at_takeover(session_id: str, published_seq: int, lost_to_seq: int) -> SubscriberLagged:
    """The new owner's note, in the stream at seq ``lost_to_seq``, that the events after
    ``published_seq`` up to it never reached the stream: its previous owner emitted them, then
    found its lease gone and its events refused (``Cluster.publish`` is fenced by the lease),
    while the seq it had reached was already saved. A reader at ``published_seq`` missed
    nothing it could have read, and no run it follows will go on: it ends them ``owner_lost``,
    not as a reader that fell behind."""
    return SubscriberLagged(
        session_id=session_id,
        seq=lost_to_seq,
        last_seq=published_seq,
        error=ErrorInfo(code="owner_lost", message=f"{OWNER_LOST}; its events after seq {published_seq} never reached the cluster"),
    )


def owner_lost(tail: list[Event]) -> RunFailed | None:
    """The ``run_failed`` that ends a run the dead owner left in flight (``None``: none was)."""
    ended: set[str] = set()
    for event in reversed(tail):
        if isinstance(event, m.RunFinished | m.RunFailed):
            ended.add(event.run_id)
        elif isinstance(event, RunStarted) and event.run_id not in ended:
            return RunFailed(
                session_id=event.session_id, run_id=event.run_id, request_id=event.request_id, error=ErrorInfo(code="owner_lost", message=OWNER_LOST)
            )
    return None


class RemoteSubscription:
    """A session's events from the cluster's stream, for a session owned by another instance.

    It has what a :class:`~kernel.follow.Follower` uses of a local subscription. It reads on
    demand (the shared stream is the buffer), reports a gap in the seqs as a final
    ``subscriber_lagged`` event, and when the owner is gone it takes the session over
    through its kernel, then goes on reading the events the new owner (this instance)
    mirrors into the stream.

    It also ends the runs the stream will never tell of: a run whose command was sent from
    this instance and accepted by the owner (:meth:`expect`) but never started there — it was
    queued behind another, or the owner died between accepting it and announcing it — ends
    ``owner_lost`` here once the session (at its new owner) neither runs nor queues it.
    """

    def __init__(
        self, ask: Callable[[m.GetSession], Awaitable[m.SessionOpened]], cluster: Cluster, session_id: str, after_seq: int, client: str | None,
        *, resumed: bool = False,
    ) -> None:
        # ``Kernel.execute`` for GetSession: routed, so it reaches the owner or takes over.
        self._ask = ask
        self._cluster = cluster
        self._session_id = session_id
        self._buffer: deque[Event] = deque()
        self._delivered_seq = after_seq
        self._read_seq = after_seq
        self._closed = False
        self.client = client
        # Made to resume after a seq (not "from now"): the stream's silence then says nothing.
        self._resumed = resumed
        # Runs whose start was read and whose end was not yet (their request ids): if the
        # session no longer runs one of them, its end was lost (the owner died while Redis was
        # away); when this instance stops first, they end here with its reason.
        self._open_runs: dict[str, str | None] = {}
        # Runs accepted for commands sent from here whose start was not read yet (their request ids).
        self._expected: dict[str, str | None] = {}
        # The runs whose end was read lately: an acceptance read after its run's end expects nothing.
        self._ended: deque[str] = deque(maxlen=64)

    @property
    def session_id(self) -> str:
        return self._session_id

    @property
    def last_seq(self) -> int:
        return self._delivered_seq

    @property
    def pending(self) -> int:
        return len(self._buffer)

    @property
    def newest_seq(self) -> int:
        """The newest event read from the stream (it is read on demand: it grows only then)."""
        return self._read_seq

    def _take(self) -> Event:
        event = self._buffer.popleft()
        if event.seq and not isinstance(event, SubscriberLagged):  # a made-up end (seq 0) is in no log
            self._delivered_seq = event.seq
        return event

    def receive_nowait(self) -> list[Event]:
        out: list[Event] = []
        while self._buffer:
            out.append(self._take())
        return out

    def __aiter__(self) -> RemoteSubscription:
        return self

    async def __anext__(self) -> Event:
        while not self._buffer:
            if self._closed:
                raise StopAsyncIteration
            await self._fill()
        return self._take()

    async def prime(self) -> None:
        """What is already there, at once — as a local subscription has its missed events (or
        the notice that they are gone) ready when it is made: a follower that resumes relies on it."""
        events = await self._cluster.read(self._session_id, self._read_seq, 0.001)
        self._take_in(events)
        if self._resumed and not self._buffer and not self._closed:
            # Nothing after the seq it resumes from: the session may be further on all the
            # same (a restarted Redis lost those events) — then that is a gap, told at once,
            # or a follower resuming after a loss would wait for the end of a run already over.
            await self._check_position()

    async def _fill(self) -> None:
        try:
            events = await self._cluster.read(self._session_id, self._read_seq, OWNER_CHECK_S)
        except KernelError as exc:
            log.warning("following session %s: %s; retrying", self._session_id, exc.message)
            await anyio.sleep(OWNER_CHECK_S)
            return
        if events is not None and not events:
            await self._check_position()
            return
        self._take_in(events)

    def _take_in(self, events: list[Event] | None) -> None:
        if events is None:  # deleted
            self._closed = True
            return
        if not events:
            return
        if not self._continues(events[0]):
            self._gap(f"the events after seq {self._read_seq} are no longer retained", events[0].seq)
            return
        self._extend(events)

    def _continues(self, event: Event) -> bool:
        """``event`` is the next one to read: the next seq, or a new owner's note that the
        events after the last one read never reached the stream (:func:`events_lost_at_takeover`)."""
        if isinstance(event, SubscriberLagged):
            return event.last_seq == self._read_seq
        return event.seq == self._read_seq + 1

    def _gap(self, message: str, seq: int) -> None:
        """Events after the last one read are gone: told to the follower, and following ends."""
        self._buffer.append(
            SubscriberLagged(session_id=self._session_id, seq=seq, last_seq=self._read_seq, error=ErrorInfo(code="rate_limited", message=message))
        )
        self._closed = True

    def _extend(self, events: list[Event]) -> None:
        for event in events:
            if isinstance(event, SubscriberLagged):  # a new owner's note (it follows the last event it read)
                self._buffer.append(event)
                self._closed = True
                return
            self._buffer.append(event)
            self._read_seq = event.seq
            if isinstance(event, RunStarted):
                self._expected.pop(event.run_id, None)
                self._open_runs[event.run_id] = event.request_id
            elif isinstance(event, m.RunFinished | m.RunFailed):
                self._expected.pop(event.run_id, None)
                self._open_runs.pop(event.run_id, None)
                self._ended.append(event.run_id)

    def expect(self, run_id: str, request_id: str | None) -> None:
        """The owner accepted a run of this session for a command sent from here: its end is
        owed to this follower even if the stream never tells of the run."""
        if not self._closed and run_id not in self._open_runs and run_id not in self._ended:
            self._expected[run_id] = request_id

    def inherit(self, older: RemoteSubscription) -> None:
        """Expect what ``older`` expected — the subscription this one replaces, which fell
        behind: the runs accepted for commands sent from here that it never saw start. (A run it
        saw start and not end needs nothing: the gap it fell into was reported to its follower,
        which asks whether the run still goes on; this one reads from after the gap.)"""
        for run_id, request_id in older._expected.items():
            self.expect(run_id, request_id)

    @property
    def following_a_run(self) -> bool:
        """A run of the session started (or was accepted) and its end has not reached this
        follower yet."""
        return bool(self._open_runs or self._expected) and not self._closed

    def _end_here(self, runs: dict[str, str | None], error: ErrorInfo) -> None:
        """End ``runs`` for this follower with ``error``: a ``run_failed`` the kernel makes up
        (seq 0: in no log), so that no client's stream of them waits for ever or closes looking
        complete."""
        for run_id, request_id in runs.items():
            self._buffer.append(RunFailed(session_id=self._session_id, run_id=run_id, request_id=request_id, error=error))
            self._open_runs.pop(run_id, None)
            self._expected.pop(run_id, None)
            self._ended.append(run_id)

    def stop(self, error: ErrorInfo) -> None:
        """This instance stops before the runs it follows end (they go on at their owner):
        each ends here with ``error``; then following ends."""
        self._end_here({**self._open_runs, **self._expected}, error)
        self._closed = True

    async def _check_position(self) -> None:
        """Nothing new in the stream for a while: ask the session where it is. Asking goes
        to its owner — or, when the owner is gone, takes the session over here. A session
        further on than the stream shows lost events (Redis lost them): that is a gap.

        A session *not* further on lost nothing after what was read. A run read to start that
        it does not run now then ends here ``owner_lost``: its end will never be in the
        stream. Its owner lost the session mid-run, and the new owner makes up an end only for
        the run in flight that the stream's tail shows; a follower must not wait for ever on a
        run that tail no longer shows, or whose made-up end did not reach the stream (Redis away)."""
        try:
            reply = await self._ask(m.GetSession(session_id=self._session_id))
        except KernelError as exc:
            if exc.code == "not_found":
                self._closed = True
            else:
                log.warning("following session %s: %s", self._session_id, exc.message)
            return
        info = reply.session
        stranded = {run_id: request_id for run_id, request_id in self._open_runs.items() if run_id != info.run_id}
        if info.last_seq <= self._read_seq:
            if stranded:
                log.warning("following session %s: %d run(s) in flight lost their owner: ended owner_lost", self._session_id, len(stranded))
                self._end_here(stranded, ErrorInfo(code="owner_lost", message=OWNER_LOST))
            self._end_never_started(info)
            return
        lost_end = bool(stranded)
        try:
            events = await self._cluster.read(self._session_id, self._read_seq, OWNER_CHECK_S)  # its last events may be on their way
        except KernelError:
            return
        if events is None:
            self._closed = True
        elif events and self._continues(events[0]):
            self._extend(events)
        else:
            self._gap(f"the events after seq {self._read_seq} were lost by the cluster" + (" (a run's end among them)" if lost_end else ""), info.last_seq)

    def _end_never_started(self, info: m.SessionInfo) -> None:
        """The session is where this follower read up to, so an accepted run it neither runs
        nor queues never started and never will: its owner died with it accepted, and the new
        owner never heard of it. (A run without a client id counts as queued while anything is.)"""
        gone = {
            run_id: request_id
            for run_id, request_id in self._expected.items()
            if run_id != info.run_id and not (request_id in info.queued_requests if request_id is not None else info.queued)
        }
        if gone:
            log.warning("following session %s: %d accepted run(s) never started at their owner: ended owner_lost", self._session_id, len(gone))
            self._end_here(gone, ErrorInfo(code="owner_lost", message=NEVER_STARTED))

    def close(self) -> None:
        self._closed = True

    async def __aenter__(self) -> RemoteSubscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
