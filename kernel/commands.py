"""Slash commands: named actions a user types (``/help``, ``/model``...).

They are plugins like tools; the kernel lists them (Agent-CLI ``GetCommands``,
OpenFang ``/api/commands``, ACP ``available_commands_update``) and runs them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import msgspec

from .model import LOCAL_CALLER, Caller, CommandInfo

if TYPE_CHECKING:
    from .kernel import Kernel


class CommandContext(msgspec.Struct, kw_only=True):
    kernel: Kernel
    session_id: str
    agent_id: str
    request_id: str | None = None
    # Who typed it: a command passes it to every command it carries out, so a slash command
    # never does more than its caller's key may.
    caller: Caller = LOCAL_CALLER


CommandHandler = Callable[[CommandContext, str], Awaitable[str]]


class SlashCommand(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    description: str
    handler: CommandHandler
    usage: str = ""

    def info(self) -> CommandInfo:
        return CommandInfo(name=self.name, description=self.description, usage=self.usage)
