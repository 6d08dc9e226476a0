"""Registers the memory tools (facts, persona, tasks over the SQLite store) as a plugin."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .hookspecs import hookimpl
from .tools.memory import MEMORY_TOOLS


@hookimpl
def gateway_register_tools(register: Callable[[Any], None]) -> None:
    for tool in MEMORY_TOOLS:
        register(tool)
