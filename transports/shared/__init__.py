"""Shared HTTP / WebSocket / SSE plumbing for network transports.

One place for the security policy (loopback bind, token auth, Origin allow-list,
size and rate limits) and the hypercorn wiring, so every dialect — built-in or
third-party plugin — behaves the same.  Only stdlib, anyio, msgspec and hypercorn
are used here; nothing from the kernel or another transport.

Public surface: exactly the names in ``__all__`` below, imported from
``transports.shared`` (docs/shared-plumbing.md). The ``_*.py`` modules are
private: their layout may change. Names load on first use, so a pure module
(``transports.shared.jsonwire``, imported by codecs) brings no server with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_MODULES: dict[str, tuple[str, ...]] = {
    "._config": ("LOOPBACK_ORIGINS", "TOKEN_ENV_VAR", "ConfigError", "ServerConfig", "is_loopback_host", "resolve_token", "validate_bind"),
    "._http": ("ErrorShaper", "Headers", "HttpError", "Request", "Response", "default_error_body", "error_response", "json_response"),
    "._lines": ("LineReader", "LineTooLong", "LineWriter"),
    "._router": ("HttpHandler", "Router", "WebSocketHandler"),
    "._security": ("ClientLimiter", "SlidingWindowLimiter", "extract_token", "host_allowed", "host_name", "origin_allowed", "token_matches"),
    "._serve": ("base_url", "build_hypercorn_config", "serve_asgi", "serve_http", "stalled_peer_timeout_s"),
    "._sse": ("SSEStream", "format_sse", "open_sse"),
    "._websocket": (
        "CLOSE_GOING_AWAY", "CLOSE_INTERNAL_ERROR", "CLOSE_NORMAL", "CLOSE_POLICY_VIOLATION", "CLOSE_TOO_BIG",
        "WebSocket", "WebSocketCheck", "WsClosed", "WsEvent", "WsIdle", "WsInvalidFrame", "WsRateLimited", "WsText", "WsTooLarge",
    ),
    ".jsonwire": ("JsonDecoder", "decode_json"),
}
_WHERE = {name: module for module, names in _MODULES.items() for name in names}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'transports.shared' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
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
    from ._security import ClientLimiter, SlidingWindowLimiter, extract_token, host_allowed, host_name, origin_allowed, token_matches
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
    from .jsonwire import JsonDecoder, decode_json
