"""Shared HTTP / WebSocket / SSE plumbing for network transports.

One place for the security policy (loopback bind, token auth, Origin allow-list,
size and rate limits) and the hypercorn wiring, so every dialect — built-in or
third-party plugin — behaves the same.  Only stdlib, anyio, msgspec and hypercorn
are used here; nothing from the kernel or another transport.

Public surface: exactly the names in ``__all__`` below, imported from
``transports.shared`` (docs/shared-plumbing.md). The ``_*.py`` modules are
private: their layout may change.
"""

from ._config import (
    LOOPBACK_ORIGINS,
    TOKEN_ENV_VAR,
    ConfigError,
    ServerConfig,
    is_loopback_host,
    resolve_token,
    validate_bind,
)
from ._http import (
    ErrorShaper,
    Headers,
    HttpError,
    Request,
    Response,
    default_error_body,
    error_response,
    json_response,
)
from ._lines import LineReader, LineTooLong, LineWriter
from ._router import HttpHandler, Router, WebSocketHandler
from ._security import SlidingWindowLimiter, extract_token, host_allowed, host_name, origin_allowed, token_matches
from ._serve import base_url, build_hypercorn_config, serve_asgi, serve_http, stalled_peer_timeout_s
from ._sse import SSEStream, format_sse, open_sse
from ._websocket import (
    CLOSE_GOING_AWAY,
    CLOSE_INTERNAL_ERROR,
    CLOSE_NORMAL,
    CLOSE_POLICY_VIOLATION,
    CLOSE_TOO_BIG,
    WebSocket,
    WebSocketCheck,
    WsClosed,
    WsEvent,
    WsIdle,
    WsInvalidFrame,
    WsRateLimited,
    WsText,
    WsTooLarge,
)

__all__ = [
    "CLOSE_GOING_AWAY",
    "CLOSE_INTERNAL_ERROR",
    "CLOSE_NORMAL",
    "CLOSE_POLICY_VIOLATION",
    "CLOSE_TOO_BIG",
    "LOOPBACK_ORIGINS",
    "LineReader",
    "LineTooLong",
    "LineWriter",
    "TOKEN_ENV_VAR",
    "ConfigError",
    "ErrorShaper",
    "Headers",
    "HttpError",
    "HttpHandler",
    "Request",
    "Response",
    "Router",
    "SSEStream",
    "ServerConfig",
    "SlidingWindowLimiter",
    "WebSocket",
    "WebSocketCheck",
    "WebSocketHandler",
    "WsClosed",
    "WsEvent",
    "WsIdle",
    "WsInvalidFrame",
    "WsRateLimited",
    "WsText",
    "WsTooLarge",
    "base_url",
    "build_hypercorn_config",
    "default_error_body",
    "error_response",
    "extract_token",
    "format_sse",
    "host_allowed",
    "host_name",
    "is_loopback_host",
    "json_response",
    "open_sse",
    "origin_allowed",
    "resolve_token",
    "serve_asgi",
    "serve_http",
    "stalled_peer_timeout_s",
    "token_matches",
    "validate_bind",
]
