"""The ``http`` transport: its config, the ASGI app in front of two routers, ``serve``.

Two routers share one server: the native API answers errors in the native shape, the
OpenAI routes in OpenAI's (the router's error shaper sees no path, so the app picks
the router by path first). The routers apply the shared security policy; here a browser
``Origin`` must be one of ``cors_origins`` (empty: CORS off, and every request carrying
an ``Origin`` is refused), and ``rate_limit_per_minute`` is the per-client-IP request
limit, one count for both routers.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import anyio
import msgspec
from anyio.abc import TaskStatus

from kernel import Kernel
from transports.shared import ClientLimiter, ConfigError, Router, ServerConfig, serve_http

from .codec import native_error_body
from .native import NativeApi
from .openai_codec import openai_error_body
from .openai_routes import OpenAIApi

log = logging.getLogger("gateway.http")


class HttpConfig(ServerConfig, kw_only=True, forbid_unknown_fields=True):
    """``[transports.http]``. Inherited WebSocket-only fields are accepted and unused."""

    port: int = 8000
    #: Origins allowed to call the API from a browser (CORS); empty = CORS off and any
    #: request carrying an ``Origin`` header is refused (403). ``"*"`` allows all.
    cors_origins: list[str] = msgspec.field(default_factory=list)
    #: Largest request body (chat requests carry whole conversations and images).
    max_body_bytes: int = 4_194_304
    #: Seconds of silence after which an SSE stream gets a ``: keep-alive`` comment; 0 = never.
    sse_keepalive_s: float = 15.0
    #: Requests per client IP per minute (all routes but /health); 0 disables.
    rate_limit_per_minute: int = 600
    #: Longest wait for a JSON answer (native ``Accept: application/json``, non-streamed
    #: chat completions, or the first streamed chunk); then 504 and the run is interrupted.
    run_timeout_s: float = 600.0
    #: How tool approvals are answered for OpenAI requests, whose clients cannot answer them.
    openai_tool_approval: Literal["reject", "approve"] = "reject"


def check_config(config: HttpConfig) -> None:
    if config.sse_keepalive_s < 0:
        raise ConfigError("sse_keepalive_s must be >= 0")
    if config.run_timeout_s <= 0:
        raise ConfigError("run_timeout_s must be positive")
    if config.rate_limit_per_minute < 0:
        raise ConfigError("rate_limit_per_minute must be >= 0")


def _is_openai_path(path: str) -> bool:
    return path == "/v1/chat/completions" or path == "/v1/models" or path.startswith("/v1/models/")


class HttpApp:
    """The ASGI application of the http transport."""

    def __init__(self, kernel: Kernel, config: HttpConfig) -> None:
        self.config = config
        # The routers' Origin allow-list is ServerConfig.allowed_origins: give them ours.
        router_config = msgspec.structs.replace(config, allowed_origins=list(config.cors_origins))
        cors = bool(config.cors_origins)
        limiter = ClientLimiter(config.rate_limit_per_minute)
        self.native = Router(router_config, error_body=native_error_body, cors=cors, limiter=limiter)
        self.openai = Router(router_config, error_body=openai_error_body, cors=cors, limiter=limiter)
        NativeApi(kernel, keepalive_s=config.sse_keepalive_s, run_timeout_s=config.run_timeout_s).register(self.native)
        OpenAIApi(
            kernel, keepalive_s=config.sse_keepalive_s, run_timeout_s=config.run_timeout_s,
            approve_tools=config.openai_tool_approval == "approve",
        ).register(self.openai)
        self.token = self.native.token

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        router = self.openai if scope["type"] == "http" and _is_openai_path(scope["path"]) else self.native
        await router(scope, receive, send)


class HttpTransport:
    name = "http"
    description = "REST + SSE of native kernel events; OpenAI-compatible /v1/chat/completions and /v1/models"
    Config = HttpConfig

    async def serve(
        self, kernel: Kernel, config: HttpConfig, *, task_status: TaskStatus[str | None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        check_config(config)
        app = HttpApp(kernel, config)
        await serve_http(app, config, lag_grace_s=kernel.settings.session.lag_grace_s, task_status=task_status)
