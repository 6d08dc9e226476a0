"""Following events: a session's, across subscriber lag; and one run's, to its end.

* :class:`Follower` — a session's events for a transport's writer. The hub cuts off a
  subscriber that stays behind too long (a slow client) with a final ``subscriber_lagged``
  event; it can resume after ``last_seq`` while the events are retained. The follower
  does that resubscription itself, so its reader sees a gap-free stream. Only when the
  missed events are gone does the ``subscriber_lagged`` event reach the reader, last in
  its batch, saying where the gap starts; following then goes on from now, or ends with
  ``stop_on_loss`` (a stream that must not have a hole, such as an SSE stream resumable
  by ``Last-Event-ID``).
* :class:`~kernel.watch.RunWatch` (its own pure module, so codecs can use it) — which
  events belong to one run, and what that run is waiting for.
* :class:`RunFollower` — a request answered by one run (a REST call, an OpenAI request,
  a Packet message, an editor's prompt): it subscribes, *then* starts the run (so
  nothing is missed), hands out that run's events only, and ends with its
  ``run_finished`` / ``run_failed`` — or a ``run_failed`` saying why that end cannot
  come (the session was closed, events were lost for good). Its questions are answered
  by the :class:`~kernel.model.ApprovalPolicy` given at the start; with ``ask`` they
  come out as events for the transport to put to its client, and one still open when
  the follower closes is declined at once (nobody is left to answer it) — unless the
  dialect answers in a later request (AG-UI's interrupts: ``decline_on_close=False``).
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Literal, Self

import anyio
import msgspec

from .cluster import RemoteSubscription
from .hub import Subscription
from .model import (
    LOCAL_CALLER,
    SESSION_CLOSED,
    Accepted,
    ApprovalPolicy,
    Caller,
    Continue,
    ErrorInfo,
    Event,
    GetSession,
    Interrupt,
    KernelError,
    OpenSession,
    Prompt,
    ReasoningDelta,
    Regenerate,
    ResolveToolApproval,
    ResolveTurnLimit,
    RunFailed,
    RunFinished,
    SubscriberLagged,
    TextDelta,
    ToolApprovalRequested,
    TurnLimitReached,
)
from .watch import RunWatch

if TYPE_CHECKING:
    from .kernel import Kernel

RunCommand = Prompt | Regenerate | Continue
#: A writer that is streaming (its last batch ended with a delta) and finds nothing ready
#: gives the run this many scheduling rounds at most to add more before it writes — as long
#: as each round adds some: a model handing over a delta per round then costs one write
#: per few dozen deltas instead of one each (merged in the subscription's buffer), a model
#: that pauses costs one round. The first delta of a run is never held this way.
GATHER_ROUNDS = 16


class Follower:
    def __init__(
        self,
        kernel: Kernel,
        session_id: str,
        subscription: Subscription | RemoteSubscription,
        *,
        stop_on_loss: bool = False,
        client: str | None = None,
        caller: Caller = LOCAL_CALLER,
    ) -> None:
        self.kernel = kernel
        self.session_id = session_id
        self.stop_on_loss = stop_on_loss
        self.client = client
        # Who follows (a resumed subscription is authorized again, as the first one was).
        self.caller = caller
        self.closed = False
        self._sub = subscription
        self._streaming = False  # the last batch ended with a delta

    @classmethod
    async def open(
        cls, kernel: Kernel, session_id: str, after_seq: int | None = None, *, stop_on_loss: bool = False, client: str | None = None,
        caller: Caller = LOCAL_CALLER,
    ) -> Follower:
        """Follow ``session_id`` from now, or after ``after_seq`` (KernelError when unknown —
        or not the caller's). ``client``: the transport's name, shown in the session's info."""
        subscription = await kernel.subscribe(session_id, after_seq, client=client, caller=caller)
        return cls(kernel, session_id, subscription, stop_on_loss=stop_on_loss, client=client, caller=caller)

    @property
    def pending(self) -> int:
        """Events waiting to be taken (a writer drains them before it stops)."""
        return 0 if self.closed else self._sub.pending

    async def next_batch(self, deadline: float | None = None) -> list[Event]:
        """Every event ready now, waiting for the first until ``deadline`` at most.

        ``[]`` on the deadline, or once following ended (then :attr:`closed` is set:
        the session was closed or deleted, or events were lost with ``stop_on_loss``).
        """
        while not self.closed:
            # Ready events are taken without a cancel scope: its cost per event showed in
            # the benchmarks; only an empty feed waits.
            batch = self._sub.receive_nowait()
            if not batch:
                first = await self._first(deadline)
                if first is None:
                    return []
                if self._streaming:
                    await self._gather()
                batch = [first, *self._sub.receive_nowait()]
            last = batch[-1]
            if isinstance(last, SubscriberLagged):
                batch[-1:] = await self._resume(last)
            if batch:
                self._streaming = isinstance(batch[-1], TextDelta | ReasoningDelta)
                return batch
        return []

    async def _first(self, deadline: float | None) -> Event | None:
        """The next event, waiting until ``deadline`` at most (None, and :attr:`closed` set,
        once following ended). Without a deadline no cancel scope is made: a writer's wait
        for its next batch (6 µs a scope on asyncio, on every batch's path)."""
        try:
            if deadline is None:
                return await self._sub.__anext__()
            with anyio.move_on_at(deadline):
                return await self._sub.__anext__()
        except StopAsyncIteration:
            self.close()
        return None

    async def _gather(self) -> None:
        """Let a run that adds events every scheduling round add more (:data:`GATHER_ROUNDS`).
        Shielded: an event already taken is not lost to a cancellation here. One shield for
        all the rounds, plain checkpoints inside: on asyncio a shielded checkpoint builds a
        cancel scope each time, 6 µs of a per-delta round's 26 (issue 27's profile)."""
        with anyio.CancelScope(shield=True):
            for _ in range(GATHER_ROUNDS):
                seen = self._sub.newest_seq
                await anyio.lowlevel.checkpoint()
                if self._sub.newest_seq == seen:
                    return

    async def _resume(self, lagged: SubscriberLagged) -> list[Event]:
        """The retained events after the last one delivered, or ``[lagged]`` when they are gone."""
        behind = self._sub
        behind.close()
        try:
            self._sub = await self._replace(behind, after_seq=lagged.last_seq)
            ready = self._sub.receive_nowait()
            if not (ready and isinstance(ready[0], SubscriberLagged)):
                return ready
            self._sub.close()
            if self.stop_on_loss:
                self.closed = True
            else:
                self._sub = await self._replace(behind)
            # Gone for good, as the new notice says — but when they went with the session's
            # previous owner, the first notice says so (the runs it cut off will not go on).
            return [lagged if lagged.end_code == "owner_lost" else ready[0]]
        except KernelError:  # the session is gone
            self.closed = True
            return []

    async def _replace(self, behind: Subscription | RemoteSubscription, after_seq: int | None = None) -> Subscription | RemoteSubscription:
        """A subscription in place of ``behind``, which fell behind; one from the cluster's
        stream expects the runs that one was told to expect and never saw start."""
        sub = await self.kernel.subscribe(self.session_id, after_seq=after_seq, client=self.client, caller=self.caller)
        if isinstance(sub, RemoteSubscription) and isinstance(behind, RemoteSubscription):
            sub.inherit(behind)
        return sub

    def close(self) -> None:
        self.closed = True
        self._sub.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


class RunFollower:
    """Use as ``async with await RunFollower.start(kernel, prompt, policy=...) as run:``,
    then ``await run.next_batch()`` until :attr:`end` is set (or ``await run.wait()``)."""

    def __init__(self, kernel: Kernel, follower: Follower, watch: RunWatch, accepted: Accepted, *, decline_on_close: bool = True) -> None:
        self.kernel = kernel
        self.caller = follower.caller
        self.accepted = accepted
        self.decline_on_close = decline_on_close
        self._follower = follower
        self._watch = watch
        # Why the kernel stopped following (it is stopping): the end the client is given.
        self._stopped: ErrorInfo | None = None
        kernel.run_followers.add(self)

    def stop(self, error: ErrorInfo) -> None:
        """The gateway stops before this run's end reached it (a run another instance owns,
        followed here): its stream ends with ``error`` — a failure, never a silent end."""
        self._stopped = error
        self._follower.close()

    @classmethod
    async def start(
        cls,
        kernel: Kernel,
        command: RunCommand,
        *,
        policy: ApprovalPolicy | None = None,
        stop_on_loss: bool = False,
        client: str | None = None,
        decline_on_close: bool = True,
        caller: Caller = LOCAL_CALLER,
    ) -> RunFollower:
        """Subscribe to the command's session (created for a prompt without one), then run it.

        ``stop_on_loss``: when events of the run were lost for good (the reader fell too far
        behind), end there — the batch ends with the ``subscriber_lagged`` event and
        :attr:`end` is a ``run_failed`` saying so — instead of following on past the gap:
        for a stream that must have no hole (SSE resumable by ``Last-Event-ID``).
        ``decline_on_close=False``: a question still open when the follower closes stays
        open, for a later request of the client to answer (the kernel's approval and turn
        confirmation timeouts still bound the wait) — for a dialect whose response ends at
        the question, such as AG-UI's interrupts. ``caller``: who asks (the transport's
        resolved Caller), for every command and subscription of the run.
        """
        if command.request_id is None:
            command = msgspec.structs.replace(command, request_id=f"run-{secrets.token_hex(8)}")
        if policy is not None and command.options.approval is None:
            command = msgspec.structs.replace(command, options=msgspec.structs.replace(command.options, approval=policy))
        live = kernel.sessions.get(command.session_id) if command.session_id is not None else None
        # An ephemeral session (one OpenAI-style request's) exists already and only here, in
        # memory: opening it again would only repeat the access check the subscription makes
        # (one kernel command on a proxied first token's path).
        if isinstance(command, Prompt) and not (live is not None and live.ephemeral):
            opened = await kernel.execute(OpenSession(session_id=command.session_id, agent_id=command.agent_id), caller)
            command = msgspec.structs.replace(command, session_id=opened.session.session_id)
        assert command.session_id is not None and command.request_id is not None
        follower = await Follower.open(kernel, command.session_id, stop_on_loss=stop_on_loss, client=client, caller=caller)
        try:
            accepted = await kernel.execute(command, caller)
        except BaseException:
            follower.close()
            raise
        return cls(kernel, follower, RunWatch(command.request_id, accepted.run_id), accepted, decline_on_close=decline_on_close)

    @property
    def session_id(self) -> str:
        return self._follower.session_id

    @property
    def request_id(self) -> str:
        request_id = self._watch.request_id
        assert request_id is not None  # start() gives every run one
        return request_id

    @property
    def run_id(self) -> str | None:
        return self._watch.run_id

    @property
    def end(self) -> RunFinished | RunFailed | None:
        return self._watch.end

    @property
    def question(self) -> ToolApprovalRequested | TurnLimitReached | None:
        """What the run waits for the client to answer (policy ``ask``)."""
        return self._watch.question

    async def next_batch(self, deadline: float | None = None) -> list[Event]:
        """This run's next events, in order; ``[]`` on the deadline or after its end."""
        while self._watch.end is None:
            batch = await self._follower.next_batch(deadline)
            if not batch:
                if self._follower.closed and self._stopped is not None:
                    return [self._watch.give_up(self.session_id, self._stopped.code, self._stopped.message)]
                if self._follower.closed:
                    return [self._watch.give_up(self.session_id, "internal", SESSION_CLOSED)]
                return []
            ours = [event for event in batch if self._watch.feed(event)]
            lost = batch[-1] if isinstance(batch[-1], SubscriberLagged) else None
            if lost is not None and self._watch.end is None and self._follower.stop_on_loss:
                self._watch.lost(self.session_id, lost, "the request fell behind and missed events of its run")
                return [*ours, lost]
            if lost is not None and self._watch.end is None and not await self._still_running():
                ours.append(self._watch.lost(self.session_id, lost, "the request fell behind and missed the end of its run"))
            if ours:
                return ours
        return []

    async def _still_running(self) -> bool:
        """After lost events: whether the run's end may still come (it is active or queued)."""
        try:
            reply = await self.kernel.execute(GetSession(session_id=self.session_id), self.caller)
        except KernelError:
            return False
        info = reply.session
        return info.run_id == self.run_id or self.request_id in info.queued_requests

    async def wait(self) -> RunFinished | RunFailed:
        """Read the run to its end (its events are dropped): the end."""
        while self._watch.end is None:
            await self.next_batch()
        return self._watch.end

    async def answer(self, approved: bool, reason: str | None = None, *, remember: bool = False) -> None:
        """Answer the run's open question (a tool approval, or the turn limit)."""
        question = self._watch.question
        if question is None:
            raise KernelError("invalid_request", "the run has no open question")
        command: ResolveToolApproval | ResolveTurnLimit
        if isinstance(question, ToolApprovalRequested):
            command = ResolveToolApproval(session_id=self.session_id, call_id=question.call_id, approved=approved, reason=reason, remember=remember)
        else:
            command = ResolveTurnLimit(session_id=self.session_id, confirmed=approved, reason=reason)
        await self.kernel.execute(command, self.caller)

    async def interrupt(self, cause: Literal["client", "timeout"] = "client") -> bool:
        """Stop the run (even while it is still queued); False when it is already over.
        ``cause``: the client asked or left, or the run outlived the dialect's wait."""
        if self._watch.end is not None:
            return False
        try:
            await self.kernel.execute(Interrupt(session_id=self.session_id, target_request_id=self.request_id, cause=cause), self.caller)
        except KernelError:
            return False
        return True

    async def aclose(self) -> None:
        """Stop following; a question still open is declined (nobody is left to answer it),
        unless the follower was started with ``decline_on_close=False``."""
        with anyio.CancelScope(shield=True):
            if self.decline_on_close and self._watch.question is not None and self._watch.end is None:
                try:
                    await self.answer(False, "the client went away")
                except KernelError:
                    pass  # answered or timed out meanwhile
            self._follower.close()
            self.kernel.run_followers.discard(self)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
