"""The kernel's cluster on Redis (coredis, which runs on asyncio and on trio).

What is live lives here; what must last lives in the shared store (PostgreSQL):

* ``PREFIX:owner:SESSION`` — the owner's instance id, with a lease (``PX``) the owner renews
  every third of it; gone when the owner dies, so the next instance to need the session
  takes it (``SET NX``). Renewal compares first (a Lua script), so an instance never extends
  a lease it lost.
* ``PREFIX:events:SESSION`` — a Redis Stream of the session's events, entry id ``SEQ-0``,
  trimmed (approximately) to ``stream_retention`` entries: any instance's follower reads it
  after a seq, live or to resume.
* ``PREFIX:inbox:INSTANCE`` — a list of commands forwarded to that instance; each answer goes
  to ``PREFIX:reply:ID`` (expiring), where the asking instance waits for it. ``PREFIX:taken:ID``
  (expiring) makes each one run at most once: the owner sets it before acting, a sender that
  gives up sets it to withdraw the command — whichever comes first wins.
* ``PREFIX:ended:SESSION`` — set for a while when a session was deleted: its followers stop.
* ``PREFIX:epoch`` — when this Redis began to hold the cluster (Redis's clock, ms; 0 for a fresh
  one). A Redis restarted without its data has none, and an instance that saw one before then
  waits one lease before taking an unowned session: the real owners re-assert theirs first, so
  a restart never makes two owners of one session.

Events are published from a bounded outbox by one background task, in pipelined batches,
so the owner's runs never wait on Redis. While Redis is unreachable, cross-instance
commands fail with ``unavailable``, sessions owned here go on (nobody else can take them
while nobody can reach Redis), events for remote followers are dropped (they see the gap),
and everything resumes when Redis is back (the client reconnects; leases are re-claimed).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import deque
from contextvars import ContextVar
from typing import Any

import anyio
import coredis
import coredis._concurrency as coredis_concurrency
import coredis.exceptions
import msgspec
from anyio.abc import TaskStatus
from coredis.tokens import PureToken

from kernel import ClusterHost, CommandWithdrawn, current_caller
from kernel import model as m

log = logging.getLogger("gateway.cluster")

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) and 2 or 0
"""
#: Take an unowned session (returns ``""``), or name its owner, or — when this Redis lost its
#: data lately (a restart: the epoch key is gone) — say how many ms to wait first, so that the
#: owners, which re-assert their leases every third of one, get theirs back before anyone
#: takes a session over twice. ARGV[3] "1": this instance has seen an epoch before (so a
#: missing one is a restart, not a fresh Redis). TIME is Redis's clock, the same for all.
_CLAIM = """
local owner = redis.call('GET', KEYS[1])
if owner then return owner end
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local epoch = redis.call('GET', KEYS[2])
if not epoch then
  epoch = (ARGV[3] == '1') and now_ms or 0
  redis.call('SET', KEYS[2], epoch)
end
local wait = tonumber(epoch) + tonumber(ARGV[2]) - now_ms
if wait > 0 then return wait end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return ''
"""
#: A session's events, from the instance that runs it, into its stream — unless another
#: instance holds the session's lease now (then -1: nothing is added, and this one learns it
#: lost the session). A missing lease (a restarted Redis) still lets its owner publish. Entries
#: whose seq is already there (a batch sent again) are skipped and counted.
_PUBLISH = """
local owner = redis.call('GET', KEYS[1])
if owner and owner ~= ARGV[1] then return -1 end
local skipped = 0
for i = 3, #ARGV, 2 do
  local added = redis.pcall('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], ARGV[i], 'e', ARGV[i + 1])
  if type(added) == 'table' and added.err then skipped = skipped + 1 end
end
return skipped
"""
#: ``confirm``: the lease of a session this instance runs is kept (renewed, or set again if it
#: lapsed and nobody took it: ``""``), or the instance that holds it now is named.
_CONFIRM = """
local owner = redis.call('GET', KEYS[1])
if owner and owner ~= ARGV[1] then return owner end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return ''
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
#: One key's sliding window of runs (kernel/access.py's RateWindows), atomic across instances:
#: entries older than the window are dropped; at the limit the seconds until the oldest leaves
#: are returned, else the run is counted and 0 returned.
_WINDOW = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', tonumber(ARGV[1]) - tonumber(ARGV[2]))
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return tostring(tonumber(oldest[2]) + tonumber(ARGV[2]) - tonumber(ARGV[1]))
end
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[4])
redis.call('PEXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2]) * 1000))
return '0'
"""
_encode = msgspec.json.Encoder().encode
_decode_event = msgspec.json.Decoder(m.Event).decode
_REDIS_ERRORS = (coredis.exceptions.ConnectionError, coredis.exceptions.BusyLoadingError, TimeoutError, OSError)


