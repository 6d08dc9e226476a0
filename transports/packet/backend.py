"""The async side of the Packet dialect: one packet in, one uniform answer out.

Runs in the kernel's event loop. Every request is its own task, so a long
``process_message`` never holds up ``get_status`` or ``execute_tool``. Messages
belong to one conversation (one kernel session), so they are answered one at a
time in arrival order (a fair lock) instead of piling into the session's bounded
inbox. A request abandoned by its caller (timeout) interrupts its own run, so the
conversation is free for the next message.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

import anyio
import msgspec

from kernel import Kernel, KernelError, Subscription
from kernel import model as m

from . import codec
from .codec import Answer

log = logging.getLogger("gateway.packet")


class PacketBackend:
    def __init__(
        self,
        kernel: Kernel,
        *,
        session_id: str = "packet",
        agent_id: str | None = None,
        facts: Callable[[], dict[str, Any]] | None = None,
        abandon_grace_s: float = 5.0,
    ) -> None:
        self.kernel = kernel
        self.session_id = session_id
        self.agent_id = agent_id
        self.facts = facts or dict
        self.abandon_grace_s = abandon_grace_s
        self.closing = False
        self._turns = anyio.Lock()
        self._in_flight = 0
        self._idle = anyio.Event()
        self._idle.set()

    async def open(self) -> None:
        """Create (or load) the conversation's session up front."""
        await self.kernel.session(self.session_id, self.agent_id)

    async def handle(self, packet_type: Any, body: Any) -> Answer:
        """Answer one packet; never raises (a cancelled caller aside)."""
        if self.closing:
            return codec.fail(codec.SHUT_DOWN)
        self._in_flight += 1
        self._idle = anyio.Event() if self._idle.is_set() else self._idle
        try:
            return await self._handle(packet_type, body)
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()

    async def wait_idle(self, timeout_s: float) -> bool:
        with anyio.move_on_after(timeout_s):
            await self._idle.wait()
            return True
        return False

    async def _handle(self, packet_type: Any, body: Any) -> Answer:
        request_id = f"packet-{uuid.uuid4().hex[:16]}"
        request = codec.decode(packet_type, body, session_id=self.session_id, request_id=request_id)
        if isinstance(request, Answer):
            return request
        if isinstance(request, codec.Shutdown):
            return codec.fail("shutdown is handled by the server that owns the backend")
        try:
            if isinstance(request, m.Prompt):
                return await self._message(request)
            if isinstance(request, (m.ExecuteTool, m.GetHistory, m.SaveHistory)):
                await self.kernel.session(self.session_id, self.agent_id)
            reply = await self.kernel.execute(request)
            if isinstance(reply, m.StatusReport):
                return codec.ok(codec.status_data(reply, self.kernel.settings_view(), self.facts()))
            return codec.reply_answer(codec.packet_kind(packet_type) or "", reply)
        except KernelError as exc:
            return codec.error_answer(exc)
        except Exception as exc:
            if self.closing:
                return codec.fail(codec.SHUT_DOWN)
            log.exception("packet: %s failed", codec.packet_kind(packet_type))
            return codec.fail(f"internal error: {type(exc).__name__}: {exc}")

    async def _message(self, prompt: m.Prompt) -> Answer:
        async with self._turns:
            if self.closing:
                return codec.fail(codec.SHUT_DOWN)
            prompt = msgspec.structs.replace(prompt, agent_id=self.agent_id)
            await self.kernel.session(self.session_id, self.agent_id)
            collector = codec.RunCollector(prompt.request_id or "")
            # Subscribe before the prompt so that no event of the run can be missed.
            follower = _Follower(self.kernel, self.session_id, await self.kernel.subscribe(self.session_id))
            try:
                await self.kernel.execute(prompt)
                answer = None
                while answer is None and (event := await follower.next()) is not None:
                    answer = collector.feed(event)
            except anyio.get_cancelled_exc_class():
                with anyio.CancelScope(shield=True):
                    await self._abandon(follower, collector)
                raise
            finally:
                follower.close()
            if answer is None or (self.closing and not answer["success"]):
                return codec.fail(f"{codec.SHUT_DOWN}: the message was interrupted")
            return answer

    async def _abandon(self, follower: _Follower, collector: codec.RunCollector) -> None:
        """The caller gave up (timeout): interrupt our run, now or when it starts, and
        wait (bounded) for its end so the next message starts on a quiet session."""
        session = self.kernel.sessions.get(self.session_id)
        if session is None or collector.finished:
            return
        with anyio.move_on_after(self.abandon_grace_s):
            while not collector.finished:
                active = session.active
                if active is not None and active.job.request_id == collector.request_id:
                    session.interrupt()
                event = await follower.next()
                if event is None:
                    return
                collector.feed(event)


class _Follower:
    """A session subscription that resubscribes from its last ``seq`` if it ever lags."""

    def __init__(self, kernel: Kernel, session_id: str, sub: Subscription) -> None:
        self.kernel = kernel
        self.session_id = session_id
        self.sub = sub

    async def next(self) -> m.Event | None:
        """The next event; None once the session closed (the kernel is shutting down)."""
        resumed_at: int | None = None
        while True:
            try:
                event = await self.sub.__anext__()
            except StopAsyncIteration:
                return None
            if not isinstance(event, m.SubscriberLagged):
                return event
            if event.last_seq == resumed_at:
                raise KernelError("internal", "lost events of the run: they are no longer retained")
            log.warning("packet: subscriber lagged (%s); resuming after seq %d", event.error.message, event.last_seq)
            resumed_at = event.last_seq
            self.sub.close()
            self.sub = await self.kernel.subscribe(self.session_id, after_seq=event.last_seq)

    def close(self) -> None:
        self.sub.close()
