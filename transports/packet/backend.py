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

from kernel import Follower, Kernel, KernelError
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
            follower = await Follower.open(self.kernel, self.session_id, stop_on_loss=True)
            try:
                await self.kernel.execute(prompt)
                answer = await _until_answer(follower, collector)
            except anyio.get_cancelled_exc_class():
                with anyio.CancelScope(shield=True):
                    await self._abandon(follower, collector)
                raise
            finally:
                follower.close()
            if answer is None or (self.closing and not answer["success"]):
                return codec.fail(f"{codec.SHUT_DOWN}: the message was interrupted")
            return answer

    async def _abandon(self, follower: Follower, collector: codec.RunCollector) -> None:
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
                batch = await follower.next_batch()
                if not batch or isinstance(batch[-1], m.SubscriberLagged):
                    return
                for event in batch:
                    collector.feed(event)


async def _until_answer(follower: Follower, collector: codec.RunCollector) -> Answer | None:
    """Feed the run's events to the collector until it has the answer (None: session closed)."""
    while batch := await follower.next_batch():
        for event in batch:
            if isinstance(event, m.SubscriberLagged):
                raise KernelError("internal", "lost events of the run: they are no longer retained")
            answer = collector.feed(event)
            if answer is not None:
                return answer
    return None
