"""The ``http`` transport: the ASGI app in front of two routers, and ``serve``.

Two routers share one server: the native API answers errors in the native shape, the
OpenAI routes — chat completions, models and responses — in OpenAI's (the router's
error shaper sees no path, so the app picks the router by path first). The routers
apply the shared security policy; here a browser ``Origin`` must be one of
``cors_origins`` (empty: CORS off, and every request carrying an ``Origin`` is
refused; a page the server served itself — the console — is not cross-site), and
``rate_limit_per_minute`` is the per-client-IP request limit, one count for both routers.
The console (``console/``) is on the native router: its page at ``/``, its calls to the
native API.
"""

from __future__ import annotations

from typing import Any

import anyio
import msgspec
from anyio.abc import TaskStatus

from kernel import Kernel
from transports.base import BannerLine
from transports.shared import ClientLimiter, Router, page_url, resolve_token, serve_http

from .config import HttpConfig, check_config, openai_policy
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


class HttpApp:
    """The ASGI application of the http transport."""

    def __init__(self, kernel: Kernel, config: HttpConfig) -> None:
        self.config = config
        # The routers' Origin allow-list is ServerConfig.allowed_origins: give them ours.
        router_config = msgspec.structs.replace(config, allowed_origins=list(config.cors_origins))
        cors = bool(config.cors_origins)
        limiter = ClientLimiter(config.rate_limit_per_minute)
        self.native = Router(router_config, error_body=native_codec.native_error_body, cors=cors, limiter=limiter)
        self.openai = Router(router_config, error_body=openai_codec.openai_error_body, cors=cors, limiter=limiter)
        NativeApi(
            kernel, keepalive_s=config.sse_keepalive_s, run_timeout_s=config.run_timeout_s, sessions_poll_s=config.sessions_poll_s
        ).register(self.native)
        if config.console:
            ConsolePages(self.native.token).register(self.native)
        policy = openai_policy(config.openai_tool_approval)
        OpenAIApi(kernel, keepalive_s=config.sse_keepalive_s, run_timeout_s=config.run_timeout_s, policy=policy).register(self.openai)
        ResponsesApi(
            kernel, keepalive_s=config.sse_keepalive_s, run_timeout_s=config.run_timeout_s, policy=policy,
            stored=ResponseStore(config.stored_responses, config.stored_responses_bytes),
        ).register(self.openai)
        self.token = self.native.token

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        router = self.openai if scope["type"] == "http" and _is_openai_path(scope["path"]) else self.native
        await router(scope, receive, send)


class HttpTransport:
    name = "http"
    description = "REST + SSE of native kernel events; OpenAI-compatible /v1/chat/completions, /v1/responses and /v1/models"
    Config = HttpConfig

    async def serve(
        self, kernel: Kernel, config: HttpConfig, *, task_status: TaskStatus[str | None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        check_config(config)
        app = HttpApp(kernel, config)
        await serve_http(app, config, lag_grace_s=kernel.settings.session.lag_grace_s, task_status=task_status)

    def banner(self, kernel: Kernel, config: HttpConfig, address: str | None, command: str) -> list[BannerLine]:
        """The API's base URL (the OpenAI SDK's ``base_url``) and the console's, with its login."""
        lines = [BannerLine("http", f"{address}/v1  (native API; OpenAI base_url)")]
        if config.console:
            lines.append(BannerLine("console", page_url(address, resolve_token(config))))
        return lines

