"""The http transport: a native REST + SSE API of kernel commands and events
(``native/``), an OpenAI-compatible ``/v1/chat/completions`` + ``/v1/models``
surface (``openai/``) and the OpenAI Responses API ``/v1/responses``
(``responses/``), on one server. See docs/http.md.

Names load on first use, so importing a dialect's codec brings no server with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernel import lazy_exports

_WHERE: dict[str, str] = {"HttpApp": ".server", "HttpConfig": ".config", "HttpTransport": ".server"}

__getattr__, __all__ = lazy_exports(__name__, _WHERE)

if TYPE_CHECKING:
    from .config import HttpConfig
    from .server import HttpApp, HttpTransport
