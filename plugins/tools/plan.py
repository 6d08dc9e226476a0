"""``update_plan``: the model keeps a visible plan of its work, step by step.

A model that works through several steps states them (and later their progress)
by calling this tool with the *whole* plan each time. The entries have exactly
the shape of the Agent Client Protocol's plan entries (``content``, ``priority``
``high``/``medium``/``low``, ``status`` ``pending``/``in_progress``/``completed``),
so the ACP transport shows each accepted call as the editor's plan (a ``plan``
session update); every other dialect sees an ordinary tool call. The plan lives
in the conversation itself (the call's arguments), so it needs no storage.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Literal

import msgspec

from kernel import Tool, ToolContext, ToolFailure

PLAN_TOOL = "update_plan"
MAX_ENTRIES = 100
MAX_CONTENT_CHARS = 2000


class PlanEntry(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    content: str
    priority: Literal["high", "medium", "low"] = "medium"
    status: Literal["pending", "in_progress", "completed"] = "pending"


class PlanArguments(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    entries: list[PlanEntry]


def parse_plan(args: dict[str, Any]) -> list[PlanEntry]:
    """The plan's entries; a bad plan is a tool failure the model reads and can fix."""
    try:
        entries = msgspec.convert(args, PlanArguments).entries
    except msgspec.ValidationError as exc:
        raise ToolFailure(f"invalid plan: {exc}") from None
    if len(entries) > MAX_ENTRIES:
        raise ToolFailure(f"invalid plan: at most {MAX_ENTRIES} entries, got {len(entries)}")
    for index, entry in enumerate(entries):
        if not entry.content.strip():
            raise ToolFailure(f"invalid plan: entry {index} has no content")
        if len(entry.content) > MAX_CONTENT_CHARS:
            raise ToolFailure(f"invalid plan: entry {index} is over {MAX_CONTENT_CHARS} characters")
    return entries


async def update_plan(args: dict[str, Any], ctx: ToolContext) -> str:
    entries = parse_plan(args)
    if not entries:
        return "plan cleared"
    counts = Counter(entry.status for entry in entries)
    summary = ", ".join(f"{counts[status]} {status.replace('_', ' ')}" for status in ("completed", "in_progress", "pending") if counts[status])
    return f"plan updated: {len(entries)} step{'s' if len(entries) != 1 else ''} ({summary})"


UPDATE_PLAN = Tool(
    name=PLAN_TOOL,
    description=(
        "Record your plan for a task of several steps, and update it as you go. Send the complete "
        "list every time (it replaces the previous one): each step's content, its priority "
        "(high, medium, low) and its status (pending, in_progress, completed). Keep one step "
        "in_progress at a time."
    ),
    parameters={
        "type": "object",
        "properties": {
            "entries": {
                "type": "array",
                "maxItems": MAX_ENTRIES,
                "items": {
                    "type": "object",
                    "properties": {
                        "content": {"type": "string", "description": "what this step does"},
                        "priority": {"type": "string", "enum": ["high", "medium", "low"]},
                        "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]},
                    },
                    "required": ["content", "priority", "status"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["entries"],
        "additionalProperties": False,
    },
    handler=update_plan,
    category="plan",
)
