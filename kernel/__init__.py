"""The transport-agnostic kernel: model, sessions, run loop, store, settings.

Imports only the standard library, anyio and msgspec. This package is the kernel's
whole public surface: a transport or plugin uses the names exported here and the
types in :mod:`kernel.model` (commands, events, replies, content parts, ``ErrorInfo``
with its stable codes), and nothing else — a test walks the source to keep it so
(docs/writing-a-transport.md, "The seam"). :mod:`kernel.testing` is public for tests.

Names are loaded on first use, so ``import kernel.model`` (what a pure codec needs)
loads msgspec and nothing more.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: Exported name -> the private module that defines it.
_EXPORTS: dict[str, str] = {
    "Kernel": "kernel",
    "ProviderFactory": "kernel",
    "gateway_version": "kernel",
    "Follower": "follow",
    "RunFollower": "follow",
    "RunWatch": "follow",
    "Subscription": "hub",
    "Command": "model",
    "Event": "model",
    "Reply": "model",
    "KernelError": "model",
    "ApprovalPolicy": "model",
    "FileAccess": "model",
    "CommandContext": "commands",
    "SlashCommand": "commands",
    "Chunk": "provider",
    "FinishChunk": "provider",
    "FinishReason": "provider",
    "Provider": "provider",
    "ProviderError": "provider",
    "ProviderRequest": "provider",
    "ReasoningChunk": "provider",
    "TextChunk": "provider",
    "ToolCallChunk": "provider",
    "ToolSpec": "provider",
    "UsageChunk": "provider",
    "AgentSettings": "settings",
    "OpenAISettings": "settings",
    "SECRET_KEYS": "settings",
    "Settings": "settings",
    "load_settings": "settings",
    "mask_secret": "settings",
    "mask_secrets": "settings",
    "SQLiteStore": "store",
    "Store": "store",
    "Tool": "tools",
    "ToolContext": "tools",
    "ToolFailure": "tools",
    "WorkspaceFiles": "files",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kernel' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from .commands import CommandContext, SlashCommand
    from .files import WorkspaceFiles
    from .follow import Follower, RunFollower, RunWatch
    from .hub import Subscription
    from .kernel import Kernel, ProviderFactory, gateway_version
    from .model import ApprovalPolicy, Command, Event, FileAccess, KernelError, Reply
    from .provider import (
        Chunk,
        FinishChunk,
        FinishReason,
        Provider,
        ProviderError,
        ProviderRequest,
        ReasoningChunk,
        TextChunk,
        ToolCallChunk,
        ToolSpec,
        UsageChunk,
    )
    from .settings import SECRET_KEYS, AgentSettings, OpenAISettings, Settings, load_settings, mask_secret, mask_secrets
    from .store import SQLiteStore, Store
    from .tools import Tool, ToolContext, ToolFailure
