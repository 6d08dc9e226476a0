"""Remote A2A agents as kernel tool sources (``[[tools.a2a]]``), with the a2a-sdk client.

Each remote agent is one tool, ``NAME__ask``: the model sends the remote agent a message (and,
to go on with a conversation, the ``context_id`` a previous answer named); the call streams the
remote task, each artifact chunk reported as the tool's progress (``ToolContext.progress``:
the dialects that can show it do), and its final text is the result. A remote
``INPUT_REQUIRED`` becomes the local user's question (``ToolContext.ask``) and the answer goes
back on the same remote task. A local interrupt cancels the remote task. The remote card is
read at start-up; when that fails the tool is still offered and the card is read again at
its next use.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Sequence
from typing import Any

import anyio
import httpx
from a2a.client import A2ACardResolver, A2AClientError, ClientConfig, ClientFactory
from a2a.client.client import Client
from a2a.types import CancelTaskRequest, Message, Part, Role, SendMessageRequest, StreamResponse, TaskState
from a2a.utils.errors import A2AError
from anyio.abc import TaskStatus

from kernel import A2AAgentSettings, Tool, ToolContext, ToolFailure

log = logging.getLogger("gateway.a2a")

#: The per-run limits and approval policies know remote agents' tools by this category.
CATEGORY = "a2a"
SEPARATOR = "__"
#: How long cancelling the remote task may take when the local run is interrupted.
CANCEL_TIMEOUT_S = 5.0
#: Questions a remote task may ask within one call (a loop guard).
MAX_QUESTIONS = 8

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "message": {"type": "string", "description": "What to ask or tell the remote agent"},
        "context_id": {"type": "string", "description": "The context_id of an earlier answer, to go on with that conversation"},
    },
    "required": ["message"],
}

_TERMINAL = {TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED, TaskState.TASK_STATE_REJECTED}


def _text(parts: Sequence[Part]) -> str:
    return "".join(part.text for part in parts if part.WhichOneof("content") == "text")


class _Call:
    """One call's view of the remote task: its ids, the answer so far, how it stands."""

    def __init__(self) -> None:
        self.task_id = ""
        self.context_id = ""
        self.chunks: list[str] = []
        self.state = TaskState.TASK_STATE_UNSPECIFIED
        self.status_text = ""

    def feed(self, event: StreamResponse) -> str | None:
        """Apply one stream event; the new answer text it carries, if any."""
        kind = event.WhichOneof("payload")
        if kind == "task":
            self.task_id, self.context_id, self.state = event.task.id, event.task.context_id, event.task.status.state
            if event.task.artifacts and not self.chunks:
                self.chunks = [_text(a.parts) for a in event.task.artifacts]
            self.status_text = _text(event.task.status.message.parts)
        elif kind == "artifact_update":
            update = event.artifact_update
            self.task_id, self.context_id = update.task_id, update.context_id
            piece = _text(update.artifact.parts)
            if not update.append:
                self.chunks = []
            self.chunks.append(piece)
            return piece or None
        elif kind == "status_update":
            self.task_id, self.context_id, self.state = event.status_update.task_id, event.status_update.context_id, event.status_update.status.state
            self.status_text = _text(event.status_update.status.message.parts)
        elif kind == "message":
            self.context_id = event.message.context_id or self.context_id
            self.chunks = [_text(event.message.parts)]
            self.state = TaskState.TASK_STATE_COMPLETED
        return None

    @property
    def text(self) -> str:
        return "".join(self.chunks)

    @property
    def open(self) -> bool:
        return bool(self.task_id) and self.state not in _TERMINAL


