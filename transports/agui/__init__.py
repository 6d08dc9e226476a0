"""AG-UI dialect: the gateway as the agent of web front-ends (CopilotKit, ``@ag-ui/client``).

``POST`` a ``RunAgentInput``, get the run's events as SSE; tool approvals are AG-UI
interrupts answered by the next run's ``resume``; a lost stream is resumed with
``Last-Event-ID`` (docs/agui.md). Names load on first use, so importing the pure modules
(``wire``, ``codec``, ``events``) brings no server with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernel import lazy_exports

_EXPORTS: dict[str, str] = {
    "AguiApp": ".server",
    "AguiConfig": ".config",
    "AguiTransport": ".server",
}

__getattr__, __all__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from .config import AguiConfig
    from .server import AguiApp, AguiTransport
