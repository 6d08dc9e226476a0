"""Small, real built-in tools: the clock, files inside the workspace, and a plan (``plan``).

File tools go through ``context.files`` so that a transport can swap in another
view of the files (ACP reads the editor's buffers); the default view is the
workspace directory, which the tools cannot leave.
"""

from __future__ import annotations

import datetime as dt
import os
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from kernel import Tool, ToolContext, ToolFailure

from .plan import UPDATE_PLAN


def _str_arg(args: dict[str, Any], name: str) -> str:
    value = args.get(name)
    if not isinstance(value, str) or not value:
        raise ToolFailure(f"argument {name!r} is required and must be a non-empty string")
    return value


async def current_time(args: dict[str, Any], ctx: ToolContext) -> str:
    zone_name = args.get("timezone") or "UTC"
    try:
        zone = ZoneInfo(str(zone_name))
    except (ZoneInfoNotFoundError, ValueError):
        raise ToolFailure(f"unknown time zone {zone_name!r}") from None
    return dt.datetime.now(zone).isoformat(timespec="seconds")


async def read_file(args: dict[str, Any], ctx: ToolContext) -> str:
    path = _str_arg(args, "path")
    line = args.get("line")
    limit = args.get("limit")
    if (line is not None and not isinstance(line, int)) or (limit is not None and not isinstance(limit, int)):
        raise ToolFailure("'line' and 'limit' must be integers")
    return await ctx.files.read_text(path, line=line, limit=limit)


async def write_file(args: dict[str, Any], ctx: ToolContext) -> str:
    path = _str_arg(args, "path")
    content = args.get("content")
    if not isinstance(content, str):
        raise ToolFailure("argument 'content' must be a string")
    await ctx.files.write_text(path, content)
    return f"wrote {len(content.encode())} bytes to {path}"


async def list_directory(args: dict[str, Any], ctx: ToolContext) -> str:
    from kernel import WorkspaceFiles

    base = WorkspaceFiles(ctx.workspace)
    target = base.resolve(str(args.get("path") or "."))
    if not target.is_dir():
        raise ToolFailure(f"not a directory in the workspace: {args.get('path')}")
    names = sorted(e.name + ("/" if e.is_dir() else "") for e in os.scandir(target))
    return "\n".join(names[:500]) or "(empty)"


BUILTIN_TOOLS = (
    Tool(
        name="current_time",
        description="The current date and time, ISO 8601, in a time zone (default UTC).",
        parameters={
            "type": "object",
            "properties": {"timezone": {"type": "string", "description": "IANA zone, e.g. Europe/Paris"}},
        },
        handler=current_time,
        category="clock",
    ),
    Tool(
        name="read_file",
        description="Read a UTF-8 text file from the workspace (optionally from a line, up to a number of lines).",
        parameters={
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "path relative to the workspace"},
                "line": {"type": "integer", "minimum": 1},
                "limit": {"type": "integer", "minimum": 1},
            },
            "required": ["path"],
        },
        handler=read_file,
        category="files",
    ),
    Tool(
        name="write_file",
        description="Write a UTF-8 text file in the workspace (asks the user first).",
        parameters={
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
        handler=write_file,
        category="files",
        access="update",
        requires_approval=True,
    ),
    Tool(
        name="list_directory",
        description="List the entries of a directory in the workspace.",
        parameters={"type": "object", "properties": {"path": {"type": "string", "description": "default: the workspace"}}},
        handler=list_directory,
        category="files",
    ),
    UPDATE_PLAN,
)
