"""Per-connection state of the ACP server: open prompts, the sessions this editor
opened, and the gateway's own requests to the editor waiting for their answers.

Server side (anyio events): the pure translation is :mod:`.codec`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio

from kernel import RunWatch
from kernel.model import ToolSource

from .codec import SessionStream
from .files import EditorFiles
from .jsonrpc import INTERNAL_ERROR, EditorError, JsonRpcCodec, Response, RpcError, RpcId
from .terminal import EditorTerminal
from .wire import SelectOption, SessionNotification, Update

if TYPE_CHECKING:
    from plugins.mcp.source import McpServers


class OpenPrompt:
    """An open ``session/prompt``: answered once, when its run ends (or its end is lost).

    The session's forwarder feeds ``watch`` and sets ``done``; ``cancelled`` is the
    editor's ``session/cancel``, ``$/cancel_request`` or ``session/close`` (or its going away).
    """

    def __init__(self, request_id: str, rpc_id: RpcId | None) -> None:
        self.request_id = request_id
        self.rpc_id = rpc_id  # the editor's id of the session/prompt request
        self.watch = RunWatch(request_id)
        self.cancelled = False
        self.done = anyio.Event()
        self.questions: set[int] = set()  # the gateway's permission requests for this prompt


class SessionState:
    """A kernel session this editor opened (``session/new``, ``session/load`` or ``session/resume``).

    ``following`` is the cancel scope of its forwarder, ``unfollowed`` set once that has
    stopped following (``session/close``, the editor gone).
    """

    def __init__(self, session_id: str, cwd: str, mode: str, context_window: int) -> None:
        self.id = session_id
        self.cwd = cwd
        self.mode = mode
        self.stream = SessionStream(cwd, context_window)
        self.prompts: dict[str, OpenPrompt] = {}  # by request id, in the order they were sent
        self.files: EditorFiles | None = None
        self.terminal: EditorTerminal | None = None
        self.mcp: McpServers | None = None  # the MCP servers the editor gave the session
        self.options: tuple[SelectOption, ...] = ()  # the config options the editor was last told
        self.title: str | None = None  # the title the editor was last told
        self.following = anyio.CancelScope()
        self.unfollowed = anyio.Event()

    def tool_sources(self) -> tuple[ToolSource, ...]:
        """The session's own tools from this editor (``ConfigureSession(tool_sources=...)``):
        its terminal's ``run_command``, and the tools of the MCP servers it gave."""
        terminal = (self.terminal,) if self.terminal is not None else ()
        return (*terminal, *(self.mcp.sources if self.mcp is not None else ()))


def update_line(session_id: str, update: Update) -> bytes:
    """A ``session/update`` notification, ready to write."""
    return JsonRpcCodec.notification("session/update", SessionNotification(session_id, update))


class Answer:
    """A method's result plus notifications that must follow the response."""

    def __init__(self, result: Any, after: list[bytes] | None = None) -> None:
        self.result = result
        self.after = after or []


class _Pending:
    def __init__(self) -> None:
        self.done = anyio.Event()
        self.result: Any = None
        self.error: RpcError | None = None


class EditorRequests:
    """The gateway's requests to the editor (permission, files) and their answers.

    ``request`` writes through ``write`` and waits; the read loop hands each
    response to :meth:`resolve`. Requests can be abandoned (cancelled prompt,
    closed editor) so nothing waits for an answer that will not come.
    """

    def __init__(self, codec: JsonRpcCodec, write: Callable[[list[bytes]], Awaitable[None]]) -> None:
        self.codec = codec
        self.write = write
        self.closed = False
        self._pending: dict[int, _Pending] = {}

    async def request(self, method: str, params: Any, *, timeout_s: float, track: set[int] | None = None) -> Any:
        """The editor's result; raises EditorError (error answer, abandoned) or TimeoutError."""
        if self.closed:
            raise EditorError(RpcError(code=INTERNAL_ERROR, message="the editor closed the connection"))
        rid, line = self.codec.request(method, params)
        pending = self._pending[rid] = _Pending()
        if track is not None:
            track.add(rid)
        try:
            await self.write([line])
            with anyio.fail_after(timeout_s):
                await pending.done.wait()
        finally:
            self._pending.pop(rid, None)
            self.codec.forget(rid)
            if track is not None:
                track.discard(rid)
        if pending.error is not None:
            raise EditorError(pending.error)
        return pending.result

    def resolve(self, response: Response) -> None:
        pending = self._pending.get(response.id)
        if pending is not None and not pending.done.is_set():
            pending.result, pending.error = response.result, response.error
            pending.done.set()

    def abandon(self, ids: set[int] | None, message: str) -> None:
        """Settle open requests (all of them with ``None``) as failed."""
        for rid in list(self._pending if ids is None else ids):
            pending = self._pending.get(rid)
            if pending is not None and not pending.done.is_set():
                pending.error = RpcError(code=INTERNAL_ERROR, message=message)
                pending.done.set()

    def close(self) -> None:
        self.closed = True
        self.abandon(None, "the editor closed the connection")
