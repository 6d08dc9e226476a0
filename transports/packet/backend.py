"""The async side of the Packet dialect: one packet in, one uniform answer out.

Runs in the kernel's event loop. Every request is its own task, so a long
``process_message`` never holds up ``get_status`` or ``execute_tool``. Messages
belong to one conversation (one kernel session), so they are answered one at a
time in arrival order (a fair lock) instead of piling into the session's bounded
inbox. A request abandoned by its caller (timeout) interrupts its own run, so the
conversation is free for the next message. With a settings file (the embedded
``BackendServer``'s ``config_file``) every ``set_settings`` is written to it too.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread
import msgspec

from kernel import Kernel, KernelError, RunFollower
from kernel import model as m

from . import codec
from .settingsfile import SettingsFile
from .wire import Answer

log = logging.getLogger("gateway.packet")


class PacketBackend:
    def __init__(
        self,
        kernel: Kernel,
        *,
        policy: m.ApprovalPolicy,
        session_id: str = "packet",
        agent: str | None = None,
        facts: Callable[[], dict[str, Any]] | None = None,
        abandon_grace_s: float = 5.0,
        settings_file: SettingsFile | None = None,
        caller: m.Caller = m.LOCAL_CALLER,
    ) -> None:
        self.kernel = kernel
        # Who the app acts as (the admin, unless its section configures a key).
        self.caller = caller
        self.settings_file = settings_file
        self._settings_saved = anyio.Lock()  # the file is written in the order the kernel applied the changes
        self.policy = policy
        self.session_id = session_id
        self.agent_id = kernel.agent(agent).agent_id() if agent else None
        self.facts = facts or dict
        self.abandon_grace_s = abandon_grace_s
        self.closing = False
        self._turns = anyio.Lock()
        self._in_flight = 0
        self._idle = anyio.Event()
        self._idle.set()

    async def open(self) -> None:
        """Create (or load) the conversation's session, with its agent."""
        await self.kernel.execute(m.OpenSession(session_id=self.session_id, agent_id=self.agent_id), self.caller)

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
            if isinstance(request, codec.SettingsUpdate):
                return await self._set_settings(request)
            if isinstance(request, (m.ExecuteTool, m.GetHistory, m.SaveHistory)):
                await self.open()  # these would make a session of the default agent
            reply = await self.kernel.execute(request, self.caller)
            if isinstance(reply, m.StatusReport):
                return codec.ok(codec.status_data(reply, self.kernel.settings_view(), self.facts()))
            app = self.settings_file.app_settings() if self.settings_file is not None else None
            return codec.reply_answer(codec.packet_kind(packet_type) or "", reply, app)
        except KernelError as exc:
            return codec.error_answer(exc)
        except Exception as exc:
            if self.closing:
                return codec.fail(codec.SHUT_DOWN)
            log.exception("packet: %s failed", codec.packet_kind(packet_type))
            return codec.fail(f"internal error: {type(exc).__name__}: {exc}")

    async def _set_settings(self, update: codec.SettingsUpdate) -> Answer:
        """Apply the kernel's part, then write the settings file (when there is one)."""
        if update.app and self.settings_file is None:
            keys = ", ".join(update.app)
            return codec.fail(f"{keys}: kept in a BackendServer's config_file; this packet endpoint has none")
        async with self._settings_saved:
            reply = await self.kernel.execute(update.command, self.caller)
            if self.settings_file is not None:
                settings_file = self.settings_file
                content = settings_file.content(self.kernel.settings, update.command.changes, update.app)
                try:
                    await anyio.to_thread.run_sync(settings_file.save, content)
                except OSError as exc:
                    return codec.fail(f"settings applied, but not saved to {settings_file.path}: {exc.strerror or exc}")
        return codec.reply_answer("set_settings", reply)

    async def _message(self, prompt: m.Prompt) -> Answer:
        async with self._turns:
            if self.closing:
                return codec.fail(codec.SHUT_DOWN)
            prompt = msgspec.structs.replace(prompt, agent_id=self.agent_id)
            async with await RunFollower.start(self.kernel, prompt, policy=self.policy, client="packet", caller=self.caller) as run:
                collector = codec.RunCollector()
                answer: Answer | None = None
                try:
                    while answer is None:  # the run's last event (its end) gives the answer
                        for event in await run.next_batch():
                            answer = collector.feed(event)
                except anyio.get_cancelled_exc_class():
                    with anyio.CancelScope(shield=True):
                        await self._abandon(run)
                    raise
            if self.closing and not answer["success"]:
                return codec.fail(f"{codec.SHUT_DOWN}: the message was interrupted")
            return answer

    async def _abandon(self, run: RunFollower) -> None:
        """The caller gave up (timeout): interrupt our run (even while it is queued) and
        wait (bounded) for its end, so the next message starts on a quiet session."""
        with anyio.move_on_after(self.abandon_grace_s):
            if await run.interrupt("timeout"):
                await run.wait()