#: True once a pool call has taken a slot and makes a connection for it (``SlotKeepingPool``).
_MAKING: ContextVar[bool] = ContextVar("gateway_redis_pool_making", default=False)


class SlotQueue(coredis_concurrency.Queue[Any]):
    """coredis's stack of free slots, except that a command that gives up waiting for one takes
    its wake-up back: coredis 6.9 left it queued, so the next slot released woke nobody and the
    command waiting behind the one that gave up waited for the release after (on a busy pool, a
    lease renewal held up behind a blocking read)."""

    async def get(self) -> Any:
        async with self._lock:  # one waiter at a time: the others queue on the lock
            while self.empty():
                woken = anyio.Event()
                self._getters.append(woken)
                try:
                    await woken.wait()
                finally:
                    if not woken.is_set():
                        self._getters.remove(woken)
            item = self._queue.pop()
            if self._putters and not self.full():
                self._putters.popleft().set()
            return item


class SlotKeepingPool(coredis.ConnectionPool):
    """coredis's connection pool, minus two leaks (coredis 6.9), each of which loses one of its
    ``max_connections`` (64) slots for good. With all of them gone every command waits for a
    blocking one to return: lease renewals took 0.5-2 s and leases expired on a busy instance
    (the soak's second owners). Here the slot comes back, and a new connection is made on demand:

    * a connection that is no longer usable when it is released — every blocking command
      (``BLPOP``, ``XREAD BLOCK``) cancelled while it waits is disconnected so — was dropped
      without giving its slot back;
    * a command cancelled while the pool makes a new connection for it — on a busy machine a
      follower's short wait can end during the connect — dropped the slot it had taken.

    And a command that gives up waiting for a free slot does not take the next one's wake-up
    with it (:class:`SlotQueue`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._available_connections = SlotQueue(self.max_connections)

    def release(self, connection: Any) -> None:
        if connection.usable:
            super().release(connection)
            return
        self.statistics.connection_released(connection)
        if not self._available_connections.full():
            self._available_connections.put_nowait(None)

    async def _construct_connection(self) -> Any:
        _MAKING.set(True)  # called in the taking call's task, once it holds a slot
        return await super()._construct_connection()

    async def get_connection(self, **kwargs: Any) -> Any:
        token = _MAKING.set(False)
        try:
            return await super().get_connection(**kwargs)
        except coredis.exceptions.RedisError:
            raise  # a connection that failed: coredis gave its slot back
        except BaseException:
            if _MAKING.get() and not self._available_connections.full():
                self._available_connections.append_nowait(None)
            raise
        finally:
            _MAKING.reset(token)


class CancelledIsNoFailure(logging.Filter):
    """coredis logs a connection attempt it was told to stop — a follower that ends while its
    pool is opening a connection — as "Connection attempt failed unexpectedly!" at ERROR, with
    the cancellation's traceback: a false alarm for an operator (seen in the soak). Records
    whose exception is a cancellation (asyncio's or trio's) are dropped; every other passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return error is None or not _is_cancellation(error)


def _is_cancellation(error: BaseException) -> bool:
    kind = type(error)
    return isinstance(error, asyncio.CancelledError) or (kind.__module__.startswith("trio") and kind.__name__ == "Cancelled")


def _quiet_cancelled_connects() -> None:
    coredis_log = logging.getLogger("coredis")
    if not any(isinstance(f, CancelledIsNoFailure) for f in coredis_log.filters):
        coredis_log.addFilter(CancelledIsNoFailure())


