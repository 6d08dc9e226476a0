"""File access through the editor: the kernel's file tools read and write its buffers.

When the editor advertises ``fs.readTextFile`` / ``fs.writeTextFile``, the ACP
transport gives the kernel session an :class:`EditorFiles` as its file access
(``ConfigureSession(files=...)``). Tools then see what the user sees, unsaved
changes included, and writes land in the editor (which can show and undo them). Paths are made absolute against the
session's working directory and may not leave it, the same confinement the
on-disk workspace gives. An operation the editor did not advertise goes to the
fallback (the kernel's workspace on disk).
"""

from __future__ import annotations

import os
from typing import Any, Protocol

import msgspec

from kernel import FileAccess, ToolFailure

from .jsonrpc import EditorError
from .wire import ReadTextFileParams, ReadTextFileResult, WriteTextFileParams


def confined(path: str, cwd: str) -> str:
    """The absolute path the editor understands; it must stay inside the session's cwd."""
    if not path:
        raise ToolFailure("a path is required")
    cwd = os.path.normpath(cwd)
    target = os.path.normpath(path if os.path.isabs(path) else os.path.join(cwd, path))
    if target != cwd and not target.startswith(cwd.rstrip(os.sep) + os.sep):
        raise ToolFailure(f"path {path!r} is outside the project directory {cwd}")
    return target


class Requester(Protocol):
    """Sends a request to the editor and waits for its result (the ACP connection)."""

    async def request(self, method: str, params: Any, *, timeout_s: float) -> Any: ...


async def ask_editor(requester: Requester, method: str, params: Any, *, timeout_s: float, about: str = "") -> Any:
    """The editor's result, for a tool: no answer in time, or an error, is a failure the model reads."""
    try:
        return await requester.request(method, params, timeout_s=timeout_s)
    except TimeoutError:
        raise ToolFailure(f"the editor did not answer {method} within {timeout_s:g}s") from None
    except EditorError as exc:
        target = f" for {about}" if about else ""
        raise ToolFailure(f"the editor could not carry out {method}{target}: {exc.error.message}") from None


class EditorFiles:
    def __init__(
        self,
        requester: Requester,
        session_id: str,
        cwd: str,
        *,
        can_read: bool,
        can_write: bool,
        fallback: FileAccess,
        timeout_s: float = 30.0,
    ) -> None:
        self.requester = requester
        self.session_id = session_id
        self.cwd = os.path.normpath(cwd)
        self.can_read = can_read
        self.can_write = can_write
        self.fallback = fallback
        self.timeout_s = timeout_s

    async def read_text(self, path: str, *, line: int | None = None, limit: int | None = None) -> str:
        if not self.can_read:
            return await self.fallback.read_text(path, line=line, limit=limit)
        params = ReadTextFileParams(session_id=self.session_id, path=confined(path, self.cwd), line=line, limit=limit)
        result = await self._call("fs/read_text_file", params)
        try:
            return msgspec.convert(result, ReadTextFileResult).content
        except msgspec.ValidationError:
            raise ToolFailure(f"the editor's answer to reading {path} has no text content") from None

    async def write_text(self, path: str, content: str) -> None:
        if not self.can_write:
            await self.fallback.write_text(path, content)
            return
        await self._call("fs/write_text_file", WriteTextFileParams(session_id=self.session_id, path=confined(path, self.cwd), content=content))

    async def _call(self, method: str, params: ReadTextFileParams | WriteTextFileParams) -> Any:
        return await ask_editor(self.requester, method, params, timeout_s=self.timeout_s, about=params.path)
