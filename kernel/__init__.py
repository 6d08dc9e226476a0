"""The transport-agnostic kernel: model, sessions, run loop, store, settings.

Imports only the standard library, anyio and msgspec. Transports talk to it
through :class:`Kernel` (``execute`` and ``subscribe``) and the types in
:mod:`kernel.model`.

Public surface for plugins (stable; docs/writing-a-transport.md §1):

* the names exported here, and :mod:`kernel.model` (commands, events, replies,
  content parts, ``ErrorInfo`` with its stable codes);
* ``Kernel.execute``, ``subscribe``, ``session``, ``agent``, ``agent_info``,
  ``sessions``, ``settings``, ``tools``, ``commands``, ``settings_view``,
  ``update_settings``, ``unload_session``; :class:`Follower` (a session's events
  across subscriber lag: what a transport's writer reads); on the :class:`Session` it returns: ``id``,
  ``agent``, ``busy``, ``state``, ``info()``, ``interrupt()``, ``wait_idle()``, and the
  per-session overrides ``max_turns``, ``approval_timeout_s``, ``model_override``, ``files``;
* :mod:`kernel.provider` (chunk types), :mod:`kernel.settings` (``Settings``),
  :mod:`kernel.testing` (``ScriptedProvider``, ``text_turn``, ``tool_turn``,
  ``failing_turn``, ``running_kernel``).

Private: ``kernel.run``, ``kernel.toolcalls``, ``kernel.hub.EventHub``, the
store's and the session's internals, and every name starting with ``_``.
"""

from .commands import CommandContext, SlashCommand
from .follow import Follower
from .hub import Subscription
from .kernel import Kernel, ProviderFactory
from .model import Command, Event, KernelError, Reply
from .provider import Provider, ProviderError, ProviderRequest
from .session import Session
from .settings import Settings, load_settings, mask_secret
from .store import SQLiteStore, Store
from .tools import FileAccess, Tool, ToolContext, ToolFailure

__all__ = [
    "Command",
    "CommandContext",
    "Event",
    "FileAccess",
    "Follower",
    "Kernel",
    "KernelError",
    "Provider",
    "ProviderError",
    "ProviderFactory",
    "ProviderRequest",
    "Reply",
    "SQLiteStore",
    "Session",
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