class A2AToolSource:
    """One remote agent's tool for the kernel: ``NAME__ask``."""

    def __init__(self, settings: A2AAgentSettings, http: httpx.AsyncClient) -> None:
        self.settings = settings
        self.name = settings.name
        self.failure: str | None = None
        self.card_name: str | None = None
        self._http = http
        self._client: Client | None = None
        self._connecting = anyio.Lock()
        self._tool = self._make_tool(f"the remote A2A agent {settings.name} ({settings.url})")

    def _make_tool(self, about: str) -> Tool:
        return Tool(
            name=f"{self.name}{SEPARATOR}ask",
            description=f"Ask {about}. The answer ends with its context_id; pass it back to go on with that conversation.",
            parameters=PARAMETERS,
            handler=functools.partial(A2AToolSource._ask, self),
            category=CATEGORY,
            access="update",
            requires_approval=self.settings.require_approval,
        )

    def tools(self) -> Sequence[Tool]:
        return (self._tool,)

    async def start(self) -> None:
        """Read the card; a failure is kept in :attr:`failure` (and the card read again at use)."""
        try:
            await self._connect()
        except ToolFailure as exc:
            self.failure = str(exc)
            log.warning("A2A agent %s (%s): %s; its tool is offered and the card is read again at its next use", self.name, self.settings.url, exc)

    async def _connect(self) -> Client:
        async with self._connecting:
            if self._client is not None:
                return self._client
            config = ClientConfig(streaming=True, supported_protocol_bindings=["JSONRPC", "HTTP+JSON"], httpx_client=self._http)
            try:
                with anyio.fail_after(self.settings.timeout_s):
                    card = await A2ACardResolver(self._http, self.settings.url).get_agent_card()
                client = ClientFactory(config).create(card)
            except (A2AClientError, A2AError, httpx.HTTPError, TimeoutError, ValueError) as exc:
                raise ToolFailure(f"the A2A agent {self.name}'s card could not be read from {self.settings.url}: {type(exc).__name__}: {exc}") from None
            self.card_name, self.failure = card.name, None
            self._tool = self._make_tool(f"the remote A2A agent {card.name}: {card.description.rstrip('.')}")
            self._client = client
            return client

    async def _ask(self, arguments: dict[str, Any], ctx: ToolContext) -> str:
        text = arguments.get("message")
        if not isinstance(text, str) or not text.strip():
            raise ToolFailure("message must be a non-empty string")
        context_id = arguments.get("context_id")
        client = await self._connect()
        call = _Call()
        parts = [Part(text=text)]
        try:
            with anyio.fail_after(self.settings.timeout_s):
                for _ in range(MAX_QUESTIONS + 1):
                    message = Message(role=Role.ROLE_USER, message_id=uuid.uuid4().hex, parts=parts, context_id=call.context_id or context_id or "", task_id=call.task_id)
                    async for event in client.send_message(SendMessageRequest(message=message)):
                        piece = call.feed(event)
                        if piece is not None and ctx.progress is not None:
                            await ctx.progress(piece)
                    if call.state != TaskState.TASK_STATE_INPUT_REQUIRED:
                        break
                    parts = [Part(text=await self._question(ctx, call))]
        except TimeoutError:
            raise ToolFailure(f"the A2A agent {self.name} did not answer within {self.settings.timeout_s:g}s") from None
        except (A2AClientError, A2AError, httpx.HTTPError) as exc:
            raise ToolFailure(f"the A2A agent {self.name} failed: {type(exc).__name__}: {exc}") from None
        finally:
            if call.open:  # interrupted, timed out or failed mid-task: the remote task is cancelled too
                with anyio.move_on_after(CANCEL_TIMEOUT_S, shield=True):
                    try:
                        await client.cancel_task(CancelTaskRequest(id=call.task_id))
                    except (A2AClientError, A2AError, httpx.HTTPError) as exc:
                        log.info("A2A agent %s: cancelling task %s failed: %s", self.name, call.task_id, exc)
        if call.state in (TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_REJECTED, TaskState.TASK_STATE_CANCELED):
            why = call.status_text or TaskState.Name(call.state)
            raise ToolFailure(f"the A2A agent {self.name}'s task ended {TaskState.Name(call.state)}: {why}")
        return f"{call.text}\n\n(context_id: {call.context_id})" if call.context_id else call.text

    async def _question(self, ctx: ToolContext, call: _Call) -> str:
        """The remote task asks: the local user answers — approving with their reason as the
        reply (``approve`` without one), or rejecting (``reject``); without anyone to ask, the
        call fails."""
        if ctx.ask is None:
            raise ToolFailure(f"the A2A agent {self.name} asks for input nobody here can give: {call.status_text}")
        approved, reply = await ctx.ask(f"The A2A agent {self.name} asks: {call.status_text}")
        return (reply or "approve") if approved else "reject"


class A2AAgents:
    """The configured remote agents, with one HTTP client between them; ``await
    task_group.start(agents.run)`` reads every card at once, then serves until :meth:`close`."""

    def __init__(self, agents: Sequence[A2AAgentSettings]) -> None:
        self.settings = list(agents)
        self.sources: tuple[A2AToolSource, ...] = ()
        self._closing = anyio.Event()

    @property
    def failures(self) -> dict[str, str]:
        return {s.name: s.failure for s in self.sources if s.failure is not None}

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        # One HTTP client per agent: its headers are that agent's credentials only.
        clients = [httpx.AsyncClient(timeout=httpx.Timeout(s.timeout_s, connect=10.0), headers=s.headers) for s in self.settings]
        try:
            self.sources = tuple(A2AToolSource(s, c) for s, c in zip(self.settings, clients, strict=True))
            async with anyio.create_task_group() as starting:
                for source in self.sources:
                    starting.start_soon(source.start)
            task_status.started()
            await self._closing.wait()
        finally:
            with anyio.CancelScope(shield=True):
                for client in clients:
                    await client.aclose()

    def close(self) -> None:
        self._closing.set()
