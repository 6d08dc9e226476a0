"""Shared HTTP / WebSocket / SSE plumbing for network transports.

One place for the security policy (loopback bind, token auth, Origin allow-list,
size and rate limits) and the hypercorn wiring, so every dialect — built-in or
third-party plugin — behaves the same.  Only stdlib, anyio, msgspec and hypercorn
are used here; nothing from the kernel (but its lazy-export helper and guarded JSON
decoding) or another transport.

Public surface: exactly the names in ``__all__`` below, imported from
``transports.shared`` (docs/shared-plumbing.md). The ``_*.py`` modules are
private: their layout may change. Names load on first use, so a pure module
(``transports.shared.coalesce``, imported by codecs) brings no server with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernel import lazy_exports

_MODULES: dict[str, tuple[str, ...]] = {
    "._config": ("LOOPBACK_ORIGINS", "TOKEN_ENV_VAR", "ConfigError", "HttpServerConfig", "ServerConfig", "is_loopback_host", "resolve_token", "validate_bind"),
    "._http": ("ErrorShaper", "Headers", "HttpError", "Request", "Response", "default_error_body", "error_response", "json_response"),
    "._health": ("ReadinessSource", "add_health_routes"),
    "._lines": ("LineReader", "LineTooLong", "LineWriter"),
    "._router": ("HttpHandler", "Router", "WebSocketHandler"),
    "._security": (
        "ANONYMOUS", "API_KEY_ENV_VAR", "KeyResolver", "local_caller", "resolve_caller", "resolve_principal", "traceparent_of",
        "TOKEN_COOKIE", "ClientLimiter", "SlidingWindowLimiter", "cookie_value", "extract_token", "host_allowed", "host_name",
        "origin_allowed", "same_origin", "token_cookie", "token_cookie_name", "token_matches",
    ),
    "._serve": ("base_url", "build_hypercorn_config", "serve_asgi", "serve_http", "stalled_peer_timeout_s"),
    "._sse": ("ClientWatch", "SSEStream", "format_sse", "open_sse", "watching", "write_frames"),
    "._static": ("PAGE_HEADERS", "page_url", "static_response"),
    "._tasks": ("RunTask", "TaskBook", "TaskFollower", "TaskState", "end_state", "session_of", "task_from_history"),
    "._tcplines": ("LineConnection", "LineServerConfig", "LineSplitter", "serve_lines"),
    "._websocket": (
        "CLOSE_GOING_AWAY", "CLOSE_INTERNAL_ERROR", "CLOSE_NORMAL", "CLOSE_POLICY_VIOLATION", "CLOSE_TOO_BIG",
        "WebSocket", "WebSocketCheck", "WsClosed", "WsEvent", "WsIdle", "WsInvalidFrame", "WsRateLimited", "WsText", "WsTooLarge",
    ),
    "._telemetry": ("ConnectionObserver", "LogSource", "MetricsSource", "add_metrics_route", "stream_log_entries"),
    ".coalesce": ("DeltaCoalescer",),
}
_WHERE = {name: module for module, names in _MODULES.items() for name in names}

__getattr__, __all__ = lazy_exports(__name__, _WHERE)

if TYPE_CHECKING:
    from ._config import LOOPBACK_ORIGINS as LOOPBACK_ORIGINS
    from ._config import TOKEN_ENV_VAR as TOKEN_ENV_VAR
    from ._config import ConfigError as ConfigError
    from ._config import HttpServerConfig as HttpServerConfig
    from ._config import ServerConfig as ServerConfig
    from ._config import is_loopback_host as is_loopback_host
    from ._config import resolve_token as resolve_token
    from ._config import validate_bind as validate_bind
    from ._health import ReadinessSource as ReadinessSource
    from ._health import add_health_routes as add_health_routes
    from ._http import ErrorShaper as ErrorShaper
    from ._http import Headers as Headers
    from ._http import HttpError as HttpError
    from ._http import Request as Request
    from ._http import Response as Response
    from ._http import default_error_body as default_error_body
    from ._http import error_response as error_response
    from ._http import json_response as json_response
    from ._lines import LineReader as LineReader
    from ._lines import LineTooLong as LineTooLong
    from ._lines import LineWriter as LineWriter
    from ._router import HttpHandler as HttpHandler
    from ._router import Router as Router
    from ._router import WebSocketHandler as WebSocketHandler
    from ._security import ANONYMOUS as ANONYMOUS
    from ._security import API_KEY_ENV_VAR as API_KEY_ENV_VAR
    from ._security import TOKEN_COOKIE as TOKEN_COOKIE
    from ._security import ClientLimiter as ClientLimiter
    from ._security import KeyResolver as KeyResolver
    from ._security import SlidingWindowLimiter as SlidingWindowLimiter
    from ._security import cookie_value as cookie_value
    from ._security import extract_token as extract_token
    from ._security import host_allowed as host_allowed
    from ._security import host_name as host_name
    from ._security import local_caller as local_caller
    from ._security import origin_allowed as origin_allowed
    from ._security import resolve_caller as resolve_caller
    from ._security import resolve_principal as resolve_principal
    from ._security import same_origin as same_origin
    from ._security import token_cookie as token_cookie
    from ._security import token_cookie_name as token_cookie_name
    from ._security import token_matches as token_matches
    from ._security import traceparent_of as traceparent_of
    from ._serve import base_url as base_url
    from ._serve import build_hypercorn_config as build_hypercorn_config
    from ._serve import serve_asgi as serve_asgi
    from ._serve import serve_http as serve_http
    from ._serve import stalled_peer_timeout_s as stalled_peer_timeout_s
    from ._sse import ClientWatch as ClientWatch
    from ._sse import SSEStream as SSEStream
    from ._sse import format_sse as format_sse
    from ._sse import open_sse as open_sse
    from ._sse import watching as watching
    from ._sse import write_frames as write_frames
    from ._static import PAGE_HEADERS as PAGE_HEADERS
    from ._static import page_url as page_url
    from ._static import static_response as static_response
    from ._tasks import RunTask as RunTask
    from ._tasks import TaskBook as TaskBook
    from ._tasks import TaskFollower as TaskFollower
    from ._tasks import TaskState as TaskState
    from ._tasks import end_state as end_state
    from ._tasks import session_of as session_of
    from ._tasks import task_from_history as task_from_history
    from ._tcplines import LineConnection as LineConnection
    from ._tcplines import LineServerConfig as LineServerConfig
    from ._tcplines import LineSplitter as LineSplitter
    from ._tcplines import serve_lines as serve_lines
    from ._telemetry import ConnectionObserver as ConnectionObserver
    from ._telemetry import LogSource as LogSource
    from ._telemetry import MetricsSource as MetricsSource
    from ._telemetry import add_metrics_route as add_metrics_route
    from ._telemetry import stream_log_entries as stream_log_entries
    from ._websocket import CLOSE_GOING_AWAY as CLOSE_GOING_AWAY
    from ._websocket import CLOSE_INTERNAL_ERROR as CLOSE_INTERNAL_ERROR
    from ._websocket import CLOSE_NORMAL as CLOSE_NORMAL
    from ._websocket import CLOSE_POLICY_VIOLATION as CLOSE_POLICY_VIOLATION
    from ._websocket import CLOSE_TOO_BIG as CLOSE_TOO_BIG
    from ._websocket import WebSocket as WebSocket
    from ._websocket import WebSocketCheck as WebSocketCheck
    from ._websocket import WsClosed as WsClosed
    from ._websocket import WsEvent as WsEvent
    from ._websocket import WsIdle as WsIdle
    from ._websocket import WsInvalidFrame as WsInvalidFrame
    from ._websocket import WsRateLimited as WsRateLimited
    from ._websocket import WsText as WsText
    from ._websocket import WsTooLarge as WsTooLarge
    from .coalesce import DeltaCoalescer as DeltaCoalescer
