"""Authentication, Origin and rate-limit primitives, independent of any carrier.

Kept free of ASGI so that the same rules can be unit-tested directly and reused by
non-HTTP transports (a token check is a token check on any wire).
"""

from __future__ import annotations

import hmac
import os
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Protocol
from urllib.parse import quote, unquote, urlsplit

import anyio

from kernel.model import ADMIN, Caller, Principal

__all__ = [
    "ANONYMOUS",
    "API_KEY_ENV_VAR",
    "TOKEN_COOKIE",
    "ClientLimiter",
    "KeyResolver",
    "SlidingWindowLimiter",
    "cookie_value",
    "extract_token",
    "local_caller",
    "origin_allowed",
    "resolve_caller",
    "resolve_principal",
    "same_origin",
    "token_cookie",
    "token_cookie_name",
    "token_matches",
    "traceparent_of",
]

#: The cookie a browser page's login sets (Jupyter-style: ``/?token=…`` once, then this
#: cookie), named per port by :func:`token_cookie_name`.
TOKEN_COOKIE = "gateway_token"


def host_name(host: str) -> str:
    """``127.0.0.1:8000`` -> ``127.0.0.1``; ``[::1]:8000`` -> ``::1``."""
    host = host.strip()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def host_allowed(host: str | None, token: str | None) -> bool:
    """DNS-rebinding protection: without a token, only loopback ``Host`` names are served.

    A page on evil.example that rebinds its name to 127.0.0.1 reaches a loopback server
    as same-origin; its requests still carry ``Host: evil.example``. With a token the
    token is the protection, so any Host is fine (and needed for remote access).
    """
    from ._config import is_loopback_host

    return token is not None or not host or is_loopback_host(host_name(host))


def _host_port(host: str | None) -> str | None:
    """``127.0.0.1:8000`` -> ``8000``; ``[::1]:8000`` -> ``8000``; no port -> None."""
    if not host:
        return None
    host = host.strip()
    tail = host[host.find("]") + 1 :] if host.startswith("[") else host if host.count(":") == 1 else ""
    _, colon, port = tail.partition(":")
    return port if colon and port.isdigit() else None


def token_cookie_name(host: str | None) -> str:
    """The token cookie's name on a server addressed as ``host`` (its ``Host`` header).

    Browsers keep cookies per host name, not per port: with one name per port, two
    transports on one machine with different tokens do not overwrite each other's login.
    """
    port = _host_port(host)
    return f"{TOKEN_COOKIE}_{port}" if port else TOKEN_COOKIE


def token_cookie(host: str | None, token: str) -> str:
    """The ``Set-Cookie`` value of a page's login on a server addressed as ``host``: the
    token (percent-encoded), for every path, never readable by scripts, never sent with a
    request another site starts; it lasts as long as the browser session."""
    return f"{token_cookie_name(host)}={quote(token, safe='')}; Path=/; HttpOnly; SameSite=Strict"


def cookie_value(headers: Mapping[str, str], name: str) -> str | None:
    """The value of cookie ``name`` in the request's ``Cookie`` header(s), if any."""
    for pair in headers.get("cookie", "").replace(",", ";").split(";"):
        key, eq, value = pair.strip().partition("=")
        if eq and key == name and value:
            return value.strip().strip('"')
    return None


def extract_token(headers: Mapping[str, str], query: Mapping[str, str]) -> str | None:
    """The token a client presented: ``Authorization: Bearer X`` first, then ``x-api-key: X``,
    then ``?token=X``, then the token cookie a browser page's login set (:func:`token_cookie_name`).

    ``x-api-key`` is how Anthropic's clients send a key (Claude Code, the SDKs before 2.x);
    accepted on every route, as Bearer is. Browsers cannot set headers on a WebSocket upgrade
    nor on an ``EventSource``, hence the query and the cookie.
    """
    auth = headers.get("authorization")
    if auth:
        scheme, _, value = auth.strip().partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    api_key = headers.get("x-api-key", "").strip()
    if api_key:
        return api_key
    if query.get("token"):
        return query["token"]
    cookie = cookie_value(headers, token_cookie_name(headers.get("host")))
    return unquote(cookie) if cookie else None


def token_matches(presented: str | None, expected: str | None) -> bool:
    """Constant-time token comparison; no expected token means auth is off."""
    if expected is None:
        return True
    if presented is None:
        return False
    return hmac.compare_digest(presented.encode("utf-8"), expected.encode("utf-8"))


class KeyResolver(Protocol):
    """What the shared resolver asks of the kernel (``Kernel`` is one): the principal of an
    API key, and whether keys exist (then credentials are needed even without a token)."""

    async def authenticate(self, secret: str | None) -> Principal | None: ...

    async def keys_required(self) -> bool: ...


async def resolve_principal(presented: str | None, token: str | None, keys: KeyResolver | None) -> Principal | None:
    """Who presented ``presented``: the admin for the transport's admin ``token``, a key's
    principal for a live API key, else None (refused: 401 in the dialect's shape).

    Without a token and without keys, authentication is off (a loopback gateway for one
    person) and every caller is the admin, as before keys existed. Once a key exists, a
    caller without credentials is refused even there: people share that gateway.
    """
    if presented is not None and token is not None and token_matches(presented, token):
        return ADMIN
    if keys is not None and presented is not None:
        principal = await keys.authenticate(presented)
        if principal is not None:
            return principal
    if token is None and (keys is None or not await keys.keys_required()):
        return ADMIN  # auth is off: whatever a client sends (an SDK always sends some key)
    return None


#: The caller of a route without authentication (a health check, a page that signs in):
#: no scopes, so any command it sent would be refused. Never a key's name (kernel/keys.py).
ANONYMOUS = Caller(principal=Principal(name="anonymous", scopes=()))