class Forwarded(msgspec.Struct, frozen=True):
    id: str
    command: m.Command
    # Wall-clock time after which the sender no longer waits: an owner that finds the
    # command later (it restarted under the same instance id) drops it instead of acting.
    expires: float = 0.0
    # Who sent it (key, transport, traceparent): the owner authorizes the command as them.
    caller: m.Caller = m.LOCAL_CALLER


class Answered(msgspec.Struct, frozen=True, omit_defaults=True):
    reply: m.Reply | None = None
    error: m.ErrorInfo | None = None


_decode_forwarded = msgspec.json.Decoder(Forwarded).decode
_decode_answered = msgspec.json.Decoder(Answered).decode


class RedisCluster:
    def __init__(
        self,
        url: str,
        *,
        instance_id: str | None = None,
        key_prefix: str = "gateway",
        lease_s: float = 5.0,
        forward_timeout_s: float = 30.0,
        stream_retention: int = 10_000,
        outbox_limit: int = 100_000,
    ) -> None:
        _quiet_cancelled_connects()
        self.instance_id = instance_id or uuid.uuid4().hex[:12]
        self.url = url
        self.prefix = key_prefix
        self.lease_ms = max(int(lease_s * 1000), 100)
        self.forward_timeout_s = forward_timeout_s
        # How often a forwarded command checks its owner's lease while it waits for the answer.
        self.lease_check_s = min(lease_s / 5, 0.5)
        self.stream_retention = stream_retention
        self._client: coredis.Redis[bytes] = coredis.Redis(connection_pool=SlotKeepingPool.from_url(url))
        self._owned: set[str] = set()
        # Whether this instance has seen the cluster's epoch key (then a missing one is a restart).
        self._seen_epoch = False
        self._outbox: deque[m.Event | _Ended] = deque(maxlen=outbox_limit)
        self._wake = anyio.Event()
        self._down = False
        self._host: ClusterHost | None = None  # told when a session's lease turns out lost
        self._flushing = anyio.Lock()  # one flush at a time: a session's events reach its stream in order

    def __repr__(self) -> str:
        return f"RedisCluster(instance={self.instance_id!r}, prefix={self.prefix!r})"

    # -------------------------------------------------------------- keys

    def _owner_key(self, session_id: str) -> str:
        return f"{self.prefix}:owner:{session_id}"

    @property
    def _epoch_key(self) -> str:
        return f"{self.prefix}:epoch"

    def _events_key(self, session_id: str) -> str:
        return f"{self.prefix}:events:{session_id}"

    def _ended_key(self, session_id: str) -> str:
        return f"{self.prefix}:ended:{session_id}"

    def _inbox_key(self, instance: str) -> str:
        return f"{self.prefix}:inbox:{instance}"

    def _unavailable(self, exc: BaseException) -> m.KernelError:
        return m.KernelError("unavailable", f"the cluster's Redis is unreachable: {type(exc).__name__}: {exc}")

    def _report(self, exc: BaseException) -> None:
        if not self._down:
            self._down = True
            log.error("cluster: Redis is unreachable (%s: %s); cross-instance work waits for it", type(exc).__name__, exc)

    def _recovered(self) -> None:
        if self._down:
            self._down = False
            log.info("cluster: Redis is reachable again")

    # -------------------------------------------------------------- background

    async def run(self, host: ClusterHost, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        self._host = host
        async with self._client, anyio.create_task_group() as tg:
            tg.start_soon(self._renew_leases)
            tg.start_soon(self._serve_forwarded, host, tg)
            tg.start_soon(self._publish_events)
            task_status.started()

    async def close(self) -> None:
        """Leaving the cluster (the kernel is stopping, before ``run`` is cancelled): the last
        events go out and this instance's leases are given up, so others take over at once."""
        with anyio.move_on_after(2):
            await self._flush()
            for session_id in list(self._owned):
                await self.release(session_id)

    async def _renew_leases(self) -> None:
        """Every third of a lease, all of this instance's leases in one round trip."""
        while True:
            await anyio.sleep(self.lease_ms / 3000)
            owned = list(self._owned)
            if not owned:
                continue
            try:
                async with self._client.pipeline(transaction=False) as pipe:
                    renewals = [pipe.eval(_RENEW, keys=[self._owner_key(session_id)], args=[self.instance_id, self.lease_ms]) for session_id in owned]
                kept = [await renewal for renewal in renewals]
                self._recovered()
            except _REDIS_ERRORS as exc:
                self._report(exc)
                continue
            for session_id, still_ours in zip(owned, kept, strict=True):
                if not still_ours:
                    self._lost(session_id)

    async def _serve_forwarded(self, host: ClusterHost, tg: anyio.abc.TaskGroup) -> None:
        inbox = self._inbox_key(self.instance_id)
        while True:
            try:
                popped = await self._client.blpop([inbox], timeout=1)
                self._recovered()
            except _REDIS_ERRORS as exc:
                self._report(exc)
                await anyio.sleep(0.5)
                continue
            if popped:
                tg.start_soon(self._answer, host, popped[1])

    async def _answer(self, host: ClusterHost, payload: bytes) -> None:
        try:
            request = _decode_forwarded(payload)
        except msgspec.MsgspecError as exc:
            log.warning("cluster: dropped a malformed forwarded command: %s", exc)
            return
        if request.expires and time.time() > request.expires:
            log.warning("cluster: dropped a forwarded %s whose sender stopped waiting", type(request.command).__name__)
            return
        try:  # taken exactly once: not after its sender withdrew it, nor a second copy of it
            taken = await self._client.set(self._taken_key(request.id), self.instance_id.encode(), condition=PureToken.NX, px=self._taken_ttl_ms)
        except _REDIS_ERRORS as exc:
            self._report(exc)  # its sender cannot be answered either: it gives up, or withdraws it
            return
        if not taken:
            log.info("cluster: skipped a forwarded %s its sender had withdrawn", type(request.command).__name__)
            return
        try:
            answer = Answered(reply=await host.execute_forwarded(request.command, request.caller))
        except m.KernelError as exc:
            answer = Answered(error=exc.info())
        except Exception as exc:
            log.exception("cluster: forwarded %s failed", type(request.command).__name__)
            answer = Answered(error=m.ErrorInfo(code="internal", message=f"{type(exc).__name__}: {exc}"))
        key = f"{self.prefix}:reply:{request.id}"
        try:
            await self._client.lpush(key, [_encode(answer)])
            await self._client.pexpire(key, 60_000)
        except _REDIS_ERRORS as exc:
            self._report(exc)

    async def _publish_events(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            await self._flush()

    async def _flush(self) -> None:
        """Publish the outbox: each session's events in one fenced script (``_PUBLISH``), in
        the order they were emitted; a deletion after the session's earlier events."""
        async with self._flushing:
            await self._flush_outbox()

    async def _flush_outbox(self) -> None:
        while self._outbox:
            batch = [self._outbox.popleft() for _ in range(min(len(self._outbox), 512))]
            steps: list[tuple[str, list[m.Event]] | _Ended] = []
            open_groups: dict[str, list[m.Event]] = {}
            for item in batch:
                if isinstance(item, _Ended):
                    open_groups.pop(item.session_id, None)
                    steps.append(item)
                    continue
                group = open_groups.get(item.session_id)
                if group is None:
                    group = open_groups[item.session_id] = []
                    steps.append((item.session_id, group))
                group.append(item)
            sent: list[tuple[str, Any]] = []
            try:
                async with self._client.pipeline(transaction=False) as pipe:
                    for step in steps:
                        if isinstance(step, _Ended):
                            pipe.set(self._ended_key(step.session_id), b"1", px=60_000)
                            pipe.delete([self._events_key(step.session_id)])
                            continue
                        session_id, events = step
                        args: list[str | bytes | int] = [self.instance_id, self.stream_retention]
                        for event in events:
                            args += [f"{event.seq}-0", _encode(event)]
                        sent.append((session_id, pipe.eval(_PUBLISH, keys=[self._owner_key(session_id), self._events_key(session_id)], args=args)))
                self._recovered()
            except _REDIS_ERRORS as exc:
                self._report(exc)  # remote followers will see the gap in the seqs
                return
            except coredis.exceptions.ResponseError as exc:
                log.warning("cluster: events not published: %s", exc)
                continue
            for session_id, result in sent:
                outcome = await result
                if outcome == -1:
                    self._lost(session_id)
                elif isinstance(outcome, int) and outcome > 0:
                    log.warning("cluster: %d events of session %s were already in its stream: not published again", outcome, session_id)

    def _lost(self, session_id: str) -> None:
        """Another instance holds the session's lease: stop running it here."""
        if session_id in self._owned:
            self._owned.discard(session_id)
            if self._host is not None:
                self._host.lease_lost(session_id)

    # -------------------------------------------------------------- ownership

    async def claim(self, session_id: str) -> str | None:
        key = self._owner_key(session_id)
        try:
            for _ in range(3):
                got = await self._client.eval(_CLAIM, keys=[key, self._epoch_key], args=[self.instance_id, self.lease_ms, "1" if self._seen_epoch else "0"])
                self._seen_epoch = True
                if isinstance(got, int):  # Redis restarted lately: the owners re-assert first
                    await anyio.sleep(got / 1000)
                    continue
                owner = got.decode() if isinstance(got, bytes) else str(got)
                if owner in ("", self.instance_id):
                    self._owned.add(session_id)
                    return None
                return owner
        except _REDIS_ERRORS as exc:
            if session_id in self._owned:
                return None  # ours already: keep running it while Redis is away
            raise self._unavailable(exc) from None
        raise m.KernelError("unavailable", f"the lease of session {session_id} keeps changing hands")

    async def confirm(self, session_id: str) -> str | None:
        try:
            got = await self._client.eval(_CONFIRM, keys=[self._owner_key(session_id)], args=[self.instance_id, self.lease_ms])
        except _REDIS_ERRORS:
            return None  # Redis is away: nobody can take the session from us meanwhile
        owner = got.decode() if isinstance(got, bytes) else str(got)
        return owner or None

    async def owner(self, session_id: str) -> str | None:
        try:
            current = await self._client.get(self._owner_key(session_id))
        except _REDIS_ERRORS as exc:
            raise self._unavailable(exc) from None
        return current.decode() if current is not None else None

    async def hit(self, name: str, limit: int, window_s: float) -> float:
        """A key's runs-per-minute window, one for all instances (``RateWindows``): the kernel
        uses the cluster's when it has one. Redis unreachable is ``unavailable``."""
        try:
            wait = await self._client.eval(
                _WINDOW, keys=[f"{self.prefix}:rate:{name}"], args=[time.time(), window_s, limit, uuid.uuid4().hex]
            )
        except _REDIS_ERRORS as exc:
            raise self._unavailable(exc) from None
        if isinstance(wait, bytes):
            wait = wait.decode()
        return max(float(wait), 0.0) if isinstance(wait, (str, int, float)) else 0.0

    async def ping(self) -> None:
        try:
            await self._client.ping()
        except _REDIS_ERRORS as exc:
            raise self._unavailable(exc) from None

    async def release(self, session_id: str) -> None:
        """Its last events go out first: once the lease is free, another instance may take the
        session, and an event of ours published after that would be refused (``_PUBLISH``)."""
        await self._flush()
        self._owned.discard(session_id)
        try:
            await self._client.eval(_RELEASE, keys=[self._owner_key(session_id)], args=[self.instance_id])
        except _REDIS_ERRORS as exc:
            self._report(exc)

    # -------------------------------------------------------------- commands

    async def forward(self, owner: str, command: m.Command) -> m.Reply:
        """Push the command into the owner's inbox and wait for its answer, checking the
        owner's lease every ``lease_check_s``. Each command is carried out at most once: the
        owner marks it taken (``PREFIX:taken:ID``, ``SET NX``) before it acts, and whoever
        gives up on it marks it withdrawn the same way — the first mark wins. So once the
        lease is gone, a command withdrawn in time raises :class:`CommandWithdrawn` (the
        caller takes the session over and carries it out itself, within the lease, not the
        forward timeout); one the owner took is waited for one more lease (a live owner that
        lost its lease still answers), then ``owner_lost``. A Redis failure while waiting is
        ``unavailable`` after the same attempt to withdraw."""
        request = Forwarded(id=uuid.uuid4().hex, command=command, expires=time.time() + self.forward_timeout_s, caller=current_caller())
        payload, inbox = _encode(request), self._inbox_key(owner)
        lease = self._owner_key(getattr(command, "session_id", None) or "")
        deadline = anyio.current_time() + self.forward_timeout_s
        popped = None
        owner_gone = False  # the lease left the owner after it took the command
        try:
            await self._client.lpush(inbox, [payload])
            while (left := deadline - anyio.current_time()) > 0:
                popped = await self._client.blpop([f"{self.prefix}:reply:{request.id}"], timeout=min(left, self.lease_check_s))
                if popped:
                    break
                if not owner_gone and await self._client.get(lease) != owner.encode():
                    if await self._withdraw(request.id, inbox, payload):
                        raise CommandWithdrawn(f"the lease of gateway instance {owner} expired before it took the command")
                    owner_gone = True  # it took the command before its lease went: its answer may still come
                    deadline = min(deadline, anyio.current_time() + self.lease_ms / 1000)
        except m.KernelError:
            raise
        except _REDIS_ERRORS as exc:
            unreachable = self._unavailable(exc)
            if await self._give_up(request.id, inbox, payload):
                raise CommandWithdrawn(unreachable.message) from None
            raise unreachable from None
        except BaseException:  # this instance is stopping: the command must not run after its client was answered
            await self._give_up(request.id, inbox, payload)
            raise
        if popped:
            answer = _decode_answered(popped[1])
            if answer.error is not None:
                raise m.KernelError(answer.error.code, answer.error.message, answer.error.details)
            assert answer.reply is not None
            return answer.reply
        name = type(command).__name__
        if owner_gone:
            raise m.KernelError(
                "owner_lost", f"gateway instance {owner} took the {name} and stopped before answering (it may have been carried out)"
            )
        if await self._give_up(request.id, inbox, payload):
            raise CommandWithdrawn(f"gateway instance {owner} did not take the {name} within {self.forward_timeout_s:g}s")
        raise m.KernelError("unavailable", f"gateway instance {owner} took the {name} and did not answer within {self.forward_timeout_s:g}s")

    async def _withdraw(self, forward_id: str, inbox: str, payload: bytes) -> bool:
        """Mark a forwarded command withdrawn unless its owner took it first: True when it
        will never run. It is also taken out of the inbox, so nobody pops it for nothing."""
        won = await self._client.set(self._taken_key(forward_id), b"-", condition=PureToken.NX, px=self._taken_ttl_ms)
        if won:
            await self._client.lrem(inbox, 0, payload)
        return bool(won)

    async def _give_up(self, forward_id: str, inbox: str, payload: bytes) -> bool:
        """:meth:`_withdraw` while giving up (shielded, briefly): False also when Redis cannot
        say (the owner drops the command once it expires)."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(1.0):
            try:
                return await self._withdraw(forward_id, inbox, payload)
            except _REDIS_ERRORS:
                pass
        return False

    def _taken_key(self, forward_id: str) -> str:
        return f"{self.prefix}:taken:{forward_id}"

    @property
    def _taken_ttl_ms(self) -> int:
        """A taken/withdrawn mark outlives every copy of its command (they expire at the forward timeout)."""
        return int(self.forward_timeout_s * 2000) + self.lease_ms

    # -------------------------------------------------------------- events

    def publish(self, event: m.Event) -> None:
        self._outbox.append(event)
        self._wake.set()

    def ended(self, session_id: str) -> None:
        self._outbox.append(_Ended(session_id))
        self._wake.set()

    async def read(self, session_id: str, after_seq: int, timeout_s: float) -> list[m.Event] | None:
        key = self._events_key(session_id)
        try:
            found = await self._client.xread({key: f"{after_seq}-0"}, count=1024, block=max(int(timeout_s * 1000), 1))
            if not found:
                return None if await self._client.exists([self._ended_key(session_id)]) else []
        except _REDIS_ERRORS as exc:
            raise self._unavailable(exc) from None
        entries = next(iter(found.values()), ())
        return [_decode_event(entry.field_values[b"e"]) for entry in entries]

    async def tail(self, session_id: str, count: int) -> list[m.Event]:
        try:
            entries = await self._client.xrevrange(self._events_key(session_id), end="+", start="-", count=count)
        except _REDIS_ERRORS as exc:
            raise self._unavailable(exc) from None
        return [_decode_event(entry.field_values[b"e"]) for entry in reversed(entries)]


class _Ended(msgspec.Struct, frozen=True):
    """In the outbox: the session was deleted (after its last events went out)."""

    session_id: str
