"""One OpenAI chat-completions request as one run in a throw-away kernel session.

OpenAI clients send the whole conversation every time, so each request gets a fresh
session: prior turns become its history (``SaveHistory``), the last user message the
``Prompt`` — or, when the conversation ends with tool results, a ``Continue``. The
client's own ``tools`` ride in ``PromptOptions.client_tools``: the kernel offers them
to the model and ends the run with their calls pending, which go back to the client
as ``tool_calls``. The session is deleted when the answer is out (or the client went
away). Nobody can answer an approval question on an OpenAI connection, so those are
answered by policy (``openai_tool_approval``), and turn-limit questions are declined.
"""

from __future__ import annotations

import logging
from typing import Self

import anyio

from kernel import Follower, Kernel, KernelError
from kernel import model as m
from kernel.session import Session

from .openai_codec import ChatPlan

log = logging.getLogger("gateway.http")

EPHEMERAL_LABEL = "openai chat (ephemeral)"


class EphemeralChat:
    """Use as ``async with EphemeralChat(kernel, plan) as chat: await chat.start()``,
    then ``chat.next_batch()`` until it returns ``[]``; ``chat.end`` is the outcome."""

    def __init__(self, kernel: Kernel, plan: ChatPlan, *, approve_tools: bool, request_id: str) -> None:
        self.kernel = kernel
        self.plan = plan
        self.approve_tools = approve_tools
        self.request_id = request_id
        self.session: Session | None = None
        self.run_id: str | None = None
        self.end: m.RunFinished | m.RunFailed | None = None
        self.reasoning: list[str] = []
        self.client_calls: tuple[m.ToolCall, ...] = ()
        self._follower: Follower | None = None

    async def __aenter__(self) -> Self:
        try:
            # In memory only: no SQLite write stands between the request and the first token.
            self.session = await self.kernel.session(None, self.plan.agent_id, label=EPHEMERAL_LABEL, ephemeral=True)
            if self.plan.history:
                await self.kernel.execute(m.SaveHistory(session_id=self.session.id, messages=self.plan.history))
            self._follower = await Follower.open(self.kernel, self.session.id, stop_on_loss=True)
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def start(self) -> m.Accepted:
        assert self.session is not None
        command: m.Command
        if self.plan.continuation:
            command = m.Continue(session_id=self.session.id, request_id=self.request_id, options=self.plan.options)
        else:
            command = m.Prompt(
                session_id=self.session.id, request_id=self.request_id, parts=self.plan.prompt_parts, options=self.plan.options
            )
        reply = await self.kernel.execute(command)
        assert isinstance(reply, m.Accepted)
        self.run_id = reply.run_id
        return reply

    async def next_batch(self) -> list[m.Event]:
        """This run's next events (approvals answered on the way); ``[]`` after its end."""
        assert self._follower is not None and self.session is not None
        while self.end is None:
            batch = await self._follower.next_batch()
            if not batch:
                self.end = m.RunFailed(
                    session_id=self.session.id, run_id=self.run_id or "", request_id=self.request_id,
                    error=m.ErrorInfo(code="internal", message="the run's event stream was lost"),
                )
                return [self.end]
            out: list[m.Event] = []
            for event in batch:
                if getattr(event, "run_id", None) != self.run_id:
                    continue
                out.append(event)
                if isinstance(event, m.ToolApprovalRequested):
                    await self._answer(m.ResolveToolApproval(
                        session_id=self.session.id, call_id=event.call_id, approved=self.approve_tools,
                        reason="answered by the http transport's openai_tool_approval policy",
                    ))
                elif isinstance(event, m.TurnLimitReached):
                    await self._answer(m.ResolveTurnLimit(
                        session_id=self.session.id, confirmed=False, reason="OpenAI requests do not extend the turn limit",
                    ))
                elif isinstance(event, m.ReasoningDelta):
                    self.reasoning.append(event.text)
                elif isinstance(event, (m.RunFinished, m.RunFailed)):
                    if isinstance(event, m.RunFinished):
                        self.client_calls = event.pending_tool_calls
                    self.end = event
                    break
            if out:
                return out
        return []

    async def _answer(self, command: m.Command) -> None:
        try:
            await self.kernel.execute(command)
        except KernelError as exc:  # the question was already answered or timed out
            log.debug("auto-answer refused: %s", exc.message)

    def interrupt(self) -> None:
        if self.session is not None:
            self.session.interrupt()

    async def __aexit__(self, *exc: object) -> None:
        with anyio.CancelScope(shield=True):
            if self._follower is not None:
                self._follower.close()
            if self.session is not None:
                try:  # the kernel lets an unfinished run record its end first
                    await self.kernel.execute(m.DeleteSession(session_id=self.session.id))
                except KernelError as error:
                    log.debug("deleting ephemeral session %s: %s", self.session.id, error.message)
