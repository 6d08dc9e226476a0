"""Per-connection state of the ACP transport: configuration, open prompts, sessions, and
the gateway's own requests to the editor waiting for their answers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import msgspec

from kernel import model as m

from . import mapping
from .codec import INTERNAL_ERROR, EditorError, JsonRpcCodec, Response, RpcError
from .files import EditorFiles


class AcpConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    agent: str | None = None
    max_line_bytes: int = 16_777_216
    eof_grace_s: float = 10.0
    permission_timeout_s: float = 300.0
    fs_timeout_s: float = 30.0
    context_window_tokens: int = 128_000
    default_mode: str = "default"
    max_concurrent_requests: int = 64


class OpenPrompt:
    """An open ``session/prompt``: answered once, when its run ends (or is lost)."""

    def __init__(self, request_id: str, session_id: str) -> None:
        self.request_id = request_id
        self.session_id = session_id
        self.run_id: str | None = None
        self.cancelled = False
        self.end: m.RunFinished | m.RunFailed | None = None
        self.done = anyio.Event()

    def finish(self, end: m.RunFinished | m.RunFailed | None) -> None:
        if not self.done.is_set():
            self.end = end
            self.done.set()


class SessionState:
    """A kernel session this editor opened (``session/new`` or ``session/load``)."""

    def __init__(self, session_id: str, cwd: str, mode: str, context_window: int) -> None:
        self.id = session_id
        self.cwd = cwd
        self.mode = mode
        self.stream = mapping.SessionStream(cwd, context_window)
        self.prompts: set[OpenPrompt] = set()
        self.permissions: set[int] = set()
        self.files: EditorFiles | None = None


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
        pending = self._pending.get(response.id)  # type: ignore[arg-type]
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
