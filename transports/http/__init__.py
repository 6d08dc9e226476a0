"""The http transport: a native REST + SSE API of kernel commands and events
(``native/``), and an OpenAI-compatible ``/v1/chat/completions`` + ``/v1/models``
surface (``openai/``), on one server. See docs/http.md.

Names load on first use, so importing a dialect's codec brings no server with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_WHERE: dict[str, str] = {"HttpApp": ".server", "HttpConfig": ".config", "HttpTransport": ".server"}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'transports.http' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from .config import HttpConfig
    from .server import HttpApp, HttpTransport
