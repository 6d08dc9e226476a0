"""The default file access for tools: a workspace directory on disk, never outside it."""

from __future__ import annotations

from pathlib import Path

import anyio

from .tools import ToolFailure


class WorkspaceFiles:
    def __init__(self, root: str | Path, *, max_bytes: int = 1_048_576) -> None:
        self.root = Path(root).expanduser().resolve()
        self.max_bytes = max_bytes

    def resolve(self, path: str) -> Path:
        """The real path inside the workspace; symlinks and ``..`` cannot escape it."""
        candidate = (self.root / path).resolve()
        if candidate != self.root and not candidate.is_relative_to(self.root):
            raise ToolFailure(f"path {path!r} is outside the workspace")
        return candidate

    async def read_text(self, path: str, *, line: int | None = None, limit: int | None = None) -> str:
        target = self.resolve(path)
        if not target.is_file():
            raise ToolFailure(f"no such file in the workspace: {path}")
        size = target.stat().st_size
        if size > self.max_bytes:
            raise ToolFailure(f"{path} is {size} bytes, over the {self.max_bytes}-byte limit")
        data = await anyio.Path(target).read_bytes()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolFailure(f"{path} is not a UTF-8 text file") from None
        if line is None and limit is None:
            return text
        lines = text.splitlines(keepends=True)
        start = max((line or 1) - 1, 0)
        end = start + limit if limit is not None else None
        return "".join(lines[start:end])

    async def write_text(self, path: str, content: str) -> None:
        target = self.resolve(path)
        if len(content.encode()) > self.max_bytes:
            raise ToolFailure(f"content is over the {self.max_bytes}-byte limit")
        await anyio.Path(target.parent).mkdir(parents=True, exist_ok=True)
        await anyio.Path(target).write_text(content, encoding="utf-8")
