"""Registers the memory tools (facts, persona, tasks over the SQLite store) as a plugin."""

from __future__ import annotations

from .hookspecs import RegisterTool, hookimpl
from .tools.memory import MEMORY_TOOLS


@hookimpl
def gateway_register_tools(register: RegisterTool) -> None:
    for tool in MEMORY_TOOLS:
        register(tool)