#: A W3C ``traceparent`` is 55 characters in version 00; longer values are not passed on.
_TRACEPARENT_MAX = 128


def traceparent_of(headers: Mapping[str, str]) -> str | None:
    """The caller's W3C ``traceparent`` header, bounded (the kernel's telemetry validates it)."""
    value = headers.get("traceparent", "").strip()
    return value if value and len(value) <= _TRACEPARENT_MAX else None


async def resolve_caller(
    headers: Mapping[str, str], query: Mapping[str, str], *, token: str | None, keys: KeyResolver | None, transport: str | None
) -> Caller | None:
    """The one resolver of every network transport: the credentials of a request (or of a
    WebSocket upgrade request) -> the :class:`~kernel.model.Caller` it passes with every
    command and subscription; None when the credentials are refused."""
    principal = await resolve_principal(extract_token(headers, query), token, keys)
    if principal is None:
        return None
    return Caller(principal=principal, transport=transport, traceparent=traceparent_of(headers))


#: The environment variable a local transport (stdio, ACP, Packet) reads its API key from
#: when its section sets none: an editor launching ``gateway serve --transport acp`` sets it.
API_KEY_ENV_VAR = "GATEWAY_API_KEY"


async def local_caller(
    keys: KeyResolver, api_key: str | None, transport: str, environ: Mapping[str, str] | None = None
) -> Caller:
    """The caller of a local transport: the admin (the person who started the process), or
    the key its configuration (``api_key``, else ``$GATEWAY_API_KEY``) names — then the
    process sees and does only what that key may. A key that is unknown or revoked is a
    start-up error (``ValueError``), never a silent fall-back to the admin."""
    secret = api_key or (os.environ if environ is None else environ).get(API_KEY_ENV_VAR) or None
    if secret is None:
        return Caller(principal=ADMIN, transport=transport)
    principal = await keys.authenticate(secret)
    if principal is None:
        raise ValueError(f"[transports.{transport}] the configured API key (api_key or ${API_KEY_ENV_VAR}) is unknown, revoked or expired")
    return Caller(principal=principal, transport=transport)


def _origin_parts(value: str) -> tuple[str, str, int | None] | None:
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    if not parts.scheme or not parts.hostname:
        return None
    return parts.scheme.lower(), parts.hostname.lower(), port


def origin_allowed(origin: str | None, allowed: Iterable[str]) -> bool:
    """Whether a request's ``Origin`` is in the allow-list.

    A missing Origin is allowed: only browsers send it, and they are what the check
    protects against (cross-site WebSocket hijacking).  ``"*"`` allows everything; an
    entry without a port matches any port of that scheme and host; the literal
    ``"null"`` origin (sandboxed frames, ``file://``) matches only an explicit ``"null"``.
    """
    if origin is None:
        return True
    origin = origin.strip()
    allowed = list(allowed)
    if "*" in allowed:
        return True
    if origin == "null":
        return "null" in allowed
    got = _origin_parts(origin)
    if got is None:
        return False
    for entry in allowed:
        want = _origin_parts(entry)
        if want is None:
            continue
        if want[0] == got[0] and want[1] == got[1] and (want[2] is None or want[2] == got[2]):
            return True
    return False


_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def same_origin(origin: str | None, host: str | None) -> bool:
    """Whether a browser's ``Origin`` is the server's own (the ``Host`` it addressed): a page
    the server served itself (its console) calling it back is not a cross-site request.

    A page elsewhere that rebinds its name to this server keeps its own name in ``Host``,
    which the Host check refuses without a token (:func:`host_allowed`); with a token it
    has neither the token nor the cookie (cookies belong to a host name).
    """
    if origin is None or not host:
        return False
    got = _origin_parts(origin)
    if got is None:
        return False
    scheme, origin_host, origin_port = got
    name = host_name(host).lower()
    port = _host_port(host)
    default = _DEFAULT_PORTS.get(scheme)
    return name == origin_host and (int(port) if port else default) == (origin_port if origin_port is not None else default)


class SlidingWindowLimiter:
    """At most ``limit`` events in any ``window_s`` seconds (exact sliding window).

    One per connection, so memory is bounded by ``limit`` timestamps.  Rejected events
    are not counted, so a client that backs off recovers at once.
    """

    def __init__(self, limit: int, window_s: float = 60.0) -> None:
        self.limit = limit
        self.window_s = window_s
        self._stamps: deque[float] = deque()

    def check(self, now: float | None = None) -> float:
        """Record an event; return 0.0 if allowed, else seconds until one would be."""
        if self.limit <= 0:
            return 0.0
        now = anyio.current_time() if now is None else now
        horizon = now - self.window_s
        stamps = self._stamps
        while stamps and stamps[0] <= horizon:
            stamps.popleft()
        if len(stamps) >= self.limit:
            return max(stamps[0] - horizon, 0.001)
        stamps.append(now)
        return 0.0


class ClientLimiter:
    """A sliding-window request limit per client IP; the least recently seen clients
    are forgotten beyond ``max_clients`` so memory stays bounded."""

    def __init__(self, limit: int, *, window_s: float = 60.0, max_clients: int = 4096) -> None:
        self.limit = limit
        self.window_s = window_s
        self.max_clients = max_clients
        self._clients: dict[str, SlidingWindowLimiter] = {}

    def check(self, ip: str) -> float:
        """0.0 if allowed, else seconds until the client may retry."""
        if self.limit <= 0:
            return 0.0
        limiter = self._clients.pop(ip, None) or SlidingWindowLimiter(self.limit, self.window_s)
        self._clients[ip] = limiter
        if len(self._clients) > self.max_clients:
            del self._clients[next(iter(self._clients))]
        return limiter.check()
