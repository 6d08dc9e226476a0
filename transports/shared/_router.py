"""A tiny raw-ASGI router: method + path patterns with ``{param}`` segments.

Enough for a handful of REST endpoints, SSE and WebSocket routes per dialect,
without pulling a web framework into every transport.  Unknown paths get 404,
known paths with the wrong method 405 (with ``Allow``), both as JSON in the
transport's error shape.

The security policy is applied here, to every route of every dialect, before any
handler runs: the ``Host`` check (DNS rebinding, without a token), a browser
``Origin`` must be in the allow-list or the server's own (on plain HTTP too: it stops
cross-site requests), a per-client-IP request rate, the body size limit, and the token
(``Authorization``, ``?token=`` or a page's login cookie; on every route unless it opts
out with ``auth=False``, e.g. a health check, which is also exempt from the rate unless
it asks for it with ``limited=True``, e.g. a page that checks the token itself).

A router may hand the requests that none of its routes match to a ``fallback`` app: another
router sharing the port (the console on OpenFang's), which applies its own policy.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import anyio

from kernel import beside

from ._config import HttpServerConfig, ServerConfig, resolve_token
from ._http import (
    ASGIReceive,
    ASGISend,
    BodyIncomplete,
    BodyReads,
    ErrorShaper,
    Headers,
    HttpError,
    Request,
    Response,
    default_error_body,
    error_response,
)
from ._security import ClientLimiter, KeyResolver, host_allowed, origin_allowed, resolve_caller, same_origin
from ._websocket import WebSocket

__all__ = ["HttpHandler", "Router", "WebSocketHandler", "compile_path"]

log = logging.getLogger(__name__)

HttpHandler = Callable[[Request], Awaitable[Response | None]]
WebSocketHandler = Callable[[WebSocket], Awaitable[None]]
H = TypeVar("H", bound=Callable[..., Awaitable[Any]])

_PARAM = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_UNSET: Any = object()


def compile_path(pattern: str) -> re.Pattern[str]:
    """``/api/agents/{id}/ws`` -> a regex where each ``{name}`` matches one path segment."""
    if not pattern.startswith("/"):
        raise ValueError(f"route pattern must start with '/': {pattern!r}")
    out, pos = [], 0
    for match in _PARAM.finditer(pattern):
        out.append(re.escape(pattern[pos : match.start()]))
        out.append(f"(?P<{match.group(1)}>[^/]+)")
        pos = match.end()
    out.append(re.escape(pattern[pos:]))
    return re.compile("^" + "".join(out) + "$")


@dataclass(frozen=True)
class _Route:
    pattern: str
    regex: re.Pattern[str]
    methods: frozenset[str]
    handler: Callable[..., Awaitable[Any]]
    auth: bool
    limited: bool


def _check_framing(headers: Headers) -> None:
    """RFC 9112 §6.3: a request with both ``Transfer-Encoding`` and ``Content-Length`` is
    the classic request-smuggling pair behind a proxy; answer 400 and close the connection
    (the server MUST NOT reuse it)."""
    if "transfer-encoding" in headers and "content-length" in headers:
        raise HttpError(
            400, "A request may not carry both Transfer-Encoding and Content-Length (RFC 9112 §6.3)",
            code="invalid_request", headers={"connection": "close"},
        )


class Router:
    """An ASGI application dispatching to HTTP and WebSocket handlers.

    ``config`` supplies the limits and Origin list; the token defaults to
    :func:`resolve_token` (config, then ``$GATEWAY_TOKEN``).  ``error_body`` shapes
    every JSON error this router or its WebSockets produce.  ``cors`` (off by default)
    answers preflights and adds ``Access-Control-Allow-Origin`` for allowed origins.
    ``limiter`` counts requests per client IP (``config.requests_per_minute_per_ip``
    by default); routers that serve one port share one. ``fallback``: another router for the
    requests whose path no route of this router matches but one of its own does (HTTP and
    WebSocket); a path neither routes is this router's 404, in this router's error shape.
    """

    def __init__(
        self,
        config: HttpServerConfig | None = None,
        *,
        error_body: ErrorShaper = default_error_body,
        token: str | None = _UNSET,
        cors: bool = False,
        limiter: ClientLimiter | None = None,
        fallback: Router | None = None,
        keys: KeyResolver | None = None,
        transport: str | None = None,
    ) -> None:
        self.config = config if config is not None else ServerConfig()
        # A WebSocket's limits: the config's own, or the defaults for a config without them.
        self.ws_config = self.config if isinstance(self.config, ServerConfig) else ServerConfig(
            **{name: getattr(self.config, name) for name in HttpServerConfig.__struct_fields__}
        )
        self.token: str | None = resolve_token(self.config) if token is _UNSET else token
        # The kernel, to resolve API keys to principals (None: only the admin token);
        # ``transport`` names the dialect on each request's Caller (a metric label).
        self.keys = keys
        self.transport = transport
        self.error_body = error_body
        self.cors = cors
        self.limiter = limiter if limiter is not None else ClientLimiter(self.config.requests_per_minute_per_ip)
        self.fallback = fallback
        self.body_reads = BodyReads(self.config.max_body_reads_per_ip)
        self._http: list[_Route] = []
        self._ws: list[_Route] = []

    # ---------------------------------------------------------- registration
    def route(
        self,
        methods: str | Iterable[str],
        pattern: str,
        handler: HttpHandler | None = None,
        *,
        auth: bool = True,
        limited: bool | None = None,
    ) -> Callable[[H], H]:
        """Register ``handler`` for ``methods`` on ``pattern``; usable as a decorator.
        ``limited``: whether the per-IP request rate applies (by default: when ``auth`` does)."""
        names = frozenset([methods.upper()] if isinstance(methods, str) else (m.upper() for m in methods))

        def add(fn: H) -> H:
            self._http.append(_Route(pattern, compile_path(pattern), names, fn, auth, auth if limited is None else limited))
            return fn

        if handler is not None:
            add(handler)
        return add

    def get(self, pattern: str, *, auth: bool = True, limited: bool | None = None) -> Callable[[H], H]:
        return self.route("GET", pattern, auth=auth, limited=limited)

    def post(self, pattern: str, *, auth: bool = True) -> Callable[[H], H]:
        return self.route("POST", pattern, auth=auth)

    def put(self, pattern: str, *, auth: bool = True) -> Callable[[H], H]:
        return self.route("PUT", pattern, auth=auth)

    def patch(self, pattern: str, *, auth: bool = True) -> Callable[[H], H]:
        return self.route("PATCH", pattern, auth=auth)

    def delete(self, pattern: str, *, auth: bool = True) -> Callable[[H], H]:
        return self.route("DELETE", pattern, auth=auth)

    def websocket(
        self, pattern: str, handler: WebSocketHandler | None = None, *, auth: bool = True
    ) -> Callable[[H], H]:
        """Register a WebSocket handler; it must call ``await ws.accept(checks)`` itself."""

        def add(fn: H) -> H:
            self._ws.append(_Route(pattern, compile_path(pattern), frozenset(), fn, auth, auth))
            return fn

        if handler is not None:
            add(handler)
        return add

    # -------------------------------------------------------------- dispatch
    async def __call__(self, scope: dict[str, Any], receive: ASGIReceive, send: ASGISend) -> None:
        kind = scope["type"]
        if kind in ("http", "websocket") and not host_allowed(Headers.read_one(scope.get("headers", ()), b"host"), self.token):
            await self._refuse_host(scope, receive, send)
        elif (
            self.fallback is not None and kind in ("http", "websocket")
            and not self.routes_path(kind, scope["path"]) and self.fallback.routes_path(kind, scope["path"])
        ):
            await self.fallback(scope, receive, send)
        elif kind == "http":
            await self._handle_http(scope, receive, send)
        elif kind == "websocket":
            await self._handle_websocket(scope, receive, send)
        elif kind == "lifespan":
            await self._handle_lifespan(receive, send)

    async def _refuse_host(self, scope: dict[str, Any], receive: ASGIReceive, send: ASGISend) -> None:
        host = Headers.read_one(scope.get("headers", ()), b"host")
        error = HttpError(403, f"Host {host!r} is not allowed without a token (DNS rebinding protection)", code="forbidden")
        if scope["type"] == "http":
            await error_response(error, self.error_body).send_to(send)
        else:
            await WebSocket(scope, receive, send, config=self.ws_config, error_body=self.error_body).reject(error)

    async def _handle_lifespan(self, receive: ASGIReceive, send: ASGISend) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

    def _cors_headers(self, origin: str | None) -> dict[str, str]:
        if not self.cors or origin is None or not origin_allowed(origin, self.config.allowed_origins):
            return {}
        return {"access-control-allow-origin": origin, "vary": "Origin"}

    async def _handle_http(self, scope: dict[str, Any], receive: ASGIReceive, send: ASGISend) -> None:
        started = False
        request = Request(
            scope, receive, send, max_body_bytes=self.config.max_body_bytes,
            body_timeout_s=self.config.body_timeout_s, body_reads=self.body_reads,
        )
        cors = self._cors_headers(request.headers.get("origin"))

        async def tracking_send(message: dict[str, Any]) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                extra = [(k.encode(), v.encode()) for k, v in cors.items()]
                closing = any(name.lower() == b"connection" for name, _ in message.get("headers", []))
                if not await request.finish_body() and not closing:  # an unread body must not break keep-alive
                    extra.append((b"connection", b"close"))
                if extra:
                    message = dict(message)
                    message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        request.send = tracking_send
        try:
            _check_framing(request.headers)
            response = await self._dispatch_http(request, cors)
            if response is not None:
                await response.send_to(tracking_send, head_only=request.method == "HEAD")
            elif not started:
                raise RuntimeError(f"handler for {request.method} {request.path} sent no response")
        except BodyIncomplete:
            log.info("%s %s from %s: the body did not arrive whole; not acted on", request.method, request.path, request.client_host)
        except HttpError as error:
            if not started:
                await error_response(error, self.error_body).send_to(tracking_send)
        except Exception:
            log.exception("unhandled error in %s %s", request.method, request.path)
            if not started:
                err = HttpError(500, "Internal server error", code="internal")
                await error_response(err, self.error_body).send_to(tracking_send)
        finally:
            # The wrapper refers to the request: unhooked, the two are freed when the request
            # ends instead of waiting in a reference cycle for the garbage collector.
            request.send = send

    def _check_origin_and_rate(self, request: Request, route: _Route | None) -> None:
        origin = request.headers.get("origin")
        if origin is not None and not (origin_allowed(origin, self.config.allowed_origins) or same_origin(origin, request.headers.get("host"))):
            raise HttpError(403, f"Origin {origin!r} is not allowed by this server's Origin allow-list", code="forbidden")
        if request.method == "OPTIONS" or (route is not None and not route.limited):
            return
        wait = self.limiter.check(request.client_host)
        if wait > 0:
            raise HttpError(
                429, f"Too many requests: limit is {self.limiter.limit} per minute",
                code="rate_limited", headers={"retry-after": str(math.ceil(wait))},
            )

    def routes_path(self, kind: str, path: str) -> bool:
        """Whether a route of this router (of any method) matches ``path``."""
        return any(route.regex.match(path) for route in (self._http if kind == "http" else self._ws))

    def _route_for(self, path: str) -> _Route | None:
        return next((route for route in self._http if route.regex.match(path)), None)

    async def _dispatch_http(self, request: Request, cors: dict[str, str]) -> Response | None:
        method = request.method
        self._check_origin_and_rate(request, self._route_for(request.path))
        if cors and method == "OPTIONS" and "access-control-request-method" in request.headers:
            return Response(
                204,
                headers={
                    "access-control-allow-methods": "GET, POST, PUT, PATCH, DELETE, OPTIONS",
                    "access-control-allow-headers": request.headers.get(
                        "access-control-request-headers", "authorization, content-type"
                    ),
                    "access-control-max-age": "600",
                },
            )
        allowed: set[str] = set()
        for route in self._http:
            match = route.regex.match(request.path)
            if match is None:
                continue
            if method in route.methods or (method == "HEAD" and "GET" in route.methods):
                if route.auth:
                    caller = await resolve_caller(request.headers, request.query, token=self.token, keys=self.keys, transport=self.transport)
                    if caller is None:
                        raise HttpError(
                            401, "Missing or invalid token", code="unauthorized",
                            headers={"www-authenticate": "Bearer"},
                        )
                    request.caller = caller
                request.path_params = match.groupdict()
                return await route.handler(request)
            allowed |= route.methods
        if allowed:
            raise HttpError(
                405, f"Method {method} not allowed", code="method_not_allowed",
                headers={"allow": ", ".join(sorted(allowed))},
            )
        raise HttpError(404, f"Not found: {request.path}", code="not_found")

    async def _handle_websocket(self, scope: dict[str, Any], receive: ASGIReceive, send: ASGISend) -> None:
        for route in self._ws:
            match = route.regex.match(scope["path"])
            if match is not None:
                ws = WebSocket(
                    scope, receive, send, config=self.ws_config, token=self.token, keys=self.keys, transport=self.transport,
                    require_auth=route.auth, path_params=match.groupdict(), error_body=self.error_body,
                )
                try:
                    async with ws:
                        with anyio.CancelScope() as handling:
                            async with beside(partial(ws.watch_sends, handling)):
                                await route.handler(ws)
                except Exception:
                    log.exception("unhandled error in WebSocket %s", scope["path"])
                return
        ws = WebSocket(scope, receive, send, config=self.ws_config, error_body=self.error_body)
        await ws.reject(HttpError(404, f"Not found: {scope['path']}", code="not_found"))
