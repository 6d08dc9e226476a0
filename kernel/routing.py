"""Cluster routing: which instance carries a command out, and where a session's events come from.

Off without a cluster. With one, a command about a session another instance owns is forwarded
to the owner and answered through it; one whose owner is gone (its lease expired) or draining
takes the session over here; a subscription to a remote session reads the shared stream. The
kernel facade asks :class:`ClusterRouting` first and carries the command out itself when it
answers None. It reaches the kernel only through :class:`RoutingHost`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

import anyio
import msgspec

from . import model as m
from .cluster import READ_ONLY, ROUTED, Cluster, CommandWithdrawn, RemoteSubscription, events_lost_at_takeover, owner_lost
from .companions import beside
from .host import seq_key

if TYPE_CHECKING:
    from .observe import Observers
    from .session import Session
    from .settings import Settings
    from .store import Store

log = logging.getLogger("gateway.kernel")

#: Events of a session read back when another instance's session is taken over.
TAKEOVER_TAIL = 256
#: How often a command refused by a draining owner checks whether it gave the lease up.
HANDOVER_POLL_S = 0.1


def draining_error() -> m.KernelError:
    return m.KernelError("draining", "this gateway instance is draining (shutting down): retry, another instance or its restart will serve")


class RoutingHost(Protocol):
    """What routing needs of the kernel: its state, and to carry a command out here."""

    @property
    def settings(self) -> Settings: ...

    @property
    def store(self) -> Store: ...

    @property
    def observers(self) -> Observers: ...

    @property
    def draining(self) -> bool: ...

    @property
    def stopping(self) -> anyio.Event: ...

    @property
    def sessions(self) -> Mapping[str, object]:
        """The sessions loaded (owned) here."""
        ...

    async def execute_forwarded(self, command: m.Command, caller: m.Caller = m.LOCAL_CALLER) -> m.Reply: ...

    def lease_lost(self, session_id: str) -> None:
        """Another instance runs the session now: let it go here."""
        ...

    def run_accepted_elsewhere(self, accepted: m.Accepted) -> None:
        """A run command sent from here was accepted (by the session's owner): the followers
        here of its session are owed its end (:meth:`RemoteSubscription.expect`)."""
        ...

    async def execute(self, command: m.GetSession, caller: m.Caller = m.LOCAL_CALLER) -> m.SessionOpened:
        """Routed (what a remote subscription asks the session's owner)."""
        ...


class ClusterRouting:
    def __init__(self, host: RoutingHost, cluster: Cluster) -> None:
        self.host = host
        self.cluster = cluster

    async def route(self, command: m.Command) -> m.Reply | None:
        """The reply when another instance carries ``command`` out; None: carry it out here."""
        cluster, host = self.cluster, self.host
        if not isinstance(command, ROUTED) or command.session_id is None:
            return None
        if command.session_id in host.sessions:
            if not isinstance(command, m.RUN_COMMANDS) or host.draining:
                return None
            # A run only where the lease still is (it would be refused by the store's fence
            # elsewhere): otherwise it goes to the instance that took the session over.
            owner = await self._lost_to(command.session_id)
            return None if owner is None else await self._forward(owner, command)
        if host.draining:
            # A draining instance gives leases up and never takes one: an owner elsewhere
            # carries the command out, else the client retries (reaching another instance).
            owner = await cluster.owner(command.session_id)
            if owner is None or owner == cluster.instance_id:
                raise draining_error()
        else:
            owner = await cluster.claim(command.session_id)
        if owner is None:
            return None
        return await self._forward(owner, command)

    async def _lost_to(self, session_id: str) -> str | None:
        """A session loaded here: None while its lease is ours (kept) — else the instance that
        took it over while this one stalled past the lease; the session is let go here."""
        owner = await self.cluster.confirm(session_id)
        if owner is not None:
            self.host.lease_lost(session_id)
        return owner

    async def _forward(self, owner: str, command: m.Command) -> m.Reply:
        if isinstance(command, m.ConfigureSession) and (command.files is not msgspec.UNSET or command.tool_sources is not msgspec.UNSET):
            raise m.KernelError("invalid_request", f"session {command.session_id} runs on another gateway instance: it cannot take in-process objects")
        outcome: list[m.Reply | m.KernelError] = []
        with anyio.CancelScope() as forwarding:

            async def stop() -> None:
                await self.host.stopping.wait()
                forwarding.cancel()

            # The wait runs in this task and the watch of the kernel's stop beside it: no task
            # is cancelled from outside, which left a reference cycle a command (kernel/companions.py).
            async with beside(stop):
                try:
                    outcome.append(await self._forward_once(owner, command))
                except m.KernelError as exc:
                    outcome.append(exc)
        if not outcome:
            log.warning("stopping while %s for session %s waited on instance %s: answered draining", type(command).__name__, command.session_id, owner)
            raise m.KernelError("draining", f"this gateway instance stopped while instance {owner} had not answered for session {command.session_id}: retry")
        reply = outcome[0]
        if isinstance(reply, m.KernelError):
            raise reply
        if isinstance(reply, m.Accepted) and reply.run_id is not None:
            self.host.run_accepted_elsewhere(reply)
        return reply

    async def _forward_once(self, owner: str, command: m.Command) -> m.Reply:
        """The owner's reply. Its wait is bounded by the owner's lease (``Cluster.forward``).
        When the owner is gone, the session is taken over here — and the command carried out
        here only when that cannot make it run twice: it was withdrawn before the owner took
        it, or it changes nothing. A command the dead owner took is answered ``owner_lost``
        (it may have been carried out: the client looks before sending it again). An owner
        that is draining refuses (``draining``); it gives the session's lease up as its run
        ends, and the command is carried out here."""
        cluster = self.cluster
        self.host.observers.command_forwarded()
        try:
            return await cluster.forward(owner, command)
        except m.KernelError as exc:
            if command.session_id is None:
                raise
            if exc.code == "draining":
                return await self._hand_over(owner, command, exc)
            if exc.code not in ("unavailable", "owner_lost"):
                raise
            if self.host.draining:
                # The owner is gone, but a draining instance takes no session over: the
                # client's retry reaches an instance that will.
                log.warning("instance %s did not answer for session %s and this instance is draining: refused", owner, command.session_id)
                raise draining_error() from None
            again = isinstance(exc, CommandWithdrawn) or isinstance(command, READ_ONLY)
            if await cluster.claim(command.session_id) is not None:
                raise
            if not again:
                log.warning("instance %s took %s for session %s and stopped before answering: taking the session over", owner, type(command).__name__, command.session_id)
                await self.host.execute_forwarded(m.GetSession(session_id=command.session_id))  # its run ends as owner_lost
                raise
            log.warning("instance %s did not answer for session %s and its lease expired: taking the session over", owner, command.session_id)
            return await self.host.execute_forwarded(command)

    async def _hand_over(self, owner: str, command: m.Command, refusal: m.KernelError) -> m.Reply:
        """The owner is draining: wait (up to the forward timeout) for it to give the lease up,
        then carry the command out here (or at whichever instance took the session meanwhile)."""
        cluster, host = self.cluster, self.host
        assert command.session_id is not None
        with anyio.move_on_after(host.settings.cluster.forward_timeout_s):
            while True:
                now = await cluster.claim(command.session_id) if not host.draining else await cluster.owner(command.session_id)
                if now is None and not host.draining:
                    log.info("instance %s is draining: session %s continues here", owner, command.session_id)
                    return await host.execute_forwarded(command)
                if now is not None and now not in (owner, cluster.instance_id):
                    return await cluster.forward(now, command)
                if now is None:
                    break
                await anyio.sleep(HANDOVER_POLL_S)
        raise refusal

    async def hold(self, session_id: str) -> int:
        """Before a session is loaded (or right after it is created) here: this instance holds
        its lease, and the store's fence for it moves on, so a previous owner that has not yet
        noticed it lost the session can write nothing more — its history is read after that."""
        if await self.cluster.claim(session_id) is not None:
            raise m.KernelError("unavailable", f"session {session_id} is run by another gateway instance")
        return await self.host.store.take_session(session_id)

    async def take_over(self, session: Session) -> None:
        """A session loaded here in a cluster (after :meth:`hold`): its seq goes on from the
        shared stream, and a run a previous owner left in flight ends as ``owner_lost``.

        The seq the previous owner saved can be past the stream's last event: it emitted
        events after its lease was gone, which the stream refused. The seqs go on after the
        saved one (its own clients saw those), and a note in the stream says the events
        between went with it (:func:`~kernel.cluster.events_lost_at_takeover`)."""
        cluster = self.cluster
        tail = await cluster.tail(session.id, TAKEOVER_TAIL)
        stored = await self.host.store.get_value(seq_key(session.id))
        floor = int(stored) if stored else 0
        published = tail[-1].seq if tail else 0
        session.hub.last_seq = max(session.hub.last_seq, floor, published)
        session.hub.mirror = cluster.publish
        if tail and session.hub.last_seq > published:  # the previous owner's last events were refused
            cluster.publish(events_lost_at_takeover(session.id, published, session.hub.last_seq))
        lost = owner_lost(tail)
        if lost is not None:
            await session.emit(lost)

    async def remote_subscription(self, session_id: str, after_seq: int | None, client: str | None) -> RemoteSubscription | None:
        """The shared stream of a session another instance owns (None: it is, or becomes, ours)."""
        cluster = self.cluster
        if session_id in self.host.sessions:
            if self.host.draining:
                return None
            owner = await self._lost_to(session_id)
        elif self.host.draining:  # follow wherever it runs, but take no lease
            owner = await cluster.owner(session_id)
            if owner is None or owner == cluster.instance_id:
                raise draining_error()
        else:
            owner = await cluster.claim(session_id)
        if owner is None:
            return None
        resumed = after_seq is not None
        if after_seq is None:  # from now on: the stream's end — or, when it holds nothing, the session's
            tail = await cluster.tail(session_id, 1)  # (a restarted Redis lost it: the seqs go on from there)
            after_seq = tail[-1].seq if tail else (await self.host.execute(m.GetSession(session_id=session_id))).session.last_seq
        remote = RemoteSubscription(self.host.execute, cluster, session_id, after_seq, client, resumed=resumed)
        await remote.prime()
        return remote
