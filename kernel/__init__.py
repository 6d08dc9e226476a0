"""The transport-agnostic kernel: model, sessions, run loop, store, settings.

Imports only the standard library, anyio and msgspec. Transports talk to it
through :class:`Kernel` (``execute`` and ``subscribe``) and the types in
:mod:`kernel.model`.
"""

from .commands import CommandContext, SlashCommand
from .hub import Subscription
from .kernel import Kernel, ProviderFactory
from .model import Command, Event, KernelError, Reply
from .provider import Provider, ProviderError, ProviderRequest
from .settings import Settings, load_settings, mask_secret
from .store import SQLiteStore, Store
from .tools import FileAccess, Tool, ToolContext, ToolFailure

__all__ = [
    "Command",
    "CommandContext",
    "Event",
    "FileAccess",
    "Kernel",
    "KernelError",
    "Provider",
    "ProviderError",
    "ProviderFactory",
    "ProviderRequest",
    "Reply",
    "SQLiteStore",
    "Settings",
    "SlashCommand",
    "Store",
    "Subscription",
    "Tool",
    "ToolContext",
    "ToolFailure",
    "load_settings",
    "mask_secret",
]
