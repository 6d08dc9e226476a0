"""dice: a tool the model can call (``roll_dice``) and a slash command (``/roll 2d6``).

A tool is data plus an async handler: its JSON-schema ``parameters`` are what the
model sees; ``category`` and ``access`` (query or update) are what the per-run
limits count (``[tools.limits] games_query_max = 5``); ``requires_approval``
would make every call wait for the user's yes. A handler returns the text the
model reads and raises ``ToolFailure`` for a mistake the model should see.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from typing import Any

from kernel import CommandContext, KernelError, SlashCommand, Tool, ToolContext, ToolFailure
from plugins.hookspecs import hookimpl

MAX_DICE, MAX_SIDES = 100, 1000
_random = random.SystemRandom()


def roll(count: Any, sides: Any) -> str:
    """``2d6: 3, 5 (total 8)``; a ToolFailure that says what is wrong otherwise."""
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_DICE:
        raise ToolFailure(f"count must be an integer from 1 to {MAX_DICE}, got {count!r}")
    if not isinstance(sides, int) or isinstance(sides, bool) or not 2 <= sides <= MAX_SIDES:
        raise ToolFailure(f"sides must be an integer from 2 to {MAX_SIDES}, got {sides!r}")
    rolls = [_random.randint(1, sides) for _ in range(count)]
    return f"{count}d{sides}: {', '.join(map(str, rolls))} (total {sum(rolls)})"


async def roll_dice(args: dict[str, Any], context: ToolContext) -> str:
    return roll(args.get("count", 1), args.get("sides", 6))


ROLL_DICE = Tool(
    name="roll_dice",
    description="Roll dice: `count` dice with `sides` sides each. Returns every roll and the total.",
    parameters={
        "type": "object",
        "properties": {
            "count": {"type": "integer", "minimum": 1, "maximum": MAX_DICE, "default": 1, "description": "how many dice"},
            "sides": {"type": "integer", "minimum": 2, "maximum": MAX_SIDES, "default": 6, "description": "sides per die"},
        },
        "additionalProperties": False,
    },
    handler=roll_dice,
    category="games",
    access="query",
    requires_approval=False,
)

_NOTATION = re.compile(r"(\d*)d(\d+)", re.IGNORECASE)


async def roll_command(context: CommandContext, args: str) -> str:
    """``/roll 2d6`` rolls without asking the model. Errors are KernelErrors with a code."""
    match = _NOTATION.fullmatch(args.strip() or "1d6")
    if match is None:
        raise KernelError("invalid_request", "usage: /roll NdS, for example /roll 2d6")
    try:
        return roll(int(match[1] or 1), int(match[2]))
    except ToolFailure as exc:
        raise KernelError("invalid_request", str(exc)) from None


ROLL = SlashCommand(name="roll", description="Roll dice without asking the model", usage="/roll 2d6", handler=roll_command)


@hookimpl
def gateway_register_tools(register: Callable[[Tool], None]) -> None:
    register(ROLL_DICE)


@hookimpl
def gateway_register_commands(register: Callable[[SlashCommand], None]) -> None:
    register(ROLL)
