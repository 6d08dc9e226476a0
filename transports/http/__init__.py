"""The http transport: a native REST + SSE API of kernel commands and events, and an
OpenAI-compatible ``/v1/chat/completions`` + ``/v1/models`` surface. See docs/http.md."""

from .server import HttpApp, HttpConfig, HttpTransport

__all__ = ["HttpApp", "HttpConfig", "HttpTransport"]
