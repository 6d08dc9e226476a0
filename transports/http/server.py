"""The ``http`` transport: the ASGI app in front of three routers, and ``serve``.

Three routers share one server: the native API answers errors in the native shape, the
OpenAI routes — chat completions, models and responses — in OpenAI's, Anthropic's
Messages routes in Anthropic's (the router's error shaper sees no path, so the app picks
the router by path first, and ``/v1/models`` by the ``anthropic-version`` header). The routers
apply the shared security policy; here a browser ``Origin`` must be one of
``cors_origins`` (empty: CORS off, and every request carrying an ``Origin`` is
refused; a page the server served itself — the console — is not cross-site), and
``rate_limit_per_minute`` is the per-client-IP request limit, one count for all routers.
The console (``console/``) is on the native router: its page at ``/``, its calls to the
native API.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

import anyio
import msgspec
from anyio.abc import TaskStatus

from kernel import Kernel
from transports.base import BannerLine
from transports.shared import ClientLimiter, Router, add_health_routes, add_metrics_route, page_url, resolve_token, serve_http

from .anthropic import codec as anthropic_codec
from .anthropic.routes import AnthropicApi
from .config import HttpConfig, openai_policy
from .console.pages import ConsolePages
from .native import codec as native_codec
from .native.routes import NativeApi
from .openai import codec as openai_codec
from .openai.routes import OpenAIApi
from .responses.routes import ResponsesApi
from .responses.stored import ResponseStore

_OPENAI_PATHS = ("/v1/chat/completions", "/v1/models", "/v1/responses")


def _is_openai_path(path: str) -> bool:
    return any(path == base or path.startswith(base + "/") for base in _OPENAI_PATHS)


def _is_anthropic(scope: dict[str, Any]) -> bool:
    """``/v1/messages[/…]``, and ``/v1/models[/…]`` asked with ``anthropic-version`` (the
    one header every Anthropic client sends): the same path answers in either shape."""
    path = scope["path"]
    if path == "/v1/messages" or path.startswith("/v1/messages/"):
        return True
    return (path == "/v1/models" or path.startswith("/v1/models/")) and any(name == b"anthropic-version" for name, _ in scope.get("headers", ()))


def signing_key(token: str | None) -> bytes:
    """The key of the Anthropic dialect's thinking signatures: derived from the token, so
    that signatures stay valid across restarts and instances sharing it; without a token,
    random per process (an older signature then reads as the client's own, never forged)."""
    if token is None:
        return secrets.token_bytes(32)
    return hashlib.sha256(b"gateway anthropic thinking signatures\0" + token.encode()).digest()


class HttpApp:
    """The ASGI application of the http transport."""

    def __init__(self, kernel: Kernel, config: HttpConfig) -> None:
        self.config = config
        # The routers' Origin allow-list is ServerConfig.allowed_origins: give them ours.
        router_config = msgspec.structs.replace(config, allowed_origins=list(config.cors_origins))
        cors = bool(config.cors_origins)
        limiter = ClientLimiter(config.requests_per_minute_per_ip)
        # Every router resolves credentials through the kernel's keys (request.caller).
        keys, name = kernel, HttpTransport.name
        self.native = Router(router_config, error_body=native_codec.native_error_body, cors=cors, limiter=limiter, keys=keys, transport=name)
        self.openai = Router(router_config, error_body=openai_codec.openai_error_body, cors=cors, limiter=limiter, keys=keys, transport=name)
        NativeApi(
            kernel, keepalive_s=config.sse_keepalive_s, run_timeout_s=config.run_timeout_s, sessions_poll_s=config.sessions_poll_s
        ).register(self.native)
        add_health_routes(self.native, kernel)
        add_metrics_route(self.native, kernel.observers.metrics)
        if config.console:
            ConsolePages(self.native.token, kernel).register(self.native)
        policy = openai_policy(config.openai_tool_approval)
        OpenAIApi(kernel, keepalive_s=config.sse_keepalive_s, run_timeout_s=config.run_timeout_s, policy=policy).register(self.openai)
        ResponsesApi(
            kernel, keepalive_s=config.sse_keepalive_s, run_timeout_s=config.run_timeout_s, policy=policy,
            stored=ResponseStore(config.stored_responses, config.stored_responses_bytes), signing_key=signing_key(self.openai.token),
        ).register(self.openai)
        self.anthropic = Router(router_config, error_body=anthropic_codec.anthropic_error_body, cors=cors, limiter=limiter, keys=keys, transport=name)
        AnthropicApi(
            kernel, keepalive_s=config.sse_keepalive_s, run_timeout_s=config.run_timeout_s, policy=policy,
            signing_key=signing_key(self.anthropic.token),
        ).register(self.anthropic)
        self.token = self.native.token

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and _is_anthropic(scope):
            router = self.anthropic
        else:
            router = self.openai if scope["type"] == "http" and _is_openai_path(scope["path"]) else self.native
        await router(scope, receive, send)


class HttpTransport:
    name = "http"
    description = "REST + SSE of native kernel events; OpenAI-compatible /v1/chat/completions, /v1/responses and /v1/models; Anthropic /v1/messages"
    Config = HttpConfig

    async def serve(
        self, kernel: Kernel, config: HttpConfig, *, task_status: TaskStatus[str | None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        app = HttpApp(kernel, config)
        await serve_http(
            app, config, lag_grace_s=kernel.settings.session.lag_grace_s, error_body=app.native.error_body,
            connections=(kernel.observers, self.name), task_status=task_status,
        )

    def banner(self, kernel: Kernel, config: HttpConfig, address: str | None, command: str) -> list[BannerLine]:
        """The API's base URL (the OpenAI SDK's ``base_url``) and the console's, with its login."""
        lines = [BannerLine("http", f"{address}/v1  (native API; OpenAI base_url)")]
        if config.console:
            lines.append(BannerLine("console", page_url(address, resolve_token(config))))
        return lines

