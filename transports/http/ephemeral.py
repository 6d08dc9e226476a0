"""One OpenAI chat-completions request as one run in a throw-away kernel session.

OpenAI clients send the whole conversation every time, so each request gets a fresh
session: prior turns become its history (``SaveHistory``), the last user message the
``Prompt``; the session is deleted when the answer is out (or the client went away).
Nobody can answer an approval question on an OpenAI connection, so those are answered
by policy (``openai_tool_approval``), and turn-limit questions are declined.

Two things the kernel has no command for yet are done here through a per-session
*view* of the kernel (``session.kernel`` of this one session only; nothing global
changes). They should become kernel features (see docs/http.md, "Kernel gaps"):

* **client tools**: the client's ``tools`` are added to this session's tool set as
  tools whose handler ends the run (an interrupt) instead of executing; the calls the
  model made are then read from the history and returned to the client as
  ``tool_calls`` with ``finish_reason: "tool_calls"``.
* **continuation**: when the last message is a tool result, there is no new user
  turn. The prompt is a marker text that the provider view strips from what the
  model sees, so the model continues from the tool results exactly as sent.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any, Self

import anyio
import msgspec

from kernel import Kernel, KernelError
from kernel import model as m
from kernel.provider import Chunk, ProviderRequest, ToolSpec
from kernel.session import Session
from kernel.settings import AgentSettings
from kernel.tools import Tool, ToolContext

from .follow import EventFollower
from .openai_codec import ChatPlan

log = logging.getLogger("gateway.http")

EPHEMERAL_LABEL = "openai chat (ephemeral)"
_MARKER_PREFIX = "\u2063gateway-continue:"


class _MarkerFilter:
    """A provider view that hides the continuation marker message from the model."""

    def __init__(self, inner: Any, marker: str) -> None:
        self._inner = inner
        self._marker = marker
        self.name = getattr(inner, "name", "provider")

    @property
    def model(self) -> str:
        return self._inner.model  # type: ignore[no-any-return]

    def stream(self, request: ProviderRequest) -> AsyncIterator[Chunk]:
        kept = tuple(msg for msg in request.messages if not (msg.role == "user" and msg.content == self._marker))
        return self._inner.stream(msgspec.structs.replace(request, messages=kept))  # type: ignore[no-any-return]

    async def aclose(self) -> None:
        """The wrapped provider is shared and owned by the kernel: not closed here."""


class _SessionKernelView:
    """The kernel as one ephemeral session sees it: plus the client's tools, and the
    marker filter on the provider. Everything else is the real kernel."""

    def __init__(self, kernel: Kernel, client_tools: dict[str, Tool], marker: str | None) -> None:
        self._kernel = kernel
        self._client_tools = client_tools
        self._marker = marker

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kernel, name)

    def tools_for(self, agent: AgentSettings) -> dict[str, Tool]:
        tools = self._kernel.tools_for(agent)
        tools.update(self._client_tools)
        return tools

    def provider_for(self, agent: AgentSettings | None = None) -> Any:
        provider = self._kernel.provider_for(agent)
        return _MarkerFilter(provider, self._marker) if self._marker else provider


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
        self.client_calls: list[m.ToolCall] = []
        self._follower: EventFollower | None = None
        self._client_called = False
        self._marker = f"{_MARKER_PREFIX}{uuid.uuid4().hex}" if plan.continuation else None

    async def __aenter__(self) -> Self:
        try:
            self.session = await self.kernel.session(None, self.plan.agent_id, label=EPHEMERAL_LABEL)
            client_tools = {spec.name: self._client_tool(spec) for spec in self.plan.client_tools}
            if client_tools or self._marker:
                self.session.kernel = _SessionKernelView(self.kernel, client_tools, self._marker)  # type: ignore[assignment]
                # The client decides about its own tools: never ask for approval of them.
                self.session.tool_policy.update({name: True for name in client_tools})
            if self.plan.history:
                await self.kernel.execute(m.SaveHistory(session_id=self.session.id, messages=self.plan.history))
            self._follower = await EventFollower.open(self.kernel, self.session.id)
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def start(self) -> m.Accepted:
        assert self.session is not None
        reply = await self.kernel.execute(
            m.Prompt(
                session_id=self.session.id,
                request_id=self.request_id,
                parts=self.plan.prompt_parts,
                text=self._marker,
                options=self.plan.options,
            )
        )
        assert isinstance(reply, m.Accepted)
        self.run_id = reply.run_id
        return reply

    def _client_tool(self, spec: ToolSpec) -> Tool:
        async def hand_back_to_client(arguments: dict[str, Any], context: ToolContext) -> str:
            # The client runs its own tools: end the run here; the calls are read back
            # from the history once the run has recorded them.
            self._client_called = True
            assert self.session is not None
            self.session.interrupt()
            await anyio.sleep_forever()
            return ""  # pragma: no cover - the interrupt cancels the sleep

        return Tool(name=spec.name, description=spec.description, parameters=spec.parameters, handler=hand_back_to_client)

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
                    if self._client_called and isinstance(event, m.RunFinished):
                        await self._load_client_calls()
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

    async def _load_client_calls(self) -> None:
        assert self.session is not None
        reply = await self.kernel.execute(m.GetHistory(session_id=self.session.id))
        assert isinstance(reply, m.HistoryView)
        names = {spec.name for spec in self.plan.client_tools}
        for message in reversed(reply.messages):
            if message.role == "assistant" and message.tool_calls:
                self.client_calls = [call for call in message.tool_calls if call.name in names]
                return

    def interrupt(self) -> None:
        if self.session is not None:
            self.session.interrupt()

    async def __aexit__(self, *exc: object) -> None:
        with anyio.CancelScope(shield=True):
            if self._follower is not None:
                self._follower.close()
            if self.session is not None:
                # Let an unfinished run record its end before its session disappears.
                if self.session.busy:
                    self.session.interrupt()
                    with anyio.move_on_after(5.0):
                        await self.session.wait_idle()
                try:
                    await self.kernel.execute(m.DeleteSession(session_id=self.session.id))
                except KernelError as error:
                    log.debug("deleting ephemeral session %s: %s", self.session.id, error.message)
